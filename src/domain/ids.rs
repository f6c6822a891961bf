//! Identifiers. Order numbers, attempt references, refund numbers, SKUs, baskets and idempotency
//! keys are separate types so they are never mixed up, and each is parsed once at the edge
//! (`parse`): past it, an identifier is known to be well formed. Those kassa makes itself
//! ([`new_order_no`], [`attempt_ref`]) or reads back from its own records ([`OrderNo::stored`])
//! need no parsing.

use rand::Rng;

use super::refusal::{Refusal, RefusalKind};

/// An identifier type: a plain identifier ([`is_plain_id`]) that names one kind of thing.
macro_rules! plain_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        plain_id!($(#[$doc])* $name);

        impl $name {
            #[doc = concat!("Parsed from outside: a plain identifier, or no ", $what, " can have it (`not_found`).")]
            pub fn parse(text: &str) -> Result<Self, Refusal> {
                if is_plain_id(text) { Ok($name(text.to_string())) } else { Err(Refusal::not_found($what)) }
            }
        }
    };
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {

            #[doc = concat!("One read back from kassa's own records (written only after it was parsed or made).")]
            pub fn stored(text: impl Into<String>) -> Self {
                $name(text.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

plain_id!(
    /// An order's number (`KS…`, [`new_order_no`]).
    OrderNo,
    "order"
);
plain_id!(
    /// A payment attempt's merchant reference (`out_trade_no` at the gateway, [`attempt_ref`]).
    AttemptRef,
    "payment"
);
plain_id!(
    /// A refund's number, chosen by the shop (or `DUP-…`/`LATE-…` for kassa's automatic ones).
    RefundNo
);

/// Longest refund number accepted.
pub const REFUND_NO_LEN_MAX: usize = 64;

impl RefundNo {
    /// A refund number the shop gives: a plain identifier of at most [`REFUND_NO_LEN_MAX`]
    /// characters (`invalid_refund_no` otherwise: it names a refund to make, not one to find).
    pub fn parse(text: &str) -> Result<Self, Refusal> {
        if text.len() <= REFUND_NO_LEN_MAX && is_plain_id(text) {
            Ok(RefundNo(text.to_string()))
        } else {
            Err(Refusal::unprocessable("invalid_refund_no", "refund_no must be 1-64 letters, digits, '_', '-' or '.'"))
        }
    }
}
plain_id!(
    /// A buyer session's id (kassa's own; a buyer is known by the session's bearer token, never by
    /// this id).
    SessionId
);
plain_id!(
    /// A SKU's code, chosen by the shop.
    Sku,
    "SKU"
);
plain_id!(
    /// A basket's id.
    BasketId,
    "basket"
);

/// Longest `Idempotency-Key` accepted.
pub const IDEMPOTENCY_KEY_LEN_MAX: usize = 128;

/// A checkout's `Idempotency-Key`: 1–128 printable characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(text: &str) -> Result<Self, Refusal> {
        if text.is_empty() || text.len() > IDEMPOTENCY_KEY_LEN_MAX || text.chars().any(char::is_control) {
            return Err(Refusal::new(
                RefusalKind::Malformed,
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-128 printable characters",
            ));
        }
        Ok(IdempotencyKey(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Crockford base32 without I, L, O, U: unambiguous when read aloud or typed.
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Random characters in an order number: 12 × 5 bits = 60 bits, so numbers cannot be guessed.
const ORDER_NO_RANDOM_LEN: usize = 12;
/// Longest identifier accepted in a path: bounds every lookup key.
pub const MAX_ID_LEN: usize = 64;

fn random_base32(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len).map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())])).collect()
}

/// Characters of the time prefix: 9 × 5 bits of milliseconds since the Unix epoch (good until
/// the year 3085).
const ORDER_NO_TIME_LEN: usize = 9;

/// A fresh order number such as `KS1KQ2R3T4A7F3K9QXW2MAB`: the creation time in milliseconds, then
/// 60 random bits. The time prefix makes numbers of one moment sort together, so the indexes keyed
/// by order number take new orders at their right edge instead of on a random page each (one
/// purchase touches nine such indexes: random keys cost a page write per index per order); the
/// random part keeps numbers unguessable and says nothing about how many orders there are.
/// `now_ms`: the creation time (the caller's clock; the core reads none).
pub fn new_order_no(now_ms: i64) -> OrderNo {
    let ms = u64::try_from(now_ms).unwrap_or(0);
    OrderNo(format!("KS{}{}", base32_fixed(ms, ORDER_NO_TIME_LEN), random_base32(ORDER_NO_RANDOM_LEN)))
}

/// `n` in `len` base32 characters, most significant first (sorts as the number does).
fn base32_fixed(n: u64, len: usize) -> String {
    (0..len).rev().map(|i| char::from(ALPHABET[((n >> (5 * i)) & 31) as usize])).collect()
}

/// The merchant reference of the `seq`-th payment attempt of an order: `out_trade_no` at the
/// gateway. Letters, digits and `_` only, ≤ 32 characters, which every gateway accepts.
pub fn attempt_ref(order_no: &OrderNo, seq: i64) -> AttemptRef {
    AttemptRef(format!("{order_no}_{seq}"))
}

/// A bearer secret (buyer session token, admin token): 32 random bytes as hex.
pub fn new_secret_token() -> String {
    let mut bytes = [0_u8; 32];
    rand::rng().fill(&mut bytes[..]);
    hex::encode(bytes)
}

/// Accepts identifiers coming from URLs: bounded length, ASCII letters, digits, `_`, `-`, `.`.
/// Everything else (path tricks, quotes, control characters) is refused before any lookup.
pub fn is_plain_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= MAX_ID_LEN
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && text != "."
        && text != ".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_numbers_are_plain_and_distinct() {
        let a = new_order_no(1_764_000_000_000);
        let b = new_order_no(1_764_000_000_000);
        assert_ne!(a, b);
        assert!(is_plain_id(&a) && a.len() == 23);
        let r = attempt_ref(&a, 3);
        assert_eq!(OrderNo::parse(&a).unwrap(), a);
        assert!(is_plain_id(&r) && r.len() <= 32 && r.ends_with("_3"));
    }

    #[test]
    fn order_numbers_sort_by_creation_time() {
        let mut last = base32_fixed(0, ORDER_NO_TIME_LEN);
        for n in [1_u64, 31, 32, 1_000, 1_764_000_000_000, 1_764_000_000_001, (1 << 45) - 1] {
            let next = base32_fixed(n, ORDER_NO_TIME_LEN);
            assert!(next > last && next.len() == ORDER_NO_TIME_LEN, "{last} then {next}");
            last = next;
        }
        let a = new_order_no(1_764_000_000_000);
        let b = new_order_no(1_764_000_000_002);
        assert!(a[..2 + ORDER_NO_TIME_LEN] < b[..2 + ORDER_NO_TIME_LEN], "{a} then {b}");
    }

    #[test]
    fn plain_ids_refuse_tricks() {
        for bad in ["", "..", "a/b", "a b", "x\"><script>", "ä", "a%2F", &"x".repeat(65)] {
            assert!(!is_plain_id(bad), "{bad:?}");
        }
        assert!(is_plain_id("TEA-100g_v2.1"));
    }

    #[test]
    fn tokens_are_long_and_random() {
        let t = new_secret_token();
        assert_eq!(t.len(), 64);
        assert_ne!(t, new_secret_token());
    }

    /// Each identifier type takes what a plain identifier is and refuses the rest as a thing that
    /// cannot exist; an idempotency key takes any printable text up to its length.
    #[test]
    fn identifiers_are_parsed_once_at_the_edge() {
        assert_eq!(Sku::parse("MUG-CELADON").unwrap().as_str(), "MUG-CELADON");
        for bad in ["", "..", "a/b", "a b", "x'--", &"k".repeat(MAX_ID_LEN + 1)] {
            assert_eq!(Sku::parse(bad).unwrap_err().code, "not_found", "{bad:?}");
            assert!(OrderNo::parse(bad).is_err() && BasketId::parse(bad).is_err());
            assert_eq!(RefundNo::parse(bad).unwrap_err().code, "invalid_refund_no");
            assert!(AttemptRef::parse(bad).is_err());
        }
        assert_eq!(OrderNo::parse("nope/..").unwrap_err().message, "order not found");
        assert!(IdempotencyKey::parse("k 1 é").is_ok());
        for bad in [String::new(), "k".repeat(IDEMPOTENCY_KEY_LEN_MAX + 1), "a\nb".to_string()] {
            assert_eq!(IdempotencyKey::parse(&bad).unwrap_err().code, "invalid_idempotency_key");
        }
    }
}

/// How kassa names one attempt to its gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptKey {
    pub attempt_ref: String,
    pub gateway_ref: Option<String>,
}

impl AttemptKey {
    pub fn new(attempt_ref: &str, gateway_ref: Option<&str>) -> Self {
        AttemptKey { attempt_ref: attempt_ref.to_string(), gateway_ref: gateway_ref.map(str::to_string) }
    }
}
