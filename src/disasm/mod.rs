//! ildasm-style text for method bodies: the header summary, one line per instruction with branch
//! targets as `IL_xxxx` labels, EH regions as nested `.try { … } catch … { … }` blocks when they
//! nest, and the exception table as stored. Diffs and reports are made of this text.
//!
//! Metadata tokens are printed raw (`call 0x0a000001`) unless a [`TokenNamer`] is given:
//! [`ImageNamer`] names them from an assembly's metadata as ildasm does
//! (`call void [mscorlib]System.Console::WriteLine(string)`), one token at a time and only for
//! the lines printed.

pub mod names;

pub use names::{ImageNamer, TokenNamer};

use crate::body::{Body, Clause, ClauseKind, Header, SectionContent};
use crate::image::{ImageError, Method};
use crate::instr::{Instruction, Instructions, Operand, decode_with_len};
use crate::opcode::OperandKind;
use std::cmp::Reverse;
use std::fmt::{self, Write};

// Here rather than beside `Instruction`: text is the disassembler's business, and `instr` stays
// below it.
impl fmt::Display for Instruction<'_> {
    /// `IL_0000: ldstr 0x70000001` style, with branch targets as `IL_xxxx` labels.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IL_{:04x}:  {}", self.offset, self.opcode.name())?;
        write_operand(f, self)
    }
}

/// Writes an instruction's operand (with the separating padding), ildasm-style, tokens raw.
pub fn write_operand(f: &mut impl Write, i: &Instruction<'_>) -> fmt::Result {
    write_operand_with(f, i, None)
}

/// Writes an instruction's operand (with the separating padding), ildasm-style; tokens named
/// by `names` when given (see [`write_token`]).
pub fn write_operand_with(
    f: &mut impl Write,
    i: &Instruction<'_>,
    names: Option<&dyn TokenNamer>,
) -> fmt::Result {
    if matches!(i.operand, Operand::None) {
        return Ok(());
    }
    // At least one space: `constrained.` is longer than the column.
    let pad = 11usize.saturating_sub(i.opcode.name().len()).max(1);
    write!(f, "{:pad$}", "")?;
    let next = i.next_offset();
    match &i.operand {
        Operand::None => Ok(()),
        Operand::Int8(v) => write!(f, "{v}"),
        Operand::Int32(v) => write!(f, "{v}"),
        Operand::Int64(v) => write!(f, "{v:#x}"),
        Operand::Float32(bits) => write_float(
            f,
            f32::from_bits(*bits).is_finite(),
            f32::from_bits(*bits) as f64,
            &bits.to_le_bytes(),
        ),
        Operand::Float64(bits) => write_float(
            f,
            f64::from_bits(*bits).is_finite(),
            f64::from_bits(*bits),
            &bits.to_le_bytes(),
        ),
        Operand::ShortBranch(d) => write_label(f, next + *d as i64),
        Operand::Branch(d) => write_label(f, next + *d as i64),
        Operand::Switch(targets) => {
            f.write_str("(")?;
            for (n, d) in targets.iter().enumerate() {
                if n > 0 {
                    f.write_str(", ")?;
                }
                write_label(f, next + d as i64)?;
            }
            f.write_str(")")
        }
        Operand::Var(v) => {
            let local = matches!(
                i.opcode.operand_kind(),
                crate::opcode::OperandKind::Local | crate::opcode::OperandKind::ShortLocal
            );
            write!(f, "{}_{v}", if local { "V" } else { "A" })
        }
        Operand::Token(t) => write_token(f, names, i.opcode.operand_kind(), *t),
    }
}

/// Writes a token operand of kind `kind`: named by `names`, or raw (`0x0a000001`) without
/// one, or raw followed by a comment saying why when it cannot be named.
pub fn write_token(
    f: &mut impl Write,
    names: Option<&dyn TokenNamer>,
    kind: OperandKind,
    token: u32,
) -> fmt::Result {
    let Some(names) = names else {
        return write!(f, "{token:#010x}");
    };
    let mut text = String::new();
    match names.write_token(kind, token, &mut text) {
        Ok(()) => f.write_str(&text),
        Err(why) => write!(f, "{token:#010x}  // {why}"),
    }
}

