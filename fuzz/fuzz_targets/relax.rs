#![no_main]
//! See `ilcheck::properties::relax`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::relax(data));
