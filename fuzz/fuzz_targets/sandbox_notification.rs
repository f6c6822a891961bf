//! The sandbox notification verifier and parser on arbitrary headers and bodies: never a panic,
//! never an accepted forgery (there is no private key here, so nothing may verify).
#![no_main]

use axum::http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

// A fixed Ed25519 public key (not the sandbox's): no input can carry a valid signature for it.
const PUBLIC_KEY: [u8; 32] = [7; 32];

fuzz_target!(|data: &[u8]| {
    // First byte: length of the signature header value; the rest: header, then body.
    let (head, body) = match data.split_first() {
        Some((n, rest)) => rest.split_at((*n as usize).min(rest.len())),
        None => (&[][..], data),
    };
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(head) {
        headers.insert(kassa::sandbox::protocol::SIGNATURE_HEADER, v);
    }
    assert!(kassa::gateway::sandbox::verify_signature(&PUBLIC_KEY, &headers, body, 1_700_000_000_000).is_err());
    // The parser alone (as after a valid signature) must refuse or accept without panicking.
    let _ = kassa::gateway::sandbox::parse_notification("kassa-demo-merchant", body);
});
