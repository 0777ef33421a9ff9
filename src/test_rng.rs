//! The unit tests' random numbers: one xorshift generator, seeded per test, so that every run
//! draws the same cases.

/// A xorshift generator from `seed` (which must not be 0).
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// [`xorshift`] drawing numbers below a bound given at each draw.
pub(crate) fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut next = xorshift(seed);
    move |n| next() % n
}
