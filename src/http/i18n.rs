//! The languages of the buyer pages and the admin console: one message catalog per language
//! (`locales/*.toml`, compiled in), the language of a request (`?lang=`, then the `kassa_lang`
//! cookie, then `Accept-Language`), times in the shop's time zone, and the error page a buyer
//! reaches with its next step.
//!
//! The catalogs are TOML read with the `toml` crate the configuration already uses; their texts
//! take named `{placeholders}` and nothing else (no plural rules are needed: every count is
//! written so that it reads in both languages), so no localization framework is pulled in.

use crate::clock::Zone;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};

/// The cookie that keeps a buyer's (or an operator's) choice of language.
pub const LANG_COOKIE: &str = "kassa_lang";
/// How long the choice is kept, in seconds (a year).
const LANG_COOKIE_MAX_AGE_S: u32 = 365 * 24 * 3600;
/// Most `Accept-Language` entries looked at; the rest are ignored.
const ACCEPT_LANGUAGE_ENTRIES_MAX: usize = 32;

/// A language the buyer pages and the console are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Lang {
    pub const ALL: [Lang; 2] = [Lang::En, Lang::Zh];

    /// The short code of `?lang=` and the cookie.
    pub fn code(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh",
        }
    }

    /// `en`, `zh` or a tag of either (`zh-CN`, `en-GB`), in any case.
    pub fn parse(tag: &str) -> Option<Lang> {
        let primary = tag.trim().split(['-', '_']).next().unwrap_or_default();
        if primary.eq_ignore_ascii_case("zh") {
            Some(Lang::Zh)
        } else if primary.eq_ignore_ascii_case("en") {
            Some(Lang::En)
        } else {
            None
        }
    }

    /// The other language: what the switch on a page offers.
    pub fn other(self) -> Lang {
        match self {
            Lang::En => Lang::Zh,
            Lang::Zh => Lang::En,
        }
    }

    pub fn texts(self) -> &'static Texts {
        &CATALOGS[self as usize]
    }
}

/// The language of a request: an explicit `?lang=` first, then the kept choice, then the best
/// supported language of `Accept-Language`, else English.
pub fn choose(query: Option<&str>, cookie: Option<&str>, accept_language: Option<&str>) -> Lang {
    query
        .and_then(Lang::parse)
        .or_else(|| cookie.and_then(Lang::parse))
        .or_else(|| accept_language.and_then(preferred))
        .unwrap_or_default()
}

/// The supported language `Accept-Language` prefers most (highest `q`, the first of equals);
/// `q=0` means "not this one".
pub fn preferred(header: &str) -> Option<Lang> {
    let mut best: Option<(Lang, u32)> = None;
    for entry in header.split(',').take(ACCEPT_LANGUAGE_ENTRIES_MAX) {
        let mut parts = entry.split(';');
        let Some(lang) = parts.next().and_then(Lang::parse) else { continue };
        let quality = parts.find_map(|p| p.trim().strip_prefix("q=").map(thousandths)).unwrap_or(1000);
        if quality > 0 && best.is_none_or(|(_, q)| quality > q) {
            best = Some((lang, quality));
        }
    }
    best.map(|(lang, _)| lang)
}

