//! The `kassa` binary: `serve`, `check`, `migrate`.

mod bench;
mod cases_cli;

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use kassa::app::{App, Workers};
use kassa::clock::SystemClock;
use kassa::config::{CommonArgs, KeysArgs, ServeArgs, Settings};
use kassa::store::{Db, check};

// Every request allocates (headers, JSON, rows, SQL parameters); mimalloc serves those from
// per-thread pages where glibc's malloc spent a tenth of the server's CPU (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "kassa", version, about = "Self-hosted payment order engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service
    Serve(ServeArgs),
    /// Verify the invariants on a database; exit 0 when all hold, 1 on a violation, 2 when it cannot run.
    /// With the keys secret (option, environment, config file or keys.secret in the data dir) it
    /// also verifies that every stored card key decrypts under it
    Check {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        keys: KeysArgs,
        /// Read every row. Without it a run reads what changed since the last clean run (the
        /// orders with a status change logged after it, and what is shared), or every row when
        /// no run was clean yet
        #[arg(long)]
        full: bool,
    },
    /// Apply migrations
    Migrate(MigrateArgs),
    /// Run one reconciliation pass now: query the gateways about attempts with no notification,
    /// attempts in `unknown`, late payments and processing refunds; print a summary. Exit 0 when
    /// every query got an answer, 1 when some could not be made, 2 when it cannot run.
    /// With --statement: reconcile one day's statement of one gateway against kassa's records;
    /// exit 0 when the day agrees, 1 when it has open findings or its file was not had or not
    /// readable, 2 when it cannot run
    Reconcile(ReconcileArgs),
    /// Benchmark a kassa (spawned or running) over HTTP, or the engine in-process
    Bench(bench::BenchArgs),
    /// Copy a running kassa's databases consistently into a new directory, with a manifest
    /// (PostgreSQL: the manifest only; back the database up with pg_dump)
    Backup {
        #[command(flatten)]
        common: CommonArgs,
        /// The directory to write (new, or empty)
        #[arg(long)]
        to: std::path::PathBuf,
    },
    /// Restore a SQLite backup into a data dir without a database, after checking its checksums,
    /// its schema version and the keys secret
    Restore {
        /// The backup's directory
        #[arg(long)]
        from: std::path::PathBuf,
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        keys: KeysArgs,
    },
    /// Card keys of digital SKUs
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The complaints and disputes desk
    Cases {
        #[command(subcommand)]
        command: cases_cli::CasesCommand,
    },
}

