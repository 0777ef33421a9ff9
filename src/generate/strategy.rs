//! The proptest front end: a strategy over choice streams. Proptest shrinks the byte vector
//! (fewer and smaller bytes), which the generator reads as fewer and simpler choices, so a
//! shrunk case is a smaller program that is still valid.

use super::config::Config;
use super::valid::{Generated, generate_from_bytes};
use proptest::prelude::*;

/// Longest choice stream drawn; longer streams add nothing once every block has ended.
pub const MAX_CHOICES: usize = 2048;

/// Valid methods generated under `config`.
pub fn method(config: Config) -> impl Strategy<Value = Generated> {
    proptest::collection::vec(any::<u8>(), 0..MAX_CHOICES)
        .prop_map(move |bytes| generate_from_bytes(&bytes, &config))
}

/// Valid methods with the choice stream that produced them (to replay or to feed mutators).
pub fn method_with_choices(config: Config) -> impl Strategy<Value = (Vec<u8>, Generated)> {
    proptest::collection::vec(any::<u8>(), 0..MAX_CHOICES).prop_map(move |bytes| {
        let g = generate_from_bytes(&bytes, &config);
        (bytes, g)
    })
}
