//! What the verifier needs to know beyond the body's bytes: signatures, local counts and which
//! metadata rows exist.
//!
//! Every question may be answered "unknown" (`None`); the verifier then skips the checks that
//! depend on the answer instead of guessing, so an incomplete resolver never causes a false alarm.

use crate::body::Body;
use crate::image::sig::StandAloneSig;
use crate::image::sig::{self, MethodSigSummary};
use crate::image::tables::USER_STRING_TABLE;
use crate::image::{Image, Method, Table, Token, UserStringHeap};
use crate::opcode::{Opcode, OperandKind, TokenKind};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};

/// The stack-relevant shape of a callee's signature at one call site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallSig {
    /// HASTHIS: an instance method.
    pub has_this: bool,
    /// EXPLICITTHIS: `this` is already the first of `param_count` parameters.
    pub explicit_this: bool,
    /// Parameters before any SENTINEL (II.23.2.1–3).
    pub param_count: u16,
    /// Whether the call pushes nothing.
    pub returns_void: bool,
    /// Extra arguments after the SENTINEL of a vararg call site (MemberRef or `calli` signature).
    pub vararg_extra: u16,
}

impl CallSig {
    /// A static method taking `params` arguments.
    pub fn static_method(params: u16, returns_void: bool) -> Self {
        CallSig {
            param_count: params,
            returns_void,
            ..CallSig::default()
        }
    }

    /// An instance method taking `params` arguments besides `this`.
    pub fn instance(params: u16, returns_void: bool) -> Self {
        CallSig {
            has_this: true,
            ..CallSig::static_method(params, returns_void)
        }
    }

    /// Items `opcode` pops for this signature: the arguments, `this` unless it is explicit or
    /// being created (`newobj`), and the function pointer of `calli` (III.3.19, 3.20, 4.2, 4.21).
    pub fn pops(&self, opcode: Opcode) -> u32 {
        let args = self.param_count as u32 + self.vararg_extra as u32;
        let this = (self.has_this && !self.explicit_this) as u32;
        match opcode {
            Opcode::Newobj => args,
            Opcode::Calli => args + this + 1,
            // `call`, `callvirt`, `jmp`, `ldftn`: the only other users of a call signature.
            _ => args + this,
        }
    }

    /// Items `opcode` pushes: the new object for `newobj`, else the return value if any.
    pub fn pushes(&self, opcode: Opcode) -> u32 {
        match opcode {
            Opcode::Newobj => 1,
            // `call`, `callvirt`, `calli`: the return value.
            _ => !self.returns_void as u32,
        }
    }
}

/// The verified method's own signature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MethodSig {
    /// Arguments, counting `this` for instance methods (what `ldarg` indexes).
    pub arg_count: u16,
    /// Whether `ret` takes no value.
    pub returns_void: bool,
}

/// Answers the verifier's questions about metadata. `None` means "unknown".
pub trait Resolver {
    /// The signature of the method whose body is verified.
    fn method(&self) -> Option<MethodSig> {
        None
    }

    /// How many locals the body's local signature declares (0 when it has none).
    fn local_count(&self) -> Option<u32> {
        None
    }

    /// The signature used by `call`, `callvirt`, `newobj` (a MethodDef, MemberRef or MethodSpec
    /// token) or `calli` (a StandAloneSig token).
    fn call_sig(&self, opcode: Opcode, token: u32) -> Option<CallSig> {
        let _ = (opcode, token);
        None
    }

    /// Whether the row a metadata token names exists.
    fn token_exists(&self, token: u32) -> Option<bool> {
        let _ = token;
        None
    }

    /// Whether a `0x70xxxxxx` token is the offset of a string in the `#US` heap.
    fn string_exists(&self, token: u32) -> Option<bool> {
        let _ = token;
        None
    }

    /// Whether the token's table is one the operand kind allows. The default follows
    /// Partition III 1.9 and the opcode pages; override only for a stricter or looser policy.
    fn token_fits(&self, kind: OperandKind, token: u32) -> bool {
        token_table_fits(kind, token)
    }

