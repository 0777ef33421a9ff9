#![no_main]
//! Generated bodies: verify clean, round-trip, survive every transform with the same behaviour,
//! and every mutation is caught. See `ilcheck::gen::check`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let config = ilcheck::generate::Config::everything();
    let g = ilcheck::generate::generate_from_bytes(data, &config);
    let choice = data.len() as u32;
    if let Err(e) = ilcheck::generate::check::all(&g, choice) {
        panic!("{e}");
    }
});
