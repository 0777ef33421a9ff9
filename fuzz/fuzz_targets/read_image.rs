#![no_main]
//! See `ilcheck::properties::read_image`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| ilcheck::properties::read_image(data));
