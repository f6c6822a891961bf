//! What protects a public storefront ([`crate::http::protection::Protection`]), resolved from the
//! command line and the file.

use super::{FileConfig, ProtectionArgs};
use crate::http::protection::{
    Captcha, ClientAddressHeader, DAY_MS, Protection, RETENTION_DAYS_MAX, RateLimits, SHOP_API_KEY_LEN_MIN,
    parse_proxies,
};
use crate::store::retention::Retention;

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
        },
    })
}
