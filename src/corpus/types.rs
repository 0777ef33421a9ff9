//! The type pass of verification runs: each method the structural verifier accepted, checked
//! again with the type system of its image and the image's references
//! ([`crate::verify::types`]).

use crate::body::Body;
use crate::image::{Image, ImageError, Method};
use crate::verify::types::{ModuleStore, TypeChecker, TypeSystem};
use crate::verify::{Code, Verdict};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Which type findings a run reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TypeLevel {
    /// No type pass: structure only.
    Off,
    /// Type findings of the class invalid (the default of the command line).
    #[default]
    Invalid,
    /// Invalid and unverifiable type findings.
    Unverifiable,
}

impl TypeLevel {
    /// Whether findings of `code` are reported at this level.
    pub fn reports(self, code: Code) -> bool {
        match self {
            TypeLevel::Off => false,
            TypeLevel::Invalid => code.verdict() == Verdict::Invalid,
            TypeLevel::Unverifiable => true,
        }
    }

    /// The stable name (`off`, `invalid`, `unverifiable`).
    pub fn as_str(self) -> &'static str {
        match self {
            TypeLevel::Off => "off",
            TypeLevel::Invalid => "invalid",
            TypeLevel::Unverifiable => "unverifiable",
        }
    }
}

/// What the type pass of a run checked.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TypeSummary {
    /// The level findings were reported at.
    pub level: &'static str,
    /// Methods type-checked (those the structural verifier accepted).
    pub methods_checked: u64,
    /// Of those, methods checked in part: something could not be resolved.
    pub methods_in_part: u64,
    /// Methods checked in part, by the first reason met.
    pub in_part: BTreeMap<&'static str, u64>,
    /// Type findings by verdict class, reported or not (`invalid`, `unverifiable`).
    pub by_verdict: BTreeMap<&'static str, u64>,
    /// Unverifiable findings not reported at this level.
    pub not_reported: u64,
    /// Bytes of IL type-checked.
    pub il_bytes: u64,
    /// Referenced assemblies opened (each once per run).
    pub references_opened: u64,
    /// Time spent in the type pass (type system and checks), single thread.
    pub seconds: f64,
}

impl TypeSummary {
    /// Type-checking throughput: MB/s (10^6 bytes) of IL.
    pub fn mb_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.il_bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// The type pass: references found through one [`ModuleStore`], a reusable checker.
#[derive(Debug)]
pub struct TypePass<'s> {
    store: &'s ModuleStore,
    level: TypeLevel,
    checker: TypeChecker,
}

impl<'s> TypePass<'s> {
    /// A pass reporting at `level` that finds references through `store`.
    pub fn new(store: &'s ModuleStore, level: TypeLevel) -> Self {
        TypePass {
            store,
            level,
            checker: TypeChecker::new(),
        }
    }

    /// The level findings are reported at.
    pub fn level(&self) -> TypeLevel {
        self.level
    }

    /// Type-checks the methods `work[k]` for which `accepted(k)` holds, calling `found` with
    /// each reported finding as (k, code, offset, message) in method order.
    pub fn run(
        &mut self,
        image: &Image<'_>,
        path: Option<&Path>,
        work: &[(Method<'_>, Result<Body<'_>, ImageError>)],
        accepted: impl Fn(usize) -> bool,
        summary: &mut TypeSummary,
        mut found: impl FnMut(usize, Code, u32, String),
    ) {
        summary.level = self.level.as_str();
        if self.level == TypeLevel::Off {
            return;
        }
        let start = std::time::Instant::now();
        let mut ts = TypeSystem::new(self.store, image, path);
        for (k, (method, body)) in work.iter().enumerate() {
            let Ok(body) = body else { continue };
            if !accepted(k) {
                continue;
            }
            let out = self.checker.check(&mut ts, method.rid(), body);
            summary.methods_checked += 1;
            summary.il_bytes += body.code.len() as u64;
            if let Some(why) = out.partial {
                summary.methods_in_part += 1;
                *summary.in_part.entry(why.as_str()).or_default() += 1;
            }
            for d in out.diagnostics {
                *summary
                    .by_verdict
                    .entry(d.code.verdict().as_str())
                    .or_default() += 1;
                if self.level.reports(d.code) {
                    found(k, d.code, d.offset, d.message.clone());
                } else {
                    summary.not_reported += 1;
                }
            }
        }
        summary.references_opened = self.store.opened() as u64;
        summary.seconds += start.elapsed().as_secs_f64();
    }
}
