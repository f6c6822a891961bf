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

/// Characters of the time prefix: 9 × 5 bits of milliseconds since the Unix epoch (good until
/// the year 3085).
const ORDER_NO_TIME_LEN: usize = 9;

/// A fresh order number such as `KS1KQ2R3T4A7F3K9QXW2MAB`: the creation time in milliseconds, then
/// 60 random bits. The time prefix makes numbers of one moment sort together, so the indexes keyed
/// by order number take new orders at their right edge instead of on a random page each (one
/// purchase touches nine such indexes: random keys cost a page write per index per order); the
/// random part keeps numbers unguessable and says nothing about how many orders there are.
pub fn new_order_no() -> String {
    let ms = u64::try_from(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis(),
    )
    .unwrap_or(u64::MAX);
    format!("KS{}{}", base32_fixed(ms, ORDER_NO_TIME_LEN), random_base32(ORDER_NO_RANDOM_LEN))
}

/// `n` in `len` base32 characters, most significant first (sorts as the number does).
fn base32_fixed(n: u64, len: usize) -> String {
    (0..len).rev().map(|i| char::from(ALPHABET[((n >> (5 * i)) & 31) as usize])).collect()
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
        assert!(is_plain_id(&a) && a.len() == 23);
        let r = attempt_ref(&a, 3);
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
        let a = new_order_no();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_order_no();
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
}