#[derive(clap::Args)]
struct MigrateArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// List the migrations that would be applied, and apply none (nor create a database)
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct ReconcileArgs {
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// Reconcile a day's statement (needs --gateway and --date) instead of querying attempts
    #[arg(long, requires_all = ["gateway", "date"])]
    statement: bool,
    /// The gateway whose statement to reconcile (sandbox, wechatpay, alipay, stripe)
    #[arg(long, requires = "statement")]
    gateway: Option<String>,
    /// The statement's day, YYYY-MM-DD, in the gateway's own time (Beijing time for WeChat Pay and
    /// Alipay, UTC for Stripe and the sandbox)
    #[arg(long, requires = "statement")]
    date: Option<String>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Import keys from a file, one per line (blank lines skipped); duplicates within the SKU are
    /// refused and counted
    Import {
        /// The digital SKU to add the keys to
        #[arg(long)]
        sku: String,
        /// File with one key per line ("-" for standard input)
        file: std::path::PathBuf,
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        keys: KeysArgs,
    },
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tokio_postgres=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // Structured JSON when not on a terminal (log collectors), readable text otherwise.
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().with_current_span(true).init();
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kassa: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => match serve(&args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa: {e:#}");
                    ExitCode::FAILURE
                }
            },
            Command::Check { common, keys, full } => run_check(&common, &keys, full).await,
            Command::Backup { common, to } => match backup(&common, &to).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa backup: {e:#}");
                    ExitCode::FAILURE
                }
            },
            Command::Restore { from, common, keys } => match restore(&from, &common, &keys) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa restore: {e:#}");
                    ExitCode::FAILURE
                }
            },
            Command::Keys { command: KeysCommand::Import { sku, file, common, keys } } => {
                match import_keys(&sku, &file, &common, &keys).await {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("kassa keys import: {e:#}");
                        ExitCode::FAILURE
                    }
                }
            }
            Command::Cases { command: cases_cli::CasesCommand::WechatNotifyUrl { action, url, serve } } => {
                match cases_cli::wechat_notify_url(action, url.as_deref(), &serve).await {
                    Ok(Ok(())) => ExitCode::SUCCESS,
                    Ok(Err(e)) => {
                        eprintln!("kassa cases wechat-notify-url: {e}");
                        ExitCode::FAILURE
                    }
                    Err(e) => {
                        eprintln!("kassa cases wechat-notify-url: {e:#}");
                        ExitCode::from(2)
                    }
                }
            }
            Command::Bench(bench::BenchArgs { command: Some(bench::BenchCommand::Seed(seed)), .. }) => {
                match bench::seed::run(&seed).await {
                    Ok(seeded) => {
                        println!("{}", serde_json::to_string(&seeded).unwrap_or_default());
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("kassa bench seed: {e:#}");
                        ExitCode::from(2)
                    }
                }
            }
            Command::Bench(args) => match bench::run(&args).await {
                Ok(report) => {
                    print!("{}", bench::table(&report));
                    println!("{}", serde_json::to_string(&report).unwrap_or_default());
                    if report.oversold > 0 || report.check_violations.is_some_and(|v| v > 0) {
                        ExitCode::FAILURE
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("kassa bench: {e:#}");
                    ExitCode::from(2)
                }
            },
            Command::Reconcile(args) if args.statement => match reconcile_statement(&args).await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("kassa reconcile: {e:#}");
                    ExitCode::from(2)
                }
            },
            Command::Reconcile(args) => match reconcile(&args).await {
                Ok(report) if report.errors == 0 => ExitCode::SUCCESS,
                Ok(_) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("kassa reconcile: {e:#}");
                    ExitCode::from(2)
                }
            },
            Command::Migrate(args) => match migrate(&args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kassa: {e:#}");
                    ExitCode::FAILURE
                }
            },
        }
    })
}

async fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let settings = Settings::resolve(args)?;
    if args.check_config {
        return check_config(&settings).await;
    }
    kassa::store::files::create_private_dir(&settings.data_dir)?;
    let listener = tokio::net::TcpListener::bind(settings.listen).await.map_err(|e| {
        let addr = settings.listen;
        match e.kind() {
            std::io::ErrorKind::AddrInUse => anyhow::anyhow!(
                "cannot listen on {addr}: the address is already in use (another kassa, or another program); \
                 choose another with --listen"
            ),
            std::io::ErrorKind::PermissionDenied => anyhow::anyhow!(
                "cannot listen on {addr}: permission denied (ports below 1024 need privileges); choose another with --listen"
            ),
            _ => anyhow::anyhow!("cannot listen on {addr}: {e}"),
        }
    })?;
    let app = App::start(&settings, Arc::new(SystemClock), listener, Workers::Run).await?;
    for warning in &app.warnings {
        eprintln!("kassa: warning: {warning}");
    }
    println!("kassa listening on http://{}", app.addr);
    if settings.demo {
        let base = &app.public_url;
        println!("storefront: {base}/");
        println!("console:    {base}/admin");
    }
    if let Some(token) = &app.generated_admin_token {
        println!("admin token: {token}");
    }
    if settings.demo {
        println!("{}", demo_banner(&app.public_url));
    }
    tokio::signal::ctrl_c().await?;
    tracing::info!("shutting down");
    app.stop().await;
    Ok(())
}

