//! What a shop attaches to an order at checkout: its own reference (unique per shop: a second
//! checkout with the same one answers the first order, like an idempotency key), string metadata,
//! and where the buyer is sent back to after paying or giving up. Each is checked here once, at the
//! edge; past it the values are known to fit.

use std::collections::BTreeMap;

use super::refusal::{Refusal, RefusalKind};

/// Longest merchant reference, in characters.
pub const MERCHANT_REFERENCE_LEN_MAX: usize = 64;
/// Most metadata pairs on one order.
pub const METADATA_PAIRS_MAX: usize = 20;
/// Longest metadata key, in characters.
pub const METADATA_KEY_LEN_MAX: usize = 40;
/// Longest metadata value, in characters.
pub const METADATA_VALUE_LEN_MAX: usize = 500;
/// Longest return or cancel URL, in bytes.
pub const RETURN_URL_LEN_MAX: usize = 2048;
/// Most origins `--allowed-return-origins` may list.
pub const RETURN_ORIGINS_MAX: usize = 32;

/// The shop's own reference for an order: 1–64 printable characters, no spaces at either end.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct MerchantReference(String);

impl MerchantReference {
    pub fn parse(text: &str) -> Result<Self, Refusal> {
        let n = text.chars().count();
        if n == 0 || n > MERCHANT_REFERENCE_LEN_MAX || text.chars().any(char::is_control) || text.trim() != text {
            return Err(Refusal::unprocessable(
                "invalid_merchant_reference",
                format!(
                    "merchant_reference must be 1-{MERCHANT_REFERENCE_LEN_MAX} printable characters without surrounding spaces"
                ),
            ));
        }
        Ok(MerchantReference(text.to_string()))
    }

