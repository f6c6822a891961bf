//! Configuration: command line, then `KASSA_<NAME>` environment variables (both through clap),
//! then the TOML file named by `--config`, then defaults.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::Deserialize;

use crate::domain::decide::LatePolicy;
use crate::domain::refund::{RefundPolicy, WINDOW_DAYS_MAX};
use crate::gateway::config::GatewaysFile;

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
    /// Address to listen on [default: 127.0.0.1:8080]
    #[arg(long, env = "KASSA_LISTEN")]
    pub listen: Option<String>,
    /// Base URL used in notify and return URLs [default: http://<listen>]
    #[arg(long, env = "KASSA_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Seed a demo catalog and make the built-in sandbox gateway the default
    #[arg(long, env = "KASSA_DEMO")]
    pub demo: bool,
    /// Mount the built-in sandbox gateway without the demo catalog
    #[arg(long, env = "KASSA_SANDBOX")]
    pub sandbox: bool,
    /// Sandbox fault switch: accept close calls but still let the buyer pay (late-payment tests)
    #[arg(long, env = "KASSA_SANDBOX_IGNORE_CLOSE")]
    pub sandbox_ignore_close: bool,
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
    #[command(flatten)]
    pub keys: KeysArgs,
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
}

pub const DEFAULT_RECONCILE_AFTER_SECONDS: u64 = 120;
pub const DEFAULT_RECONCILE_INTERVAL_MS: u64 = 30_000;

pub const DEFAULT_HOLD_SECONDS: u64 = 900;
pub const DEFAULT_SWEEP_INTERVAL_MS: u64 = 5_000;
pub const DEFAULT_DB_MAX_CONNECTIONS: u32 = 16;
/// Upper bound of the hold: a week, so `hold_seconds * 1000` can never overflow.
pub const HOLD_SECONDS_MAX: u64 = 7 * 24 * 3600;

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

fn database_url(data_dir: &Path, explicit: Option<String>) -> String {
    explicit.unwrap_or_else(|| format!("sqlite://{}", data_dir.join("kassa.db").display()))
}

impl Settings {
    pub fn resolve(args: &ServeArgs) -> anyhow::Result<Settings> {
        let file = read_file(args.common.config.as_deref())?;
        let data_dir = args.common.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./kassa-data"));
        let listen = args.listen.clone().or(file.listen).unwrap_or_else(|| "127.0.0.1:8080".to_string());
        let listen: SocketAddr =
            listen.parse().with_context(|| format!("--listen {listen:?} is not an address like 127.0.0.1:8080"))?;
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
        Ok(Settings {
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
            public_url: args.public_url.clone().or(file.public_url),
            demo,
            sandbox: demo || args.sandbox || file.sandbox.unwrap_or(false),
            sandbox_ignore_close: args.sandbox_ignore_close || file.sandbox_ignore_close.unwrap_or(false),
            admin_token: args.admin_token.clone().or(file.admin_token).filter(|t| !t.is_empty()),
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

    /// The database settings for `check` and `migrate`.
    pub fn resolve_common(args: &CommonArgs) -> anyhow::Result<(String, u32)> {
        let file = read_file(args.config.as_deref())?;
        let data_dir = args.data_dir.clone().or(file.data_dir).unwrap_or_else(|| PathBuf::from("./kassa-data"));
        Ok((
            database_url(&data_dir, args.database_url.clone().or(file.database_url)),
            args.db_max_connections.or(file.db_max_connections).unwrap_or(DEFAULT_DB_MAX_CONNECTIONS),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_beats_file_beats_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kassa.toml");
        std::fs::write(&file, "hold_seconds = 60\nlisten = \"127.0.0.1:9000\"\ndemo = true\n").unwrap();
        let mut args = ServeArgs::default();
        args.common.config = Some(file);
        args.hold_seconds = Some(5);
        let s = Settings::resolve(&args).unwrap();
        assert_eq!(s.hold_seconds, 5);
        assert_eq!(s.listen.port(), 9000);
        assert!(s.demo && s.sandbox);
        assert_eq!(s.sweep_interval_ms, DEFAULT_SWEEP_INTERVAL_MS);
        assert!(s.database_url.starts_with("sqlite://./kassa-data"));
        assert_eq!(s.refund_policy.window_days, None);
    }

    #[test]
    fn the_refund_window_is_off_unless_set() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kassa.toml");
        std::fs::write(&file, "refund_window_days = 90\n").unwrap();
        let mut args = ServeArgs::default();
        args.common.config = Some(file);
        assert_eq!(Settings::resolve(&args).unwrap().refund_policy.window_days, Some(90));
        args.refund_window_days = Some(30);
        assert_eq!(Settings::resolve(&args).unwrap().refund_policy.window_days, Some(30));
        args.refund_window_days = Some(0);
        assert!(Settings::resolve(&args).is_err());
    }

    #[test]
    fn refuses_unknown_keys_and_bad_values() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kassa.toml");
        std::fs::write(&file, "hold_secs = 60\n").unwrap();
        let mut args = ServeArgs::default();
        args.common.config = Some(file);
        assert!(Settings::resolve(&args).is_err());
        let args = ServeArgs { listen: Some("nowhere".into()), ..Default::default() };
        assert!(Settings::resolve(&args).is_err());
    }
}
