//! Every JSON and form request body decoder of the HTTP API on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kassa::http::api::decode_bodies_for_fuzzing(data);
});