/// A `q` value (`1`, `0.8`, `0.853`) in thousandths, as the header writes it; 0 when it is not one.
fn thousandths(q: &str) -> u32 {
    let (whole, fraction) = q.trim().split_once('.').unwrap_or((q.trim(), ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let fraction: u32 = format!("{fraction:0<3}").parse().unwrap_or(0);
    match whole {
        "0" => fraction,
        "1" if fraction == 0 => 1000,
        _ => 0,
    }
}

/// The `?lang=` of a query string, when it names a language.
pub fn query_lang(query: Option<&str>) -> Option<Lang> {
    serde_urlencoded::from_str::<Vec<(String, String)>>(query?)
        .ok()?
        .into_iter()
        .find(|(k, _)| k == "lang")
        .and_then(|(_, v)| Lang::parse(&v))
}

/// The language of a request from its parts.
pub fn of_request(query: Option<&str>, headers: &HeaderMap) -> Lang {
    let accept = headers.get(header::ACCEPT_LANGUAGE).and_then(|v| v.to_str().ok());
    let asked = query_lang(query);
    asked.unwrap_or_else(|| choose(None, super::cookie(headers, LANG_COOKIE), accept))
}

/// The `Set-Cookie` value that keeps `lang` as the buyer's choice.
pub fn lang_cookie(lang: Lang) -> String {
    let max_age = Some(i64::from(LANG_COOKIE_MAX_AGE_S));
    // Not HttpOnly: nothing secret, and the page's language switch is a plain link.
    super::set_cookie(LANG_COOKIE, lang.code(), "/", max_age, cookie::SameSite::Lax, false, false)
}

impl<S: Send + Sync> FromRequestParts<S> for Lang {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(match parts.extensions.get::<Lang>() {
            Some(lang) => *lang,
            None => of_request(parts.uri.query(), &parts.headers),
        })
    }
}

/// One language's texts, by dotted key (`basket.title`).
#[derive(Debug)]
pub struct Texts {
    lang: Lang,
    map: BTreeMap<String, String>,
}

static CATALOGS: LazyLock<[Texts; 2]> = LazyLock::new(|| {
    [
        Texts::load(Lang::En, include_str!("../../locales/en.toml")),
        Texts::load(Lang::Zh, include_str!("../../locales/zh.toml")),
    ]
});

impl Texts {
    fn load(lang: Lang, source: &str) -> Texts {
        let map = parse_catalog(source).unwrap_or_else(|e| {
            // Compiled in and checked by the unit tests; a page then shows keys, never fails.
            tracing::error!(lang = lang.code(), error = %e, "message catalog unreadable");
            BTreeMap::new()
        });
        Texts { lang, map }
    }

    pub fn lang(&self) -> Lang {
        self.lang
    }

    /// The text of `key`; the key itself when it is missing (which the unit tests rule out).
    pub fn t<'a>(&'a self, key: &'a str) -> &'a str {
        self.map.get(key).map_or(key, String::as_str)
    }

    /// The text of `key` with `{name}` filled in by `value`.
    pub fn f(&self, key: &str, name: &str, value: impl std::fmt::Display) -> String {
        self.t(key).replace(&format!("{{{name}}}"), &value.to_string())
    }

    /// The text of `key` with two placeholders filled in.
    pub fn f2(
        &self,
        key: &str,
        name: &str,
        value: impl std::fmt::Display,
        name2: &str,
        value2: impl std::fmt::Display,
    ) -> String {
        self.f(key, name, value).replace(&format!("{{{name2}}}"), &value2.to_string())
    }

    /// An order status in words.
    pub fn status<'a>(&'a self, status: &'a str) -> &'a str {
        self.map.get(&format!("status.{status}")).map_or(status, String::as_str)
    }

    /// The `lang` attribute of the page.
    pub fn tag(&self) -> &str {
        self.t("lang.tag")
    }

    /// The other language's own name, for the switch.
    pub fn other_name(&self) -> &str {
        self.lang.other().texts().t("lang.name")
    }

    /// The link that switches `page` (a path of this site) to the other language.
    pub fn switch_href(&self, page: &str) -> String {
        let join = if page.contains('?') { '&' } else { '?' };
        format!("{page}{join}lang={}", self.lang.other().code())
    }

    /// The texts the pages' scripts need (`js.*` and `status.*`), as JSON for a `data-` attribute.
    pub fn for_scripts(&self) -> String {
        self.scripts_json(&["js.", "status."])
    }

    /// The texts the console's scripts need (`admin.js.*`), as JSON for a `data-` attribute.
    pub fn for_console_scripts(&self) -> String {
        self.scripts_json(&["admin.js."])
    }

    fn scripts_json(&self, prefixes: &[&str]) -> String {
        let wanted: BTreeMap<&str, &str> = self
            .map
            .iter()
            .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        serde_json::to_string(&wanted).unwrap_or_else(|_| "{}".to_string())
    }

    /// A time (RFC 3339) as the buyer reads it, in the shop's time zone.
    pub fn time(&self, rfc3339: &str, zone: &Zone) -> String {
        local_time(self.lang, rfc3339, zone)
    }
}

/// The catalog's tables flattened to dotted keys; every leaf must be a string.
fn parse_catalog(source: &str) -> Result<BTreeMap<String, String>, String> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) -> Result<(), String> {
        for (key, value) in table {
            let key = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            match value {
                toml::Value::String(s) => {
                    out.insert(key, s.clone());
                }
                toml::Value::Table(t) => walk(&key, t, out)?,
                _ => return Err(format!("{key} is not a text")),
            }
        }
        Ok(())
    }
    let table: toml::Table = toml::from_str(source).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    walk("", &table, &mut out)?;
    Ok(out)
}