fn write_float(f: &mut impl Write, finite: bool, value: f64, bytes: &[u8]) -> fmt::Result {
    if finite {
        write!(f, "{value:?}")
    } else {
        // Infinities and NaNs (with their payloads) as the bytes ildasm shows for them.
        f.write_str("(")?;
        for (n, b) in bytes.iter().enumerate() {
            write!(f, "{}{b:02X}", if n > 0 { " " } else { "" })?;
        }
        f.write_str(")")
    }
}

/// `IL_xxxx` for a target offset; targets before the method start are shown as `IL_-xxxx`.
pub fn write_label(f: &mut impl Write, target: i64) -> fmt::Result {
    if target < 0 {
        write!(f, "IL_-{:04x}", -target)
    } else {
        write!(f, "IL_{target:04x}")
    }
}

/// What a region of the structured EH view is headed with: its text follows from this alone,
/// so regions with equal labels print equal lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum RegionLabel {
    Try,
    Filter,
    Catch(u32),
    /// The handler of a filter clause.
    FilterHandler,
    Finally,
    Fault,
    /// A handler whose flags name no kind.
    Invalid(u32),
}

impl RegionLabel {
    fn handler(c: &Clause) -> RegionLabel {
        match c.kind() {
            ClauseKind::Catch => RegionLabel::Catch(c.class_or_filter),
            ClauseKind::Filter => RegionLabel::FilterHandler,
            ClauseKind::Finally => RegionLabel::Finally,
            ClauseKind::Fault => RegionLabel::Fault,
            ClauseKind::Invalid => RegionLabel::Invalid(c.flags),
        }
    }

    /// Writes the line that opens the region and, unless that line is the brace itself (a
    /// filter's handler), the brace line, each after `indent`.
    fn write_open(
        self,
        out: &mut String,
        indent: &str,
        names: Option<&dyn TokenNamer>,
    ) -> fmt::Result {
        out.push_str(indent);
        match self {
            RegionLabel::Try => out.push_str(".try"),
            RegionLabel::Filter => out.push_str("filter"),
            RegionLabel::Catch(class) => {
                out.push_str("catch ");
                write_token(out, names, OperandKind::Type, class)?;
            }
            RegionLabel::FilterHandler => {
                out.push_str("{  // handler\n");
                return Ok(());
            }
            RegionLabel::Finally => out.push_str("finally"),
            RegionLabel::Fault => out.push_str("fault"),
            RegionLabel::Invalid(flags) => write!(out, "handler (flags {flags:#x})")?,
        }
        out.push('\n');
        out.push_str(indent);
        out.push_str("{\n");
        Ok(())
    }
}

/// One region of the structured EH view.
#[derive(Clone, Copy, Debug)]
struct Region {
    start: u32,
    end: u32,
    label: RegionLabel,
    /// Where the clauses list it: regions with the same bounds keep this order.
    seq: u32,
}

/// Regions nested deeper than this are indented as deep as this: fully indented, the text of
/// a body with `n` nested regions would grow with the square of `n`.
const MAX_INDENT: usize = 32;

/// The structured EH view: the regions in print order, and how deep they nest.
struct Nesting {
    regions: Vec<Region>,
    depth: usize,
}

