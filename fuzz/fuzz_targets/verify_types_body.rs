#![no_main]
//! See `ilcheck::properties::verify_types_body`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::verify_types_body(data));