/// What the demo shows a newcomer after its addresses: the card-key sale, in the storefront and
/// from a terminal.
fn demo_banner(base: &str) -> String {
    let sku = kassa::app::DEMO_DIGITAL_SKU;
    let auth = "-H \"Authorization: Bearer $T\"";
    format!(
        "\nBuy the e-book {sku} in the storefront and pay in the sandbox: its card key appears on the order\n\
         page once paid, each key sold exactly once. Or from a terminal (with curl and jq):\n\
         \x20 T=$(curl -s -XPOST {base}/api/v1/sessions | jq -r .token)\n\
         \x20 B=$(curl -s -XPOST {auth} -d '{{\"lines\":[{{\"sku\":\"{sku}\",\"quantity\":1}}]}}' {base}/api/v1/baskets | jq -r .basket_id)\n\
         \x20 O=$(curl -s -XPOST {auth} -d '{{\"gateway\":\"sandbox\"}}' {base}/api/v1/baskets/$B/checkout)\n\
         \x20 curl -s -XPOST -d '{{\"outcome\":\"succeeded\"}}' {base}/sandbox/api/payments/$(echo \"$O\" | jq -r .attempt_ref)/complete\n\
         \x20 sleep 1; curl -s {auth} {base}/api/v1/orders/$(echo \"$O\" | jq -r .order_no) | jq '.status, .lines[0].keys'"
    )
}

/// A command's database (migrated) and gateways, as `serve` would have them.
async fn open_gateways(
    args: &ServeArgs,
) -> anyhow::Result<(Settings, Db, kassa::clock::SharedClock, kassa::gateway::Gateways)> {
    let settings = Settings::resolve(args)?;
    let db = Db::connect_with(&settings.database_url, settings.db_max_connections, settings.engine).await?;
    db.migrate().await?;
    let clock: kassa::clock::SharedClock = Arc::new(SystemClock);
    let public_url = settings.public_url.clone().unwrap_or_else(|| format!("http://{}", settings.listen));
    let (gateways, _sandbox) = kassa::app::mount_gateways(&settings, &db, &clock, &public_url).await?;
    Ok((settings, db, clock, gateways))
}

async fn reconcile(args: &ReconcileArgs) -> anyhow::Result<kassa::workers::reconciler::ReconcileReport> {
    let (settings, db, clock, gateways) = open_gateways(&args.serve).await?;
    let public_url = settings.public_url.clone().unwrap_or_else(|| format!("http://{}", settings.listen));
    let links = Arc::new(kassa::app::link_signer(&db, None).await?);
    let cx = kassa::app::usecase_context(&settings, &db, &clock, &gateways, &public_url, None, links);
    let reconciler = kassa::workers::reconciler::Reconciler { cx, after_ms: settings.reconcile_after_ms };
    let report = reconciler.pass(true).await?;
    db.close().await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(report);
    }
    println!("attempts queried     {}", report.attempts_queried);
    println!("refunds queried      {}", report.refunds_queried);
    println!("payments applied     {}", report.payments_applied);
    println!("attempts closed      {}", report.attempts_closed);
    println!("refunds settled      {}", report.refunds_settled);
    println!("refunds re-sent      {}", report.refunds_resent);
    println!("unchanged            {}", report.unchanged);
    println!("errors               {}", report.errors);
    println!("discrepancies        {}", report.findings.len());
    for f in &report.findings {
        let subject = f.refund_no.as_deref().unwrap_or(&f.attempt_ref);
        println!(
            "  {} {} {} (order {}): kassa had {}, gateway says {}; {}",
            f.kind, f.gateway, subject, f.order_no, f.ours, f.theirs, f.action
        );
    }
    Ok(report)
}

