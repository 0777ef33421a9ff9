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

use crate::body::{Body, Clause, ClauseKind, ClauseTable, Header, SectionContent};
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
        out: &mut impl Write,
        indent: &str,
        names: Option<&dyn TokenNamer>,
    ) -> fmt::Result {
        out.write_str(indent)?;
        match self {
            RegionLabel::Try => out.write_str(".try")?,
            RegionLabel::Filter => out.write_str("filter")?,
            RegionLabel::Catch(class) => {
                out.write_str("catch ")?;
                write_token(out, names, OperandKind::Type, class)?;
            }
            RegionLabel::FilterHandler => return out.write_str("{  // handler\n"),
            RegionLabel::Finally => out.write_str("finally")?,
            RegionLabel::Fault => out.write_str("fault")?,
            RegionLabel::Invalid(flags) => write!(out, "handler (flags {flags:#x})")?,
        }
        out.write_char('\n')?;
        out.write_str(indent)?;
        out.write_str("{\n")
    }
}

/// One region of the structured EH view, in twelve bytes: its label is read from its clause.
#[derive(Clone, Copy, Debug)]
struct Region {
    start: u32,
    end: u32,
    /// `3 × clause + part` (0 the try, 1 the filter, 2 the handler): the order the clauses list
    /// regions in, which regions with the same bounds keep.
    seq: u32,
}

impl Region {
    /// The clause this region belongs to.
    fn clause(self) -> usize {
        (self.seq / 3) as usize
    }

    fn label(self, clauses: ClauseTable<'_>) -> RegionLabel {
        match self.seq % 3 {
            0 => RegionLabel::Try,
            1 => RegionLabel::Filter,
            // Regions are made from the clauses, so the clause is there.
            _ => clauses
                .get(self.clause())
                .map_or(RegionLabel::Try, |c| RegionLabel::handler(&c)),
        }
    }
}

/// Regions nested deeper than this are indented as deep as this: fully indented, the text of
/// a body with `n` nested regions would grow with the square of `n`.
const MAX_INDENT: usize = 32;

/// The structured EH view: the regions in print order, and how deep they nest.
struct Nesting {
    regions: Vec<Region>,
    depth: usize,
}

/// The instruction starts of a body's code, one bit per byte.
struct Starts {
    bits: Vec<u64>,
    len: u32,
}

impl Starts {
    /// Whether byte `o` starts an instruction or is the end of the code.
    fn on_boundary(&self, o: u64) -> bool {
        o == self.len as u64
            || (o < self.len as u64 && self.bits[(o / 64) as usize] & (1 << (o % 64)) != 0)
    }
}

/// Regions in print order (outer before inner), or `None` when they do not nest cleanly on
/// instruction boundaries; then only the flat listing and the table are shown.
fn nested_regions(clauses: ClauseTable<'_>, starts: &Starts) -> Option<Nesting> {
    // `seq` numbers three parts per clause.
    if clauses.len() > (u32::MAX / 3) as usize {
        return None;
    }
    let mut regions: Vec<Region> = Vec::with_capacity(2 * clauses.len());
    let mut push = |start: u64, end: u64, seq: usize| -> Option<()> {
        if start >= end || !starts.on_boundary(start) || !starts.on_boundary(end) {
            return None;
        }
        regions.push(Region {
            start: start as u32,
            end: end as u32,
            seq: seq as u32,
        });
        Some(())
    };
    for (ci, c) in clauses.iter().enumerate() {
        push(c.try_offset as u64, c.try_end(), 3 * ci)?;
        if c.kind() == ClauseKind::Filter {
            push(
                c.class_or_filter as u64,
                c.handler_offset as u64,
                3 * ci + 1,
            )?;
        }
        push(c.handler_offset as u64, c.handler_end(), 3 * ci + 2)?;
    }
    // A region listed again (a try shared by several clauses) is shown once, where it is first
    // listed: sorted, equal regions are neighbours, the first listed first.
    regions.sort_unstable_by_key(|r| (r.start, Reverse(r.end), r.label(clauses), r.seq));
    regions.dedup_by(|r, kept| {
        (r.start, r.end, r.label(clauses)) == (kept.start, kept.end, kept.label(clauses))
    });
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
    let _ = disassemble_to(&mut out, body, names);
    out
}

/// Writes the text [`disassemble_with`] returns to `out` as it is made: the memory used is a
/// few bytes per instruction start and per EH region, whatever the length of the text. An
/// error is `out`'s.
pub fn disassemble_to(
    out: &mut impl Write,
    body: &Body<'_>,
    names: Option<&dyn TokenNamer>,
) -> fmt::Result {
    write_body(out, body, names)
}

/// An [`std::io::Write`] as a [`fmt::Write`], for [`disassemble_to`]: the first I/O error is
/// kept (a `fmt::Error` says only that one happened).
#[derive(Debug)]
pub struct IoWriter<W: std::io::Write> {
    inner: W,
    error: Option<std::io::Error>,
}

impl<W: std::io::Write> IoWriter<W> {
    /// Writes to `inner`.
    pub fn new(inner: W) -> Self {
        IoWriter { inner, error: None }
    }

    /// The first I/O error since the last call, if one happened.
    pub fn take_error(&mut self) -> Option<std::io::Error> {
        self.error.take()
    }

