//! Wiring: open the store, mount gateways, start the HTTP server and the workers.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::SharedClock;
use crate::config::Settings;
use crate::domain::checkout::SkuLimits;
use crate::domain::{Currency, Money, ids};
use crate::gateway::Gateways;
use crate::gateway::sandbox::SandboxGateway;
use crate::http::{AppState, Inner, router};
use crate::sandbox::Sandbox;
use crate::store::Db;
use crate::store::catalog::{self, NewSku, SkuKind};
use crate::vault::Vault;
use crate::workers::keys::KeyKeeper;
use crate::workers::monitor::Monitor;
use crate::workers::outbox::Relay;
use crate::workers::reconciler::Reconciler;
use crate::workers::refunds::Refunder;
use crate::workers::retention::Retainer;
use crate::workers::run_every;
use crate::workers::sweeper::Sweeper;

/// Interval of the monitor (the sweeper's lag, stuck-order alerts, alert pushes).
const MONITOR_INTERVAL: Duration = Duration::from_secs(10);
/// Interval of the refund sender.
const REFUND_INTERVAL: Duration = Duration::from_millis(1_000);
/// Interval of the outbox relay.
/// How often the gateways' keys are looked after (WeChat Pay's certificates downloaded).
const KEYS_INTERVAL: Duration = Duration::from_millis(crate::gateway::wechat_keys::REFRESH_EVERY_MS.unsigned_abs());
const OUTBOX_INTERVAL: Duration = Duration::from_millis(500);
/// Interval of the mail worker.
const MAIL_INTERVAL: Duration = Duration::from_secs(1);
/// Interval of the retention worker.
const RETENTION_INTERVAL: Duration = Duration::from_secs(600);
/// Interval of the WeChat mini-program shipping reporter.
const SHIPPING_INTERVAL: Duration = Duration::from_secs(2);
/// Interval of the sandbox's notification retry worker.
const SANDBOX_DELIVERY_INTERVAL: Duration = Duration::from_millis(500);
/// Interval of the look at whether the daily poll of complaints and disputes is due.
const CASE_POLL_INTERVAL: Duration = Duration::from_secs(600);
/// Interval of the daily statement job's look at whether a day is due.
const STATEMENT_INTERVAL: Duration = Duration::from_secs(60);

/// A running kassa instance.
pub struct App {
    pub state: AppState,
    pub sweeper: Arc<Sweeper>,
    pub reconciler: Arc<Reconciler>,
    pub refunder: Arc<Refunder>,
    pub monitor: Arc<Monitor>,
    pub retainer: Arc<Retainer>,
    /// The gateways' keys kept current (WeChat Pay's platform certificates).
    pub keeper: Arc<KeyKeeper>,
    /// The outbox relay, when a merchant webhook is configured.
    pub relay: Option<Arc<Relay>>,
    /// E-mail to the buyer, when `[email]` is configured.
    pub mailer: Option<Arc<crate::workers::mail::Mailer>>,
    /// WeChat mini-program subscribe messages, when `[gateways.wechatpay.subscribe]` is configured.
    pub notifier: Option<Arc<crate::workers::subscribe::Notifier>>,
    /// WeChat mini-program shipping reports, when the mini program's secret is configured.
    pub shipper: Option<Arc<crate::workers::shipping::Shipper>>,
    /// The daily statement reconciliation (run by the workers unless `--statement-time off`).
    pub statements: Arc<crate::workers::statements::StatementJob>,
    pub sandbox: Option<Arc<Sandbox>>,
    pub addr: SocketAddr,
    pub public_url: String,
    /// What this instance cannot do as configured (no gateway, no admin access), said at start-up.
    pub warnings: Vec<String>,
    /// The admin token when this instance generated it (demo mode), to be shown once.
    pub generated_admin_token: Option<String>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Whether to run the background workers (tests drive `step()` themselves when off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    Run,
    Off,
}

/// The buckets of every latency histogram, in seconds: from a local statement to a slow gateway.
pub const LATENCY_BUCKETS_S: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

fn metrics_handle() -> Option<metrics_exporter_prometheus::PrometheusHandle> {
    static HANDLE: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Latencies as histograms with buckets (seconds), which aggregate across a fleet.
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS_S)
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).ok().map(|()| handle)
        })
        .clone()
}

