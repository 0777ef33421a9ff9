//! Operand rules: local and argument indices, token tables and rows, `#US` strings.

use super::{Code, Ctx, Resolver, Verifier};
use crate::opcode::{Opcode, OperandKind};

/// The local or argument a short form names without an operand (`ldloc.2`, `ldarg.0`, …).
/// Not in the opcode table, which describes encodings; `true` means a local.
fn implicit_index(op: Opcode) -> Option<(bool, u32)> {
    use Opcode::*;
    Some(match op {
        Ldarg_0 | Ldarg_1 | Ldarg_2 | Ldarg_3 => (false, op as u32 - Ldarg_0 as u32),
        Ldloc_0 | Ldloc_1 | Ldloc_2 | Ldloc_3 => (true, op as u32 - Ldloc_0 as u32),
        Stloc_0 | Stloc_1 | Stloc_2 | Stloc_3 => (true, op as u32 - Stloc_0 as u32),
        _ => return None,
    })
}

pub(super) fn check(v: &mut Verifier, off: u32, op: Opcode, arg: u32, ctx: &Ctx, r: &dyn Resolver) {
    let kind = op.operand_kind();
    let var = match kind {
        OperandKind::ShortLocal | OperandKind::Local => Some((true, arg)),
        OperandKind::ShortArg | OperandKind::Arg => Some((false, arg)),
        OperandKind::None => implicit_index(op),
        k if k.is_token() => {
            check_token(v, off, op, kind, arg, r);
            None
        }
        _ => None,
    };
    match var {
        Some((true, index)) => {
            if let Some(count) = ctx.locals
                && index >= count
            {
                v.report(
                    Code::UnrecognizedLocalNumber,
                    off,
                    format!("{op} uses local {index}, but the method has {count}"),
                );
            }
        }
        Some((false, index)) => {
            if let Some(m) = ctx.method
                && index >= m.arg_count as u32
            {
                v.report(
                    Code::UnrecognizedArgumentNumber,
                    off,
                    format!(
                        "{op} uses argument {index}, but the method has {}",
                        m.arg_count
                    ),
                );
            }
        }
        None => {}
    }
}

fn check_token(
    v: &mut Verifier,
    off: u32,
    op: Opcode,
    kind: OperandKind,
    token: u32,
    r: &dyn Resolver,
) {
    if !r.token_fits(kind, token) {
        let (code, what) = match kind {
            OperandKind::Type => (Code::ExpectedTypeToken, "a type"),
            OperandKind::Field => (Code::ExpectedFieldToken, "a field"),
            OperandKind::Method => (Code::ExpectedMethodToken, "a method"),
            OperandKind::String => (Code::StringOperand, "a #US string"),
            OperandKind::Sig => (Code::ExpectedSigToken, "a StandAloneSig"),
            _ => (Code::TokenResolve, "a type, method or field"),
        };
        v.report(
            code,
            off,
            format!("{op} needs {what} token, not {token:#010x}"),
        );
        return;
    }
    if kind == OperandKind::String {
        if r.string_exists(token) == Some(false) {
            v.report(
                Code::StringOperand,
                off,
                format!("{op} token {token:#010x} is not a string in #US"),
            );
        }
    } else if token & 0x00FF_FFFF == 0 || r.token_exists(token) == Some(false) {
        v.report(
            Code::TokenResolve,
            off,
            format!("{op} token {token:#010x} names no row"),
        );
    }
}
