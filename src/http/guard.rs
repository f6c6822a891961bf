//! Protection at the edge: who a request comes from (the client address, behind trusted proxies;
//! the shop's own server by its key), per-address token buckets, and the bot check at confirm.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::time::Duration;

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::Clock as _;
use serde_json::json;

use super::AppState;
use super::protection::{Captcha, ClientAddressHeader, Protection, RateLimits};
use crate::domain::contact::{LOOKUP_MISS_WINDOW_MS, LOOKUP_MISSES_BEFORE_CHECK};
use crate::error::{Error, RefusalKind};

/// How long misses of one address count toward the bot check.
const LOOKUP_MISS_WINDOW: Duration = Duration::from_millis(LOOKUP_MISS_WINDOW_MS.unsigned_abs());

/// Header with the shop server's API key.
pub const SHOP_KEY_HEADER: &str = "kassa-shop-key";
/// Header in which the shop's server names the buyer's address.
pub const BUYER_IP_HEADER: &str = "kassa-buyer-ip";
/// Addresses whose buckets are kept per limit before buckets idle long enough to be full again are
/// dropped at once rather than at the next retention pass (a full bucket and a new one are alike).
pub const TRACKED_ADDRESSES_MAX: usize = 100_000;
/// Order lookups one address may make per minute (`POST /api/v1/lookup`, `POST /lookup`).
pub const LOOKUPS_PER_ADDRESS_PER_MINUTE: u32 = 10;
/// Lookups of one order number, and of one contact, per hour, from all addresses together.
pub const LOOKUPS_PER_KEY_PER_HOUR: u32 = 10;
/// Longest bot-check token passed on to the verifier.
pub const CAPTCHA_TOKEN_LEN_MAX: usize = 4096;
/// A bot-check token is at most [`CAPTCHA_TOKEN_LEN_MAX`] characters, whether or not a check is
/// configured (`captcha_failed` otherwise).
pub fn token_fits(token: Option<&str>) -> Result<(), Error> {
    if token.is_some_and(|t| t.chars().count() > CAPTCHA_TOKEN_LEN_MAX) {
        return Err(Error::unprocessable("captcha_failed", "the bot check token is too long"));
    }
    Ok(())
}

/// Form fields a page's confirm may carry the bot check's token in: kassa's own, and those the
/// Turnstile, hCaptcha and reCAPTCHA widgets fill in.
pub const CAPTCHA_FORM_FIELDS: [&str; 4] =
    ["captcha_token", "cf-turnstile-response", "h-captcha-response", "g-recaptcha-response"];
/// How long the verifier has to answer.
pub const CAPTCHA_TIMEOUT: Duration = Duration::from_secs(5);
/// Forwarded hops read from one request: a longer chain is cut to its right-most hops.
pub const FORWARDED_HOPS_MAX: usize = 32;

/// What a route's requests draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    Sessions,
    BasketWrites,
    Confirms,
    Polls,
    Signins,
    /// Order lookups.
    Lookups,
    /// Gateway notifications that fail verification: only those draw from it, after verifying, so
    /// a gateway's genuine notifications are never limited.
    RejectedNotifications,
}

impl Bucket {
    fn name(self) -> &'static str {
        match self {
            Bucket::Sessions => "sessions",
            Bucket::BasketWrites => "basket_writes",
            Bucket::Confirms => "confirms",
            Bucket::Polls => "polls",
            Bucket::Signins => "signins",
            Bucket::Lookups => "lookups",
            Bucket::RejectedNotifications => "rejected_notifications",
        }
    }
}

