//! Commands beyond the reading ones: `rewrite`, `bench`, and the harness for users'
//! rewriters: `generate`, `equiv` and `fuzz`.

pub mod bench;
pub mod fuzz;
pub mod generate;
pub mod interrupt;
pub mod report;
pub mod rewrite;
pub mod types;
