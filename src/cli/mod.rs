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

/// What to tell a user whose method globs matched none of `methods`: a full name that would
/// match with `*` added to a glob (`Ns.Type::Method` lacks the parameters), else an example of
/// the form full names take; empty when no name reads.
pub fn glob_hint<'i, I>(methods: impl Fn() -> I, globs: &[String]) -> String
where
    I: Iterator<Item = ilcheck::image::Method<'i>>,
{
    let names = || methods().filter_map(|m| m.full_name().ok());
    let near = names().find_map(|n| {
        let bare = &n[..n.find('(').unwrap_or(n.len())];
        globs
            .iter()
            .find(|g| ilcheck::corpus::glob_match(g, bare))
            .map(|g| format!("; {n} would match '{g}*'"))
    });
    near.or_else(|| {
        names()
            .next()
            .map(|n| format!("; full names include the parameters, e.g. {n}"))
    })
    .unwrap_or_default()
}
