//! Verification types: what an evaluation-stack slot holds (III.1.8.1.2), how a signature type
//! is held on the stack, whether a held value fits where a type is expected, and the merge at
//! join points (III.1.8.1.3).

use super::system::{Ans, Kind, TypeSystem};
use super::ty::{Prim, TyId, TyNode};
use crate::verify::Code;

/// One evaluation-stack slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum V {
    /// Not known (an unresolved type): every check against it passes.
    Unknown,
    /// `int32` (and the smaller integers, `bool` and `char`).
    I4,
    /// `int64`.
    I8,
    /// `native int` (and unmanaged pointers).
    I,
    /// `F`: a floating-point number.
    F,
    /// The null reference.
    Null,
    /// An object reference of a type (a boxed value when the type is a value type).
    Obj(TyId),
    /// A value of a value type that is not a primitive or an enum.
    Value(TyId),
    /// A managed pointer to a type, and where it points.
    ByRef(TyId, Home),
    /// A value of a generic parameter type: a reference or a value, as instantiated.
    Var(TyId),
}

/// Where a managed pointer points, as far as returning it goes (III.3.56): a pointer into the
/// method's own frame dies with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Home {
    /// A location that outlives the method, or one not known to be in its frame: a field of
    /// an object, an array element, a static field, what a call returned, a managed pointer
    /// the method was given.
    Permanent,
    /// One of the method's own locals or arguments (`ldloca`, `ldarga`), or a field in one.
    Frame,
}

impl Home {
    /// The home of a merge: in the frame when either is.
    fn join(self, other: Home) -> Home {
        if self == Home::Frame || other == Home::Frame {
            Home::Frame
        } else {
            Home::Permanent
        }
    }
}

// A slot stays eight bytes: the entry states and the stack copy slots by the thousand.
const _: () = assert!(std::mem::size_of::<V>() == 8);

/// How a value of type `t` is held on the stack.
#[inline]
pub fn stack_of(ts: &mut TypeSystem<'_>, t: TyId) -> V {
    if let Some(Some(v)) = ts.forms.get(t.0 as usize) {
        return *v;
    }
    stack_of_first(ts, t)
}

/// [`stack_of`] the first time `t` is asked about: worked out and kept.
#[cold]
#[inline(never)]
fn stack_of_first(ts: &mut TypeSystem<'_>, t: TyId) -> V {
    let v = stack_of_uncached(ts, t);
    let i = t.0 as usize;
    if ts.forms.len() <= i {
        ts.forms.resize(i + 1, None);
    }
    ts.forms[i] = Some(v);
    v
}

fn stack_of_uncached(ts: &mut TypeSystem<'_>, t: TyId) -> V {
    // Matched in place: an instance's arguments are not cloned.
    match *ts.tys.node(t) {
        TyNode::Unknown | TyNode::Void => V::Unknown,
        TyNode::Object | TyNode::String | TyNode::Class(_) => V::Obj(t),
        TyNode::SzArray(_) | TyNode::Array(..) => V::Obj(t),
        TyNode::TypedRef => V::Value(t),
        TyNode::Prim(p) => prim_stack(p),
        // Enums nested in generic types are instances too.
        TyNode::Value(_) | TyNode::Inst { value: true, .. } => match ts.kind(t) {
            Some(Kind::Enum(Some(p))) => prim_stack(p),
            Some(Kind::Enum(None) | Kind::Unknown) | None => V::Unknown,
            Some(Kind::Value) => V::Value(t),
            // A value type marker on a class: the definition decides.
            Some(Kind::Class | Kind::Interface) => V::Obj(t),
        },
        TyNode::Inst { value: false, .. } => V::Obj(t),
        TyNode::Var(_) | TyNode::MVar(_) => V::Var(t),
        TyNode::Ptr(_) | TyNode::FnPtr => V::I,
        TyNode::ByRef(e) => V::ByRef(e, Home::Permanent),
    }
}

/// The stack form of a primitive.
pub fn prim_stack(p: Prim) -> V {
    match p.reduced() {
        Prim::I1 | Prim::I2 | Prim::I4 => V::I4,
        Prim::I8 => V::I8,
        Prim::I => V::I,
        Prim::R4 | Prim::R8 => V::F,
        // `reduced` returns only the forms above.
        Prim::Bool | Prim::Char | Prim::U1 | Prim::U2 | Prim::U4 | Prim::U8 | Prim::U => V::I4,
    }
}

