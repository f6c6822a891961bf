//! What protects a public storefront ([`crate::http::protection::Protection`]): its options, and
//! how they resolve from the command line and the file.

use super::FileConfig;
use crate::http::protection::{
    Captcha, ClientAddressHeader, DAY_MS, Protection, RETENTION_DAYS_MAX, RateLimits, SHOP_API_KEY_LEN_MIN,
    parse_proxies,
};
use crate::store::retention::Retention;

/// Limits that protect a public storefront (docs/public-internet.md).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProtectionArgs {
    /// Unpaid orders one buyer session may have open at once; 0 for no limit [default: 3]
    #[arg(long, env = "KASSA_MAX_OPEN_ORDERS_PER_SESSION")]
    pub max_open_orders_per_session: Option<u32>,
    /// Units of one SKU one order may hold, for a SKU with no max_per_order of its own; 0 for no
    /// limit [default: 20]
    #[arg(long, env = "KASSA_DEFAULT_MAX_PER_ORDER")]
    pub default_max_per_order: Option<u32>,
    /// Units one order may hold, all lines together; 0 for no limit [default: 100]
    #[arg(long, env = "KASSA_MAX_UNITS_PER_ORDER")]
    pub max_units_per_order: Option<u32>,
    /// Share of a SKU's stock one order may hold, in percent (rounded up, at least one unit), for
    /// a SKU with no max_per_order of its own; 100 for no limit [default: 50]
    #[arg(long, env = "KASSA_MAX_STOCK_SHARE_PERCENT")]
    pub max_stock_share_percent: Option<u32>,
    /// Per-address rate limits: on or off (benchmarks and load tests) [default: on]
    #[arg(long, env = "KASSA_RATE_LIMITS")]
    pub rate_limits: Option<String>,
    /// Buyer sessions one address may create per minute [default: 20]
    #[arg(long, env = "KASSA_RATE_SESSIONS_PER_MINUTE")]
    pub rate_sessions_per_minute: Option<u32>,
    /// Basket writes (new baskets, line changes) per address per minute [default: 120]
    #[arg(long, env = "KASSA_RATE_BASKET_WRITES_PER_MINUTE")]
    pub rate_basket_writes_per_minute: Option<u32>,
    /// Confirms (checkouts, payment retries) per address per minute [default: 20]
    #[arg(long, env = "KASSA_RATE_CONFIRMS_PER_MINUTE")]
    pub rate_confirms_per_minute: Option<u32>,
    /// Order-status reads per address per minute [default: 240]
    #[arg(long, env = "KASSA_RATE_POLLS_PER_MINUTE")]
    pub rate_polls_per_minute: Option<u32>,
    /// Admin sign-in attempts per address per minute [default: 10]
    #[arg(long, env = "KASSA_RATE_SIGNINS_PER_MINUTE")]
    pub rate_signins_per_minute: Option<u32>,
    /// Gateway notifications failing verification stored per address per minute; more are
    /// answered 429 and not stored (genuine notifications are never limited) [default: 30]
    #[arg(long, env = "KASSA_RATE_REJECTED_NOTIFICATIONS_PER_MINUTE")]
    pub rate_rejected_notifications_per_minute: Option<u32>,
    /// Failed admin sign-ins from one address, within the lockout time, that lock it out [default: 10]
    #[arg(long, env = "KASSA_SIGNIN_LOCKOUT_FAILURES")]
    pub signin_lockout_failures: Option<u32>,
    /// How long a locked-out address waits, in seconds [default: 900]
    #[arg(long, env = "KASSA_SIGNIN_LOCKOUT_SECONDS")]
    pub signin_lockout_seconds: Option<u64>,
    /// Proxies whose --client-address-header is believed, as a comma-separated CIDR list
    /// [default: 127.0.0.1/32,::1/128]; "none" believes no proxy
    #[arg(long, env = "KASSA_TRUSTED_PROXIES")]
    pub trusted_proxies: Option<String>,
    /// The one header a trusted proxy names the client in: x-forwarded-for, forwarded, x-real-ip
    /// or none; any other forwarding header is ignored [default: x-forwarded-for]
    #[arg(long, env = "KASSA_CLIENT_ADDRESS_HEADER")]
    pub client_address_header: Option<String>,
    /// API key of the shop's own server (at least 32 characters), sent as Kassa-Shop-Key: its
    /// requests are not limited as one address, and may name the buyer's in Kassa-Buyer-Ip
    #[arg(long, env = "KASSA_SHOP_API_KEY", hide_env_values = true)]
    pub shop_api_key: Option<String>,
    /// Bot check: the siteverify URL of Turnstile, hCaptcha or reCAPTCHA; confirms then need a captcha_token
    #[arg(long, env = "KASSA_CAPTCHA_VERIFY_URL")]
    pub captcha_verify_url: Option<String>,
    /// Bot check: the secret key the siteverify URL is called with
    #[arg(long, env = "KASSA_CAPTCHA_SECRET", hide_env_values = true)]
    pub captcha_secret: Option<String>,
    /// An admin console session ends after this many idle minutes [default: 30]
    #[arg(long, env = "KASSA_ADMIN_IDLE_MINUTES")]
    pub admin_idle_minutes: Option<u64>,
    /// A client must send its request headers within this many seconds [default: 10]
    #[arg(long, env = "KASSA_HEADER_READ_TIMEOUT_SECONDS")]
    pub header_read_timeout_seconds: Option<u64>,
    /// A request (body included) must be answered within this many seconds [default: 30]
    #[arg(long, env = "KASSA_REQUEST_TIMEOUT_SECONDS")]
    pub request_timeout_seconds: Option<u64>,
    /// Most client connections served at once; more wait to be accepted [default: 1024]
    #[arg(long, env = "KASSA_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Buyer sessions that never ordered, and open baskets, are pruned this many days after their
    /// last use [default: 30]
    #[arg(long, env = "KASSA_RETENTION_DAYS")]
    pub retention_days: Option<u32>,
    /// The raw bodies of processed notifications are emptied after this many days (the decision
    /// records stay) [default: 180]
    #[arg(long, env = "KASSA_NOTIFICATION_BODY_DAYS")]
    pub notification_body_days: Option<u32>,
    /// Notifications that failed verification (a digest of each) are deleted after this many days
    /// [default: 30]
    #[arg(long, env = "KASSA_REJECTED_NOTIFICATION_DAYS")]
    pub rejected_notification_days: Option<u32>,
    /// Webhook messages are deleted this many days after they were delivered (messages not
    /// delivered stay) [default: 90]
    #[arg(long, env = "KASSA_DELIVERED_MESSAGE_DAYS")]
    pub delivered_message_days: Option<u32>,
    /// Idempotency keys are deleted this many days after their checkout [default: 30]
    #[arg(long, env = "KASSA_IDEMPOTENCY_KEY_DAYS")]
    pub idempotency_key_days: Option<u32>,
    /// Bearer token (at least 32 characters) that reads /metrics from another machine; the admin
    /// token does too. Without it only this machine's clients read /metrics
    #[arg(long, env = "KASSA_METRICS_TOKEN", hide_env_values = true)]
    pub metrics_token: Option<String>,
    /// Serve /metrics to every client without a token (a proxy in front keeps it private)
    #[arg(long, env = "KASSA_METRICS_PUBLIC", value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics_public: bool,
}