/// `rfc3339` in `zone` (its offset at that instant), written the way `lang` writes dates; the text
/// as given if it is not a time.
pub fn local_time(lang: Lang, rfc3339: &str, zone: &Zone) -> String {
    use time::macros::format_description;
    let Ok(at) = time::OffsetDateTime::parse(rfc3339, &time::format_description::well_known::Rfc3339) else {
        return rfc3339.to_string();
    };
    let millis = i64::try_from(at.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
    let offset = zone.offset_at(millis);
    let at = at.to_offset(offset);
    let written = match lang {
        Lang::En => at.format(format_description!("[day padding:none] [month repr:short] [year], [hour]:[minute]")),
        Lang::Zh => {
            at.format(format_description!("[year]年[month padding:none]月[day padding:none]日 [hour]:[minute]"))
        }
    };
    let Ok(written) = written else { return rfc3339.to_string() };
    format!("{written} ({})", zone_name(offset))
}

/// `UTC`, or `UTC+08:00`.
pub fn zone_name(zone: time::UtcOffset) -> String {
    if zone.is_utc() {
        return "UTC".to_string();
    }
    let (h, m, _) = zone.as_hms();
    let sign = if zone.is_negative() { '-' } else { '+' };
    format!("UTC{sign}{:02}:{:02}", h.unsigned_abs(), m.unsigned_abs())
}

/// Where the next step of an error page leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The storefront: start again.
    Shop,
    /// The page the buyer came from (the basket, the order), as the handler knows it.
    Back,
}

/// What a buyer is told about a refusal: the text's key, the next step's label key and where it
/// leads. Known codes first, then by status.
pub fn explain(code: &str, status: StatusCode) -> (&'static str, &'static str, Next) {
    use Next::*;
    match code {
        "not_found" => ("error.not_found", "common.back_to_shop", Shop),
        "out_of_stock" | "insufficient_stock" => ("error.out_of_stock", "error.shop_again", Shop),
        "quantity_limit" => ("error.quantity_limit", "error.shop_again", Shop),
        "price_changed" => ("error.price_changed", "error.review_basket", Back),
        "order_expired" => ("error.order_expired", "error.shop_again", Shop),
        "not_payable" | "already_paid" => ("error.not_payable", "error.see_order", Back),
        "payment_closed" | "payment_final" => ("error.payment_ended", "error.see_order", Back),
        "basket_empty" => ("error.basket_empty", "common.back_to_shop", Shop),
        "invalid_quantity" => ("error.invalid_quantity", "common.back_to_shop", Shop),
        "basket_frozen" => ("error.basket_frozen", "error.back", Back),
        "csrf_failed" => ("error.csrf_failed", "error.reload", Shop),
        "unauthorized" => ("error.unauthorized", "error.reload", Shop),
        "too_many_open_orders" => ("error.too_many_open_orders", "common.back_to_shop", Shop),
        "rate_limited" => ("error.rate_limited", "error.try_again", Back),
        "captcha_failed" => ("error.captcha_failed", "error.try_again", Back),
        "gateway_unavailable" | "gateway_refused" => ("error.gateway", "error.try_again", Back),
        "link_used" | "link_expired" => ("error.link_ended", "lookup.find_again", Back),
        "invalid_lookup" | "invalid_contact" | "invalid_lookup_password" => {
            ("error.lookup_invalid", "error.back", Back)
        }
        "mail_off" => ("error.mail_off", "error.back", Back),
        "open_in_browser" => ("error.open_in_browser", "error.back", Back),
        promotion if promotion.starts_with("promotion_") => ("error.promotion", "error.review_basket", Back),
        _ => match status {
            StatusCode::NOT_FOUND => ("error.not_found", "common.back_to_shop", Shop),
            StatusCode::UNAUTHORIZED => ("error.unauthorized", "error.reload", Shop),
            StatusCode::FORBIDDEN => ("error.csrf_failed", "error.reload", Shop),
            StatusCode::CONFLICT => ("error.conflict", "error.back", Back),
            StatusCode::TOO_MANY_REQUESTS => ("error.rate_limited", "error.try_again", Back),
            StatusCode::BAD_GATEWAY => ("error.gateway", "error.try_again", Back),
            StatusCode::SERVICE_UNAVAILABLE => ("error.unavailable", "error.try_again", Back),
            s if s.is_server_error() => ("error.internal", "common.back_to_shop", Shop),
            StatusCode::UNPROCESSABLE_ENTITY => ("error.refused", "error.back", Back),
            _ => ("error.unreadable", "error.back", Back),
        },
    }
}

