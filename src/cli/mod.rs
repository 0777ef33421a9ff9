//! Commands of the harness for users' rewriters: `generate`, `equiv` and `fuzz`.

pub mod fuzz;
pub mod generate;