/// The name of a slot's type for messages.
pub fn name(ts: &mut TypeSystem<'_>, v: V) -> String {
    match v {
        V::Unknown => "(unknown)".into(),
        V::I4 => "int32".into(),
        V::I8 => "int64".into(),
        V::I => "native int".into(),
        V::F => "F".into(),
        V::Null => "null".into(),
        V::Obj(t) => {
            let n = ts.name(t);
            if ts.is_value_type(t) == Some(true) {
                format!("boxed {n}")
            } else {
                n
            }
        }
        V::Value(t) | V::Var(t) => ts.name(t),
        V::ByRef(t, _) => format!("{}&", ts.name(t)),
    }
}

/// The names of a found and an expected type for a message; where the two read the same
/// (`System.RuntimeTypeHandle` of two core libraries), each followed by the assembly that
/// defines it.
pub fn names_apart(
    ts: &mut TypeSystem<'_>,
    found: (String, Option<TyId>),
    want: (String, Option<TyId>),
) -> (String, String) {
    let (mut f, mut w) = (found.0, want.0);
    if f == w {
        for (name, t) in [(&mut f, found.1), (&mut w, want.1)] {
            if let Some(asm) = t.and_then(|t| ts.defined_in(t)) {
                *name = format!("{name} (of {asm})");
            }
        }
    }
    (f, w)
}

/// The type a slot holds, where it names one.
pub fn type_of(v: V) -> Option<TyId> {
    match v {
        V::Obj(t) | V::Value(t) | V::Var(t) | V::ByRef(t, _) => Some(t),
        V::Unknown | V::I4 | V::I8 | V::I | V::F | V::Null => None,
    }
}

/// Why a value does not fit: the code (which says the verdict class) and nothing else; the
/// caller writes the message.
pub type Misfit = Code;

/// Whether `found` may be stored where a value of type `expected` goes (an argument, a local,
/// a field, a return value: III.1.8.1.2.3 and III.1.6). `Ok` when it may or when that cannot
/// be told.
#[inline]
pub fn fits(ts: &mut TypeSystem<'_>, found: V, expected: TyId) -> Result<(), Misfit> {
    let want = stack_of(ts, expected);
    fits_v(ts, found, want)
}

/// [`fits`] against a stack form.
#[inline]
pub fn fits_v(ts: &mut TypeSystem<'_>, found: V, want: V) -> Result<(), Misfit> {
    // Most arguments, locals and fields receive a value of their own stack form: answered
    // here, without the call (every form but `Null`, never expected, fits itself below).
    if found == want && want != V::Null {
        return Ok(());
    }
    fits_slow(ts, found, want)
}

/// [`fits_v`] of two different forms.
fn fits_slow(ts: &mut TypeSystem<'_>, found: V, want: V) -> Result<(), Misfit> {
    use V::*;
    match (found, want) {
        (Unknown, _) | (_, Unknown) | (Var(_), _) | (_, Var(_)) => Ok(()),
        (I4 | I, I4 | I) | (I8, I8) | (F, F) => Ok(()),
        (Null, Obj(_)) => Ok(()),
        (Obj(a), Obj(b)) => match ts.assignable(a, b) {
            Ans::Yes | Ans::Unknown => Ok(()),
            Ans::No => Err(Code::TypeNotAssignable),
        },
        (Value(a), Value(b)) => {
            if a == b || ts.tys.has_generic_param(a) || ts.tys.has_generic_param(b) {
                Ok(())
            } else {
                Err(Code::StackUnexpected)
            }
        }
        (ByRef(a, _), ByRef(b, _)) => {
            if byref_targets_match(ts, a, b) {
                Ok(())
            } else {
                Err(Code::TypeNotAssignable)
            }
        }
        // A managed pointer as a native int, or the reverse, or null as a managed pointer:
        // valid code, not verifiable.
        (ByRef(..), I) | (I, ByRef(..)) | (Null, ByRef(..)) => Err(Code::UnmanagedPointer),
        _ => Err(Code::StackUnexpected),
    }
}