/// The bucket of a route (method and matched path), if it has one. Gateway notifications,
/// operations endpoints and the admin API are never limited.
pub fn bucket_of(method: &Method, path: &str) -> Option<Bucket> {
    let post = method == Method::POST;
    let get = method == Method::GET;
    match path {
        "/api/v1/sessions" if post => Some(Bucket::Sessions),
        "/api/v1/baskets"
        | "/shop/basket"
        | "/shop/basket/{basket_id}/promotion"
        | "/shop/basket/{basket_id}/promotion/remove"
            if post =>
        {
            Some(Bucket::BasketWrites)
        }
        "/api/v1/baskets/{basket_id}/lines/{sku}" if method == Method::PUT => Some(Bucket::BasketWrites),
        // A code tried on a basket is a basket write: guessing codes is limited per address.
        "/api/v1/baskets/{basket_id}/promotion" if method == Method::PUT || method == Method::DELETE => {
            Some(Bucket::BasketWrites)
        }
        "/api/v1/baskets/{basket_id}/checkout"
        | "/shop/basket/{basket_id}/confirm"
        | "/api/v1/orders/{order_no}/attempts"
        | "/checkout/retry/{order_no}"
            if post =>
        {
            Some(Bucket::Confirms)
        }
        "/api/v1/orders/{order_no}"
        | "/api/v1/catalog"
        | "/checkout/return/{attempt_ref}"
        | "/checkout/return/{attempt_ref}/status"
        | "/h5/orders/{order_no}"
            if get =>
        {
            Some(Bucket::Polls)
        }
        "/admin/login" if post => Some(Bucket::Signins),
        "/api/v1/lookup" | "/lookup" | "/lookup/open/{token}" if post => Some(Bucket::Lookups),
        "/lookup/open/{token}" if get => Some(Bucket::Polls),
        _ => None,
    }
}

/// Whether the operation `method path` (as documented) is rate limited per address.
pub fn bucket_of_documented(method: &str, path: &str) -> bool {
    Method::from_bytes(method.to_ascii_uppercase().as_bytes()).is_ok_and(|m| bucket_of(&m, path).is_some())
}

/// The bucket of a request: its route's, or — for the storefront visited without a buyer cookie,
/// which creates a buyer session — the sessions bucket.
pub fn bucket_of_request(method: &Method, path: &str, headers: &HeaderMap) -> Option<Bucket> {
    bucket_of(method, path).or_else(|| {
        let new_buyer = method == Method::GET && path == "/" && super::cookie(headers, super::SESSION_COOKIE).is_none();
        new_buyer.then_some(Bucket::Sessions)
    })
}

/// Who a request comes from, as the limits see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    /// The buyer's address: the peer, the right-most untrusted forwarded hop, or what the shop's
    /// server named.
    pub addr: IpAddr,
    /// The shop's server, by its API key.
    pub shop: bool,
    /// The shop's server acting without naming a buyer: not limited as one address.
    pub exempt: bool,
}

type Limiter = governor::DefaultKeyedRateLimiter<IpAddr>;

struct Buckets {
    sessions: Limiter,
    basket_writes: Limiter,
    confirms: Limiter,
    polls: Limiter,
    signins: Limiter,
    lookups: Limiter,
    rejected_notifications: Limiter,
    /// Lookups per order number and per contact (by their SHA-256), from every address.
    lookup_keys: governor::DefaultKeyedRateLimiter<String>,
}

impl Buckets {
    fn new(r: &RateLimits) -> Buckets {
        let limiter = |per_minute: u32| {
            let n = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
            Limiter::keyed(governor::Quota::per_minute(n))
        };
        Buckets {
            sessions: limiter(r.sessions_per_minute),
            basket_writes: limiter(r.basket_writes_per_minute),
            confirms: limiter(r.confirms_per_minute),
            polls: limiter(r.polls_per_minute),
            signins: limiter(r.signins_per_minute),
            lookups: limiter(LOOKUPS_PER_ADDRESS_PER_MINUTE),
            rejected_notifications: limiter(r.rejected_notifications_per_minute),
            lookup_keys: governor::DefaultKeyedRateLimiter::keyed(governor::Quota::per_hour(
                NonZeroU32::new(LOOKUPS_PER_KEY_PER_HOUR).unwrap_or(NonZeroU32::MIN),
            )),
        }
    }

    fn get(&self, bucket: Bucket) -> &Limiter {
        match bucket {
            Bucket::Sessions => &self.sessions,
            Bucket::BasketWrites => &self.basket_writes,
            Bucket::Confirms => &self.confirms,
            Bucket::Polls => &self.polls,
            Bucket::Signins => &self.signins,
            Bucket::Lookups => &self.lookups,
            Bucket::RejectedNotifications => &self.rejected_notifications,
        }
    }