/// The demo catalog: idempotent, safe when several instances start at once. The flash sale
/// sells at most two lamps an order and holds them for five minutes.
const DEMO_CATALOG: &[(&str, &str, i64, i64, SkuLimits)] = &[
    ("TEA-LONGJING-100G", "West Lake Longjing tea, 100 g", 12_800, 50, NO_LIMITS),
    ("MUG-CELADON", "Celadon mug", 8_900, 20, NO_LIMITS),
    ("NOTEBOOK-A5", "A5 dotted notebook", 2_500, 100, NO_LIMITS),
    (
        "LAMP-FLASH-SALE",
        "Desk lamp (flash sale)",
        990,
        10,
        SkuLimits { max_per_order: Some(2), hold_seconds: Some(300) },
    ),
];
const NO_LIMITS: SkuLimits = SkuLimits { max_per_order: None, hold_seconds: None };

/// The demo's digital SKU: each sale hands out one of its card keys, exactly once, shown on the
/// buyer's order page after payment.
pub const DEMO_DIGITAL_SKU: &str = "EBOOK-TEA-GUIDE";
/// Its keys, imported when the demo starts (a key already there, sold or not, is not again).
const DEMO_KEYS: [&str; 5] =
    ["TEA-GUIDE-7Q4M-2K9D", "TEA-GUIDE-3HX8-PW6N", "TEA-GUIDE-R5TJ-8C2E", "TEA-GUIDE-L9VB-4F7A", "TEA-GUIDE-6MZP-1G3S"];

/// The demo's digital SKU and its card keys: idempotent, like the catalog.
async fn seed_demo_keys(db: &Db, vault: &Vault, now: i64) -> anyhow::Result<()> {
    let sku = crate::domain::ids::Sku::parse(DEMO_DIGITAL_SKU)?;
    let new = NewSku {
        sku: sku.clone(),
        name: "Tea guide e-book (card key)".to_string(),
        kind: SkuKind::Digital,
        price: Money::new(1_900, Currency::parse("CNY")?)?,
        stock: 0,
        limits: NO_LIMITS,
    };
    catalog::create_sku(db, &new, true, now).await?;
    let keys: Vec<String> = DEMO_KEYS.iter().map(|k| (*k).to_string()).collect();
    crate::store::fulfilment::import_keys(db, vault, &sku, &keys, now).await?;
    Ok(())
}

async fn seed_demo(db: &Db, now: i64) -> anyhow::Result<()> {
    let cny = Currency::parse("CNY")?;
    for (sku, name, price, stock, limits) in DEMO_CATALOG {
        let new = NewSku {
            sku: crate::domain::ids::Sku::parse(sku)?,
            name: (*name).to_string(),
            kind: SkuKind::Physical,
            price: Money::new(*price, cny)?,
            stock: *stock,
            limits: *limits,
        };
        catalog::create_sku(db, &new, true, now).await?;
    }
    Ok(())
}

/// Builds the configured gateways (and the sandbox when asked for) and picks the default one.
pub async fn mount_gateways(
    settings: &Settings,
    db: &Db,
    clock: &SharedClock,
    public_url: &str,
) -> anyhow::Result<(Gateways, Option<Arc<Sandbox>>)> {
    let mut gateways = Gateways::default();
    let sandbox = if settings.sandbox {
        let records = db.open_sandbox(&settings.database_url).await?;
        let sandbox = Sandbox::init(db, records, clock.clone(), settings.sandbox_ignore_close).await?;
        gateways.add(Arc::new(SandboxGateway::new(sandbox.clone(), public_url)));
        Some(sandbox)
    } else {
        None
    };
    for gateway in settings.gateways.build(public_url)? {
        gateways.add(gateway);
    }
    let preferred = if settings.sandbox { Some(crate::sandbox::protocol::NAME) } else { None };
    let fallback = preferred.or_else(|| settings.gateways.names().first().copied());
    gateways.default = match &settings.default_gateway {
        Some(name) => Some(
            gateways
                .get(name)
                .map(|g| g.name())
                .with_context(|| format!("--default-gateway {name:?} is not configured ({:?})", gateways.names()))?,
        ),
        None => fallback,
    };
    Ok((gateways, sandbox))
}

