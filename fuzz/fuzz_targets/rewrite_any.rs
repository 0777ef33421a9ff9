#![no_main]
//! See `ilcheck::properties::rewrite_any`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::rewrite_any(data));