    /// Whether every `(kind, token)` operand passes the operand rules: its table fits the kind
    /// ([`Resolver::token_fits`]), it is not row 0, and its row or `#US` string is not known to
    /// be missing. The verifier asks once per body and, only when the answer is false, checks
    /// the tokens one by one to report. Override only to answer faster, never differently.
    fn tokens_pass(&self, tokens: &[(OperandKind, u32)]) -> bool {
        tokens
            .iter()
            .all(|&(kind, token)| token_passes(self, kind, token))
    }

    /// The row counts and `#US` heap this resolver's [`Self::tokens_pass`] answers from, when
    /// it answers from nothing else (with the default [`Self::token_fits`]): a resolver over
    /// this one that knows more rows and strings can then check every token in one loop
    /// ([`tokens_pass_by_counts`]). `None` (the default) when it answers otherwise.
    fn token_limits(&self) -> Option<TokenLimits<'_>> {
        None
    }
}

/// What a resolver's [`Resolver::tokens_pass`] reads when it answers from counts alone.
#[derive(Clone, Copy, Debug)]
pub struct TokenLimits<'a> {
    /// Rows of each table, by table number (0 for numbers no table has).
    pub rows: &'a [u32; 64],
    /// The `#US` heap's bytes.
    pub user_strings: &'a [u8],
}

/// [`Resolver::tokens_pass`] from row counts by table number and a test of `ldstr` offsets;
/// `other` answers operands that are neither (the verifier batches none such).
#[inline]
pub fn tokens_pass_by_counts(
    tokens: &[(OperandKind, u32)],
    rows: &[u32; 64],
    string_ok: impl Fn(u32) -> bool,
    other: impl Fn(OperandKind, u32) -> bool,
) -> bool {
    tokens.iter().all(|&(kind, token)| {
        let (t, rid) = ((token >> 24) as usize, token & 0x00FF_FFFF);
        if kind == OperandKind::String {
            t == USER_STRING_TABLE as usize && string_ok(rid)
        } else if kind.is_token() {
            // No other kind admits `#US` or a table number above 63.
            t < 64 && FITS[kind as usize & 31] & (1 << t) != 0 && rid != 0 && rid <= rows[t]
        } else {
            other(kind, token)
        }
    })
}

/// As [`UserStringHeap::contains`]: `index` starts a length prefix (II.24.2.4, compressed as
/// in II.23.2) whose entry ends inside the heap. Inline, as `ldstr` is among the commonest
/// token operands.
#[inline]
pub(crate) fn us_entry_fits(heap: &[u8], index: u32) -> bool {
    let rest = heap.get(index as usize..).unwrap_or(&[]);
    let (len, used) = match *rest {
        [b0, ..] if b0 & 0x80 == 0 => (b0 as usize, 1),
        [b0, b1, ..] if b0 & 0xC0 == 0x80 => (((b0 & 0x3F) as usize) << 8 | b1 as usize, 2),
        [b0, b1, b2, b3, ..] if b0 & 0xE0 == 0xC0 => (
            ((b0 & 0x1F) as usize) << 24 | (b1 as usize) << 16 | (b2 as usize) << 8 | b3 as usize,
            4,
        ),
        _ => return false,
    };
    rest.len() - used >= len
}

/// The operand rules for one token, as the verifier applies them (see [`Resolver::tokens_pass`]).
pub(crate) fn token_passes<R: Resolver + ?Sized>(r: &R, kind: OperandKind, token: u32) -> bool {
    r.token_fits(kind, token)
        && if kind == OperandKind::String {
            r.string_exists(token) != Some(false)
        } else {
            token & 0x00FF_FFFF != 0 && r.token_exists(token) != Some(false)
        }
}

/// Metadata table numbers (II.22) that operands refer to.
mod table {
    pub const TYPE_REF: u32 = 0x01;
    pub const TYPE_DEF: u32 = 0x02;
    pub const FIELD: u32 = 0x04;
    pub const METHOD_DEF: u32 = 0x06;
    pub const MEMBER_REF: u32 = 0x0A;
    pub const STANDALONE_SIG: u32 = 0x11;
    pub const TYPE_SPEC: u32 = 0x1B;
    pub const METHOD_SPEC: u32 = 0x2B;
    pub const USER_STRING: u32 = 0x70;
}

