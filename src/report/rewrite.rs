//! Text output of rewrite runs.

use super::thousands;
use crate::corpus::RewriteReport;
use crate::image::writer::WriteSummary;
use std::fmt::Write;

/// Something the input had that its patched output no longer has, or has but no longer
/// valid: what the user must redo (re-sign) or know (the runtime compiles the IL now).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invalidated {
    /// The strong-name signature no longer matches (flag and space kept for re-signing).
    StrongName,
    /// The Authenticode certificate table was removed (bodies were relocated).
    CertificateDropped,
    /// The Authenticode certificate table is kept but its signature no longer matches.
    Authenticode,
    /// The ReadyToRun code was dropped: the output is IL-only.
    ReadyToRunDropped,
    /// The ReadyToRun code was kept (`--keep-r2r`): the runtime may run it instead of the
    /// patched IL.
    ReadyToRunKept,
}

impl Invalidated {
    /// Every kind, in the order they are reported.
    pub const ALL: [Invalidated; 5] = [
        Invalidated::StrongName,
        Invalidated::CertificateDropped,
        Invalidated::Authenticode,
        Invalidated::ReadyToRunDropped,
        Invalidated::ReadyToRunKept,
    ];

    /// What writing `w` invalidated, in [`Invalidated::ALL`]'s order.
    pub fn of(w: &WriteSummary) -> impl Iterator<Item = Invalidated> + '_ {
        Invalidated::ALL.into_iter().filter(move |i| match i {
            Invalidated::StrongName => w.strong_name_invalidated,
            Invalidated::CertificateDropped => w.certificate_table_dropped,
            Invalidated::Authenticode => w.authenticode_invalidated && !w.certificate_table_dropped,
            Invalidated::ReadyToRunDropped => w.ready_to_run_stripped,
            Invalidated::ReadyToRunKept => w.ready_to_run && w.modified && !w.ready_to_run_stripped,
        })
    }

    /// A few words for one assembly, e.g. `strong name invalidated`.
    pub fn phrase(self) -> &'static str {
        match self {
            Invalidated::StrongName => "strong name invalidated",
            Invalidated::CertificateDropped => "Authenticode certificate dropped",
            Invalidated::Authenticode => "Authenticode signature invalidated",
            Invalidated::ReadyToRunDropped => "ReadyToRun code dropped",
            Invalidated::ReadyToRunKept => {
                "ReadyToRun code kept (it may run instead of the patched IL)"
            }
        }
    }

    /// `n` assemblies of this kind, for a total line, e.g. `3 strong names invalidated`.
    pub fn counted(self, n: u64) -> String {
        let (one, many) = match self {
            Invalidated::StrongName => ("strong name invalidated", "strong names invalidated"),
            Invalidated::CertificateDropped => (
                "Authenticode certificate dropped",
                "Authenticode certificates dropped",
            ),
            Invalidated::Authenticode => (
                "Authenticode signature invalidated",
                "Authenticode signatures invalidated",
            ),
            Invalidated::ReadyToRunDropped => (
                "ReadyToRun image made IL-only",
                "ReadyToRun images made IL-only",
            ),
            Invalidated::ReadyToRunKept => (
                "ReadyToRun image kept its native code",
                "ReadyToRun images kept their native code",
            ),
        };
        format!("{} {}", thousands(n), if n == 1 { one } else { many })
    }
}

/// The summary of a rewrite: counts, skips and rejections by reason, the write, throughput.
pub fn rewrite_text(r: &RewriteReport) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{} → {} ({})", r.input, r.output, r.transform);
    let _ = writeln!(
        s,
        "methods: {} selected, {} rewritten, {} unchanged by the transform, {} skipped, {} rejected by the verifier, {} invalid before",
        thousands(r.selected),
        thousands(r.rewritten),
        thousands(r.unchanged),
        thousands(r.skipped.values().sum()),
        thousands(r.rejected.values().sum()),
        thousands(r.invalid_before)
    );
    for (reason, n) in &r.skipped {
        let bytes = r.skipped_il_bytes.get(reason).copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "  skipped {n:>7}  {reason} ({} bytes of IL)",
            thousands(bytes)
        );
    }
    for (rule, n) in &r.rejected {
        let _ = writeln!(s, "  REJECTED {n:>6}  {rule}");
    }
    for m in &r.listed {
        let _ = writeln!(s, "  {} {}: {}", m.token, m.method, m.reason);
    }
    if r.metadata_rows_added > 0 || r.locals_added > 0 {
        let _ = writeln!(
            s,
            "metadata: {} rows added; {} methods given a local for the return value ({} of them their first, with InitLocals set)",
            thousands(r.metadata_rows_added),
            thousands(r.locals_added),
            thousands(r.init_locals_set)
        );
    }
    if let Some(w) = &r.write {
        let _ = writeln!(
            s,
            "write: {} bodies in place, {} relocated ({} into the space old bodies left: {} of {} bytes), {} unchanged{}",
            thousands(w.in_place as u64),
            thousands(w.relocated as u64),
            thousands(w.reused_bodies as u64),
            thousands(w.reused_bytes as u64),
            thousands(w.freed_bytes as u64),
            thousands(w.unchanged as u64),
            signatures_text(w)
        );
        if w.ready_to_run_stripped {
            let _ = writeln!(
                s,
                "ReadyToRun: the input's precompiled code is dropped; the output is IL-only, so the runtime compiles the patched IL"
            );
        } else if w.ready_to_run && w.modified {
            let _ = writeln!(
                s,
                "WARNING: ReadyToRun code kept (--keep-r2r): the runtime may run the original methods' precompiled code instead of the patched IL"
            );
        }
    }
    let _ = writeln!(
        s,
        "IL: {} bytes in, {} out; rewrite {:.4} s on {}, write {:.4} s: {:.1} MB/s of IL",
        thousands(r.il_bytes_in),
        thousands(r.il_bytes_out),
        r.rewrite_seconds,
        super::threads_text(r.threads as u64),
        r.write_seconds,
        r.mb_per_s()
    );
    s
}

/// The signatures the write broke or removed, as a suffix of the write line (empty when none).
fn signatures_text(w: &WriteSummary) -> String {
    let broken: Vec<&str> = Invalidated::of(w)
        .filter_map(|i| match i {
            Invalidated::StrongName => Some("strong-name signature no longer valid"),
            Invalidated::CertificateDropped => Some("Authenticode certificate table removed"),
            Invalidated::Authenticode => Some("Authenticode signature no longer valid"),
            // Said on a line of their own.
            Invalidated::ReadyToRunDropped | Invalidated::ReadyToRunKept => None,
        })
        .collect();
    if broken.is_empty() {
        String::new()
    } else {
        format!("; {} (re-sign the output)", broken.join("; "))
    }
}