/// `kassa reconcile --statement`: whether the day agrees.
async fn reconcile_statement(args: &ReconcileArgs) -> anyhow::Result<bool> {
    use kassa::domain::money::format_minor;
    let (Some(gateway), Some(date)) = (args.gateway.as_deref(), args.date.as_deref()) else {
        anyhow::bail!("--statement needs --gateway and --date");
    };
    let day = kassa::workers::statements::parse_day(date)
        .ok_or_else(|| anyhow::anyhow!("--date {date:?}: use YYYY-MM-DD (2026-03-01)"))?;
    let (_, db, clock, gateways) = open_gateways(&args.serve).await?;
    let Some(g) = gateways.get(gateway) else {
        let names = gateways.names().join(", ");
        anyhow::bail!("--gateway {gateway:?} is not configured here (configured: {names})");
    };
    let run = kassa::workers::statements::run_day(&db, g.as_ref(), day, 1, &clock).await;
    db.close().await;
    let run = run.map_err(|e| anyhow::anyhow!("{e}"))?;
    let open = run.view.as_ref().map_or(0, |v| v.findings.iter().filter(|f| f.state == "open").count());
    let agrees = run.result == "reconciled" && open == 0;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&run)?);
        return Ok(agrees);
    }
    println!("{} statement of {}: {}", run.gateway, run.day, run.result);
    if let Some(d) = &run.detail {
        println!("  {d}");
    }
    if let Some(v) = &run.view {
        let m = |minor: i64| format_minor(minor, &v.currency);
        println!("{:<10} {:>8} {:>16} {:>16} {:>14} {:>16}", "", "count", "gross", "refunds", "fees", "net");
        for (side, t) in [("gateway", &v.gateway_totals), ("kassa", &v.kassa_totals)] {
            println!(
                "{side:<10} {:>8} {:>16} {:>16} {:>14} {:>16}",
                t.count,
                m(t.gross_minor),
                m(t.refunds_minor),
                m(t.fees_minor),
                m(t.net_minor)
            );
        }
        if v.kassa_totals.discounts_minor != 0 {
            println!("discounts  {} given off by promotions (kassa's side)", m(v.kassa_totals.discounts_minor));
        }
        for (side, t) in [("gateway", &v.gateway_totals), ("kassa", &v.kassa_totals)] {
            if (t.disputes_minor, t.reinstated_minor, t.dispute_fees_minor) != (0, 0, 0) {
                println!(
                    "disputes   {side}: {} taken, {} given back, {} in dispute fees",
                    m(t.disputes_minor),
                    m(t.reinstated_minor),
                    m(t.dispute_fees_minor)
                );
            }
        }
        println!("findings   {open} open ({} new, {} closed by this run)", run.changes.opened, run.changes.closed);
        for f in v.findings.iter().filter(|f| f.state == "open") {
            let order = f.order_no.as_deref().map(|o| format!(" (order {o})")).unwrap_or_default();
            println!("  {} {}{order}: kassa has {}, the statement {}", f.kind, f.subject, f.ours, f.theirs);
        }
    }
    Ok(agrees)
}

async fn import_keys(sku: &str, file: &std::path::Path, common: &CommonArgs, keys: &KeysArgs) -> anyhow::Result<()> {
    use std::io::{BufRead as _, Write as _};
    let sku = kassa::domain::ids::Sku::parse(sku).map_err(|e| anyhow::anyhow!("--sku {sku:?}: {}", e.message))?;
    let secret = Settings::resolve_keys_secret(common, keys)?
        .ok_or_else(|| anyhow::anyhow!("no keys secret: pass --keys-secret (or KASSA_KEYS_SECRET)"))?;
    let vault = kassa::vault::Vault::from_hex(&secret)?;
    let (url, max, engine) = Settings::resolve_common(common)?;
    let db = Db::connect_with(&url, max, engine).await?;
    db.migrate().await?;
    let reader: Box<dyn std::io::BufRead> = if file.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?,
        ))
    };
    let total_bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
    let terminal = std::io::stderr().is_terminal();
    let clock = SystemClock;
    let (mut imported, mut duplicates, mut read_bytes, mut batch) = (0_i64, 0_i64, 0_u64, Vec::new());
    let report = |imported: i64, duplicates: i64, read_bytes: u64, last: bool| {
        let pct = read_bytes.saturating_mul(100).checked_div(total_bytes).unwrap_or(0);
        if terminal {
            eprint!("\rimported {imported} keys, {duplicates} duplicates ({pct}% of the file)");
            if last {
                eprintln!();
            }
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("imported {imported} keys, {duplicates} duplicates ({pct}% of the file)");
        }
    };
    for line in reader.lines() {
        let line = line?;
        read_bytes = read_bytes.saturating_add(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        batch.push(line);
        if batch.len() == kassa::store::fulfilment::IMPORT_BATCH_MAX {
            let n =
                kassa::store::fulfilment::import_keys(&db, &vault, &sku, &batch, kassa::clock::Clock::now_ms(&clock))
                    .await?;
            (imported, duplicates) = (imported + n.imported, duplicates + n.duplicates);
            batch.clear();
            report(imported, duplicates, read_bytes, false);
        }
    }
    if !batch.is_empty() {
        let n = kassa::store::fulfilment::import_keys(&db, &vault, &sku, &batch, kassa::clock::Clock::now_ms(&clock))
            .await?;
        (imported, duplicates) = (imported + n.imported, duplicates + n.duplicates);
    }
    report(imported, duplicates, read_bytes, true);
    println!("{{\"imported\": {imported}, \"duplicates\": {duplicates}}}");
    db.close().await;
    Ok(())
}