/// What a buyer is told about a promotion code that takes nothing off (the text's key), by the
/// refusal's code.
pub fn promotion_refusal(code: &str) -> &'static str {
    match code {
        "promotion_unknown" => "basket.promotion_unknown",
        "promotion_expired" => "basket.promotion_expired",
        "promotion_used_up" => "basket.promotion_used_up",
        "promotion_minimum_not_met" => "basket.promotion_minimum_plain",
        "promotion_not_applicable" => "basket.promotion_not_applicable",
        "promotion_limit_per_buyer" => "basket.promotion_limit_per_buyer",
        _ => "basket.promotion_refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders(text: &str) -> Vec<&str> {
        let mut out: Vec<&str> =
            text.split('{').skip(1).filter_map(|s| s.split_once('}').map(|(name, _)| name)).collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn both_catalogs_have_the_same_keys_and_placeholders() {
        let en = parse_catalog(include_str!("../../locales/en.toml")).unwrap();
        let zh = parse_catalog(include_str!("../../locales/zh.toml")).unwrap();
        assert!(en.len() > 50, "{}", en.len());
        let en_keys: Vec<_> = en.keys().collect();
        let zh_keys: Vec<_> = zh.keys().collect();
        assert_eq!(en_keys, zh_keys, "the catalogs name the same keys");
        for (key, text) in &en {
            assert_eq!(placeholders(text), placeholders(&zh[key]), "placeholders of {key}");
            assert!(!zh[key].is_empty() && !text.is_empty(), "{key} is written");
        }
        for lang in Lang::ALL {
            assert_eq!(lang.texts().map.len(), en.len());
        }
    }

    /// Every `t.t("…")`, `t.f("…"` and `t.f2("…"` in a template or in the code names a key of the
    /// catalogs, and so does every key [`explain`] gives.
    #[test]
    fn every_key_used_is_in_the_catalog() {
        let en = Lang::En.texts();
        let mut sources: Vec<(String, String)> = Vec::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        for dir in ["templates", "templates/admin", "templates/mail", "src/http"] {
            for entry in std::fs::read_dir(root.join(dir)).unwrap() {
                let path = entry.unwrap().path();
                if path.is_file() {
                    sources.push((path.display().to_string(), std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        assert!(sources.iter().any(|(path, _)| path.ends_with("admin/order.html")), "the console's templates are read");
        let mut used = 0;
        for (path, text) in &sources {
            for call in ["t(\"", "f(\"", "f2(\""] {
                for piece in text.split(call).skip(1) {
                    let key = piece.split('"').next().unwrap();
                    if !key.contains('.') || key.contains(' ') || key.contains('{') {
                        continue;
                    }
                    used += 1;
                    assert!(en.map.contains_key(key), "{path} uses {key:?}, which the catalog lacks");
                }
            }
        }
        assert!(used > 40, "{used}");
        for code in [
            "promotion_unknown",
            "promotion_expired",
            "promotion_used_up",
            "promotion_minimum_not_met",
            "promotion_not_applicable",
            "promotion_limit_per_buyer",
            "whatever",
        ] {
            assert!(en.map.contains_key(promotion_refusal(code)), "{code}");
        }
        for code in ["not_found", "price_changed", "order_expired", "out_of_stock", "payment_closed", "whatever"] {
            for status in [
                StatusCode::NOT_FOUND,
                StatusCode::CONFLICT,
                StatusCode::UNPROCESSABLE_ENTITY,
                StatusCode::BAD_REQUEST,
                StatusCode::INTERNAL_SERVER_ERROR,
                StatusCode::SERVICE_UNAVAILABLE,
                StatusCode::BAD_GATEWAY,
                StatusCode::TOO_MANY_REQUESTS,
            ] {
                let (text, next, _) = explain(code, status);
                assert!(en.map.contains_key(text) && en.map.contains_key(next), "{code} {status}");
            }
        }
    }

    #[test]
    fn a_request_speaks_the_language_it_asks_for() {
        // Real browsers' headers.
        assert_eq!(choose(None, None, Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::Zh);
        assert_eq!(choose(None, None, Some("en-US,en;q=0.9")), Lang::En);
        assert_eq!(choose(None, None, Some("zh-TW,zh;q=0.9,en-US;q=0.8,en;q=0.7")), Lang::Zh);
        assert_eq!(choose(None, None, Some("de-DE,de;q=0.9,zh;q=0.8,en;q=0.7")), Lang::Zh);
        assert_eq!(choose(None, None, Some("fr-FR,fr;q=0.9")), Lang::En);
        assert_eq!(choose(None, None, Some("en;q=0.5, zh-Hans;q=0.9")), Lang::Zh);
        assert_eq!(choose(None, None, Some("zh;q=0, en;q=0.1")), Lang::En);
        assert_eq!(choose(None, None, Some("*")), Lang::En);
        assert_eq!(choose(None, None, Some("zh;q=abc")), Lang::En);
        assert_eq!(choose(None, None, Some("en;q=0.85, zh;q=0.853")), Lang::Zh);
        assert_eq!(choose(None, None, Some("en;q=0.9, zh;q=1.5")), Lang::En);
        assert_eq!(choose(None, None, Some("en;q=0.001, zh;q=0.0001")), Lang::En);
        assert_eq!(choose(None, None, None), Lang::En);
        // The kept choice beats the header; an explicit ?lang= beats both.
        assert_eq!(choose(None, Some("en"), Some("zh-CN")), Lang::En);
        assert_eq!(choose(Some("zh"), Some("en"), Some("en")), Lang::Zh);
        assert_eq!(choose(Some("xx"), Some("zh"), None), Lang::Zh);
        assert_eq!(query_lang(Some("a=1&lang=zh")), Some(Lang::Zh));
        assert_eq!(query_lang(Some("lang=klingon")), None);
        assert_eq!(query_lang(None), None);
    }

    #[test]
    fn times_read_in_the_shops_zone() {
        let beijing = Zone::parse("+08:00").unwrap();
        assert_eq!(local_time(Lang::En, "2026-12-03T15:20:05Z", &beijing), "3 Dec 2026, 23:20 (UTC+08:00)");
        assert_eq!(local_time(Lang::Zh, "2026-12-03T17:20:05Z", &beijing), "2026年12月4日 01:20 (UTC+08:00)");
        assert_eq!(local_time(Lang::En, "2026-12-03T15:20:05Z", &Zone::utc()), "3 Dec 2026, 15:20 (UTC)");
        assert_eq!(local_time(Lang::En, "not a time", &beijing), "not a time");
        let shanghai = Zone::parse("Asia/Shanghai").unwrap();
        assert_eq!(local_time(Lang::En, "2026-12-03T15:20:05Z", &shanghai), "3 Dec 2026, 23:20 (UTC+08:00)");
        // A zone with daylight saving shows each time at the offset of its own day.
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        assert_eq!(local_time(Lang::En, "2026-01-10T12:00:00Z", &berlin), "10 Jan 2026, 13:00 (UTC+01:00)");
        assert_eq!(local_time(Lang::En, "2026-07-10T12:00:00Z", &berlin), "10 Jul 2026, 14:00 (UTC+02:00)");
        assert_eq!(zone_name(time::UtcOffset::from_hms(-3, -30, 0).unwrap()), "UTC-03:30");
    }

    #[test]
    fn texts_fill_their_placeholders() {
        let zh = Lang::Zh.texts();
        assert_eq!(zh.f("handoff.summary", "order", "KS1").replace("{total}", "1.00 CNY"), "订单 KS1，1.00 CNY。");
        assert_eq!(zh.f2("js.left", "min", 3, "s", 7), "剩余 3 分 7 秒");
        assert_eq!(zh.status("paid"), "已付款");
        assert_eq!(zh.status("no_such"), "no_such");
        assert_eq!(Lang::En.texts().switch_href("/h5/orders/KS1"), "/h5/orders/KS1?lang=zh");
        assert_eq!(zh.switch_href("/?a=1"), "/?a=1&lang=en");
        let js: BTreeMap<String, String> = serde_json::from_str(&zh.for_scripts()).unwrap();
        assert_eq!(js["status.refunded"], "已退款");
        assert!(js.keys().all(|k| k.starts_with("js.") || k.starts_with("status.")));
        let console: BTreeMap<String, String> = serde_json::from_str(&zh.for_console_scripts()).unwrap();
        assert_eq!(console["admin.js.refused"], "被拒绝");
        assert!(console.keys().all(|k| k.starts_with("admin.js.")));
    }
}
