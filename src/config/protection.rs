//! What protects a public storefront, resolved from the command line and the file: per-buyer and
//! per-address limits, trusted proxies, the shop's key, the bot check, the admin session, the
//! server's own limits and retention.

use anyhow::Context as _;

use super::{FileConfig, ProtectionArgs};

/// What protects a public storefront: per-buyer and per-address limits, the bot check, the admin
/// session, the server's own limits and retention.
#[derive(Debug, Clone)]
pub struct Protection {
    /// Unpaid orders per buyer session; 0 for no limit.
    pub max_open_orders_per_session: u32,
    /// `None`: rate limits off.
    pub rate_limits: Option<RateLimits>,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header a trusted proxy names the client in; every other is ignored.
    pub client_address_header: ClientAddressHeader,
    pub shop_api_key: Option<String>,
    pub captcha: Option<Captcha>,
    pub admin_idle_ms: i64,
    pub header_read_timeout: std::time::Duration,
    pub request_timeout: std::time::Duration,
    pub max_connections: usize,
    pub retention: Retention,
}

/// Token buckets per client address: each refills at its rate per minute and holds as much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    pub sessions_per_minute: u32,
    pub basket_writes_per_minute: u32,
    pub confirms_per_minute: u32,
    pub polls_per_minute: u32,
    pub signins_per_minute: u32,
    /// Failed sign-ins within `signin_lockout_ms` that lock an address out for as long.
    pub signin_lockout_failures: u32,
    pub signin_lockout_ms: i64,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            sessions_per_minute: 20,
            basket_writes_per_minute: 120,
            confirms_per_minute: 20,
            polls_per_minute: 240,
            signins_per_minute: 10,
            signin_lockout_failures: 10,
            signin_lockout_ms: 900_000,
        }
    }
}

/// The one header kassa reads the client's address from when the peer is a trusted proxy: the one
/// the operator's proxy writes. Any other forwarding header is the client's own word and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For`, appended to by each proxy (nginx's `$proxy_add_x_forwarded_for`, Caddy,
    /// HAProxy's `option forwardfor`, Traefik).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded`, its `for=` parameters.
    Forwarded,
    /// `X-Real-IP`: one address, set (not appended) by the proxy.
    XRealIp,
    /// No header: the peer is the client (kassa faces the internet itself).
    None,
}

impl ClientAddressHeader {
    pub fn parse(text: &str) -> anyhow::Result<ClientAddressHeader> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "x-forwarded-for" => ClientAddressHeader::XForwardedFor,
            "forwarded" => ClientAddressHeader::Forwarded,
            "x-real-ip" => ClientAddressHeader::XRealIp,
            "none" => ClientAddressHeader::None,
            other => {
                anyhow::bail!("--client-address-header {other:?}: use x-forwarded-for, forwarded, x-real-ip or none")
            }
        })
    }

    /// The header's name as sent (lower case), if any.
    pub fn name(self) -> Option<&'static str> {
        match self {
            ClientAddressHeader::XForwardedFor => Some("x-forwarded-for"),
            ClientAddressHeader::Forwarded => Some("forwarded"),
            ClientAddressHeader::XRealIp => Some("x-real-ip"),
            ClientAddressHeader::None => None,
        }
    }
}

/// The siteverify endpoint a confirm's `captcha_token` is checked at.
#[derive(Debug, Clone)]
pub struct Captcha {
    pub verify_url: String,
    pub secret: String,
}

/// What the retention worker prunes, by age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Buyer sessions that never ordered and open baskets, after this long unused.
    pub idle_ms: i64,
    /// Raw bodies of processed notifications, after this long.
    pub notification_body_ms: i64,
}

pub(super) const DAY_MS: i64 = 24 * 3600 * 1000;
/// Shortest admin token accepted: guessing one is then out of reach.
pub const ADMIN_TOKEN_LEN_MIN: usize = 32;
/// Shortest shop API key accepted.
pub const SHOP_API_KEY_LEN_MIN: usize = 32;
/// Longest retention, and longest lockout, that can be configured.
pub const RETENTION_DAYS_MAX: u32 = 3650;

impl Default for Protection {
    fn default() -> Self {
        Protection {
            max_open_orders_per_session: crate::domain::checkout::OPEN_ORDERS_PER_SESSION_DEFAULT,
            rate_limits: Some(RateLimits::default()),
            trusted_proxies: loopback_proxies(),
            client_address_header: ClientAddressHeader::default(),
            shop_api_key: None,
            captcha: None,
            admin_idle_ms: 30 * 60 * 1000,
            header_read_timeout: std::time::Duration::from_secs(10),
            request_timeout: std::time::Duration::from_secs(30),
            max_connections: 1024,
            retention: Retention { idle_ms: 30 * DAY_MS, notification_body_ms: 180 * DAY_MS },
        }
    }
}

fn loopback_proxies() -> Vec<ipnet::IpNet> {
    ["127.0.0.1/32", "::1/128"].iter().filter_map(|n| n.parse().ok()).collect()
}

/// A comma-separated CIDR list (a bare address is one host); "none" for no proxy.
pub fn parse_proxies(list: &str) -> anyhow::Result<Vec<ipnet::IpNet>> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            n.parse::<ipnet::IpNet>()
                .or_else(|_| n.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .with_context(|| format!("--trusted-proxies: {n:?} is not an address or a CIDR block like 10.0.0.0/8"))
        })
        .collect()
}

impl Protection {
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
        Ok(Protection {
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
            },
        })
    }
}