    fn all(&self) -> [&Limiter; 7] {
        [
            &self.sessions,
            &self.basket_writes,
            &self.confirms,
            &self.polls,
            &self.signins,
            &self.lookups,
            &self.rejected_notifications,
        ]
    }
}

/// The per-address limits and how a request's client is found.
pub struct Guard {
    buckets: Option<Buckets>,
    trusted: Vec<ipnet::IpNet>,
    header: ClientAddressHeader,
    /// SHA-256 of the shop's API key; compared in constant time.
    shop_key_hash: Option<Vec<u8>>,
    captcha: Option<(Captcha, reqwest::Client)>,
    /// Whether a trusted proxy's request without the client address header has been logged (set
    /// from the start where no such warning is wanted: the demo, all of it on one machine).
    warned_unforwarded: std::sync::atomic::AtomicBool,
    /// Lookups that matched nothing, per address: how many, since when.
    lookup_misses: std::sync::Mutex<std::collections::HashMap<IpAddr, (u32, std::time::Instant)>>,
}

fn sha256(text: &str) -> Vec<u8> {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes()).as_ref().to_vec()
}

impl Guard {
    pub fn new(p: &Protection) -> anyhow::Result<Guard> {
        let captcha = match &p.captcha {
            Some(c) => Some((c.clone(), reqwest::Client::builder().timeout(CAPTCHA_TIMEOUT).build()?)),
            None => None,
        };
        Ok(Guard {
            buckets: p.rate_limits.as_ref().map(Buckets::new),
            trusted: p.trusted_proxies.clone(),
            header: p.client_address_header,
            shop_key_hash: p.shop_api_key.as_deref().map(sha256),
            captcha,
            warned_unforwarded: std::sync::atomic::AtomicBool::new(false),
            lookup_misses: std::sync::Mutex::default(),
        })
    }

