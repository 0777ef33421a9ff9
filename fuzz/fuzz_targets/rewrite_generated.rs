#![no_main]
//! See `ilcheck::properties::rewrite_generated`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::rewrite_generated(data));