    /// The writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: std::io::Write> Write for IoWriter<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.inner.write_all(s.as_bytes()).map_err(|e| {
            self.error.get_or_insert(e);
            fmt::Error
        })
    }
}

/// A method's name as [`write_method`]'s header shows it: its full name, with `...` after the
/// parameters of a vararg method (as its call sites show them), which the full name that
/// `--methods` globs match lacks.
pub fn header_name(method: &Method<'_>) -> Result<String, ImageError> {
    let mut name = method.full_name()?;
    // A signature that does not read is not vararg as far as the header goes: the body's
    // listing and the verifier say what is wrong with it.
    if method.signature().is_ok_and(|s| s.vararg) && name.ends_with(')') {
        name.pop();
        if !name.ends_with('(') {
            name.push_str(", ");
        }
        name.push_str("...)");
    }
    Ok(name)
}

/// `text` in double quotes, its quotes and backslashes escaped, as ilasm writes strings.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The text of one method of an image: a header line with its MethodDef token, full name (as
/// `--methods` globs match it; `...` ends a vararg method's parameters, see [`header_name`]),
/// a P/Invoke's library and entry point (`pinvokeimpl("libc" as "getpid")`) and RVA, then its
/// body as [`disassemble_with`] prints it. A method without a body (RVA 0) says so. `Err` says why the body is not wholly readable —
/// it does not decode, or some of its code does not — while the text still shows what could
/// be read.
pub fn write_method(
    out: &mut impl Write,
    method: &Method<'_>,
    names: Option<&dyn TokenNamer>,
) -> Result<(), String> {
    let name = header_name(method).unwrap_or_else(|e| format!("<name unreadable: {e}>"));
    let _ = write!(out, "// method {} {name}", method.token());
    match method.pinvoke() {
        Ok(Some((library, entry))) => {
            let _ = write!(
                out,
                " pinvokeimpl({} as {})",
                quoted(library),
                quoted(entry)
            );
        }
        Ok(None) => {}
        Err(e) => {
            let _ = write!(out, " pinvokeimpl(<unreadable: {e}>)");
        }
    }
    if method.rva() == 0 {
        let _ = out.write_str(", RVA 0: no body\n");
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

fn write_body(
    out: &mut impl Write,
    body: &Body<'_>,
    names: Option<&dyn TokenNamer>,
) -> fmt::Result {
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
            Some(Ok(())) => out.write_str(&locals)?,
            None => write!(out, "{:#010x}", body.local_sig())?,
            Some(Err(why)) => write!(out, "{:#010x}  // {why}", body.local_sig())?,
        }
        out.write_char('\n')?;
    }
    // The clauses of one EH section (the common case) are read in place, not copied.
    let mut eh = body.sections.iter().filter(|s| s.is_eh());
    match (eh.next(), eh.next()) {
        (None, _) => write_code_with(out, body.code, ClauseTable::EMPTY, names)?,
        (Some(s), None) => write_code_with(out, body.code, s.clauses(), names)?,
        (Some(_), Some(_)) => {
            let all: Vec<Clause> = body.clauses().collect();
            write_code_with(out, body.code, &all, names)?;
        }
    }
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
                    out.write_str(" handler ")?;
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

fn write_range(out: &mut impl Write, start: u64, end: u64) -> fmt::Result {
    write!(out, "IL_{start:04x} to IL_{end:04x}")
}

/// Writes the instruction listing, structured by EH regions when they nest, tokens raw.
pub fn write_code<'c>(
    out: &mut impl Write,
    code: &[u8],
    clauses: impl Into<ClauseTable<'c>>,
) -> fmt::Result {
    write_code_with(out, code, clauses, None)
}

/// Writes the instruction listing, structured by EH regions when they nest; tokens named by
/// `names` when given.
pub fn write_code_with<'c>(
    out: &mut impl Write,
    code: &[u8],
    clauses: impl Into<ClauseTable<'c>>,
    names: Option<&dyn TokenNamer>,
) -> fmt::Result {
    let clauses = clauses.into();
    // The code is walked twice, first for the instruction starts that region bounds must be
    // on (a bit per byte, only when there are regions), so that no decoded instruction is kept.
    let mut starts = Starts {
        bits: Vec::new(),
        len: code.len() as u32,
    };
    if !clauses.is_empty() {
        starts.bits.resize(code.len().div_ceil(64), 0);
    }
    let mut error = None;
    for i in Instructions::new(code) {
        match i {
            Ok(i) => {
                if let Some(w) = starts.bits.get_mut(i.offset as usize / 64) {
                    *w |= 1 << (i.offset % 64);
                }
            }
            Err(e) => error = Some(e),
        }
    }
    let nesting = nested_regions(clauses, &starts);
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
        close_until(out, &mut open, i.offset, &indent)?;
        while let Some(r) = regions.get(next_region).filter(|r| r.start == i.offset) {
            r.label(clauses)
                .write_open(out, indent(open.len()), names)?;
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
        out.write_char('\n')?;
    }
    close_until(out, &mut open, u32::MAX, &indent)?;
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
    out: &mut impl Write,
    open: &mut Vec<u32>,
    offset: u32,
    indent: &dyn Fn(usize) -> &'s str,
) -> fmt::Result {
    while open.last().is_some_and(|&end| end <= offset) {
        open.pop();
        out.write_str(indent(open.len()))?;
        out.write_str("}\n")?;
    }
    Ok(())
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