    /// No warning about a trusted proxy's request without the client address header: for the demo,
    /// whose clients are this machine's.
    #[must_use]
    pub fn quiet_about_unforwarded(self) -> Guard {
        self.warned_unforwarded.store(true, std::sync::atomic::Ordering::Relaxed);
        self
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&addr))
    }

    /// The client of a request from `peer` with `headers`. Refused: a wrong shop key.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Result<Client, Error> {
        self.client_and_source(peer, headers).map(|(client, _)| client)
    }

    /// [`Guard::client`], and where its address comes from: `peer` (the connection),
    /// `forwarded` (the configured header of a trusted proxy) or `shop` (the shop's server, or the
    /// buyer it named).
    pub fn client_and_source(&self, peer: IpAddr, headers: &HeaderMap) -> Result<(Client, &'static str), Error> {
        if let Some(given) = headers.get(SHOP_KEY_HEADER) {
            let ok = self.shop_key_hash.as_ref().is_some_and(|expected| {
                let given = sha256(given.to_str().unwrap_or_default());
                aws_lc_rs::constant_time::verify_slices_are_equal(&given, expected).is_ok()
            });
            if !ok {
                return Err(Error::refused(
                    RefusalKind::Unauthenticated,
                    "invalid_shop_key",
                    "the shop API key is not valid",
                ));
            }
            let named = headers.get(BUYER_IP_HEADER).and_then(|v| v.to_str().ok()).map(str::trim);
            return match named {
                Some(text) => {
                    let addr = text.parse::<IpAddr>().map_err(|_| {
                        Error::invalid("invalid_buyer_ip", format!("{BUYER_IP_HEADER} is not an IP address"))
                    })?;
                    Ok((Client { addr, shop: true, exempt: false }, "shop"))
                }
                None => Ok((Client { addr: peer, shop: true, exempt: true }, "shop")),
            };
        }
        let addr = self.forwarded_client(peer, headers);
        if addr != peer {
            return Ok((Client { addr, shop: false, exempt: false }, "forwarded"));
        }
        if let Some(name) = self.header.name()
            && self.trusts(peer)
            && headers.get(name).is_none()
            && !self.warned_unforwarded.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                peer = %peer,
                header = name,
                "a request from a trusted proxy carries no {name}: clients behind a proxy that does not set it \
                 share its address (one rate limit for all), and a client connecting from a trusted address \
                 is taken at its word. Make the proxy set {name}, or start with --trusted-proxies none when \
                 nothing proxies kassa (said once)"
            );
        }
        Ok((Client { addr, shop: false, exempt: false }, "peer"))
    }

    /// The peer, or — when the peer is a trusted proxy — the right-most hop of the configured
    /// client address header that is not one. Every hop trusted: the left-most.
    fn forwarded_client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let hops = forwarded_hops(headers, self.header);
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(addr) => {
                    client = *addr;
                    if !self.trusts(*addr) {
                        break;
                    }
                }
                // A hop that is not an address (`unknown`, an obfuscated name): the proxy right
                // of it is as far as anything can be believed.
                None => break,
            }
        }
        client
    }

    /// Takes one token of `bucket` for `client`; refused with `rate_limited` and when to retry.
    pub fn take(&self, bucket: Bucket, client: &Client) -> Result<(), Error> {
        let Some(buckets) = &self.buckets else { return Ok(()) };
        if client.exempt {
            return Ok(());
        }
        let limiter = buckets.get(bucket);
        if limiter.len() >= TRACKED_ADDRESSES_MAX {
            limiter.retain_recent();
            if limiter.len() >= TRACKED_ADDRESSES_MAX {
                tracing::warn!(bucket = bucket.name(), "rate limit buckets full of active addresses");
            }
        }
        match limiter.check_key(&key_of(client.addr)) {
            Ok(()) => Ok(()),
            Err(not_until) => {
                let wait = not_until.wait_time_from(governor::clock::DefaultClock::default().now());
                let retry_after_s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                metrics::counter!("kassa_rate_limited_total", "bucket" => bucket.name()).increment(1);
                Err(Error::refused(
                    RefusalKind::TooMany,
                    "rate_limited",
                    format!("too many requests from this address; retry in {retry_after_s} s"),
                )
                .with_details(json!({"bucket": bucket.name(), "retry_after_s": retry_after_s})))
            }
        }
    }

    /// Drops buckets that are full again (an idle address); run now and then.
    pub fn forget_idle(&self) {
        if let Some(buckets) = &self.buckets {
            for limiter in buckets.all() {
                limiter.retain_recent();
                limiter.shrink_to_fit();
            }
            buckets.lookup_keys.retain_recent();
            buckets.lookup_keys.shrink_to_fit();
        }
        if let Ok(mut misses) = self.lookup_misses.lock() {
            misses.retain(|_, (_, since)| since.elapsed() < LOOKUP_MISS_WINDOW);
        }
    }

    /// Takes one lookup of `what` (an order number or a contact, kept only as its SHA-256) from
    /// its hourly allowance; refused with `rate_limited`.
    pub fn take_lookup_key(&self, what: &str) -> Result<(), Error> {
        let Some(buckets) = &self.buckets else { return Ok(()) };
        if buckets.lookup_keys.len() >= TRACKED_ADDRESSES_MAX {
            buckets.lookup_keys.retain_recent();
        }
        match buckets.lookup_keys.check_key(&hex::encode(sha256(what))) {
            Ok(()) => Ok(()),
            Err(_) => {
                metrics::counter!("kassa_rate_limited_total", "bucket" => "lookup_keys").increment(1);
                Err(Error::refused(
                    RefusalKind::TooMany,
                    "rate_limited",
                    "too many lookups of this order or contact; try again in an hour",
                )
                .with_details(json!({"bucket": "lookup_keys", "retry_after_s": 3600})))
            }
        }
    }

    /// Whether a lookup from `addr` needs the bot check: one is configured and the address's
    /// lookups missed [`LOOKUP_MISSES_BEFORE_CHECK`] times lately.
    pub fn lookup_needs_captcha(&self, addr: IpAddr) -> bool {
        self.captcha.is_some()
            && self.lookup_misses.lock().is_ok_and(|m| {
                m.get(&addr)
                    .is_some_and(|(n, since)| *n >= LOOKUP_MISSES_BEFORE_CHECK && since.elapsed() < LOOKUP_MISS_WINDOW)
            })
    }

    /// Counts a lookup from `addr` that matched nothing.
    pub fn note_lookup_miss(&self, addr: IpAddr) {
        let Ok(mut misses) = self.lookup_misses.lock() else { return };
        if misses.len() >= TRACKED_ADDRESSES_MAX {
            misses.retain(|_, (_, since)| since.elapsed() < LOOKUP_MISS_WINDOW);
            if misses.len() >= TRACKED_ADDRESSES_MAX {
                return;
            }
        }
        let entry = misses.entry(addr).or_insert((0, std::time::Instant::now()));
        if entry.1.elapsed() >= LOOKUP_MISS_WINDOW {
            *entry = (0, std::time::Instant::now());
        }
        entry.0 += 1;
    }

    pub fn captcha_required(&self) -> bool {
        self.captcha.is_some()
    }

    /// The bot check of a confirm: the token verified at the siteverify URL (`secret`,
    /// `response`, `remoteip`; answered `success`). No check configured: passes.
    pub async fn verify_captcha(&self, token: Option<&str>, remote: IpAddr) -> Result<(), Error> {
        let Some((captcha, http)) = &self.captcha else { return Ok(()) };
        let failed = |m: &str| Error::unprocessable("captcha_failed", m.to_string());
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| failed("the bot check is missing: send captcha_token"))?;
        token_fits(Some(token))?;
        let remote = remote.to_string();
        let form = [("secret", captcha.secret.as_str()), ("response", token), ("remoteip", remote.as_str())];
        let answer = http.post(&captcha.verify_url).form(&form).send().await;
        let passed = match answer {
            Ok(r) if r.status().is_success() => r
                .json::<serde_json::Value>()
                .await
                .map(|v| v.get("success").and_then(serde_json::Value::as_bool) == Some(true))
                .unwrap_or(false),
            Ok(r) => {
                tracing::warn!(status = %r.status(), "bot check verifier answered with an error");
                return Err(Error::upstream("captcha_unavailable", "the bot check could not be verified; try again"));
            }
            Err(e) => {
                tracing::warn!(error = %e, "bot check verifier unreachable");
                return Err(Error::upstream("captcha_unavailable", "the bot check could not be verified; try again"));
            }
        };
        metrics::counter!("kassa_captcha_checks_total", "passed" => passed.to_string()).increment(1);
        if passed { Ok(()) } else { Err(failed("the bot check failed; try again")) }
    }
}