async fn migrate(args: &MigrateArgs) -> anyhow::Result<()> {
    let (url, max, engine) = Settings::resolve_common(&args.common)?;
    if args.dry_run {
        let missing = kassa::store::sqlite_path(&url).filter(|p| !std::path::Path::new(p).exists());
        let (db, pending) = match missing {
            Some(path) => {
                println!("no database at {path} yet: it would be created");
                (None, kassa::store::Db::sqlite_migrations().to_vec())
            }
            None => {
                let db = Db::connect_existing(&url, max, engine).await?;
                let pending = db.pending_migrations().await?;
                (Some(db), pending)
            }
        };
        if pending.is_empty() {
            println!("no pending migrations");
        }
        for (version, name, _) in &pending {
            println!("pending {version:>4} {name}");
        }
        if let Some(db) = db {
            db.close().await;
        }
        return Ok(());
    }
    let db = Db::connect_with(&url, max, engine).await?;
    let applied = db.pending_migrations().await?;
    db.migrate().await?;
    for (version, name, _) in &applied {
        println!("applied {version:>4} {name}");
    }
    println!("migrations applied ({} new)", applied.len());
    db.close().await;
    Ok(())
}

/// `kassa serve --check-config`: what `serve` would refuse at start, found without starting.
async fn check_config(settings: &Settings) -> anyhow::Result<()> {
    let public_url = settings.public_url.clone().unwrap_or_else(|| format!("http://{}", settings.listen));
    let gateways = settings.gateways.build(&public_url).map_err(|e| anyhow::anyhow!("gateways: {e:#}"))?;
    let mut names: Vec<&str> = gateways.iter().map(|g| g.name()).collect();
    if settings.demo || settings.sandbox {
        names.push(kassa::sandbox::protocol::NAME);
    }
    if let Some(default) = &settings.default_gateway
        && !names.contains(&default.as_str())
    {
        anyhow::bail!("default_gateway {default:?} is not configured (configured: {names:?})");
    }
    if let Some(secret) = &settings.keys_secret {
        kassa::vault::Vault::from_hex(secret).map_err(|e| anyhow::anyhow!("keys_secret: {e}"))?;
    }
    kassa::store::normalize_url_kind(&settings.database_url)?;
    if let Some(wechat) = &settings.gateways.wechatpay
        && let Some(subscribe) = &wechat.subscribe
    {
        subscribe.checked().map_err(|e| anyhow::anyhow!("[gateways.wechatpay.subscribe] {e}"))?;
        if wechat.mini_program_secret.is_none() {
            anyhow::bail!("[gateways.wechatpay.subscribe] needs mini_program_secret in [gateways.wechatpay]");
        }
    }
    if let Some(email) = &settings.email {
        kassa::workers::mail::test_connection(email).await.map_err(|e| anyhow::anyhow!("[email]: {e}"))?;
        println!("e-mail ok: {}:{} answers", email.host, email.port);
    }
    println!(
        "configuration ok: listen {}, database {}, gateways {:?}",
        settings.listen,
        // Without credentials: what follows the last '@', up to the query.
        settings
            .database_url
            .rsplit_once('@')
            .map_or(settings.database_url.as_str(), |(_, at)| at)
            .split('?')
            .next()
            .unwrap_or_default(),
        names
    );
    Ok(())
}

