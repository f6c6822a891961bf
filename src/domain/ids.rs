//! Identifiers. Order numbers, attempt references, tokens are separate types so they are never
//! mixed up, and each is parsed once at the edge.

use rand::Rng;

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

/// A fresh order number such as `KS7F3K9QXW2MAB`.
pub fn new_order_no() -> String {
    format!("KS{}", random_base32(ORDER_NO_RANDOM_LEN))
}

/// The merchant reference of the `seq`-th payment attempt of an order: `out_trade_no` at the
/// gateway. Letters, digits and `_` only, ≤ 32 characters, which every gateway accepts.
pub fn attempt_ref(order_no: &str, seq: i64) -> String {
    format!("{order_no}_{seq}")
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

/// A SKU code as given by the shop: a plain identifier.
pub fn parse_sku(text: &str) -> Option<&str> {
    is_plain_id(text).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_numbers_are_plain_and_distinct() {
        let a = new_order_no();
        let b = new_order_no();
        assert_ne!(a, b);
        assert!(is_plain_id(&a) && a.len() == 14);
        let r = attempt_ref(&a, 3);
        assert!(is_plain_id(&r) && r.len() <= 32 && r.ends_with("_3"));
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
}