/// Whether `token`'s table suits an operand of `kind`. A MemberRef may name a field or a method,
/// so it fits both; which one it is needs its signature.
pub const fn token_table_fits(kind: OperandKind, token: u32) -> bool {
    use table::*;
    let t = token >> 24;
    let is_type = matches!(t, TYPE_REF | TYPE_DEF | TYPE_SPEC);
    let is_method = matches!(t, METHOD_DEF | MEMBER_REF | METHOD_SPEC);
    match kind.token_kind() {
        Some(TokenKind::Type) => is_type,
        Some(TokenKind::Field) => matches!(t, FIELD | MEMBER_REF),
        Some(TokenKind::Method) => is_method,
        Some(TokenKind::Tok) => is_type || is_method || t == FIELD,
        Some(TokenKind::String) => t == USER_STRING,
        Some(TokenKind::Sig) => t == STANDALONE_SIG,
        // No token: nothing to fit.
        None => true,
    }
}

/// [`token_table_fits`] as a bit per table number below 64 (`#US` excluded), by operand kind.
const FITS: [u64; 32] = {
    let mut masks = [0; 32];
    let mut k = 0;
    while k < crate::opcode::ALL.len() {
        let kind = crate::opcode::ALL[k].operand;
        let mut t = 0;
        while t < 64 {
            if t != table::USER_STRING && token_table_fits(kind, t << 24) {
                masks[kind as usize] |= 1 << t;
            }
            t += 1;
        }
        k += 1;
    }
    masks
};

/// A resolver that knows nothing: only the body's own structure is checked.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoResolver;

impl Resolver for NoResolver {}

/// An in-memory resolver for tests and generators.
///
/// ```
/// use ilcheck::verify::{CallSig, SyntheticResolver};
/// let r = SyntheticResolver::new()
///     .method(1, false)
///     .locals(2)
///     .call(0x0A00_0001, CallSig::static_method(1, true))
///     .string(0x7000_0001)
///     .closed();
/// ```
#[derive(Clone, Debug, Default)]
pub struct SyntheticResolver {
    method: Option<MethodSig>,
    locals: Option<u32>,
    calls: HashMap<u32, CallSig>,
    tokens: HashSet<u32>,
    strings: HashSet<u32>,
    closed: bool,
}

impl SyntheticResolver {
    /// A module that knows nothing: every question is answered "unknown" until told.
    pub fn new() -> Self {
        Self::default()
    }

    /// The verified method takes `arg_count` arguments (counting `this`).
    pub fn method(mut self, arg_count: u16, returns_void: bool) -> Self {
        self.method = Some(MethodSig {
            arg_count,
            returns_void,
        });
        self
    }

    /// The verified method declares `count` locals.
    pub fn locals(mut self, count: u32) -> Self {
        self.locals = Some(count);
        self
    }

    /// A callee token (or a `calli` StandAloneSig token) and its signature; the token exists.
    pub fn call(mut self, token: u32, sig: CallSig) -> Self {
        self.calls.insert(token, sig);
        self.tokens.insert(token);
        self
    }

    /// A metadata token whose row exists.
    pub fn token(mut self, token: u32) -> Self {
        self.tokens.insert(token);
        self
    }

    /// A `#US` token that names a string.
    pub fn string(mut self, token: u32) -> Self {
        self.strings.insert(token);
        self
    }

    /// From now on, tokens and strings not registered do not exist (instead of being unknown).
    pub fn closed(mut self) -> Self {
        self.closed = true;
        self
    }

    fn known(&self, present: bool) -> Option<bool> {
        (present || self.closed).then_some(present)
    }
}

impl Resolver for SyntheticResolver {
    fn method(&self) -> Option<MethodSig> {
        self.method
    }

    fn local_count(&self) -> Option<u32> {
        self.locals
    }

    fn call_sig(&self, _opcode: Opcode, token: u32) -> Option<CallSig> {
        self.calls.get(&token).copied()
    }

    fn token_exists(&self, token: u32) -> Option<bool> {
        self.known(self.tokens.contains(&token))
    }

    fn string_exists(&self, token: u32) -> Option<bool> {
        self.known(self.strings.contains(&token))
    }
}

