//! Configuration: command line, then `KASSA_<NAME>` environment variables (both through clap),
//! then the TOML file named by `--config`, then defaults.

use crate::clock::Zone;
use crate::store::engine::EngineConfig;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use crate::domain::decide::LatePolicy;
use crate::domain::refund::{RefundPolicy, WINDOW_DAYS_MAX};
use crate::domain::shop::{Origin, RETURN_ORIGINS_MAX};
use crate::gateway::config::GatewaysFile;

pub mod email;
mod protection;

pub use protection::ProtectionArgs;

pub use crate::http::protection::{
    ADMIN_TOKEN_LEN_MIN, Captcha, ClientAddressHeader, Protection, RETENTION_DAYS_MAX, RateLimits,
    SHOP_API_KEY_LEN_MIN, parse_proxies,
};
pub use crate::store::retention::Retention;

/// Options shared by `serve`, `check` and `migrate`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// Data directory (SQLite database lives here); created if missing [default: ./kassa-data]
    #[arg(long, env = "KASSA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// sqlite://PATH (default: a file in the data dir) or postgres://…
    #[arg(long, env = "KASSA_DATABASE_URL")]
    pub database_url: Option<String>,
    /// TOML configuration file
    #[arg(long, env = "KASSA_CONFIG")]
    pub config: Option<PathBuf>,
    /// Most connections to PostgreSQL per instance [default: 16]
    #[arg(long, env = "KASSA_DB_MAX_CONNECTIONS")]
    pub db_max_connections: Option<u32>,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Validate the configuration (options, environment, file, gateway keys, keys secret) and
    /// exit: 0 when it is sound, 1 naming what is not. Nothing is started or written
    #[arg(long)]
    pub check_config: bool,
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "KASSA_LISTEN")]
    pub listen: Option<String>,
    /// Base URL used in notify and return URLs [default: http://<listen>]
    #[arg(long, env = "KASSA_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Seed a demo catalog and make the built-in sandbox gateway the default
    #[arg(long, env = "KASSA_DEMO", value_parser = clap::builder::BoolishValueParser::new())]
    pub demo: bool,
    /// Mount the built-in sandbox gateway without the demo catalog
    #[arg(long, env = "KASSA_SANDBOX", value_parser = clap::builder::BoolishValueParser::new())]
    pub sandbox: bool,
    /// Sandbox fault switch: accept close calls but still let the buyer pay (late-payment tests)
    #[arg(long, env = "KASSA_SANDBOX_IGNORE_CLOSE", value_parser = clap::builder::BoolishValueParser::new())]
    pub sandbox_ignore_close: bool,
    /// Start the sandbox even beside a real gateway or with a public URL that is not loopback:
    /// anyone could then mark an order paid through it. Refused without this flag
    #[arg(long, env = "KASSA_SANDBOX_IN_PRODUCTION_I_KNOW", value_parser = clap::builder::BoolishValueParser::new())]
    pub sandbox_in_production_i_know: bool,
    /// Admin bearer token (generated and printed in --demo mode when absent)
    #[arg(long, env = "KASSA_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// How long an unpaid order holds its stock, in seconds [default: 900]
    #[arg(long, env = "KASSA_HOLD_SECONDS")]
    pub hold_seconds: Option<u64>,
    /// Sweeper interval in milliseconds [default: 5000]
    #[arg(long, env = "KASSA_SWEEP_INTERVAL_MS")]
    pub sweep_interval_ms: Option<u64>,
    /// What to do with a payment that arrives after its order expired: reallocate (take the stock
    /// again if it is there, else refund), refund, or manual [default: reallocate]
    #[arg(long, env = "KASSA_LATE_PAYMENT_POLICY")]
    pub late_payment_policy: Option<String>,
    /// Merchant refunds only within this many days of the payment (1-3650) [default: no limit];
    /// automatic refunds of late and duplicate payments are never held to it
    #[arg(long, env = "KASSA_REFUND_WINDOW_DAYS")]
    pub refund_window_days: Option<u32>,
    /// Merchant webhook that receives order events (outbox), e.g. https://shop.example/kassa-events
    #[arg(long, env = "KASSA_WEBHOOK_URL")]
    pub webhook_url: Option<String>,
    /// Secret for the webhook's HMAC-SHA256 signature
    #[arg(long, env = "KASSA_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// Where to POST alerts as they are raised (JSON), in addition to the console and metrics
    #[arg(long, env = "KASSA_ALERT_WEBHOOK_URL")]
    pub alert_webhook_url: Option<String>,
    /// Gateway used when a checkout names none (sandbox, alipay, wechatpay, stripe)
    #[arg(long, env = "KASSA_DEFAULT_GATEWAY")]
    pub default_gateway: Option<String>,
    /// Query the gateway about an attempt with no notification this long after it was created,
    /// in seconds [default: 120]
    #[arg(long, env = "KASSA_RECONCILE_AFTER_SECONDS")]
    pub reconcile_after_seconds: Option<u64>,
    /// Reconciler interval in milliseconds [default: 30000]
    #[arg(long, env = "KASSA_RECONCILE_INTERVAL_MS")]
    pub reconcile_interval_ms: Option<u64>,
    /// How long a link to an order (from a lookup or an e-mail) stays good, in hours [default: 24]
    #[arg(long, env = "KASSA_LOOKUP_LINK_HOURS")]
    pub lookup_link_hours: Option<u64>,
    /// How long before a complaint's or dispute's deadline the operator is warned, in hours
    /// (1-72) [default: 6]
    #[arg(long, env = "KASSA_CASE_DUE_MARGIN_HOURS")]
    pub case_due_margin_hours: Option<u64>,
    /// Origins a checkout's return_url and cancel_url may point at, comma-separated
    /// (https://shop.example,https://m.shop.example) [default: none: kassa's own return page]
    #[arg(long, env = "KASSA_ALLOWED_RETURN_ORIGINS")]
    pub allowed_return_origins: Option<String>,
    /// The shop's time zone, a name (Asia/Shanghai, Europe/Berlin) or a UTC offset (UTC, +08:00):
    /// times on the buyer pages are shown in it [default: UTC]
    #[arg(long, env = "KASSA_TIME_ZONE")]
    pub time_zone: Option<String>,
    /// When the daily statement reconciliation runs, local time HH:MM, or `off`: each gateway's
    /// previous day is fetched from then on, and again every 15 minutes until its file is there
    /// [default: 10:00]
    #[arg(long, env = "KASSA_STATEMENT_TIME")]
    pub statement_time: Option<String>,
    /// The zone --statement-time is read in, a name or a UTC offset [default: +08:00, Beijing
    /// time, when the gateways publish]
    #[arg(long, env = "KASSA_STATEMENT_TIME_ZONE")]
    pub statement_time_zone: Option<String>,
    #[command(flatten)]
    pub keys: KeysArgs,
    #[command(flatten)]
    pub protection: ProtectionArgs,
}

