//! Money arithmetic, currency and identifier parsing on arbitrary input: checked, never a panic,
//! never a wrong sum.
#![no_main]

use kassa::domain::{Currency, Money, ids};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = Currency::parse(&text);
    let plain = ids::is_plain_id(&text);
    assert!(!plain || (!text.contains('/') && !text.contains('"') && text.len() <= ids::MAX_ID_LEN));
    if data.len() >= 17 {
        let a = i64::from_le_bytes(data[0..8].try_into().unwrap_or_default());
        let b = i64::from_le_bytes(data[8..16].try_into().unwrap_or_default());
        let Ok(cny) = Currency::parse("CNY") else { return };
        if let (Ok(x), Ok(y)) = (Money::new(a, cny), Money::new(b, cny)) {
            match x.checked_add(y) {
                Ok(s) => assert_eq!(Some(s.amount_minor()), a.checked_add(b)),
                Err(_) => assert!(a.checked_add(b).is_none()),
            }
            let _ = x.checked_mul(i64::from(data[16]));
            let _ = x.display_major();
        }
    }
});