async fn backup(common: &CommonArgs, to: &std::path::Path) -> anyhow::Result<()> {
    let (url, max, engine) = Settings::resolve_common(common)?;
    let db = Db::connect_existing(&url, max, engine).await?;
    let manifest = kassa::backup::backup(&db, &url, to, kassa::clock::Clock::now_ms(&SystemClock)).await?;
    db.close().await;
    for file in &manifest.files {
        println!("{} {} bytes sha256 {}", to.join(&file.name).display(), file.bytes, file.sha256);
    }
    println!("{} (schema version {})", to.join(kassa::backup::MANIFEST).display(), manifest.schema_version);
    if manifest.database == "postgres" {
        println!("PostgreSQL: back the database itself up with pg_dump or base backups (docs/operations.md)");
    }
    if manifest.keys_check.is_some() {
        println!("the card keys need the keys secret, which a backup never holds: keep keys.secret safe apart");
    }
    Ok(())
}

fn restore(from: &std::path::Path, common: &CommonArgs, keys: &KeysArgs) -> anyhow::Result<()> {
    let data_dir = common.data_dir.clone().ok_or_else(|| anyhow::anyhow!("--data-dir names where to restore"))?;
    let vault = Settings::resolve_keys_secret(common, keys)?
        .map(|s| kassa::vault::Vault::from_hex(&s))
        .transpose()
        .map_err(|e| anyhow::anyhow!("the keys secret: {e}"))?;
    let newest = kassa::store::Db::sqlite_migrations().last().map_or(0, |(v, ..)| *v);
    let manifest = kassa::backup::restore(from, &data_dir, newest, vault.as_ref())?;
    println!(
        "restored {} file(s) into {} (schema version {}); kassa serve migrates it on start",
        manifest.files.len(),
        data_dir.display(),
        manifest.schema_version
    );
    Ok(())
}

async fn run_check(args: &CommonArgs, keys: &KeysArgs, full: bool) -> ExitCode {
    let result = async {
        let (url, max, engine) = Settings::resolve_common(args)?;
        let vault = Settings::resolve_keys_secret(args, keys)?
            .map(|s| kassa::vault::Vault::from_hex(&s))
            .transpose()
            .map_err(|e| anyhow::anyhow!("the keys secret: {e}"))?;
        let db = Db::connect_existing(&url, max, engine).await?;
        let keys_unchecked = vault.is_none() && kassa::store::fulfilment::keys_stored(&db).await?;
        let scope = if full { check::Scope::Full } else { check::since_last_clean(&db).await? };
        let (violations, checked) = check::run_scoped(&db, vault.as_ref(), scope).await?;
        if violations.is_empty() {
            check::record_clean(&db, checked).await?;
        }
        anyhow::Ok((violations, keys_unchecked, scope))
    }
    .await;
    match result {
        Ok((violations, keys_unchecked, scope)) if violations.is_empty() => {
            let read = match scope {
                check::Scope::Full => "every row".to_string(),
                check::Scope::Since(id) => format!("what changed after status-log row {id}; --full reads every row"),
            };
            if keys_unchecked {
                println!("ok: invariants I1-I9 hold (read {read}; card keys not decrypted: no keys secret given)");
            } else {
                println!("ok: invariants I1-I9 hold (read {read})");
            }
            ExitCode::SUCCESS
        }
        Ok((violations, _, _)) => {
            for v in &violations {
                println!("{v}");
            }
            println!("{} violation(s)", violations.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("kassa check: cannot run: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_definition_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