/// Regions in print order (outer before inner), or `None` when they do not nest cleanly on
/// instruction boundaries; then only the flat listing and the table are shown.
fn nested_regions(clauses: &[Clause], starts: &[u32], code_len: u32) -> Option<Nesting> {
    let on_boundary = |o: u64| o == code_len as u64 || starts.binary_search(&(o as u32)).is_ok();
    let mut regions: Vec<Region> = Vec::with_capacity(2 * clauses.len());
    let mut push = |start: u64, end: u64, label: RegionLabel| -> Option<()> {
        if start >= end || !on_boundary(start) || !on_boundary(end) {
            return None;
        }
        let seq = regions.len() as u32;
        regions.push(Region {
            start: start as u32,
            end: end as u32,
            label,
            seq,
        });
        Some(())
    };
    for c in clauses {
        push(c.try_offset as u64, c.try_end(), RegionLabel::Try)?;
        if c.kind() == ClauseKind::Filter {
            push(
                c.class_or_filter as u64,
                c.handler_offset as u64,
                RegionLabel::Filter,
            )?;
        }
        push(
            c.handler_offset as u64,
            c.handler_end(),
            RegionLabel::handler(c),
        )?;
    }
    // A region listed again (a try shared by several clauses) is shown once, where it is first
    // listed: sorted, equal regions are neighbours, the first listed first.
    regions.sort_unstable_by_key(|r| (r.start, Reverse(r.end), r.label, r.seq));
    regions.dedup_by(|r, kept| (r.start, r.end, r.label) == (kept.start, kept.end, kept.label));
    // Outer before inner; regions with the same bounds in the order the clauses list them.
    regions.sort_unstable_by_key(|r| (r.start, Reverse(r.end), r.seq));
    let mut open: Vec<u32> = Vec::new();
    let mut depth = 0;
    for r in &regions {
        while open.last().is_some_and(|&end| end <= r.start) {
            open.pop();
        }
        if open.last().is_some_and(|&end| r.end > end) {
            return None;
        }
        open.push(r.end);
        depth = depth.max(open.len());
    }
    Some(Nesting { regions, depth })
}

/// Full ildasm-style text of a body, tokens raw.
pub fn disassemble(body: &Body<'_>) -> String {
    disassemble_with(body, None)
}

/// Full ildasm-style text of a body; tokens (operands, catch classes, the locals signature)
/// named by `names` when given.
pub fn disassemble_with(body: &Body<'_>, names: Option<&dyn TokenNamer>) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_body(&mut out, body, names);
    out
}

/// The text of one method of an image: a header line with its MethodDef token, full name (as
/// `--methods` globs match it) and RVA, then its body as [`disassemble_with`] prints it.
/// A method without a body (RVA 0) says so. `Err` says why the body is not wholly readable —
/// it does not decode, or some of its code does not — while the text still shows what could
/// be read.
pub fn write_method(
    out: &mut String,
    method: &Method<'_>,
    names: Option<&dyn TokenNamer>,
) -> Result<(), String> {
    let name = method
        .full_name()
        .unwrap_or_else(|e| format!("<name unreadable: {e}>"));
    let _ = write!(out, "// method {} {name}", method.token());
    if method.rva() == 0 {
        out.push_str(", RVA 0: no body\n");
        return Ok(());
    }
    let _ = writeln!(out, ", RVA {:#x}", method.rva());
    let body = match method.decoded_body() {
        Ok(body) => body,
        Err(e) => {
            let _ = writeln!(out, "// {e}");
            return Err(e.to_string());
        }
    };
    let _ = write_body(out, &body, names);
    body.validate_code()
        .map(|_| ())
        .map_err(|e| ImageError::Body {
            token: method.token(),
            offset: method.body_offset().unwrap_or(0),
            source: e,
        })
        .map_err(|e| e.to_string())
}