/// Where the card-key encryption secret comes from.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct KeysArgs {
    /// Card-key encryption secret: 64 hex characters (generated into the data dir with --demo)
    #[arg(long, env = "KASSA_KEYS_SECRET", hide_env_values = true)]
    pub keys_secret: Option<String>,
}

/// The `--config` file. Unknown keys are refused so a typo is not silently ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub data_dir: Option<PathBuf>,
    pub database_url: Option<String>,
    pub db_max_connections: Option<u32>,
    pub listen: Option<String>,
    pub public_url: Option<String>,
    pub demo: Option<bool>,
    pub sandbox: Option<bool>,
    pub sandbox_ignore_close: Option<bool>,
    pub sandbox_in_production_i_know: Option<bool>,
    pub admin_token: Option<String>,
    pub hold_seconds: Option<u64>,
    pub sweep_interval_ms: Option<u64>,
    pub late_payment_policy: Option<String>,
    pub refund_window_days: Option<u32>,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub keys_secret: Option<String>,
    pub alert_webhook_url: Option<String>,
    /// The gateway used when a checkout names none (default: the sandbox in demo mode, else the
    /// first configured of alipay, wechatpay, stripe).
    pub default_gateway: Option<String>,
    /// Real gateway sections (`[gateways.alipay]`, `[gateways.wechatpay]`, `[gateways.stripe]`).
    #[serde(default)]
    pub gateways: GatewaysFile,
    /// Active query and reconciliation.
    pub reconcile_after_seconds: Option<u64>,
    pub reconcile_interval_ms: Option<u64>,
    pub lookup_link_hours: Option<u64>,
    pub case_due_margin_hours: Option<u64>,
    /// The SMTP server of the buyer's e-mail (`[email]`).
    pub email: Option<email::EmailFile>,
    pub allowed_return_origins: Option<String>,
    pub time_zone: Option<String>,
    /// The daily statement reconciliation (the flags of the same names).
    pub statement_time: Option<String>,
    pub statement_time_zone: Option<String>,
    /// Protection of a public storefront (the flags of the same names).
    pub max_open_orders_per_session: Option<u32>,
    pub rate_limits: Option<String>,
    pub rate_sessions_per_minute: Option<u32>,
    pub rate_basket_writes_per_minute: Option<u32>,
    pub rate_confirms_per_minute: Option<u32>,
    pub rate_polls_per_minute: Option<u32>,
    pub rate_signins_per_minute: Option<u32>,
    pub rate_rejected_notifications_per_minute: Option<u32>,
    pub signin_lockout_failures: Option<u32>,
    pub signin_lockout_seconds: Option<u64>,
    pub trusted_proxies: Option<String>,
    pub client_address_header: Option<String>,
    pub shop_api_key: Option<String>,
    pub captcha_verify_url: Option<String>,
    pub captcha_secret: Option<String>,
    pub admin_idle_minutes: Option<u64>,
    pub header_read_timeout_seconds: Option<u64>,
    pub request_timeout_seconds: Option<u64>,
    pub max_connections: Option<usize>,
    pub retention_days: Option<u32>,
    pub notification_body_days: Option<u32>,
    pub rejected_notification_days: Option<u32>,
    pub delivered_message_days: Option<u32>,
    pub idempotency_key_days: Option<u32>,
    pub default_max_per_order: Option<u32>,
    pub max_units_per_order: Option<u32>,
    pub max_stock_share_percent: Option<u32>,
    pub metrics_token: Option<String>,
    pub metrics_public: Option<bool>,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub database_url: String,
    pub db_max_connections: u32,
    pub listen: SocketAddr,
    pub public_url: Option<String>,
    pub demo: bool,
    pub sandbox: bool,
    pub sandbox_ignore_close: bool,
    /// The sandbox runs beside a real gateway or on a public URL that is not loopback, as asked.
    pub sandbox_in_production: bool,
    pub admin_token: Option<String>,
    pub hold_seconds: u64,
    pub sweep_interval_ms: u64,
    pub late_payment_policy: LatePolicy,
    pub refund_policy: RefundPolicy,
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
    pub keys_secret: Option<String>,
    pub alert_webhook_url: Option<String>,
    pub gateways: GatewaysFile,
    pub default_gateway: Option<String>,
    /// An attempt without a notification this long after its creation is queried at its gateway.
    pub reconcile_after_ms: i64,
    /// How often the reconciler runs.
    pub reconcile_interval_ms: u64,
    pub protection: Protection,
    /// Where checkouts may send their buyers back to (`--allowed-return-origins`).
    pub allowed_return_origins: Vec<Origin>,
    /// The shop's time zone (`--time-zone`).
    pub time_zone: Zone,
    /// When the daily statement reconciliation runs (`--statement-time`); `None`: off.
    pub statement_schedule: Option<crate::workers::statements::Schedule>,
    /// How the storage engine runs ([`EngineConfig::from_lookup`], from the environment: switches for measuring).
    pub engine: EngineConfig,
    /// E-mail to the buyer (`[email]`); `None`: off.
    pub email: Option<email::EmailSettings>,
    /// How long a link to an order stays good (`--lookup-link-hours`).
    pub lookup_link_hours: u64,
    /// How long before a case's deadline the operator is warned (`--case-due-margin-hours`).
    pub case_due_margin_ms: i64,
}