/// Whether managed pointers to `a` and to `b` are interchangeable: the same type, the same
/// verification type of a primitive (`int32&` and `uint32&`), an enum and its underlying type.
pub fn byref_targets_match(ts: &mut TypeSystem<'_>, a: TyId, b: TyId) -> bool {
    if a == b || ts.tys.has_unknown(a) || ts.tys.has_unknown(b) {
        return true;
    }
    if ts.tys.has_generic_param(a) || ts.tys.has_generic_param(b) {
        return true;
    }
    let (pa, pb) = (prim_of(ts, a), prim_of(ts, b));
    if let (Some(x), Some(y)) = (pa, pb) {
        return x.reduced() == y.reduced();
    }
    // Object types: a pointer to a location of a base type is not a pointer to one of a
    // derived type, nor the reverse (writes through it would break the other's type); the
    // runtime does not check this.
    false
}

/// The primitive a type is held as in memory (enums: their underlying type).
pub fn prim_of(ts: &mut TypeSystem<'_>, t: TyId) -> Option<Prim> {
    // Matched in place: an instance's arguments are not cloned.
    match *ts.tys.node(t) {
        TyNode::Prim(p) => Some(p),
        TyNode::Value(_) | TyNode::Inst { value: true, .. } => match ts.kind(t) {
            Some(Kind::Enum(p)) => p,
            _ => None,
        },
        _ => None,
    }
}

/// Two stack slots of kinds that do not merge at a join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unmergeable;

/// The merge of two slots at a join (III.1.8.1.3); [`Unmergeable`] when their kinds differ.
pub fn merge(ts: &mut TypeSystem<'_>, a: V, b: V) -> Result<V, Unmergeable> {
    use V::*;
    if a == b {
        return Ok(a);
    }
    Ok(match (a, b) {
        (Unknown, _) | (_, Unknown) => Unknown,
        (I4, I) | (I, I4) => I,
        (Null, Obj(t)) | (Obj(t), Null) => Obj(t),
        (Obj(x), Obj(y)) => Obj(ts.merge(x, y)),
        (ByRef(x, hx), ByRef(y, hy)) => {
            let home = hx.join(hy);
            if byref_targets_match(ts, x, y) {
                ByRef(x, home)
            } else {
                ByRef(TyId::UNKNOWN, home)
            }
        }
        (Var(_), _) | (_, Var(_)) => Unknown,
        (Value(x), Value(y)) if ts.tys.has_generic_param(x) || ts.tys.has_generic_param(y) => {
            Unknown
        }
        (ByRef(..), I) | (I, ByRef(..)) => I,
        _ => return Err(Unmergeable),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;
    use crate::verify::types::ModuleStore;

    /// A join keeps a pointer in the frame when it is on either path (a `ret` after it may
    /// return a local's address), and whether a pointer fits never depends on its home.
    #[test]
    fn a_joined_pointer_is_in_the_frame_when_either_is() {
        let (_, bytes) = crate::corpus::EMBEDDED[0];
        let image = Image::parse(bytes).unwrap();
        let store = ModuleStore::new(vec![]);
        let mut ts = TypeSystem::new(&store, &image, None);
        let (i4, u4) = (ts.tys.prim(Prim::I4), ts.tys.prim(Prim::U4));
        let lasting = V::ByRef(i4, Home::Permanent);
        let frame = V::ByRef(u4, Home::Frame);
        assert_eq!(merge(&mut ts, lasting, lasting), Ok(lasting));
        assert_eq!(
            merge(&mut ts, lasting, frame),
            Ok(V::ByRef(i4, Home::Frame))
        );
        assert_eq!(
            merge(&mut ts, frame, lasting),
            Ok(V::ByRef(u4, Home::Frame))
        );
        let string = V::ByRef(TyId::STRING, Home::Permanent);
        assert_eq!(
            merge(&mut ts, frame, string),
            Ok(V::ByRef(TyId::UNKNOWN, Home::Frame))
        );
        assert_eq!(fits_v(&mut ts, frame, lasting), Ok(()));
        assert_eq!(fits_v(&mut ts, lasting, frame), Ok(()));
    }
}