/// What a server started like this cannot do.
fn startup_warnings(state: &AppState, settings: &Settings) -> Vec<String> {
    let mut warnings = Vec::new();
    if settings.sandbox_in_production {
        warnings.push(
            "DANGER: the sandbox gateway is mounted beside a real gateway or on a public URL \
             (--sandbox-in-production-i-know): anyone who reaches /sandbox can mark an order paid and take its \
             goods"
                .to_string(),
        );
    }
    if state.gateways.names().is_empty() {
        warnings.push(
            "no payment gateway is configured: buyers can order but cannot pay (configure [gateways.*] in the \
             --config file, or start with --sandbox to try kassa)"
                .to_string(),
        );
    }
    if state.admin_token_hash.is_none() {
        warnings.push(
            "no admin token: the admin API and console are closed (set --admin-token or KASSA_ADMIN_TOKEN; \
             generate one with `openssl rand -hex 32`)"
                .to_string(),
        );
    }
    if state.public_url.starts_with("http://") && !crate::config::is_loopback_url(&state.public_url) {
        warnings.push(format!(
            "the public URL {} is not https: the admin cookie and buyer tokens travel in clear (set --public-url \
             https://… behind a TLS proxy)",
            state.public_url
        ));
    }
    warnings
}

/// Writes a secret file readable by its owner only.
fn write_private(path: &std::path::Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(path).with_context(|| format!("creating {}", path.display()))?;
    file.write_all(contents.as_bytes())?;
    Ok(())
}