/// IPv6 clients are counted by their /64: one host usually holds a whole /64.
fn key_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// The hops `header` names, left (first client) to right (nearest proxy): `None` for a hop that is
/// no address. At most [`FORWARDED_HOPS_MAX`], the right-most ones. Only that header is read: any
/// other forwarding header is the client's own word.
fn forwarded_hops(headers: &HeaderMap, header: ClientAddressHeader) -> Vec<Option<IpAddr>> {
    let Some(name) = header.name() else { return Vec::new() };
    let values = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let mut hops: Vec<Option<IpAddr>> = match header {
        ClientAddressHeader::Forwarded => values
            .flat_map(|v| v.split(','))
            .map(|element| {
                // An element without `for=` names no address: nothing left of it is believed.
                element.split(';').find_map(|pair| {
                    let (k, v) = pair.trim().split_once('=')?;
                    k.trim().eq_ignore_ascii_case("for").then(|| parse_hop(v.trim().trim_matches('"')))
                })?
            })
            .collect(),
        _ => values.flat_map(|v| v.split(',')).map(|hop| parse_hop(hop.trim())).collect(),
    };
    if hops.len() > FORWARDED_HOPS_MAX {
        hops.drain(..hops.len() - FORWARDED_HOPS_MAX);
    }
    hops
}

/// One hop: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]:4711`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(addr) = hop.parse::<IpAddr>() {
        return Some(addr);
    }
    if let Ok(sock) = hop.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    hop.strip_prefix('[').and_then(|h| h.strip_suffix(']')).and_then(|h| h.parse().ok())
}