/// `--case-due-margin-hours` checked, in milliseconds.
fn case_due_margin(hours: Option<u64>) -> anyhow::Result<i64> {
    use crate::domain::case::{DUE_MARGIN_HOURS_MAX, DUE_MARGIN_MS_DEFAULT};
    match hours {
        None => Ok(DUE_MARGIN_MS_DEFAULT),
        Some(h) if (1..=DUE_MARGIN_HOURS_MAX).contains(&h) => Ok(i64::try_from(h).unwrap_or(0) * 3_600_000),
        Some(_) => anyhow::bail!("--case-due-margin-hours must be between 1 and {DUE_MARGIN_HOURS_MAX}"),
    }
}

/// `--listen`: an address, or a host name and port (`localhost:8080`) resolved once at start-up,
/// preferring IPv4.
fn resolve_listen(listen: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let hint = || format!("--listen {listen:?} is not an address like 127.0.0.1:8080 or localhost:8080");
    let found: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(listen).with_context(hint)?.collect();
    found.iter().find(|a| a.is_ipv4()).or(found.first()).copied().with_context(hint)
}

/// `--statement-time` and `--statement-time-zone`.
fn parse_schedule(
    at: Option<&str>,
    zone: Option<&str>,
) -> anyhow::Result<Option<crate::workers::statements::Schedule>> {
    use crate::workers::statements::{Schedule, parse_time_of_day};
    let mut schedule = Schedule::default();
    match at.map(str::trim) {
        Some("off") => return Ok(None),
        Some(at) => {
            schedule.at_minutes =
                parse_time_of_day(at).with_context(|| format!("--statement-time {at:?}: use HH:MM (10:00) or off"))?;
        }
        None => {}
    }
    if let Some(z) = zone {
        schedule.zone = Zone::parse(z).with_context(|| {
            format!("--statement-time-zone {z:?}: use UTC, an offset such as +08:00, or a name such as Asia/Shanghai")
        })?;
    }
    Ok(Some(schedule))
}