fn write_body(out: &mut String, body: &Body<'_>, names: Option<&dyn TokenNamer>) -> fmt::Result {
    match &body.header {
        Header::Tiny => writeln!(out, "// tiny header, code size {}", body.code.len())?,
        Header::Fat(h) => {
            writeln!(
                out,
                "// fat header: flags {:#05x}, header size {} bytes, code size {}",
                h.flags,
                h.size_dwords as usize * 4,
                body.code.len()
            )?;
            if !h.extra.is_empty() {
                writeln!(out, "// extra header bytes: {}", hex(h.extra))?;
            }
        }
    }
    writeln!(out, ".maxstack {}", body.max_stack())?;
    if body.local_sig() != 0 || body.init_locals() {
        let init = if body.init_locals() { "init " } else { "" };
        write!(out, ".locals {init}")?;
        let mut locals = String::new();
        match names.map(|n| n.write_locals(body.local_sig(), &mut locals)) {
            Some(Ok(())) => out.push_str(&locals),
            None => write!(out, "{:#010x}", body.local_sig())?,
            Some(Err(why)) => write!(out, "{:#010x}  // {why}", body.local_sig())?,
        }
        out.push('\n');
    }
    let clauses: Vec<Clause> = body.clauses().copied().collect();
    write_code_with(out, body.code, &clauses, names)?;
    for (n, s) in body.sections.iter().enumerate() {
        let form = if s.is_fat() { "fat" } else { "small" };
        write!(
            out,
            "// section {n}: kind {:#04x} ({form}), DataSize {}",
            s.kind, s.data_size
        )?;
        if s.padding.iter().any(|&b| b != 0) {
            write!(out, ", padding {}", hex(s.padding))?;
        }
        if s.reserved != 0 {
            write!(out, ", reserved {:#06x}", s.reserved)?;
        }
        writeln!(out)?;
        match &s.content {
            SectionContent::Eh { clauses, trailing } => {
                for (i, c) in clauses.iter().enumerate() {
                    write!(
                        out,
                        "//   clause {i}: {:?} (flags {:#x}) try ",
                        c.kind(),
                        c.flags
                    )?;
                    write_range(out, c.try_offset as u64, c.try_end())?;
                    out.push_str(" handler ");
                    write_range(out, c.handler_offset as u64, c.handler_end())?;
                    match c.kind() {
                        ClauseKind::Catch => write!(out, " class {:#010x}", c.class_or_filter)?,
                        ClauseKind::Filter => write!(out, " filter IL_{:04x}", c.class_or_filter)?,
                        _ => write!(out, " token field {:#010x}", c.class_or_filter)?,
                    }
                    writeln!(out)?;
                }
                if !trailing.is_empty() {
                    writeln!(out, "//   trailing bytes: {}", hex(trailing))?;
                }
            }
            SectionContent::Raw(data) => writeln!(out, "//   data: {}", hex(data))?,
        }
    }
    Ok(())
}

fn write_range(out: &mut String, start: u64, end: u64) -> fmt::Result {
    write!(out, "IL_{start:04x} to IL_{end:04x}")
}

/// Writes the instruction listing, structured by EH regions when they nest, tokens raw.
pub fn write_code(out: &mut String, code: &[u8], clauses: &[Clause]) -> fmt::Result {
    write_code_with(out, code, clauses, None)
}

/// Writes the instruction listing, structured by EH regions when they nest; tokens named by
/// `names` when given.
pub fn write_code_with(
    out: &mut String,
    code: &[u8],
    clauses: &[Clause],
    names: Option<&dyn TokenNamer>,
) -> fmt::Result {
    // The code is walked twice, first for the instruction starts that region bounds must be
    // on, so that no decoded instruction is kept.
    let mut starts: Vec<u32> = Vec::new();
    let mut error = None;
    for i in Instructions::new(code) {
        match i {
            Ok(i) => starts.push(i.offset),
            Err(e) => error = Some(e),
        }
    }
    let nesting = nested_regions(clauses, &starts, code.len() as u32);
    drop(starts);
    let (regions, depth) = nesting.map_or((Vec::new(), 0), |n| (n.regions, n.depth));
    if regions.is_empty() && !clauses.is_empty() {
        writeln!(
            out,
            "// EH regions do not nest on instruction boundaries; see the table below"
        )?;
    }
    if depth > MAX_INDENT {
        writeln!(
            out,
            "// EH regions nest {depth} deep; indentation stops at {MAX_INDENT} levels"
        )?;
    }
    let spaces = "  ".repeat(depth.min(MAX_INDENT));
    let indent = |depth: usize| &spaces[..2 * depth.min(MAX_INDENT)];
    let mut next_region = 0;
    let mut open: Vec<u32> = Vec::new();
    for i in Instructions::new(code).flatten() {
        close_until(out, &mut open, i.offset, &indent);
        while let Some(r) = regions.get(next_region).filter(|r| r.start == i.offset) {
            r.label.write_open(out, indent(open.len()), names)?;
            open.push(r.end);
            next_region += 1;
        }
        write!(
            out,
            "{}IL_{:04x}:  {}",
            indent(open.len()),
            i.offset,
            i.opcode.name()
        )?;
        write_operand_with(out, &i, names)?;
        out.push('\n');
    }
    close_until(out, &mut open, u32::MAX, &indent);
    if let Some(e) = error {
        let at = e.offset() as usize;
        writeln!(
            out,
            "// {e}; remaining bytes: {}",
            hex(&code[at.min(code.len())..])
        )?;
    }
    Ok(())
}