/// Resolves through an assembly's metadata: MethodDef, MemberRef and MethodSpec signatures,
/// `calli` StandAloneSigs, row existence and `#US` entries. Call signatures are cached, so keep
/// one resolver per image and call [`ImageResolver::set_method`] before each body.
pub struct ImageResolver<'i> {
    image: &'i Image<'i>,
    /// `#US`, located once: every `ldstr` asks about it.
    user_strings: UserStringHeap<'i>,
    method: Option<MethodSig>,
    locals: Option<u32>,
    /// Row counts by table number (0 for numbers that name no table).
    rows: [u32; 64],
    /// Call-site signatures by row id, one vector per table a call may name (MethodDef,
    /// MemberRef, MethodSpec; StandAloneSig for `calli`), sized by the table's row count: an
    /// index is cheaper than hashing on the dataflow's hottest lookup. `None` until looked up;
    /// the answer itself is stored as it is returned, so a hit is one load.
    calls: [Vec<Cell<Option<Option<CallSig>>>>; 4],
    /// Method signatures by `#Blob` index: compilers store one blob per signature shape, shared
    /// by every MethodDef and MemberRef of that shape, so most are parsed once.
    method_sigs: BlobCache<Option<MethodSigSummary>>,
    /// Local counts by `#Blob` index of the local signature, likewise shared.
    local_sigs: BlobCache<Option<u32>>,
}

/// A direct-mapped cache by `#Blob` index: a fixed table of slots, a new entry replacing the
/// one in its slot. A lookup is one multiply and one load into a table that stays in the CPU's
/// caches, where a hash map as large as the image's method rows would miss them; and a blob
/// evicted by another is only parsed again.
struct BlobCache<T: Copy> {
    slots: Vec<Cell<Option<(u32, T)>>>,
}

impl<T: Copy> BlobCache<T> {
    /// Slots: a power of two (the index takes the top bits of the product).
    const SLOTS_LOG2: u32 = 11;

    fn new() -> Self {
        BlobCache {
            slots: (0..1 << Self::SLOTS_LOG2)
                .map(|_| Cell::new(None))
                .collect(),
        }
    }

    fn slot(&self, index: u32) -> &Cell<Option<(u32, T)>> {
        let k = index.wrapping_mul(0x9E37_79B1) >> (32 - Self::SLOTS_LOG2);
        &self.slots[k as usize]
    }

    fn get(&self, index: u32) -> Option<T> {
        match self.slot(index).get() {
            Some((key, value)) if key == index => Some(value),
            _ => None,
        }
    }

    fn insert(&self, index: u32, value: T) {
        self.slot(index).set(Some((index, value)));
    }
}

// Both layers of `Option` fit in the niches of `CallSig`'s flags: an entry is one word.
const _: () = assert!(std::mem::size_of::<Option<Option<CallSig>>>() == 8);

/// The cache vector of a call token: which one, for the tables a call may name. Other
/// combinations never resolve (the image reader would refuse them), so they need no vector.
/// One table read instead of a match on the pair: this runs for every call the dataflow meets.
#[inline(always)]
fn cache_slot(opcode: Opcode, token: u32) -> Option<usize> {
    let slot = if opcode == Opcode::Calli {
        if token >> 24 == table::STANDALONE_SIG {
            3
        } else {
            4
        }
    } else {
        CALL_SLOT[(token >> 24) as usize]
    };
    (slot < 4).then_some(slot as usize)
}

/// The cache vector for `call`, `callvirt` and `newobj` by table number (4: none).
const CALL_SLOT: [u8; 256] = {
    let mut t = [4; 256];
    t[table::METHOD_DEF as usize] = 0;
    t[table::MEMBER_REF as usize] = 1;
    t[table::METHOD_SPEC as usize] = 2;
    t
};

/// [`sig::method_sig_summary`] of the common shapes, read without the general parser: counts,
/// indexes and coded tokens of one byte, and types built from primitives, classes and value
/// types, generic parameters, generic instances, pointers, byrefs and vectors, a few levels
/// deep. `None` for any other blob, which the general parser then reads (and may reject).
fn simple_method_sig(blob: &[u8]) -> Option<MethodSigSummary> {
    use sig::callconv;
    let (&cc, rest) = blob.split_first()?;
    let kind = cc & callconv::KIND_MASK;
    if kind > callconv::VARARG && kind != callconv::UNMANAGED {
        return None;
    }
    let mut pos = 0;
    let generic_params = if cc & callconv::GENERIC != 0 {
        byte_u32(rest, &mut pos)?
    } else {
        0
    };
    let count = byte_u32(rest, &mut pos)?;
    if count as usize > rest.len() - pos {
        return None;
    }
    let ret = *rest.get(pos)?;
    for _ in 0..=count {
        pos = simple_type(rest, pos, 0)?;
    }
    Some(MethodSigSummary {
        calling_convention: cc,
        has_this: cc & callconv::HASTHIS != 0,
        explicit_this: cc & callconv::EXPLICITTHIS != 0,
        vararg: kind == callconv::VARARG,
        generic_params,
        param_count: count,
        returns_void: ret == sig::element::VOID,
        sentinel_index: None,
    })
}

