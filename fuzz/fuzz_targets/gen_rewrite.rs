#![no_main]
//! Generated bodies: verify clean, round-trip, survive every transform with the same behaviour,
//! and every mutation is caught. See `ilcheck::gen::check`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let config = ilcheck::r#gen::Config::everything();
    let g = ilcheck::r#gen::generate_from_bytes(data, &config);
    let choice = data.len() as u32;
    if let Err(e) = ilcheck::r#gen::check::all(&g, choice) {
        panic!("{e}");
    }
});