/// The protection the command line and the file ask for, each value checked against its bounds.
pub(super) fn resolve(args: &ProtectionArgs, file: &FileConfig) -> anyhow::Result<Protection> {
    let d = Protection::default();
    let r = RateLimits::default();
    let rate = |flag: Option<u32>, file: Option<u32>, default: u32, name: &str| -> anyhow::Result<u32> {
        let v = flag.or(file).unwrap_or(default);
        if v == 0 {
            anyhow::bail!("--{name} must be at least 1 (turn all rate limits off with --rate-limits off)");
        }
        Ok(v)
    };
    let rate_limits = match args.rate_limits.clone().or(file.rate_limits.clone()).as_deref() {
        None | Some("on") => Some(RateLimits {
            sessions_per_minute: rate(
                args.rate_sessions_per_minute,
                file.rate_sessions_per_minute,
                r.sessions_per_minute,
                "rate-sessions-per-minute",
            )?,
            basket_writes_per_minute: rate(
                args.rate_basket_writes_per_minute,
                file.rate_basket_writes_per_minute,
                r.basket_writes_per_minute,
                "rate-basket-writes-per-minute",
            )?,
            confirms_per_minute: rate(
                args.rate_confirms_per_minute,
                file.rate_confirms_per_minute,
                r.confirms_per_minute,
                "rate-confirms-per-minute",
            )?,
            polls_per_minute: rate(
                args.rate_polls_per_minute,
                file.rate_polls_per_minute,
                r.polls_per_minute,
                "rate-polls-per-minute",
            )?,
            signins_per_minute: rate(
                args.rate_signins_per_minute,
                file.rate_signins_per_minute,
                r.signins_per_minute,
                "rate-signins-per-minute",
            )?,
            rejected_notifications_per_minute: rate(
                args.rate_rejected_notifications_per_minute,
                file.rate_rejected_notifications_per_minute,
                r.rejected_notifications_per_minute,
                "rate-rejected-notifications-per-minute",
            )?,
            signin_lockout_failures: rate(
                args.signin_lockout_failures,
                file.signin_lockout_failures,
                r.signin_lockout_failures,
                "signin-lockout-failures",
            )?,
            signin_lockout_ms: {
                let s = args.signin_lockout_seconds.or(file.signin_lockout_seconds).unwrap_or(900);
                if !(1..=86_400).contains(&s) {
                    anyhow::bail!("--signin-lockout-seconds must be between 1 and 86400");
                }
                i64::try_from(s * 1000).unwrap_or(i64::MAX)
            },
        }),
        Some("off") => None,
        Some(other) => anyhow::bail!("--rate-limits {other:?}: use on or off"),
    };
    let trusted_proxies = match args.trusted_proxies.clone().or(file.trusted_proxies.clone()) {
        Some(list) => parse_proxies(&list)?,
        None => d.trusted_proxies,
    };
    let client_address_header = match args.client_address_header.clone().or(file.client_address_header.clone()) {
        Some(text) => ClientAddressHeader::parse(&text)?,
        None => d.client_address_header,
    };
    let shop_api_key = args.shop_api_key.clone().or(file.shop_api_key.clone()).filter(|k| !k.is_empty());
    if shop_api_key.as_ref().is_some_and(|k| k.chars().count() < SHOP_API_KEY_LEN_MIN) {
        anyhow::bail!(
            "--shop-api-key must be at least {SHOP_API_KEY_LEN_MIN} characters; generate one with `openssl rand -hex 32`"
        );
    }
    let verify_url = args.captcha_verify_url.clone().or(file.captcha_verify_url.clone()).filter(|u| !u.is_empty());
    let secret = args.captcha_secret.clone().or(file.captcha_secret.clone()).filter(|s| !s.is_empty());
    let captcha = match (verify_url, secret) {
        (None, None) => None,
        (Some(verify_url), Some(secret)) => {
            if !(verify_url.starts_with("https://") || verify_url.starts_with("http://")) {
                anyhow::bail!("--captcha-verify-url must be an http(s) URL");
            }
            Some(Captcha { verify_url, secret })
        }
        _ => anyhow::bail!("the bot check needs both --captcha-verify-url and --captcha-secret"),
    };
    let minutes = args.admin_idle_minutes.or(file.admin_idle_minutes).unwrap_or(30);
    if !(1..=720).contains(&minutes) {
        anyhow::bail!("--admin-idle-minutes must be between 1 and 720 (a console session lasts 12 hours at most)");
    }
    let seconds = |flag: Option<u64>, file: Option<u64>, default: std::time::Duration, name: &str| {
        let s = flag.or(file).unwrap_or(default.as_secs());
        if !(1..=3600).contains(&s) {
            anyhow::bail!("--{name} must be between 1 and 3600");
        }
        Ok(std::time::Duration::from_secs(s))
    };
    let max_connections = args.max_connections.or(file.max_connections).unwrap_or(d.max_connections);
    if !(1..=1_000_000).contains(&max_connections) {
        anyhow::bail!("--max-connections must be between 1 and 1000000");
    }
    let days = |flag: Option<u32>, file: Option<u32>, default_ms: i64, name: &str| {
        let days = flag.or(file).map_or(default_ms / DAY_MS, i64::from);
        if !(1..=i64::from(RETENTION_DAYS_MAX)).contains(&days) {
            anyhow::bail!("--{name} must be between 1 and {RETENTION_DAYS_MAX}");
        }
        Ok(days * DAY_MS)
    };
    let order_limits = crate::domain::checkout::OrderLimits {
        default_max_per_order: args
            .default_max_per_order
            .or(file.default_max_per_order)
            .map_or(d.order_limits.default_max_per_order, i64::from),
        units_per_order: args
            .max_units_per_order
            .or(file.max_units_per_order)
            .map_or(d.order_limits.units_per_order, i64::from),
        stock_share_percent: args
            .max_stock_share_percent
            .or(file.max_stock_share_percent)
            .map_or(d.order_limits.stock_share_percent, i64::from),
    };
    order_limits.validate().map_err(anyhow::Error::msg)?;
    let metrics_token = args.metrics_token.clone().or(file.metrics_token.clone()).filter(|k| !k.is_empty());
    if metrics_token.as_ref().is_some_and(|k| k.chars().count() < SHOP_API_KEY_LEN_MIN) {
        anyhow::bail!(
            "--metrics-token must be at least {SHOP_API_KEY_LEN_MIN} characters; generate one with `openssl rand -hex 32`"
        );
    }
    Ok(Protection {
        order_limits,
        metrics_token,
        metrics_public: args.metrics_public || file.metrics_public.unwrap_or(false),
        max_open_orders_per_session: args
            .max_open_orders_per_session
            .or(file.max_open_orders_per_session)
            .unwrap_or(d.max_open_orders_per_session),
        rate_limits,
        trusted_proxies,
        client_address_header,
        shop_api_key,
        captcha,
        admin_idle_ms: i64::try_from(minutes * 60_000).unwrap_or(i64::MAX),
        header_read_timeout: seconds(
            args.header_read_timeout_seconds,
            file.header_read_timeout_seconds,
            d.header_read_timeout,
            "header-read-timeout-seconds",
        )?,
        request_timeout: seconds(
            args.request_timeout_seconds,
            file.request_timeout_seconds,
            d.request_timeout,
            "request-timeout-seconds",
        )?,
        max_connections,
        retention: Retention {
            idle_ms: days(args.retention_days, file.retention_days, d.retention.idle_ms, "retention-days")?,
            notification_body_ms: days(
                args.notification_body_days,
                file.notification_body_days,
                d.retention.notification_body_ms,
                "notification-body-days",
            )?,
            rejected_notification_ms: days(
                args.rejected_notification_days,
                file.rejected_notification_days,
                d.retention.rejected_notification_ms,
                "rejected-notification-days",
            )?,
            delivered_message_ms: days(
                args.delivered_message_days,
                file.delivered_message_days,
                d.retention.delivered_message_ms,
                "delivered-message-days",
            )?,
            idempotency_key_ms: days(
                args.idempotency_key_days,
                file.idempotency_key_days,
                d.retention.idempotency_key_ms,
                "idempotency-key-days",
            )?,
        },
    })
}