/// `--allowed-return-origins`: a comma-separated list of origins (empty: none).
fn parse_origins(list: Option<&str>) -> anyhow::Result<Vec<Origin>> {
    let origins = list
        .unwrap_or_default()
        .split(',')
        .filter(|o| !o.trim().is_empty())
        .map(|o| Origin::parse(o).map_err(|e| anyhow::anyhow!("--allowed-return-origins: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if origins.len() > RETURN_ORIGINS_MAX {
        anyhow::bail!("--allowed-return-origins lists at most {RETURN_ORIGINS_MAX} origins");
    }
    Ok(origins)
}

/// The admin token, refused when it is short enough to guess.
fn check_admin_token(token: Option<String>) -> anyhow::Result<Option<String>> {
    match token {
        Some(t) if t.chars().count() < ADMIN_TOKEN_LEN_MIN => anyhow::bail!(
            "--admin-token must be at least {ADMIN_TOKEN_LEN_MIN} characters; generate one with `openssl rand -hex 32`"
        ),
        other => Ok(other),
    }
}

pub const DEFAULT_RECONCILE_AFTER_SECONDS: u64 = 120;
pub const DEFAULT_RECONCILE_INTERVAL_MS: u64 = 30_000;

pub const DEFAULT_HOLD_SECONDS: u64 = crate::domain::checkout::HOLD_SECONDS_DEFAULT;
pub const DEFAULT_SWEEP_INTERVAL_MS: u64 = 5_000;
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 16;
/// Upper bound of the hold (`domain::checkout::HOLD_SECONDS_MAX`), as the options count it.
pub const HOLD_SECONDS_MAX: u64 = crate::domain::checkout::HOLD_SECONDS_MAX.unsigned_abs();

fn read_file(path: Option<&Path>) -> anyhow::Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config file {}", path.display()))?;
    let mut file: FileConfig =
        toml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))?;
    // Key files are named relative to the config file.
    let base = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    file.gateways.resolve_paths(base);
    Ok(file)
}

/// Where `serve --demo` keeps the card-key secret it generated (mode 0600).
pub fn keys_secret_file(data_dir: &Path) -> PathBuf {
    data_dir.join("keys.secret")
}

/// Whether a URL's host is this machine (`localhost`, `127.0.0.0/8`, `::1`).
pub fn is_loopback_url(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else { return false };
    let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether the sandbox would run where real money is taken: beside a real gateway, or reached at
/// a URL that is not loopback (a public URL, or a listen address open to the network).
fn sandbox_beside_production(gateways: &GatewaysFile, reached_at: &str) -> bool {
    let real = gateways.alipay.is_some() || gateways.wechatpay.is_some() || gateways.stripe.is_some();
    real || !is_loopback_url(reached_at)
}

fn database_url(data_dir: &Path, explicit: Option<String>) -> String {
    explicit.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("kassa.db").display()))
}

/// The engine's configuration the environment asks for ([`crate::store::engine::ENV`]), read once
/// when a command starts.
pub fn engine_from_env() -> anyhow::Result<EngineConfig> {
    EngineConfig::from_lookup(|name| std::env::var(name).ok())
}