/// A compressed integer in its one-byte form at `b[*pos]`, advancing past it.
fn byte_u32(b: &[u8], pos: &mut usize) -> Option<u32> {
    let v = *b.get(*pos)?;
    *pos += 1;
    (v < 0x80).then_some(v as u32)
}

/// A compressed integer in its one- or two-byte form (II.23.2), advancing past it.
fn short_u32(b: &[u8], pos: &mut usize) -> Option<u32> {
    let v = *b.get(*pos)?;
    if v < 0x80 {
        *pos += 1;
        Some(v as u32)
    } else if v & 0xC0 == 0x80 {
        let low = *b.get(*pos + 1)?;
        *pos += 2;
        Some(((v & 0x3F) as u32) << 8 | low as u32)
    } else {
        None
    }
}

/// Where the type at `b[pos..]` ends, if it has one of [`simple_method_sig`]'s shapes (coded
/// tokens may take two bytes). `nest` stays far below the general parser's depth limit.
fn simple_type(b: &[u8], mut pos: usize, nest: u32) -> Option<usize> {
    use sig::element::*;
    if nest > 8 {
        return None;
    }
    let et = *b.get(pos)?;
    pos += 1;
    match et {
        VOID..=STRING | TYPEDBYREF | I | U | OBJECT => Some(pos),
        CLASS | VALUETYPE => {
            sig::decode_type_def_or_ref(short_u32(b, &mut pos)?)?;
            Some(pos)
        }
        VAR | MVAR => {
            byte_u32(b, &mut pos)?;
            Some(pos)
        }
        PTR | BYREF | SZARRAY => simple_type(b, pos, nest + 1),
        GENERICINST => {
            if !matches!(*b.get(pos)?, CLASS | VALUETYPE) {
                return None;
            }
            pos += 1;
            sig::decode_type_def_or_ref(short_u32(b, &mut pos)?)?;
            let count = byte_u32(b, &mut pos)?;
            if count as usize > b.len() - pos {
                return None;
            }
            for _ in 0..count {
                pos = simple_type(b, pos, nest + 1)?;
            }
            Some(pos)
        }
        _ => None,
    }
}

/// The rows of `table` plus one, as cache entries indexed by row id.
fn cache_for(image: &Image<'_>, table: Table) -> Vec<Cell<Option<Option<CallSig>>>> {
    let rows = image.tables().rows(table) as usize;
    // Bounded by the table stream the image holds.
    (0..=rows).map(|_| Cell::new(None)).collect()
}

impl<'i> ImageResolver<'i> {
    /// A resolver over `image`, with no method set yet (see `set_method`).
    pub fn new(image: &'i Image<'i>) -> Self {
        ImageResolver {
            image,
            user_strings: image.user_strings(),
            method: None,
            locals: None,
            rows: std::array::from_fn(|t| {
                Table::from_u8(t as u8).map_or(0, |table| image.tables().rows(table))
            }),
            calls: [
                cache_for(image, Table::MethodDef),
                cache_for(image, Table::MemberRef),
                cache_for(image, Table::MethodSpec),
                cache_for(image, Table::StandAloneSig),
            ],
            method_sigs: BlobCache::new(),
            local_sigs: BlobCache::new(),
        }
    }

