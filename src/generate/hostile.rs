//! Valid method bodies of hostile shapes and sizes, for the scaling benchmark
//! (`examples/scaling.rs`) and the tests that check the large-body paths give the right answers.
//!
//! Each builder returns the raw body bytes (fat header, code, fat EH sections) written directly,
//! not through the crate's encoder, so that the input does not depend on the code under test.
//! Every body verifies clean with [`NoResolver`](crate::verify::NoResolver) and `MaxStack` 8:
//!
//! - [`straight_line`]: `ldc.i4.1; pop` pairs and a `ret`: the control, no branch, no region;
//! - [`sequential_try`]: `n` try/finally blocks one after the other;
//! - [`nested_try`]: `n` try/finally regions each inside the one before, every `leave` going to
//!   the final `ret` through every finally around it;
//! - [`cascade`]: a chain of short branches each jumping over the next, all exactly in range,
//!   and a `ret` inside the last one's span: an epilogue (a `nop`) before that `ret` grows the
//!   span by one byte, and each widening then pushes the branch before it out of range, one
//!   relaxation pass per branch.
//!
//! A fat EH section's DataSize is 24 bits, so [`body`] spreads more than
//! [`MAX_FAT_CLAUSES`] clauses over several sections.

use crate::body::{
    Clause, FAT_CLAUSE_SIZE, FAT_HEADER_SIZE, FLAG_MORE_SECTS, FORMAT_FAT, SECT_EH_TABLE,
    SECT_FAT_FORMAT, SECT_MORE_SECTS,
};
use crate::opcode::Opcode;
use std::fmt;

/// Most clauses one fat EH section holds (its DataSize is 24 bits).
pub const MAX_FAT_CLAUSES: usize = (0xFF_FFFF - 4) / FAT_CLAUSE_SIZE;

/// MaxStack every shape declares.
pub const MAX_STACK: u16 = 8;

// One-byte encodings, from the opcode table.
const NOP: u8 = Opcode::Nop as u8;
const LDC_I4_0: u8 = Opcode::Ldc_I4_0 as u8;
const LDC_I4_1: u8 = Opcode::Ldc_I4_1 as u8;
const POP: u8 = Opcode::Pop as u8;
const RET: u8 = Opcode::Ret as u8;
const BR_S: u8 = Opcode::Br_S as u8;
const SWITCH: u8 = Opcode::Switch as u8;
const ENDFINALLY: u8 = Opcode::Endfinally as u8;
const LEAVE: u8 = Opcode::Leave as u8;
const LEAVE_S: u8 = Opcode::Leave_S as u8;

/// One of the hostile shapes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shape {
    /// `n` instructions of straight-line code.
    StraightLine,
    /// `n` try/finally blocks in sequence.
    SequentialTry,
    /// `n` try/finally regions nested in each other.
    NestedTry,
    /// A widening-cascade branch chain of about `n` instructions.
    Cascade,
}

impl Shape {
    /// Every shape, the control first.
    pub const ALL: [Shape; 4] = [
        Shape::StraightLine,
        Shape::SequentialTry,
        Shape::NestedTry,
        Shape::Cascade,
    ];