impl Default for Settings {
    /// What no flag, variable or file resolves to ([`Settings::resolve`] of nothing), but for the
    /// engine, which is read from the environment there and is its default here.
    fn default() -> Self {
        let data_dir = PathBuf::from("./kassa-data");
        Settings {
            database_url: database_url(&data_dir, None),
            data_dir,
            db_max_connections: DEFAULT_DB_MAX_CONNECTIONS,
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            demo: false,
            sandbox: false,
            sandbox_ignore_close: false,
            sandbox_in_production: false,
            admin_token: None,
            hold_seconds: DEFAULT_HOLD_SECONDS,
            sweep_interval_ms: DEFAULT_SWEEP_INTERVAL_MS,
            late_payment_policy: LatePolicy::default(),
            refund_policy: RefundPolicy { window_days: None },
            webhook_url: None,
            webhook_secret: None,
            keys_secret: None,
            alert_webhook_url: None,
            gateways: GatewaysFile::default(),
            default_gateway: None,
            reconcile_after_ms: i64::try_from(DEFAULT_RECONCILE_AFTER_SECONDS * 1000).unwrap_or(i64::MAX),
            reconcile_interval_ms: DEFAULT_RECONCILE_INTERVAL_MS,
            protection: Protection::default(),
            allowed_return_origins: Vec::new(),
            time_zone: Zone::utc(),
            statement_schedule: Some(crate::workers::statements::Schedule::default()),
            engine: EngineConfig::default(),
            email: None,
            lookup_link_hours: crate::domain::contact::LINK_HOURS_DEFAULT,
            case_due_margin_ms: crate::domain::case::DUE_MARGIN_MS_DEFAULT,
        }
    }
}