    /// Answers for `method` (its signature) and `body` (its locals) from now on.
    /// The same answers as [`Method::signature`] and [`Image::local_count`], from the caches.
    pub fn set_method(&mut self, method: &Method<'_>, body: &Body<'_>) {
        // A runtime-async method's `ret` returns its task's result: nothing for `Task`.
        let async_void = (method.impl_flags() & sig::IMPL_ASYNC != 0)
            .then(|| {
                let blob = method.signature_blob().ok()?;
                let ret = sig::returned_type(blob, method.impl_flags())?;
                Some(ret == [sig::element::VOID])
            })
            .flatten();
        self.method = self
            .method_sig_at(method.row().signature)
            .map(|s| MethodSig {
                arg_count: u16::try_from(
                    s.param_count as u64 + (s.has_this && !s.explicit_this) as u64,
                )
                .unwrap_or(u16::MAX),
                returns_void: async_void.unwrap_or(s.returns_void),
            });
        self.locals = self.locals_of(body.local_sig());
    }

    /// The method signature blob at `index`, parsed (`None` if it does not parse).
    fn method_sig_at(&self, index: u32) -> Option<MethodSigSummary> {
        if let Some(known) = self.method_sigs.get(index) {
            return known;
        }
        let parsed = self.image.blobs().get(index).ok().and_then(|blob| {
            simple_method_sig(blob).or_else(|| sig::method_sig_summary(blob).ok())
        });
        self.method_sigs.insert(index, parsed);
        parsed
    }

    /// As [`Image::local_count`] (`None` for its errors), parsing each blob once.
    fn locals_of(&self, token: u32) -> Option<u32> {
        if token == 0 {
            return Some(0);
        }
        let t = Token(token);
        if t.table() != Some(Table::StandAloneSig) {
            return None;
        }
        let index = self.image.tables().standalone_sig(t.rid()).ok()?.signature;
        if let Some(known) = self.local_sigs.get(index) {
            return known;
        }
        let count =
            self.image
                .blobs()
                .get(index)
                .ok()
                .and_then(|blob| match sig::standalone_sig(blob) {
                    Ok(StandAloneSig::Locals { count }) => Some(count),
                    _ => None,
                });
        self.local_sigs.insert(index, count);
        count
    }

    /// The signature blob index of a call token, as [`Image::method_sig`] finds it.
    fn method_sig_index(&self, token: Token) -> Option<u32> {
        let t = self.image.tables();
        match token.table()? {
            // One column instead of the whole row: a row in range lies wholly inside the
            // stream, and a MethodDef row has no column that can fail on its own.
            Table::MethodDef => t.cell(Table::MethodDef, token.rid(), 4).ok(),
            Table::MemberRef => Some(t.member_ref(token.rid()).ok()?.signature),
            Table::MethodSpec => {
                let method = t.method_spec(token.rid()).ok()?.method;
                if method.table() == Some(Table::MethodSpec) {
                    return None;
                }
                self.method_sig_index(method)
            }
            _ => None,
        }
    }

    /// Answers with facts gathered earlier (by [`Resolver::method`] and
    /// [`Resolver::local_count`] after [`ImageResolver::set_method`]).
    pub fn set_facts(&mut self, method: Option<MethodSig>, locals: Option<u32>) {
        self.method = method;
        self.locals = locals;
    }

    /// A resolver for one method of `image`.
    pub fn for_method(image: &'i Image<'i>, method: &Method<'_>, body: &Body<'_>) -> Self {
        let mut r = Self::new(image);
        r.set_method(method, body);
        r
    }

    /// Looks a call signature up and caches it (or that it does not resolve).
    #[cold]
    #[inline(never)]
    fn call_sig_miss(&self, slot: usize, opcode: Opcode, token: u32) -> Option<CallSig> {
        let rid = (token & 0x00FF_FFFF) as usize;
        let sig = if rid == 0 {
            None
        } else {
            self.lookup(opcode, token)
        };
        if let Some(entry) = self.calls[slot].get(rid) {
            entry.set(Some(sig));
        }
        sig
    }

    fn lookup(&self, opcode: Opcode, token: u32) -> Option<CallSig> {
        let s = if opcode == Opcode::Calli {
            match self.image.standalone_sig(Token(token)).ok()? {
                StandAloneSig::Method(s) => s,
                StandAloneSig::Locals { .. } => return None,
            }
        } else {
            self.method_sig_at(self.method_sig_index(Token(token))?)?
        };
        let fixed = s.sentinel_index.map_or(s.param_count, |i| i as u32);
        Some(CallSig {
            has_this: s.has_this,
            explicit_this: s.explicit_this,
            param_count: u16::try_from(fixed).ok()?,
            returns_void: s.returns_void,
            vararg_extra: u16::try_from(s.param_count.checked_sub(fixed)?).ok()?,
        })
    }
}

