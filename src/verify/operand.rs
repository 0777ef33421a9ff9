//! Operand rules: local and argument indices, token tables and rows, `#US` strings.
//!
//! The decoder checks indices itself (one compare against a limit); tokens go through
//! [`token`]. Reporting is kept out of line.

use super::{Code, Out, Resolver};
use crate::opcode::{Opcode, OperandKind, TokenKind};

/// A local index (`ldloc.s 5`, or implied as in `stloc.2`) beyond the locals signature.
#[cold]
#[inline(never)]
pub(super) fn bad_local(v: &mut Out, off: u32, op: Opcode, index: u32, count: u32) {
    v.report(
        Code::UnrecognizedLocalNumber,
        off,
        format!("{op} uses local {index}, but the method has {count}"),
    );
}

/// An argument index (`ldarg.s 5`, or implied as in `ldarg.0`) beyond the method's signature.
#[cold]
#[inline(never)]
pub(super) fn bad_argument(v: &mut Out, off: u32, op: Opcode, index: u32, count: u16) {
    v.report(
        Code::UnrecognizedArgumentNumber,
        off,
        format!("{op} uses argument {index}, but the method has {count}"),
    );
}

/// A token operand of `kind`: its table, then its row or `#US` entry.
#[inline]
pub(super) fn token<R: Resolver + ?Sized>(
    v: &mut Out,
    off: u32,
    op: Opcode,
    kind: OperandKind,
    token: u32,
    r: &R,
) {
    if !r.token_fits(kind, token) {
        wrong_table(v, off, op, kind, token);
    } else if kind == OperandKind::String {
        if r.string_exists(token) == Some(false) {
            no_string(v, off, op, token);
        }
    } else if token & 0x00FF_FFFF == 0 || r.token_exists(token) == Some(false) {
        no_row(v, off, op, token);
    }
}

#[cold]
#[inline(never)]
fn wrong_table(v: &mut Out, off: u32, op: Opcode, kind: OperandKind, token: u32) {
    let (code, what) = match kind.token_kind() {
        Some(TokenKind::Type) => (Code::ExpectedTypeToken, "a type"),
        Some(TokenKind::Field) => (Code::ExpectedFieldToken, "a field"),
        Some(TokenKind::Method) => (Code::ExpectedMethodToken, "a method"),
        Some(TokenKind::String) => (Code::StringOperand, "a #US string"),
        Some(TokenKind::Sig) => (Code::ExpectedSigToken, "a StandAloneSig"),
        // `ldtoken`'s, and (never asked) kinds without a token.
        Some(TokenKind::Tok) | None => (Code::TokenResolve, "a type, method or field"),
    };
    v.report(
        code,
        off,
        format!("{op} needs {what} token, not {token:#010x}"),
    );
}

#[cold]
#[inline(never)]
fn no_string(v: &mut Out, off: u32, op: Opcode, token: u32) {
    v.report(
        Code::StringOperand,
        off,
        format!("{op} token {token:#010x} is not a string in #US"),
    );
}

#[cold]
#[inline(never)]
fn no_row(v: &mut Out, off: u32, op: Opcode, token: u32) {
    v.report(
        Code::TokenResolve,
        off,
        format!("{op} token {token:#010x} names no row"),
    );
}