impl Settings {
    pub fn resolve(args: &ServeArgs) -> anyhow::Result<Settings> {
        let file = read_file(args.common.config.as_deref())?;
        let protection = protection::resolve(&args.protection, &file)?;
        let data_dir = args.common.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./kassa-data"));
        let listen = args.listen.clone().or(file.listen).unwrap_or_else(|| "127.0.0.1:8080".to_string());
        let listen = resolve_listen(&listen)?;
        let hold_seconds = args.hold_seconds.or(file.hold_seconds).unwrap_or(DEFAULT_HOLD_SECONDS);
        if hold_seconds > HOLD_SECONDS_MAX {
            anyhow::bail!("--hold-seconds must be at most {HOLD_SECONDS_MAX}");
        }
        let sweep_interval_ms =
            args.sweep_interval_ms.or(file.sweep_interval_ms).unwrap_or(DEFAULT_SWEEP_INTERVAL_MS).max(10);
        let demo = args.demo || file.demo.unwrap_or(false);
        let policy = args.late_payment_policy.clone().or(file.late_payment_policy.clone());
        let late_payment_policy = match policy.as_deref() {
            None => LatePolicy::default(),
            Some(p) => LatePolicy::parse(p)
                .with_context(|| format!("--late-payment-policy {p:?}: use reallocate, refund or manual"))?,
        };
        let window_days = args.refund_window_days.or(file.refund_window_days);
        if let Some(days) = window_days
            && !(1..=WINDOW_DAYS_MAX).contains(&days)
        {
            anyhow::bail!("--refund-window-days must be between 1 and {WINDOW_DAYS_MAX} (leave it out for no limit)");
        }
        let webhook_url = args.webhook_url.clone().or(file.webhook_url.clone()).filter(|u| !u.is_empty());
        if let Some(url) = &webhook_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            anyhow::bail!("--webhook-url must be an http(s) URL");
        }
        let webhook_secret = args.webhook_secret.clone().or(file.webhook_secret.clone()).filter(|s| !s.is_empty());
        if webhook_url.is_some() && webhook_secret.is_none() {
            anyhow::bail!("--webhook-url needs --webhook-secret, so the shop can verify what it receives");
        }
        let keys_secret = args.keys.keys_secret.clone().or(file.keys_secret.clone()).filter(|s| !s.is_empty());
        let reconcile_after_s = args
            .reconcile_after_seconds
            .or(file.reconcile_after_seconds)
            .unwrap_or(DEFAULT_RECONCILE_AFTER_SECONDS)
            .min(HOLD_SECONDS_MAX);
        let allowed_return_origins =
            parse_origins(args.allowed_return_origins.as_deref().or(file.allowed_return_origins.as_deref()))?;
        let time_zone = match args.time_zone.as_deref().or(file.time_zone.as_deref()) {
            None => Zone::utc(),
            Some(z) => Zone::parse(z).with_context(|| {
                format!("--time-zone {z:?}: use UTC, an offset such as +08:00, or a name such as Asia/Shanghai")
            })?,
        };
        let statement_schedule = parse_schedule(
            args.statement_time.as_deref().or(file.statement_time.as_deref()),
            args.statement_time_zone.as_deref().or(file.statement_time_zone.as_deref()),
        )?;
        let sandbox = demo || args.sandbox || file.sandbox.unwrap_or(false);
        let public_url = args.public_url.clone().or(file.public_url);
        // The sandbox is reached at the public URL, or where kassa listens when none is given.
        let reached_at = public_url.clone().unwrap_or_else(|| format!("http://{listen}"));
        let sandbox_in_production = sandbox && sandbox_beside_production(&file.gateways, &reached_at);
        if sandbox_in_production
            && !(args.sandbox_in_production_i_know || file.sandbox_in_production_i_know.unwrap_or(false))
        {
            anyhow::bail!(
                "the sandbox gateway (--demo or --sandbox) lets anyone mark an order paid: it is refused beside a \
                 real gateway, with a public URL that is not loopback, or listening on the network. Leave out \
                 --demo and --sandbox in production, or add --sandbox-in-production-i-know for a closed test \
                 installation"
            );
        }
        let lookup_link_hours = email::link_hours(args.lookup_link_hours.or(file.lookup_link_hours))?;
        let case_due_margin_ms = case_due_margin(args.case_due_margin_hours.or(file.case_due_margin_hours))?;
        let email = email::resolve(file.email.as_ref(), std::env::var("KASSA_EMAIL_PASSWORD").ok())?;
        Ok(Settings {
            email,
            lookup_link_hours,
            case_due_margin_ms,
            allowed_return_origins,
            time_zone,
            statement_schedule,
            engine: engine_from_env()?,
            protection,
            gateways: file.gateways.clone(),
            default_gateway: args.default_gateway.clone().or(file.default_gateway.clone()),
            reconcile_after_ms: i64::try_from(reconcile_after_s * 1000).unwrap_or(i64::MAX),
            reconcile_interval_ms: args
                .reconcile_interval_ms
                .or(file.reconcile_interval_ms)
                .unwrap_or(DEFAULT_RECONCILE_INTERVAL_MS)
                .max(100),
            alert_webhook_url: args
                .alert_webhook_url
                .clone()
                .or(file.alert_webhook_url.clone())
                .filter(|u| !u.is_empty()),
            late_payment_policy,
            refund_policy: RefundPolicy { window_days },
            webhook_url,
            webhook_secret,
            keys_secret,
            database_url: database_url(&data_dir, args.common.database_url.clone().or(file.database_url)),
            data_dir,
            db_max_connections: args
                .common
                .db_max_connections
                .or(file.db_max_connections)
                .unwrap_or(DEFAULT_DB_MAX_CONNECTIONS),
            listen,
            public_url,
            demo,
            sandbox,
            sandbox_in_production,
            sandbox_ignore_close: args.sandbox_ignore_close || file.sandbox_ignore_close.unwrap_or(false),
            admin_token: check_admin_token(
                args.admin_token.clone().or(file.admin_token.clone()).filter(|t| !t.is_empty()),
            )?,
            hold_seconds,
            sweep_interval_ms,
        })
    }

    /// The card-key secret for commands other than `serve`: option, environment, file, or the one
    /// `serve --demo` generated in the data dir.
    pub fn resolve_keys_secret(common: &CommonArgs, keys: &KeysArgs) -> anyhow::Result<Option<String>> {
        let file = read_file(common.config.as_deref())?;
        if let Some(secret) = keys.keys_secret.clone().or(file.keys_secret).filter(|s| !s.is_empty()) {
            return Ok(Some(secret));
        }
        let data_dir = common.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./kassa-data"));
        let path = keys_secret_file(&data_dir);
        Ok(std::fs::read_to_string(&path).ok().map(|s| s.trim().to_string()))
    }

    /// The database settings for `check`, `migrate` and `keys import`: its URL, the pool's bound
    /// and the engine's configuration.
    pub fn resolve_common(args: &CommonArgs) -> anyhow::Result<(String, u32, EngineConfig)> {
        let file = read_file(args.config.as_deref())?;
        let data_dir = args.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./kassa-data"));
        Ok((
            database_url(&data_dir, args.database_url.clone().or(file.database_url)),
            args.db_max_connections.or(file.db_max_connections).unwrap_or(DEFAULT_DB_MAX_CONNECTIONS),
            engine_from_env()?,
        ))
    }
}

#[cfg(test)]
mod tests;
