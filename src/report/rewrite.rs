//! Text output of rewrite runs.

use super::thousands;
use crate::corpus::RewriteReport;
use std::fmt::Write;

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
            if w.strong_name_invalidated {
                "; strong-name signature no longer valid (re-sign the output)"
            } else {
                ""
            }
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
