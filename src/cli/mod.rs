//! Commands beyond the reading ones: `rewrite`, `bench`, and the harness for users'
//! rewriters: `generate`, `equiv` and `fuzz`.

pub mod bench;
pub mod fuzz;
pub mod generate;
pub mod interrupt;
pub mod out;
pub mod report;
pub mod rewrite;
pub mod types;

use std::path::Path;

/// Refuses a report path that names a file the run reads (an input or an original, through any
/// name or link): a report never replaces what it reports on.
pub fn refuse_reports_over<'p>(
    reports: impl IntoIterator<Item = &'p Path>,
    read: &[&Path],
) -> anyhow::Result<()> {
    for r in reports {
        if let Some(p) = read.iter().find(|p| ilcheck::fsio::same_file(p, r)) {
            anyhow::bail!(
                "{}: is {}, which this run reads; a report never replaces what it reports on",
                r.display(),
                p.display()
            );
        }
    }
    Ok(())
}