impl App {
    /// Starts kassa on an already bound listener.
    pub async fn start(
        settings: &Settings,
        clock: SharedClock,
        listener: tokio::net::TcpListener,
        workers: Workers,
    ) -> anyhow::Result<App> {
        let addr = listener.local_addr()?;
        crate::store::files::create_private_dir(&settings.data_dir)
            .with_context(|| format!("creating the data dir {}", settings.data_dir.display()))?;
        let db = Db::connect_with(&settings.database_url, settings.db_max_connections, settings.engine).await?;
        db.migrate().await.context("applying migrations")?;
        let public_url =
            settings.public_url.clone().unwrap_or_else(|| format!("http://{addr}")).trim_end_matches('/').to_string();

        let (gateways, sandbox) = mount_gateways(settings, &db, &clock, &public_url).await?;
        if settings.demo {
            seed_demo(&db, clock.now_ms()).await?;
        }
        let (admin_token, generated_admin_token) = match (&settings.admin_token, settings.demo) {
            (Some(t), _) => (Some(t.clone()), None),
            (None, true) => {
                let t = ids::new_secret_token();
                (Some(t.clone()), Some(t))
            }
            (None, false) => (None, None),
        };
        let vault = match (&settings.keys_secret, settings.demo) {
            (Some(secret), _) => Some(Arc::new(Vault::from_hex(secret).context("--keys-secret")?)),
            (None, demo) => {
                let path = crate::config::keys_secret_file(&settings.data_dir);
                match std::fs::read_to_string(&path) {
                    Ok(secret) => {
                        Some(Arc::new(Vault::from_hex(&secret).with_context(|| format!("{}", path.display()))?))
                    }
                    Err(_) if demo => {
                        let secret = Vault::generate_secret();
                        write_private(&path, &secret)?;
                        Some(Arc::new(Vault::from_hex(&secret)?))
                    }
                    Err(_) => None,
                }
            }
        };
        // Card keys are sealed with one secret: a different one would deliver keys nobody can read.
        match &vault {
            Some(vault) => crate::store::fulfilment::verify_keys_secret(&db, vault)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
                .context("the keys secret (--keys-secret, or keys.secret in the data dir)")?,
            None if crate::store::fulfilment::keys_stored(&db).await? => anyhow::bail!(
                "this database holds card keys but no keys secret is configured: start with the --keys-secret \
                 they were imported under (or put it in keys.secret in the data dir)"
            ),
            None => {}
        }
        if settings.demo
            && let Some(vault) = &vault
        {
            seed_demo_keys(&db, vault, clock.now_ms()).await?;
        }
        let guard = crate::http::guard::Guard::new(&settings.protection)?;
        let guard = Arc::new(if settings.demo { guard.quiet_about_unforwarded() } else { guard });
        let retainer = Arc::new(Retainer {
            db: db.clone(),
            clock: clock.clone(),
            retention: settings.protection.retention,
            memory: guard.clone(),
        });
        let links = Arc::new(link_signer(&db, vault.as_deref()).await?);
        let cx = usecase_context(settings, &db, &clock, &gateways, &public_url, vault, links);
        let mailer = match &settings.email {
            Some(email) => Some(Arc::new(crate::workers::mail::Mailer::new(cx.clone(), email)?)),
            None => None,
        };
        let refunder = Arc::new(Refunder { cx: cx.clone() });
        let state = AppState(Arc::new(Inner {
            cx: cx.clone(),
            sandbox: sandbox.clone(),
            admin_token_hash: admin_token
                .map(|t| aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, t.as_bytes()).as_ref().to_vec()),
            demo: settings.demo,
            time_zone: settings.time_zone.clone(),
            protection: settings.protection.clone(),
            guard: guard.clone(),
            metrics: metrics_handle(),
            webhook_configured: settings.webhook_url.is_some() && settings.webhook_secret.is_some(),
        }));
        let reconciler = Arc::new(Reconciler { cx: cx.clone(), after_ms: settings.reconcile_after_ms });
        let sweeper = Arc::new(Sweeper { cx: cx.clone() });
        let monitor = Arc::new(Monitor::new(
            db.clone(),
            clock.clone(),
            settings.alert_webhook_url.clone(),
            settings.case_due_margin_ms,
        ));
        let keeper = Arc::new(KeyKeeper::new(db.clone(), clock.clone(), state.gateways.clone()));
        let relay = match (&settings.webhook_url, &settings.webhook_secret) {
            (Some(url), Some(secret)) => Some(Arc::new(Relay::new(db.clone(), clock.clone(), url.clone(), secret)?)),
            _ => None,
        };
        let shipper =
            match settings.gateways.wechatpay.as_ref().map(crate::gateway::wechat_shipping::ShippingApi::from_config) {
                Some(Ok(Some(api))) => {
                    Some(Arc::new(crate::workers::shipping::Shipper::new(db.clone(), clock.clone(), api)))
                }
                Some(Err(e)) => anyhow::bail!("[gateways.wechatpay] shipping reports: {e}"),
                _ => None,
            };
        crate::store::shipping::set_reporting(&db, shipper.as_ref().map(|s| s.appid())).await?;
        let notifier = subscribe_notifier(settings, &db, &clock)?;
        crate::store::subscribe::set_subscribing(
            &db,
            notifier.as_ref().map(|n| n.appid()),
            &notifier.as_ref().map(|n| n.kinds()).unwrap_or_default(),
        )
        .await?;
        let statements = Arc::new(crate::workers::statements::StatementJob {
            db: db.clone(),
            gateways: state.gateways.clone(),
            clock: clock.clone(),
            schedule: settings.statement_schedule.clone().unwrap_or_default(),
        });
        let warnings = startup_warnings(&state, settings);
        for w in &warnings {
            tracing::warn!("{w}");
        }
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        let app = router(state.clone());
        let limits = crate::http::server::ServerLimits {
            header_read_timeout: settings.protection.header_read_timeout,
            request_timeout: settings.protection.request_timeout,
            max_connections: settings.protection.max_connections,
        };
        tasks.push(tokio::spawn(crate::http::server::serve(listener, app, limits, shutdown_rx.clone())));
        if workers == Workers::Run {
            let sw = sweeper.clone();
            let interval = Duration::from_millis(settings.sweep_interval_ms);
            tasks.push(tokio::spawn(run_every("sweeper", interval, shutdown_rx.clone(), move || {
                let sw = sw.clone();
                async move {
                    match sw.step().await {
                        Ok(r) if r.examined > 0 => tracing::info!(?r, "sweep"),
                        Ok(_) => {}
                        Err(e) => tracing::error!(error = %e, "sweep failed"),
                    }
                }
            })));
            let rc = reconciler.clone();
            let interval = Duration::from_millis(settings.reconcile_interval_ms);
            tasks.push(tokio::spawn(run_every("reconciler", interval, shutdown_rx.clone(), move || {
                let rc = rc.clone();
                async move {
                    if let Err(e) = rc.pass(false).await {
                        tracing::error!(error = %e, "reconciliation pass failed");
                    }
                }
            })));
            let mo = monitor.clone();
            tasks.push(tokio::spawn(run_every("monitor", MONITOR_INTERVAL, shutdown_rx.clone(), move || {
                let mo = mo.clone();
                async move {
                    if let Err(e) = mo.step().await {
                        tracing::error!(error = %e, "monitor step failed");
                    }
                }
            })));
            let rt = retainer.clone();
            tasks.push(tokio::spawn(run_every("retention", RETENTION_INTERVAL, shutdown_rx.clone(), move || {
                let rt = rt.clone();
                async move {
                    if let Err(e) = rt.step().await {
                        tracing::error!(error = %e, "retention pass failed");
                    }
                }
            })));
            let rf = refunder.clone();
            tasks.push(tokio::spawn(run_every("refunds", REFUND_INTERVAL, shutdown_rx.clone(), move || {
                let rf = rf.clone();
                async move {
                    if let Err(e) = rf.step().await {
                        tracing::error!(error = %e, "refund step failed");
                    }
                }
            })));
            let keeper =
                Arc::new(crate::workers::keys::KeyKeeper::new(db.clone(), clock.clone(), state.gateways.clone()));
            tasks.push(tokio::spawn(run_every("gateway-keys", KEYS_INTERVAL, shutdown_rx.clone(), move || {
                let keeper = keeper.clone();
                async move {
                    if let Err(e) = keeper.step().await {
                        tracing::error!(error = %e, "gateway key upkeep failed");
                    }
                }
            })));
            if let Some(relay) = relay.clone() {
                tasks.push(tokio::spawn(run_every("outbox", OUTBOX_INTERVAL, shutdown_rx.clone(), move || {
                    let relay = relay.clone();
                    async move {
                        if let Err(e) = relay.step().await {
                            tracing::error!(error = %e, "outbox relay step failed");
                        }
                    }
                })));
            }
            if let Some(mailer) = mailer.clone() {
                tasks.push(tokio::spawn(run_every("mail", MAIL_INTERVAL, shutdown_rx.clone(), move || {
                    let mailer = mailer.clone();
                    async move {
                        if let Err(e) = mailer.step().await {
                            tracing::error!(error = %e, "mail step failed");
                        }
                    }
                })));
            }
            if let Some(notifier) = notifier.clone() {
                tasks.push(tokio::spawn(run_every("subscribe", SHIPPING_INTERVAL, shutdown_rx.clone(), move || {
                    let notifier = notifier.clone();
                    async move {
                        if let Err(e) = notifier.step().await {
                            tracing::error!(error = %e, "subscribe message step failed");
                        }
                    }
                })));
            }
            if let Some(shipper) = shipper.clone() {
                tasks.push(tokio::spawn(run_every("shipping", SHIPPING_INTERVAL, shutdown_rx.clone(), move || {
                    let shipper = shipper.clone();
                    async move {
                        if let Err(e) = shipper.step().await {
                            tracing::error!(error = %e, "shipping report step failed");
                        }
                    }
                })));
            }
            let poller = Arc::new(crate::workers::cases::CasePoller { cx: cx.clone() });
            tasks.push(tokio::spawn(run_every("cases", CASE_POLL_INTERVAL, shutdown_rx.clone(), move || {
                let poller = poller.clone();
                async move {
                    if let Err(e) = poller.step().await {
                        tracing::error!(error = %e, "case poll failed");
                    }
                }
            })));
            if settings.statement_schedule.is_some() {
                let job = statements.clone();
                tasks.push(tokio::spawn(run_every("statements", STATEMENT_INTERVAL, shutdown_rx.clone(), move || {
                    let job = job.clone();
                    async move {
                        if let Err(e) = job.step().await {
                            tracing::error!(error = %e, "statement reconciliation failed");
                        }
                    }
                })));
            }
            if let Some(sb) = sandbox.clone() {
                tasks.push(tokio::spawn(run_every(
                    "sandbox-delivery",
                    SANDBOX_DELIVERY_INTERVAL,
                    shutdown_rx.clone(),
                    move || {
                        let sb = sb.clone();
                        async move {
                            if let Err(e) = sb.deliver_step().await {
                                tracing::error!(error = %e, "sandbox delivery step failed");
                            }
                        }
                    },
                )));
            }
        }
        Ok(App {
            state,
            sweeper,
            reconciler,
            refunder,
            relay,
            mailer,
            notifier,
            shipper,
            statements,
            monitor,
            retainer,
            keeper,
            sandbox,
            addr,
            public_url,
            generated_admin_token,
            warnings,
            shutdown,
            tasks,
        })
    }

    /// Stops accepting requests, lets in-flight ones finish, stops the workers.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        self.state.db.close().await;
    }
}

