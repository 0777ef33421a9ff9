#![no_main]
//! See `ilcheck::properties::decode_body`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::decode_body(data));