/// Closes every open region that ends at or before `offset`.
fn close_until<'s>(
    out: &mut String,
    open: &mut Vec<u32>,
    offset: u32,
    indent: &dyn Fn(usize) -> &'s str,
) {
    while open.last().is_some_and(|&end| end <= offset) {
        open.pop();
        out.push_str(indent(open.len()));
        out.push_str("}\n");
    }
}

/// Space-separated upper-case hex bytes.
pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 3);
    for (n, b) in bytes.iter().enumerate() {
        if n > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{b:02X}");
    }
    s
}

/// The instruction starting at IL offset `at` as a listing prints it (`IL_0004:  brtrue.s
/// IL_000c`), tokens named by `names` when given; a comment with the decoder's message when
/// none decodes there.
pub fn instruction_text(code: &[u8], at: u32, names: Option<&dyn TokenNamer>) -> String {
    let mut out = String::new();
    let _ = match decode_with_len(code, at as usize) {
        Ok((i, _)) => write!(out, "IL_{:04x}:  {}", i.offset, i.opcode.name())
            .and_then(|()| write_operand_with(&mut out, &i, names)),
        Err(e) => write!(out, "// {e}"),
    };
    out
}

/// The instructions around IL offset `at`: `radius` on each side of the one that contains it,
/// that one marked with `>`, tokens raw. Undecodable code ends the listing with the decoder's
/// message.
pub fn window(code: &[u8], at: u32, radius: usize) -> String {
    window_with(code, at, radius, None)
}

/// [`window`] with tokens named by `names` when given: only the lines shown are named.
pub fn window_with(code: &[u8], at: u32, radius: usize, names: Option<&dyn TokenNamer>) -> String {
    // Offsets of every line first; only the lines shown are formatted (the instructions decoded
    // again), so that a body's many findings do not each format the whole body.
    let mut offsets: Vec<u32> = Vec::new();
    let mut error = None;
    for i in Instructions::new(code) {
        match i {
            Ok(i) => offsets.push(i.offset),
            Err(e) => error = Some(e),
        }
    }
    let instructions = offsets.len();
    if let Some(e) = &error {
        offsets.push(e.offset());
    }
    let hit = offsets.iter().rposition(|&off| off <= at).unwrap_or(0);
    let from = hit.saturating_sub(radius);
    let to = (hit + radius + 1).min(offsets.len());
    let mut out = String::new();
    for (n, &off) in offsets[from..to].iter().enumerate() {
        let mark = if from + n == hit { ">" } else { " " };
        let _ = match (from + n < instructions, &error) {
            (true, _) => match decode_with_len(code, off as usize) {
                Ok((i, _)) => write!(out, "  {mark} IL_{:04x}:  {}", i.offset, i.opcode.name())
                    .and_then(|()| write_operand_with(&mut out, &i, names))
                    .map(|()| out.push('\n')),
                Err(e) => writeln!(out, "  {mark} // {e}"),
            },
            (false, Some(e)) => writeln!(out, "  {mark} // {e}"),
            (false, None) => Ok(()),
        };
    }
    out
}
