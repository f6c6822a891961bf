//! What protects a public storefront: per-buyer and per-address limits, trusted proxies, the
//! shop's key, the bot check, the admin session, the server's own limits and retention. The
//! configuration resolves it from the command line and the file; [`super::guard`] enforces it.

use anyhow::Context as _;

use crate::store::retention::Retention;

/// What protects a public storefront: per-buyer and per-address limits, the bot check, the admin
/// session, the server's own limits and retention.
#[derive(Debug, Clone)]
pub struct Protection {
    /// Unpaid orders per buyer session; 0 for no limit.
    pub max_open_orders_per_session: u32,
    /// Units one order may hold (a SKU's share of stock, per line, per order).
    pub order_limits: crate::domain::checkout::OrderLimits,
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
    /// `/metrics` for clients other than this machine: with this bearer token (or the admin's).
    pub metrics_token: Option<String>,
    /// `/metrics` open to every client, as behind a proxy that keeps it private.
    pub metrics_public: bool,
}

/// Token buckets per client address: each refills at its rate per minute and holds as much.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    pub sessions_per_minute: u32,
    pub basket_writes_per_minute: u32,
    pub confirms_per_minute: u32,
    pub polls_per_minute: u32,
    pub signins_per_minute: u32,
    /// Gateway notifications failing verification that are stored per address per minute; more
    /// are answered 429 and not stored.
    pub rejected_notifications_per_minute: u32,
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
            rejected_notifications_per_minute: 30,
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

/// One day in milliseconds.
pub const DAY_MS: i64 = 24 * 3600 * 1000;
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
            order_limits: crate::domain::checkout::OrderLimits::default(),
            rate_limits: Some(RateLimits::default()),
            trusted_proxies: loopback_proxies(),
            client_address_header: ClientAddressHeader::default(),
            shop_api_key: None,
            captcha: None,
            admin_idle_ms: 30 * 60 * 1000,
            header_read_timeout: std::time::Duration::from_secs(10),
            request_timeout: std::time::Duration::from_secs(30),
            max_connections: 1024,
            metrics_token: None,
            metrics_public: false,
            retention: Retention {
                idle_ms: 30 * DAY_MS,
                notification_body_ms: 180 * DAY_MS,
                rejected_notification_ms: 30 * DAY_MS,
                delivered_message_ms: 90 * DAY_MS,
                idempotency_key_ms: 30 * DAY_MS,
            },
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