/// The subscribe-message worker `[gateways.wechatpay.subscribe]` asks for (it needs the mini
/// program's secret); refused at start when the section does not hold.
fn subscribe_notifier(
    settings: &Settings,
    db: &Db,
    clock: &SharedClock,
) -> anyhow::Result<Option<Arc<crate::workers::subscribe::Notifier>>> {
    let Some(wechat) = settings.gateways.wechatpay.as_ref() else { return Ok(None) };
    let Some(config) = wechat.subscribe.as_ref() else { return Ok(None) };
    let subscribe = config.checked().map_err(|e| anyhow::anyhow!("[gateways.wechatpay.subscribe] {e}"))?;
    let api = crate::gateway::wechat_shipping::ShippingApi::from_config(wechat)
        .map_err(|e| anyhow::anyhow!("[gateways.wechatpay.subscribe]: {e}"))?
        .ok_or_else(|| {
            anyhow::anyhow!("[gateways.wechatpay.subscribe] needs mini_program_secret in [gateways.wechatpay]")
        })?;
    Ok(Some(Arc::new(crate::workers::subscribe::Notifier::new(db.clone(), clock.clone(), api, subscribe))))
}

/// The signer of links to an order: from the keys secret where there is one, else from a random
/// secret kept in the database (made once, read by every instance).
pub async fn link_signer(db: &Db, vault: Option<&crate::vault::Vault>) -> anyhow::Result<crate::vault::LinkSigner> {
    Ok(match vault {
        Some(v) => v.link_signer(),
        None => {
            let secret =
                crate::store::settings::get_or_init(db, "link_secret", crate::vault::Vault::generate_secret).await?;
            crate::vault::LinkSigner::from_secret(secret.as_bytes())
        }
    })
}

/// What the use cases reach, as the settings configure it.
pub fn usecase_context(
    settings: &Settings,
    db: &Db,
    clock: &SharedClock,
    gateways: &Gateways,
    public_url: &str,
    vault: Option<Arc<crate::vault::Vault>>,
    links: Arc<crate::vault::LinkSigner>,
) -> crate::usecase::Context {
    crate::usecase::Context {
        db: db.clone(),
        clock: clock.clone(),
        gateways: gateways.clone(),
        public_url: public_url.to_string(),
        hold_ms: i64::try_from(settings.hold_seconds.saturating_mul(1000)).unwrap_or(i64::MAX),
        max_open_orders_per_session: settings.protection.max_open_orders_per_session,
        order_limits: settings.protection.order_limits,
        late_policy: settings.late_payment_policy,
        refund_policy: settings.refund_policy,
        allowed_return_origins: settings.allowed_return_origins.clone(),
        vault,
        links,
        link_hours: settings.lookup_link_hours,
        mail: settings.email.as_ref().map(|e| crate::usecase::mail::MailPolicy { keys_inline: e.keys_inline }),
    }
}