/// Middleware: finds the client (kept in the request's extensions for the handlers) and takes a
/// token of the route's bucket. The admin, by its bearer token, is never limited; sign-ins draw
/// from theirs in the handler, and only when the token is wrong (the right one is never refused).
pub async fn guard_requests(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), |c| c.0.ip());
    let client = match state.guard.client_and_source(peer, req.headers()) {
        Ok((client, source)) => {
            let span = tracing::Span::current();
            span.record("client", tracing::field::display(client.addr));
            span.record("client_source", source);
            client
        }
        Err(e) => return e.into_response(),
    };
    let bucket =
        req.extensions().get::<MatchedPath>().and_then(|p| bucket_of_request(req.method(), p.as_str(), req.headers()));
    if let Some(bucket) = bucket.filter(|b| *b != Bucket::Signins) {
        let admin = super::bearer(req.headers()).is_some_and(|t| state.is_admin_token(t));
        if !admin && let Err(e) = state.guard.take(bucket, &client) {
            return e.into_response();
        }
    }
    req.extensions_mut().insert(client);
    next.run(req).await
}

impl crate::workers::retention::ForgetIdle for Guard {
    fn forget_idle(&self) {
        Guard::forget_idle(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(trusted: &str, limits: Option<RateLimits>) -> Guard {
        guard_reading(trusted, ClientAddressHeader::XForwardedFor, limits)
    }

    fn guard_reading(trusted: &str, header: ClientAddressHeader, limits: Option<RateLimits>) -> Guard {
        let p = Protection {
            trusted_proxies: crate::http::protection::parse_proxies(trusted).unwrap(),
            client_address_header: header,
            rate_limits: limits,
            shop_api_key: Some("k".repeat(32)),
            ..Protection::default()
        };
        Guard::new(&p).unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let g = guard("10.0.0.0/8", None);
        let h = headers(&[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(g.client(ip("203.0.113.9"), &h).unwrap().addr, ip("203.0.113.9"));
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() {
        let g = guard("10.0.0.0/8, 192.0.2.1", None);
        // The client forged the first hop; the proxies appended the real one and each other.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 198.51.100.7"), ("x-forwarded-for", "192.0.2.1")]);
        assert_eq!(g.client(ip("10.1.2.3"), &h).unwrap().addr, ip("198.51.100.7"));
        let all_trusted = headers(&[("x-forwarded-for", "10.9.9.9")]);
        assert_eq!(g.client(ip("10.1.2.3"), &all_trusted).unwrap().addr, ip("10.9.9.9"));
        assert_eq!(g.client(ip("10.1.2.3"), &HeaderMap::new()).unwrap().addr, ip("10.1.2.3"));
        let unknown = headers(&[("x-forwarded-for", "198.51.100.7, unknown, 10.0.0.5")]);
        assert_eq!(g.client(ip("10.1.2.3"), &unknown).unwrap().addr, ip("10.0.0.5"));
    }

    #[test]
    fn only_the_configured_header_is_read() {
        // Every forwarding header at once: the client wrote all but the one its proxy writes.
        let h = headers(&[
            ("forwarded", "for=192.0.2.60;proto=https, for=\"[2001:db8:cafe::17]:4711\""),
            ("x-forwarded-for", "203.0.113.1, 198.51.100.7"),
            ("x-real-ip", "198.51.100.99"),
        ]);
        let read = |header| guard_reading("10.0.0.0/8", header, None).client(ip("10.0.0.1"), &h).unwrap().addr;
        assert_eq!(read(ClientAddressHeader::Forwarded), ip("2001:db8:cafe::17"));
        assert_eq!(read(ClientAddressHeader::XForwardedFor), ip("198.51.100.7"));
        assert_eq!(read(ClientAddressHeader::XRealIp), ip("198.51.100.99"));
        assert_eq!(read(ClientAddressHeader::None), ip("10.0.0.1"));
        // A proxy that writes X-Forwarded-For passes a client's own `Forwarded` through: ignored.
        let forged = headers(&[("forwarded", "for=10.1.2.9"), ("x-forwarded-for", "198.51.100.7")]);
        let g = guard("10.0.0.0/8", None);
        assert_eq!(g.client(ip("10.0.0.1"), &forged).unwrap().addr, ip("198.51.100.7"));
        // An element without `for=` (`proto=https` alone) is a hop that names no address.
        let g = guard_reading("10.0.0.0/8", ClientAddressHeader::Forwarded, None);
        let no_for = headers(&[("forwarded", "for=198.51.100.7, proto=https, for=10.0.0.2")]);
        assert_eq!(g.client(ip("10.0.0.1"), &no_for).unwrap().addr, ip("10.0.0.2"));
    }

    #[test]
    fn the_shop_server_names_the_buyer_or_is_exempt() {
        let g = guard("none", None);
        let key = "k".repeat(32);
        let named = headers(&[("kassa-shop-key", &key), ("kassa-buyer-ip", "198.51.100.7")]);
        assert_eq!(
            g.client(ip("203.0.113.9"), &named).unwrap(),
            Client { addr: ip("198.51.100.7"), shop: true, exempt: false }
        );
        let alone = headers(&[("kassa-shop-key", &key)]);
        assert!(g.client(ip("203.0.113.9"), &alone).unwrap().exempt);
        let wrong = headers(&[("kassa-shop-key", "nope"), ("kassa-buyer-ip", "198.51.100.7")]);
        assert_eq!(g.client(ip("203.0.113.9"), &wrong).unwrap_err().code(), "invalid_shop_key");
        // Without the key the header is the buyer's own word, and ignored.
        let forged = headers(&[("kassa-buyer-ip", "198.51.100.7")]);
        assert_eq!(g.client(ip("203.0.113.9"), &forged).unwrap().addr, ip("203.0.113.9"));
    }

    #[test]
    fn a_bucket_refuses_past_its_rate_and_says_when_to_retry() {
        let limits = RateLimits { confirms_per_minute: 2, ..RateLimits::default() };
        let g = guard("none", Some(limits));
        let a = Client { addr: ip("198.51.100.7"), shop: false, exempt: false };
        let b = Client { addr: ip("198.51.100.8"), shop: false, exempt: false };
        assert!(g.take(Bucket::Confirms, &a).is_ok());
        assert!(g.take(Bucket::Confirms, &a).is_ok());
        let refused = g.take(Bucket::Confirms, &a).unwrap_err();
        assert_eq!(refused.code(), "rate_limited");
        assert!(g.take(Bucket::Confirms, &b).is_ok(), "another address has its own bucket");
        assert!(g.take(Bucket::Polls, &a).is_ok(), "another limit has its own bucket");
        let exempt = Client { exempt: true, ..a };
        assert!(g.take(Bucket::Confirms, &exempt).is_ok());
        assert!(guard("none", None).take(Bucket::Confirms, &a).is_ok(), "rate limits off");
    }

    #[test]
    fn ipv6_clients_share_their_slash_64() {
        assert_eq!(key_of(ip("2001:db8:1:2:aaaa::1")), key_of(ip("2001:db8:1:2:bbbb::2")));
        assert_ne!(key_of(ip("2001:db8:1:2::1")), key_of(ip("2001:db8:1:3::1")));
        assert_eq!(key_of(ip("::ffff:198.51.100.7")), ip("198.51.100.7"));
    }

    #[test]
    fn routes_draw_from_their_buckets() {
        assert_eq!(bucket_of(&Method::POST, "/api/v1/sessions"), Some(Bucket::Sessions));
        assert_eq!(bucket_of(&Method::PUT, "/api/v1/baskets/{basket_id}/lines/{sku}"), Some(Bucket::BasketWrites));
        assert_eq!(bucket_of(&Method::PUT, "/api/v1/baskets/{basket_id}/promotion"), Some(Bucket::BasketWrites));
        assert_eq!(bucket_of(&Method::POST, "/api/v1/baskets/{basket_id}/checkout"), Some(Bucket::Confirms));
        assert_eq!(bucket_of(&Method::GET, "/api/v1/orders/{order_no}"), Some(Bucket::Polls));
        assert_eq!(bucket_of(&Method::POST, "/admin/login"), Some(Bucket::Signins));
        assert_eq!(bucket_of(&Method::POST, "/notify/{gateway}"), None, "a gateway's notifications are never limited");
        assert_eq!(bucket_of(&Method::GET, "/admin/login"), None);
        let none = HeaderMap::new();
        assert_eq!(
            bucket_of_request(&Method::GET, "/", &none),
            Some(Bucket::Sessions),
            "a storefront visit makes a buyer"
        );
        let returning = headers(&[("cookie", "kassa_session=abc")]);
        assert_eq!(bucket_of_request(&Method::GET, "/", &returning), None);
    }
}