    /// A short name for tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            Shape::StraightLine => "straight-line",
            Shape::SequentialTry => "sequential-try",
            Shape::NestedTry => "nested-try",
            Shape::Cascade => "cascade",
        }
    }

    /// What `n` counts for this shape.
    pub fn unit(self) -> &'static str {
        match self {
            Shape::StraightLine | Shape::Cascade => "instructions",
            Shape::SequentialTry | Shape::NestedTry => "clauses",
        }
    }

    /// The body of this shape at size `n`.
    pub fn build(self, n: usize) -> Hostile {
        match self {
            Shape::StraightLine => straight_line(n),
            Shape::SequentialTry => sequential_try(n),
            Shape::NestedTry => nested_try(n),
            Shape::Cascade => cascade(n),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A built body and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hostile {
    /// What was built.
    pub shape: Shape,
    /// The size asked for, in [`Shape::unit`]s.
    pub n: usize,
    /// The whole body: header, code and EH sections.
    pub bytes: Vec<u8>,
    /// Bytes of code.
    pub code_size: usize,
    /// Instructions in the code.
    pub instructions: usize,
    /// Clauses in the EH table.
    pub clauses: usize,
    /// Branches (and `leave`s) in the code; for [`cascade`], the chain's.
    pub branches: usize,
}

/// A fat-header body of `code` and `clauses` (in table order), the clauses in as many fat EH
/// sections as they need, each with at most [`MAX_FAT_CLAUSES`].
pub fn body(code: &[u8], clauses: &[Clause], max_stack: u16) -> Vec<u8> {
    let sections = clauses.len().div_ceil(MAX_FAT_CLAUSES);
    let mut out =
        Vec::with_capacity(FAT_HEADER_SIZE + code.len() + 3 + 4 * sections + 24 * clauses.len());
    let more = if clauses.is_empty() {
        0
    } else {
        FLAG_MORE_SECTS
    };
    let flags = FORMAT_FAT | more | 3 << 12;
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&max_stack.to_le_bytes());
    out.extend_from_slice(&(code.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(code);
    for (k, chunk) in clauses.chunks(MAX_FAT_CLAUSES).enumerate() {
        while !out.len().is_multiple_of(4) {
            out.push(0);
        }
        let last = k + 1 == sections;
        let kind = SECT_EH_TABLE | SECT_FAT_FORMAT | if last { 0 } else { SECT_MORE_SECTS };
        let data_size = (4 + FAT_CLAUSE_SIZE * chunk.len()) as u32;
        out.push(kind);
        out.extend_from_slice(&data_size.to_le_bytes()[..3]);
        for c in chunk {
            crate::body::write_clause(c, true, &mut out);
        }
    }
    out
}

/// A finally clause over `[try_start, handler_start)` and `[handler_start, handler_end)`.
pub fn finally(try_start: usize, handler_start: usize, handler_end: usize) -> Clause {
    Clause {
        flags: Clause::FLAG_FINALLY,
        try_offset: try_start as u32,
        try_length: (handler_start - try_start) as u32,
        handler_offset: handler_start as u32,
        handler_length: (handler_end - handler_start) as u32,
        class_or_filter: 0,
    }
}

/// `ldc.i4.1; pop` repeated, then `ret`: `n` instructions (at least one).
pub fn straight_line(n: usize) -> Hostile {
    let n = n.max(1);
    let mut code = Vec::with_capacity(n);
    for k in 0..n - 1 {
        code.push(if k.is_multiple_of(2) { LDC_I4_1 } else { POP });
    }
    if !code.len().is_multiple_of(2) {
        // An odd count: the last push needs its pop before the `ret`; a `nop` takes its place.
        code.pop();
        code.push(NOP);
    }
    code.push(RET);
    Hostile {
        shape: Shape::StraightLine,
        n,
        bytes: body(&code, &[], MAX_STACK),
        code_size: code.len(),
        instructions: n,
        clauses: 0,
        branches: 0,
    }
}

/// `n` blocks of `try { nop; leave.s next } finally { endfinally }` and a `ret`.
pub fn sequential_try(n: usize) -> Hostile {
    let mut code = Vec::with_capacity(4 * n + 1);
    let mut clauses = Vec::with_capacity(n);
    for _ in 0..n {
        let start = code.len();
        code.extend_from_slice(&[NOP, LEAVE_S, 1, ENDFINALLY]);
        clauses.push(finally(start, start + 3, start + 4));
    }
    code.push(RET);
    Hostile {
        shape: Shape::SequentialTry,
        n,
        bytes: body(&code, &clauses, MAX_STACK),
        code_size: code.len(),
        instructions: 3 * n + 1,
        clauses: n,
        branches: n,
    }
}

/// `n` try/finally regions, each inside the try of the one before: every try starts with a
/// `nop`, the innermost holds a `leave` to the final `ret`, and after each inner finally the
/// enclosing try leaves to that `ret` too. Clauses are listed innermost first (II.19).
pub fn nested_try(n: usize) -> Hostile {
    let mut code = vec![NOP; n];
    code.reserve(6 * n + 1);
    let end = 7 * n;
    // Level k (0 outermost) has its `leave` at n + 6 (n - 1 - k), its handler 5 bytes later.
    let mut clauses = Vec::with_capacity(n);
    for k in (0..n).rev() {
        let leave = code.len();
        code.push(LEAVE);
        code.extend_from_slice(&((end - (leave + 5)) as i32).to_le_bytes());
        code.push(ENDFINALLY);
        clauses.push(finally(k, leave + 5, leave + 6));
    }
    code.push(RET);
    Hostile {
        shape: Shape::NestedTry,
        n,
        bytes: body(&code, &clauses, MAX_STACK),
        code_size: code.len(),
        instructions: 3 * n + 1,
        clauses: n,
        branches: n,
    }
}

/// `bytes` (at least 6) of stack-neutral padding in few instructions: `ldc.i4.0`, a `switch`
/// whose every target is the next instruction, and up to three `nop`s. Returns the instruction
/// count.
fn pad(code: &mut Vec<u8>, bytes: usize) -> usize {
    let targets = (bytes - 6) / 4;
    code.push(LDC_I4_0);
    code.push(SWITCH);
    code.extend_from_slice(&(targets as u32).to_le_bytes());
    code.extend(std::iter::repeat_n(0, 4 * targets));
    let nops = bytes - 6 - 4 * targets;
    code.extend(std::iter::repeat_n(NOP, nops));
    2 + nops
}

/// A chain of `br.s`, each jumping over the next to the one after it with a displacement of
/// exactly 127; padding between them is a `switch` (few instructions for many bytes). The last
/// two reach the final `ret`, and the padding after the last branch starts with a `ret` of its
/// own. An epilogue transform puts a `nop` before that `ret` (one byte more): the branch before
/// the last no longer fits, and its widening pushes the one before it out of range, and so on
/// back to the first. About `n` instructions (at least three links).
pub fn cascade(n: usize) -> Hostile {
    // A link is a `br.s` and 62 or 63 bytes of padding: 3.5 instructions on average.
    let links = (2 * n / 7).max(3);
    let gap = |i: usize| if i.is_multiple_of(2) { 62 } else { 63 };
    let mut starts = Vec::with_capacity(links);
    let mut at = 0;
    for i in 0..links {
        starts.push(at);
        at += 2 + gap(i);
    }
    let end = at;
    let mut code = Vec::with_capacity(end + 1);
    let mut instructions = 1;
    for i in 0..links {
        let target = starts.get(i + 2).copied().unwrap_or(end);
        let disp = target - (starts[i] + 2);
        code.push(BR_S);
        code.push(disp as u8);
        instructions += 1;
        if i + 1 == links {
            code.push(RET);
            instructions += 1 + pad(&mut code, gap(i) - 1);
        } else {
            instructions += pad(&mut code, gap(i));
        }
    }
    code.push(RET);
    debug_assert_eq!(code.len(), end + 1);
    Hostile {
        shape: Shape::Cascade,
        n,
        bytes: body(&code, &[], MAX_STACK),
        code_size: code.len(),
        instructions,
        clauses: 0,
        branches: links,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::Body;
    use crate::verify::{NoResolver, Verifier};

    #[test]
    fn every_shape_decodes_and_verifies_clean() {
        let mut v = Verifier::new();
        for shape in Shape::ALL {
            for n in [1, 2, 3, 10, 200] {
                let h = shape.build(n);
                let body = Body::parse(&h.bytes).unwrap();
                assert_eq!(body.len(), h.bytes.len(), "{shape} {n}");
                assert_eq!(body.code.len(), h.code_size, "{shape} {n}");
                assert_eq!(body.instructions().count(), h.instructions, "{shape} {n}");
                assert_eq!(body.clauses().count(), h.clauses, "{shape} {n}");
                let diags = v.verify(&body, &NoResolver, &crate::verify::Options::ALL);
                assert!(diags.is_empty(), "{shape} {n}: {diags:?}");
            }
        }
    }

    #[test]
    fn many_clauses_take_several_sections() {
        let code = [NOP, LEAVE_S, 1, ENDFINALLY, RET];
        let clauses = vec![finally(0, 3, 4); MAX_FAT_CLAUSES + 1];
        let bytes = body(&code, &clauses, MAX_STACK);
        let body = Body::parse(&bytes).unwrap();
        assert_eq!(body.sections.len(), 2);
        assert_eq!(body.clauses().count(), MAX_FAT_CLAUSES + 1);
        let mut out = Vec::new();
        body.encode(&mut out).unwrap();
        assert_eq!(out, bytes);
    }
}
