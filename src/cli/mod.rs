//! Commands beyond the reading ones: `rewrite`, and the harness for users' rewriters:
//! `generate`, `equiv` and `fuzz`.

pub mod fuzz;
pub mod generate;
pub mod rewrite;