    /// One read back from kassa's own records.
    pub fn stored(text: impl Into<String>) -> Self {
        MerchantReference(text.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The shop's metadata on an order: at most [`METADATA_PAIRS_MAX`] string pairs, keys of 1–40
/// printable characters, values of at most 500; kept and returned as given.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct Metadata(BTreeMap<String, String>);

impl Metadata {
    /// From the pairs a request named (its JSON object's members, in any order).
    pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, Refusal> {
        let invalid = |m: String| Refusal::unprocessable("invalid_metadata", m);
        let mut map = BTreeMap::new();
        for (key, value) in pairs {
            if map.len() == METADATA_PAIRS_MAX {
                return Err(invalid(format!("metadata holds at most {METADATA_PAIRS_MAX} pairs")));
            }
            let k = key.chars().count();
            if k == 0 || k > METADATA_KEY_LEN_MAX || key.chars().any(char::is_control) {
                return Err(invalid(format!("a metadata key is 1-{METADATA_KEY_LEN_MAX} printable characters")));
            }
            if value.chars().count() > METADATA_VALUE_LEN_MAX || value.chars().any(char::is_control) {
                return Err(invalid(format!(
                    "metadata value of {key:?}: at most {METADATA_VALUE_LEN_MAX} printable characters"
                )));
            }
            map.insert(key.to_string(), value.to_string());
        }
        Ok(Metadata(map))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn pairs(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// As stored: a JSON object, `None` when empty.
    pub fn to_stored(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| serde_json::to_string(&self.0).unwrap_or_default())
    }

    /// Read back from kassa's own records (`None` or unreadable: none).
    pub fn from_stored(text: Option<&str>) -> Metadata {
        Metadata(text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default())
    }
}

/// An origin a shop lets buyers be sent back to: `scheme://host[:port]`, http or https.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin(String);

impl Origin {
    /// From `--allowed-return-origins`: an origin with nothing after it, lower-cased.
    pub fn parse(text: &str) -> Result<Origin, String> {
        let text = text.trim().trim_end_matches('/');
        match origin_of(text) {
            Some((origin, "")) => Ok(Origin(origin)),
            _ => Err(format!("{text:?} is not an origin such as https://shop.example or http://127.0.0.1:8080")),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `url`'s origin (scheme and authority, lower-cased) and what follows it, if it is an absolute
/// http(s) URL with a host and no user information.
fn origin_of(url: &str) -> Option<(String, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let host = authority.rsplit_once(':').map_or(authority, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) && !port.is_empty() { h } else { authority }
    });
    let host_ok = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':'));
    if authority.contains('@') || !host_ok || authority.ends_with(':') {
        return None;
    }
    Some((format!("{scheme}://{}", authority.to_ascii_lowercase()), tail))
}

/// A return or cancel URL a checkout named, if it is an absolute http(s) URL under one of
/// `allowed` and fits; anything else is refused as `return_url_not_allowed` naming the field.
pub fn check_return_url(field: &str, url: &str, allowed: &[Origin]) -> Result<String, Refusal> {
    let refused =
        |why: &str| Refusal::new(RefusalKind::Unprocessable, "return_url_not_allowed", format!("{field}: {why}"));
    if url.len() > RETURN_URL_LEN_MAX || url.chars().any(|c| c.is_control() || c.is_whitespace() || c == '"') {
        return Err(refused(&format!("at most {RETURN_URL_LEN_MAX} bytes without spaces")));
    }
    let Some((origin, _)) = origin_of(url) else {
        return Err(refused("not an absolute http(s) URL"));
    };
    if !allowed.iter().any(|o| o.0 == origin) {
        return Err(refused(&format!("{origin} is not among the allowed return origins")));
    }
    Ok(url.to_string())
}

/// The placeholder a return or cancel URL may hold for the order's number.
pub const ORDER_NO_PLACEHOLDER: &str = "{order_no}";

/// `url` with [`ORDER_NO_PLACEHOLDER`] replaced by `order_no` (an order number is URL-safe).
pub fn with_order_no(url: &str, order_no: &str) -> String {
    url.replace(ORDER_NO_PLACEHOLDER, order_no)
}

/// What a shop attached to one checkout, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShopData {
    pub merchant_reference: Option<MerchantReference>,
    pub metadata: Metadata,
    /// Where the gateway sends the buyer after paying (kassa's own return page when `None`).
    pub return_url: Option<String>,
    /// Where a buyer who gives up goes back to (the shop's storefront when `None`).
    pub cancel_url: Option<String>,
}

/// The shop's own fields of an order — its `merchant_reference` and `metadata` — are the shop's
/// word: webhooks and the shop's books trust them. A checkout may carry them only from the shop's
/// server (`by_shop`: its request carries the shop's API key); a buyer naming them is refused.
pub fn may_set_shop_fields(by_shop: bool, names_reference: bool, names_metadata: bool) -> Result<(), Refusal> {
    if by_shop || !(names_reference || names_metadata) {
        return Ok(());
    }
    Err(Refusal::new(
        RefusalKind::Forbidden,
        "shop_key_required",
        "merchant_reference and metadata are the shop's: send them from the shop's server with its Kassa-Shop-Key",
    ))
}

/// A checkout named a reference an order already has: the same buyer is answered that order (a
/// retried request, like an idempotency key); another buyer is refused, and learns nothing of it.
pub fn on_reference_taken(order_session: &str, session: &str) -> Result<(), Refusal> {
    if order_session == session {
        Ok(())
    } else {
        Err(Refusal::conflict("merchant_reference_taken", "another order has this merchant_reference"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_reference_answers_its_own_buyer_only() {
        assert!(on_reference_taken("s1", "s1").is_ok());
        assert_eq!(on_reference_taken("s1", "s2").unwrap_err().code, "merchant_reference_taken");
    }

    #[test]
    fn only_the_shop_names_its_own_fields() {
        assert!(may_set_shop_fields(false, false, false).is_ok());
        assert!(may_set_shop_fields(true, true, true).is_ok());
        for (reference, metadata) in [(true, false), (false, true), (true, true)] {
            let refused = may_set_shop_fields(false, reference, metadata).unwrap_err();
            assert_eq!((refused.kind, refused.code), (RefusalKind::Forbidden, "shop_key_required"));
        }
    }

    #[test]
    fn a_merchant_reference_is_printable_and_bounded() {
        assert!(MerchantReference::parse("PO-2024/118").is_ok());
        assert!(MerchantReference::parse("订单-7").is_ok());
        for bad in ["", " x", "x ", "a\nb", &"x".repeat(65)] {
            assert_eq!(MerchantReference::parse(bad).unwrap_err().code, "invalid_merchant_reference", "{bad:?}");
        }
        assert!(MerchantReference::parse(&"é".repeat(64)).is_ok(), "characters, not bytes");
    }

    #[test]
    fn metadata_is_bounded_in_pairs_keys_and_values() {
        let ok = Metadata::parse([("crm_id", "42"), ("note", "")]).unwrap();
        assert_eq!(ok.to_stored().unwrap(), r#"{"crm_id":"42","note":""}"#);
        assert_eq!(Metadata::from_stored(ok.to_stored().as_deref()), ok);
        assert_eq!(Metadata::parse([]).unwrap().to_stored(), None);
        let keys: Vec<String> = (0..21).map(|i| format!("k{i}")).collect();
        let too_many = Metadata::parse(keys.iter().map(|k| (k.as_str(), "v")));
        assert_eq!(too_many.unwrap_err().code, "invalid_metadata");
        let twenty = Metadata::parse(keys[..20].iter().map(|k| (k.as_str(), "v"))).unwrap();
        assert_eq!(twenty.pairs().len(), 20);
        let long_key = "k".repeat(41);
        let long_value = "v".repeat(501);
        for (k, v) in [("", "v"), (long_key.as_str(), "v"), ("k", long_value.as_str()), ("k", "a\u{0}b")] {
            assert_eq!(Metadata::parse([(k, v)]).unwrap_err().code, "invalid_metadata", "{k:?}");
        }
    }

    #[test]
    fn return_urls_must_be_under_an_allowed_origin() {
        let allowed =
            vec![Origin::parse("https://Shop.example/").unwrap(), Origin::parse("http://127.0.0.1:8080").unwrap()];
        assert_eq!(allowed[0].as_str(), "https://shop.example");
        for good in ["https://shop.example/thanks?o=1", "https://SHOP.example", "http://127.0.0.1:8080/r#x"] {
            assert_eq!(check_return_url("return_url", good, &allowed).unwrap(), good);
        }
        for bad in [
            "https://shop.example.evil.test/",
            "https://evil.test/?https://shop.example",
            "http://shop.example/",
            "https://shop.example@evil.test/",
            "https://shop.example:444/",
            "javascript:alert(1)",
            "//shop.example/",
            "/relative",
            "https://shop.example/a b",
        ] {
            let e = check_return_url("cancel_url", bad, &allowed).unwrap_err();
            assert_eq!(e.code, "return_url_not_allowed", "{bad}");
            assert!(e.message.starts_with("cancel_url: "), "{}", e.message);
        }
        assert!(check_return_url("return_url", "https://shop.example/", &[]).is_err(), "none allowed by default");
        let templated = check_return_url("return_url", "https://shop.example/done/{order_no}", &allowed).unwrap();
        assert_eq!(with_order_no(&templated, "KS1"), "https://shop.example/done/KS1");
        for bad in ["ftp://x", "https://x/path", "https://", "x"] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }
}