impl Resolver for ImageResolver<'_> {
    fn method(&self) -> Option<MethodSig> {
        self.method
    }

    fn local_count(&self) -> Option<u32> {
        self.locals
    }

    #[inline(always)]
    fn call_sig(&self, opcode: Opcode, token: u32) -> Option<CallSig> {
        let slot = cache_slot(opcode, token)?;
        let rid = (token & 0x00FF_FFFF) as usize;
        // The hit path stays small enough to inline into the dataflow loop. A row id past the
        // table has no entry and never resolves.
        match self.calls[slot].get(rid)?.get() {
            Some(known) => known,
            None => self.call_sig_miss(slot, opcode, token),
        }
    }

    fn token_exists(&self, token: u32) -> Option<bool> {
        Some(self.image.token_exists(Token(token)))
    }

    fn string_exists(&self, token: u32) -> Option<bool> {
        // As `Image::user_string_ok`, with the heap located once.
        let t = Token(token);
        Some(t.table_byte() == USER_STRING_TABLE && self.user_strings.contains(t.rid()))
    }

    /// The default's answer from a kind mask and the row counts, without a call per token.
    fn tokens_pass(&self, tokens: &[(OperandKind, u32)]) -> bool {
        tokens_pass_by_counts(
            tokens,
            &self.rows,
            |rid| us_entry_fits(self.user_strings.data, rid),
            |kind, token| token_passes(self, kind, token),
        )
    }

    fn token_limits(&self) -> Option<TokenLimits<'_>> {
        Some(TokenLimits {
            rows: &self.rows,
            user_strings: self.user_strings.data,
        })
    }
}

#[cfg(test)]
mod simple_sig_tests {
    use super::*;

    /// A key sharing its slot with an earlier one evicts it: the earlier key then misses (and
    /// is parsed again by its caller), never answers with the other key's value.
    #[test]
    fn blob_cache_evicts_rather_than_confuses() {
        let cache = BlobCache::<u32>::new();
        let slot_of = |k: u32| std::ptr::from_ref(cache.slot(k));
        let first = 7u32;
        let other = (8..u32::MAX)
            .find(|&k| slot_of(k) == slot_of(first))
            .expect("some key shares the slot");
        assert_eq!(cache.get(first), None);
        cache.insert(first, 1);
        assert_eq!(cache.get(first), Some(1));
        assert_eq!(cache.get(other), None);
        cache.insert(other, 2);
        assert_eq!(cache.get(other), Some(2));
        assert_eq!(cache.get(first), None);
        // Keys in other slots are untouched.
        let apart = (8..u32::MAX)
            .find(|&k| slot_of(k) != slot_of(first))
            .unwrap();
        cache.insert(apart, 3);
        assert_eq!((cache.get(apart), cache.get(other)), (Some(3), Some(2)));
    }

    /// The shortcut answers exactly as the general parser wherever it answers.
    #[test]
    fn simple_method_sig_agrees_with_the_parser() {
        const BYTES: &[u8] = &[
            0x00, 0x01, 0x02, 0x03, 0x05, 0x08, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15,
            0x16, 0x18, 0x1C, 0x1D, 0x1E, 0x20, 0x25, 0x30, 0x41, 0x45, 0x60, 0x7F, 0x80, 0xC0,
            0xFF,
        ];
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let (mut agreed, mut answered) = (0, 0);
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 12) as usize;
            let blob: Vec<u8> = (0..len)
                .map(|k| {
                    let pick = (seed >> (8 + 4 * k)) as usize;
                    if k < 2 && pick & 1 == 0 {
                        (pick >> 1) as u8 & 0x37
                    } else {
                        BYTES[pick % BYTES.len()]
                    }
                })
                .collect();
            let full = sig::method_sig_summary(&blob).ok();
            if let Some(quick) = simple_method_sig(&blob) {
                assert_eq!(Some(quick), full, "{blob:02x?}");
                answered += 1;
            }
            agreed += full.is_some() as u32;
        }
        assert!(
            answered > 1000 && agreed > answered / 2,
            "{answered} {agreed}"
        );
    }
}
