//! The ECMA-335 Partition III opcode table: the one source of truth.
//!
//! Every opcode is listed once, with its name, encoding, operand kind, stack behaviour and flow
//! kind. The decoder, encoder, disassembler, verifier and generators all read this table; none of
//! them keeps its own list of opcodes.

use std::fmt;

/// What follows the opcode bytes in the instruction stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OperandKind {
    /// No operand.
    None,
    /// `int8` (ShortInlineI). Also the alignment of `unaligned.` and the flags of `no.`.
    ShortI,
    /// `int32` (InlineI).
    I,
    /// `int64` (InlineI8).
    I8,
    /// `float32` (ShortInlineR), kept as raw bits.
    ShortR,
    /// `float64` (InlineR), kept as raw bits.
    R,
    /// `int8` displacement from the next instruction (ShortInlineBrTarget).
    ShortBrTarget,
    /// `int32` displacement from the next instruction (InlineBrTarget).
    BrTarget,
    /// `uint32` count N then N `int32` displacements from the end of the table (InlineSwitch).
    Switch,
    /// `uint8` local index (ShortInlineVar on a local).
    ShortLocal,
    /// `uint8` argument index (ShortInlineVar on an argument).
    ShortArg,
    /// `uint16` local index (InlineVar on a local).
    Local,
    /// `uint16` argument index (InlineVar on an argument).
    Arg,
    /// Any of TypeDef, TypeRef, TypeSpec, MethodDef, MemberRef, MethodSpec, Field (InlineTok).
    Tok,
    /// TypeDef, TypeRef or TypeSpec token (InlineType).
    Type,
    /// Field or MemberRef token (InlineField).
    Field,
    /// MethodDef, MemberRef or MethodSpec token (InlineMethod).
    Method,
    /// `#US` heap token 0x70xxxxxx (InlineString).
    String,
    /// StandAloneSig token (InlineSig).
    Sig,
}

impl OperandKind {
    /// Operand size in bytes; `None` for `switch`, whose size depends on its count.
    pub const fn fixed_size(self) -> Option<usize> {
        Some(match self {
            OperandKind::None => 0,
            OperandKind::ShortI
            | OperandKind::ShortBrTarget
            | OperandKind::ShortLocal
            | OperandKind::ShortArg => 1,
            OperandKind::Local | OperandKind::Arg => 2,
            OperandKind::I
            | OperandKind::ShortR
            | OperandKind::BrTarget
            | OperandKind::Tok
            | OperandKind::Type
            | OperandKind::Field
            | OperandKind::Method
            | OperandKind::String
            | OperandKind::Sig => 4,
            OperandKind::I8 | OperandKind::R => 8,
            OperandKind::Switch => return None,
        })
    }

    /// True for operands that are metadata tokens.
    pub const fn is_token(self) -> bool {
        self.token_kind().is_some()
    }

    /// Which tokens the operand takes, when it is a token: the one place that splits the
    /// operand kinds into tokens and the rest.
    pub const fn token_kind(self) -> Option<TokenKind> {
        match self {
            OperandKind::Tok => Some(TokenKind::Tok),
            OperandKind::Type => Some(TokenKind::Type),
            OperandKind::Field => Some(TokenKind::Field),
            OperandKind::Method => Some(TokenKind::Method),
            OperandKind::String => Some(TokenKind::String),
            OperandKind::Sig => Some(TokenKind::Sig),
            OperandKind::None
            | OperandKind::ShortI
            | OperandKind::I
            | OperandKind::I8
            | OperandKind::ShortR
            | OperandKind::R
            | OperandKind::ShortBrTarget
            | OperandKind::BrTarget
            | OperandKind::Switch
            | OperandKind::ShortLocal
            | OperandKind::ShortArg
            | OperandKind::Local
            | OperandKind::Arg => None,
        }
    }

    /// True for operands that are branch displacements.
    pub const fn is_branch(self) -> bool {
        matches!(self, OperandKind::ShortBrTarget | OperandKind::BrTarget)
    }
}

/// The token operand kinds (InlineTok, InlineType, InlineField, InlineMethod, InlineString,
/// InlineSig), for code that treats only tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// [`OperandKind::Tok`].
    Tok,
    /// [`OperandKind::Type`].
    Type,
    /// [`OperandKind::Field`].
    Field,
    /// [`OperandKind::Method`].
    Method,
    /// [`OperandKind::String`].
    String,
    /// [`OperandKind::Sig`].
    Sig,
}

/// How many stack items an opcode pops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pops {
    /// A fixed count.
    Fixed(u8),
    /// Given by a signature: the callee's parameters (plus `this`, plus the function pointer for
    /// `calli`) for calls; the method's own return value for `ret`.
    Signature,
    /// Empties the whole evaluation stack (`leave`, `leave.s`, `endfinally`).
    All,
}

/// How many stack items an opcode pushes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pushes {
    /// A fixed count.
    Fixed(u8),
    /// The callee's return value: 0 when it returns void, else 1.
    Signature,
}

/// Where control goes after an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flow {
    /// Falls through to the next instruction.
    Next,
    /// Debugger break; falls through.
    Break,
    /// Unconditional transfer to its target (`br`, `leave`).
    Branch,
    /// Its targets or the next instruction (`brtrue`, `beq`, `switch`).
    CondBranch,
    /// Leaves the method or the handler (`ret`, `endfinally`, `endfilter`, `jmp`).
    Return,
    /// Raises an exception (`throw`, `rethrow`).
    Throw,
    /// Calls, then falls through.
    Call,
    /// A prefix: modifies the instruction that follows it.
    Prefix,
}

impl Flow {
    /// True when the instruction after this one is not reached by falling through.
    pub const fn ends_block(self) -> bool {
        matches!(self, Flow::Branch | Flow::Return | Flow::Throw)
    }
}

/// Static facts about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpInfo {
    /// The opcode these facts describe.
    pub opcode: Opcode,
    /// The ECMA-335 mnemonic, e.g. `ldarg.s`, `unaligned.`.
    pub name: &'static str,
    /// What follows the opcode bytes.
    pub operand: OperandKind,
    /// Stack items popped (Partition III's stack transition, left of the arrow).
    pub pops: Pops,
    /// Stack items pushed.
    pub pushes: Pushes,
    /// Where control goes next.
    pub flow: Flow,
}

macro_rules! opcode_table {
    ($( $variant:ident = $code:literal, $name:literal, $operand:ident, $pops:expr, $pushes:expr, $flow:ident; )*) => {
        /// An ECMA-335 opcode. The discriminant is its encoding: `0x00XX` for one-byte opcodes,
        /// `0xFEXX` for two-byte ones.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        #[allow(non_camel_case_types)]
        pub enum Opcode {
            $(
                #[doc = concat!(
                    "`", $name, "`: encoded ", stringify!($code), ", operand [`OperandKind::",
                    stringify!($operand), "`], flow [`Flow::", stringify!($flow), "`]."
                )]
                $variant = $code,
            )*
        }

        /// Every opcode, in encoding order.
        pub const ALL: &[OpInfo] = &[
            $( OpInfo {
                opcode: Opcode::$variant,
                name: $name,
                operand: OperandKind::$operand,
                pops: $pops,
                pushes: $pushes,
                flow: Flow::$flow,
            }, )*
        ];
    };
}

use Pops::{All as PopAll, Fixed as P, Signature as PopSig};
use Pushes::{Fixed as U, Signature as PushSig};

opcode_table! {
    Nop = 0x00, "nop", None, P(0), U(0), Next;
    Break = 0x01, "break", None, P(0), U(0), Break;
    Ldarg_0 = 0x02, "ldarg.0", None, P(0), U(1), Next;
    Ldarg_1 = 0x03, "ldarg.1", None, P(0), U(1), Next;
    Ldarg_2 = 0x04, "ldarg.2", None, P(0), U(1), Next;
    Ldarg_3 = 0x05, "ldarg.3", None, P(0), U(1), Next;
    Ldloc_0 = 0x06, "ldloc.0", None, P(0), U(1), Next;
    Ldloc_1 = 0x07, "ldloc.1", None, P(0), U(1), Next;
    Ldloc_2 = 0x08, "ldloc.2", None, P(0), U(1), Next;
    Ldloc_3 = 0x09, "ldloc.3", None, P(0), U(1), Next;
    Stloc_0 = 0x0A, "stloc.0", None, P(1), U(0), Next;
    Stloc_1 = 0x0B, "stloc.1", None, P(1), U(0), Next;
    Stloc_2 = 0x0C, "stloc.2", None, P(1), U(0), Next;
    Stloc_3 = 0x0D, "stloc.3", None, P(1), U(0), Next;
    Ldarg_S = 0x0E, "ldarg.s", ShortArg, P(0), U(1), Next;
    Ldarga_S = 0x0F, "ldarga.s", ShortArg, P(0), U(1), Next;
    Starg_S = 0x10, "starg.s", ShortArg, P(1), U(0), Next;
    Ldloc_S = 0x11, "ldloc.s", ShortLocal, P(0), U(1), Next;
    Ldloca_S = 0x12, "ldloca.s", ShortLocal, P(0), U(1), Next;
    Stloc_S = 0x13, "stloc.s", ShortLocal, P(1), U(0), Next;
    Ldnull = 0x14, "ldnull", None, P(0), U(1), Next;
    Ldc_I4_M1 = 0x15, "ldc.i4.m1", None, P(0), U(1), Next;
    Ldc_I4_0 = 0x16, "ldc.i4.0", None, P(0), U(1), Next;
    Ldc_I4_1 = 0x17, "ldc.i4.1", None, P(0), U(1), Next;
    Ldc_I4_2 = 0x18, "ldc.i4.2", None, P(0), U(1), Next;
    Ldc_I4_3 = 0x19, "ldc.i4.3", None, P(0), U(1), Next;
    Ldc_I4_4 = 0x1A, "ldc.i4.4", None, P(0), U(1), Next;
    Ldc_I4_5 = 0x1B, "ldc.i4.5", None, P(0), U(1), Next;
    Ldc_I4_6 = 0x1C, "ldc.i4.6", None, P(0), U(1), Next;
    Ldc_I4_7 = 0x1D, "ldc.i4.7", None, P(0), U(1), Next;
    Ldc_I4_8 = 0x1E, "ldc.i4.8", None, P(0), U(1), Next;
    Ldc_I4_S = 0x1F, "ldc.i4.s", ShortI, P(0), U(1), Next;
    Ldc_I4 = 0x20, "ldc.i4", I, P(0), U(1), Next;
    Ldc_I8 = 0x21, "ldc.i8", I8, P(0), U(1), Next;
    Ldc_R4 = 0x22, "ldc.r4", ShortR, P(0), U(1), Next;
    Ldc_R8 = 0x23, "ldc.r8", R, P(0), U(1), Next;
    Dup = 0x25, "dup", None, P(1), U(2), Next;
    Pop = 0x26, "pop", None, P(1), U(0), Next;
    Jmp = 0x27, "jmp", Method, P(0), U(0), Return;
    Call = 0x28, "call", Method, PopSig, PushSig, Call;
    Calli = 0x29, "calli", Sig, PopSig, PushSig, Call;
    Ret = 0x2A, "ret", None, PopSig, U(0), Return;
    Br_S = 0x2B, "br.s", ShortBrTarget, P(0), U(0), Branch;
    Brfalse_S = 0x2C, "brfalse.s", ShortBrTarget, P(1), U(0), CondBranch;
    Brtrue_S = 0x2D, "brtrue.s", ShortBrTarget, P(1), U(0), CondBranch;
    Beq_S = 0x2E, "beq.s", ShortBrTarget, P(2), U(0), CondBranch;
    Bge_S = 0x2F, "bge.s", ShortBrTarget, P(2), U(0), CondBranch;
    Bgt_S = 0x30, "bgt.s", ShortBrTarget, P(2), U(0), CondBranch;
    Ble_S = 0x31, "ble.s", ShortBrTarget, P(2), U(0), CondBranch;
    Blt_S = 0x32, "blt.s", ShortBrTarget, P(2), U(0), CondBranch;
    Bne_Un_S = 0x33, "bne.un.s", ShortBrTarget, P(2), U(0), CondBranch;
    Bge_Un_S = 0x34, "bge.un.s", ShortBrTarget, P(2), U(0), CondBranch;
    Bgt_Un_S = 0x35, "bgt.un.s", ShortBrTarget, P(2), U(0), CondBranch;
    Ble_Un_S = 0x36, "ble.un.s", ShortBrTarget, P(2), U(0), CondBranch;
    Blt_Un_S = 0x37, "blt.un.s", ShortBrTarget, P(2), U(0), CondBranch;
    Br = 0x38, "br", BrTarget, P(0), U(0), Branch;
    Brfalse = 0x39, "brfalse", BrTarget, P(1), U(0), CondBranch;
    Brtrue = 0x3A, "brtrue", BrTarget, P(1), U(0), CondBranch;
    Beq = 0x3B, "beq", BrTarget, P(2), U(0), CondBranch;
    Bge = 0x3C, "bge", BrTarget, P(2), U(0), CondBranch;
    Bgt = 0x3D, "bgt", BrTarget, P(2), U(0), CondBranch;
    Ble = 0x3E, "ble", BrTarget, P(2), U(0), CondBranch;
    Blt = 0x3F, "blt", BrTarget, P(2), U(0), CondBranch;
    Bne_Un = 0x40, "bne.un", BrTarget, P(2), U(0), CondBranch;
    Bge_Un = 0x41, "bge.un", BrTarget, P(2), U(0), CondBranch;
    Bgt_Un = 0x42, "bgt.un", BrTarget, P(2), U(0), CondBranch;
    Ble_Un = 0x43, "ble.un", BrTarget, P(2), U(0), CondBranch;
    Blt_Un = 0x44, "blt.un", BrTarget, P(2), U(0), CondBranch;
    Switch = 0x45, "switch", Switch, P(1), U(0), CondBranch;
    Ldind_I1 = 0x46, "ldind.i1", None, P(1), U(1), Next;
    Ldind_U1 = 0x47, "ldind.u1", None, P(1), U(1), Next;
    Ldind_I2 = 0x48, "ldind.i2", None, P(1), U(1), Next;
    Ldind_U2 = 0x49, "ldind.u2", None, P(1), U(1), Next;
    Ldind_I4 = 0x4A, "ldind.i4", None, P(1), U(1), Next;
    Ldind_U4 = 0x4B, "ldind.u4", None, P(1), U(1), Next;
    Ldind_I8 = 0x4C, "ldind.i8", None, P(1), U(1), Next;
    Ldind_I = 0x4D, "ldind.i", None, P(1), U(1), Next;
    Ldind_R4 = 0x4E, "ldind.r4", None, P(1), U(1), Next;
    Ldind_R8 = 0x4F, "ldind.r8", None, P(1), U(1), Next;
    Ldind_Ref = 0x50, "ldind.ref", None, P(1), U(1), Next;
    Stind_Ref = 0x51, "stind.ref", None, P(2), U(0), Next;
    Stind_I1 = 0x52, "stind.i1", None, P(2), U(0), Next;
    Stind_I2 = 0x53, "stind.i2", None, P(2), U(0), Next;
    Stind_I4 = 0x54, "stind.i4", None, P(2), U(0), Next;
    Stind_I8 = 0x55, "stind.i8", None, P(2), U(0), Next;
    Stind_R4 = 0x56, "stind.r4", None, P(2), U(0), Next;
    Stind_R8 = 0x57, "stind.r8", None, P(2), U(0), Next;
    Add = 0x58, "add", None, P(2), U(1), Next;
    Sub = 0x59, "sub", None, P(2), U(1), Next;
    Mul = 0x5A, "mul", None, P(2), U(1), Next;
    Div = 0x5B, "div", None, P(2), U(1), Next;
    Div_Un = 0x5C, "div.un", None, P(2), U(1), Next;
    Rem = 0x5D, "rem", None, P(2), U(1), Next;
    Rem_Un = 0x5E, "rem.un", None, P(2), U(1), Next;
    And = 0x5F, "and", None, P(2), U(1), Next;
    Or = 0x60, "or", None, P(2), U(1), Next;
    Xor = 0x61, "xor", None, P(2), U(1), Next;
    Shl = 0x62, "shl", None, P(2), U(1), Next;
    Shr = 0x63, "shr", None, P(2), U(1), Next;
    Shr_Un = 0x64, "shr.un", None, P(2), U(1), Next;
    Neg = 0x65, "neg", None, P(1), U(1), Next;
    Not = 0x66, "not", None, P(1), U(1), Next;
    Conv_I1 = 0x67, "conv.i1", None, P(1), U(1), Next;
    Conv_I2 = 0x68, "conv.i2", None, P(1), U(1), Next;
    Conv_I4 = 0x69, "conv.i4", None, P(1), U(1), Next;
    Conv_I8 = 0x6A, "conv.i8", None, P(1), U(1), Next;
    Conv_R4 = 0x6B, "conv.r4", None, P(1), U(1), Next;
    Conv_R8 = 0x6C, "conv.r8", None, P(1), U(1), Next;
    Conv_U4 = 0x6D, "conv.u4", None, P(1), U(1), Next;
    Conv_U8 = 0x6E, "conv.u8", None, P(1), U(1), Next;
    Callvirt = 0x6F, "callvirt", Method, PopSig, PushSig, Call;
    Cpobj = 0x70, "cpobj", Type, P(2), U(0), Next;
    Ldobj = 0x71, "ldobj", Type, P(1), U(1), Next;
    Ldstr = 0x72, "ldstr", String, P(0), U(1), Next;
    Newobj = 0x73, "newobj", Method, PopSig, U(1), Call;
    Castclass = 0x74, "castclass", Type, P(1), U(1), Next;
    Isinst = 0x75, "isinst", Type, P(1), U(1), Next;
    Conv_R_Un = 0x76, "conv.r.un", None, P(1), U(1), Next;
    Unbox = 0x79, "unbox", Type, P(1), U(1), Next;
    Throw = 0x7A, "throw", None, P(1), U(0), Throw;
    Ldfld = 0x7B, "ldfld", Field, P(1), U(1), Next;
    Ldflda = 0x7C, "ldflda", Field, P(1), U(1), Next;
    Stfld = 0x7D, "stfld", Field, P(2), U(0), Next;
    Ldsfld = 0x7E, "ldsfld", Field, P(0), U(1), Next;
    Ldsflda = 0x7F, "ldsflda", Field, P(0), U(1), Next;
    Stsfld = 0x80, "stsfld", Field, P(1), U(0), Next;
    Stobj = 0x81, "stobj", Type, P(2), U(0), Next;
    Conv_Ovf_I1_Un = 0x82, "conv.ovf.i1.un", None, P(1), U(1), Next;
    Conv_Ovf_I2_Un = 0x83, "conv.ovf.i2.un", None, P(1), U(1), Next;
    Conv_Ovf_I4_Un = 0x84, "conv.ovf.i4.un", None, P(1), U(1), Next;
    Conv_Ovf_I8_Un = 0x85, "conv.ovf.i8.un", None, P(1), U(1), Next;
    Conv_Ovf_U1_Un = 0x86, "conv.ovf.u1.un", None, P(1), U(1), Next;
    Conv_Ovf_U2_Un = 0x87, "conv.ovf.u2.un", None, P(1), U(1), Next;
    Conv_Ovf_U4_Un = 0x88, "conv.ovf.u4.un", None, P(1), U(1), Next;
    Conv_Ovf_U8_Un = 0x89, "conv.ovf.u8.un", None, P(1), U(1), Next;
    Conv_Ovf_I_Un = 0x8A, "conv.ovf.i.un", None, P(1), U(1), Next;
    Conv_Ovf_U_Un = 0x8B, "conv.ovf.u.un", None, P(1), U(1), Next;
    Box = 0x8C, "box", Type, P(1), U(1), Next;
    Newarr = 0x8D, "newarr", Type, P(1), U(1), Next;
    Ldlen = 0x8E, "ldlen", None, P(1), U(1), Next;
    Ldelema = 0x8F, "ldelema", Type, P(2), U(1), Next;
    Ldelem_I1 = 0x90, "ldelem.i1", None, P(2), U(1), Next;
    Ldelem_U1 = 0x91, "ldelem.u1", None, P(2), U(1), Next;
    Ldelem_I2 = 0x92, "ldelem.i2", None, P(2), U(1), Next;
    Ldelem_U2 = 0x93, "ldelem.u2", None, P(2), U(1), Next;
    Ldelem_I4 = 0x94, "ldelem.i4", None, P(2), U(1), Next;
    Ldelem_U4 = 0x95, "ldelem.u4", None, P(2), U(1), Next;
    Ldelem_I8 = 0x96, "ldelem.i8", None, P(2), U(1), Next;
    Ldelem_I = 0x97, "ldelem.i", None, P(2), U(1), Next;
    Ldelem_R4 = 0x98, "ldelem.r4", None, P(2), U(1), Next;
    Ldelem_R8 = 0x99, "ldelem.r8", None, P(2), U(1), Next;
    Ldelem_Ref = 0x9A, "ldelem.ref", None, P(2), U(1), Next;
    Stelem_I = 0x9B, "stelem.i", None, P(3), U(0), Next;
    Stelem_I1 = 0x9C, "stelem.i1", None, P(3), U(0), Next;
    Stelem_I2 = 0x9D, "stelem.i2", None, P(3), U(0), Next;
    Stelem_I4 = 0x9E, "stelem.i4", None, P(3), U(0), Next;
    Stelem_I8 = 0x9F, "stelem.i8", None, P(3), U(0), Next;
    Stelem_R4 = 0xA0, "stelem.r4", None, P(3), U(0), Next;
    Stelem_R8 = 0xA1, "stelem.r8", None, P(3), U(0), Next;
    Stelem_Ref = 0xA2, "stelem.ref", None, P(3), U(0), Next;
    Ldelem = 0xA3, "ldelem", Type, P(2), U(1), Next;
    Stelem = 0xA4, "stelem", Type, P(3), U(0), Next;
    Unbox_Any = 0xA5, "unbox.any", Type, P(1), U(1), Next;
    Conv_Ovf_I1 = 0xB3, "conv.ovf.i1", None, P(1), U(1), Next;
    Conv_Ovf_U1 = 0xB4, "conv.ovf.u1", None, P(1), U(1), Next;
    Conv_Ovf_I2 = 0xB5, "conv.ovf.i2", None, P(1), U(1), Next;
    Conv_Ovf_U2 = 0xB6, "conv.ovf.u2", None, P(1), U(1), Next;
    Conv_Ovf_I4 = 0xB7, "conv.ovf.i4", None, P(1), U(1), Next;
    Conv_Ovf_U4 = 0xB8, "conv.ovf.u4", None, P(1), U(1), Next;
    Conv_Ovf_I8 = 0xB9, "conv.ovf.i8", None, P(1), U(1), Next;
    Conv_Ovf_U8 = 0xBA, "conv.ovf.u8", None, P(1), U(1), Next;
    Refanyval = 0xC2, "refanyval", Type, P(1), U(1), Next;
    Ckfinite = 0xC3, "ckfinite", None, P(1), U(1), Next;
    Mkrefany = 0xC6, "mkrefany", Type, P(1), U(1), Next;
    Ldtoken = 0xD0, "ldtoken", Tok, P(0), U(1), Next;
    Conv_U2 = 0xD1, "conv.u2", None, P(1), U(1), Next;
    Conv_U1 = 0xD2, "conv.u1", None, P(1), U(1), Next;
    Conv_I = 0xD3, "conv.i", None, P(1), U(1), Next;
    Conv_Ovf_I = 0xD4, "conv.ovf.i", None, P(1), U(1), Next;
    Conv_Ovf_U = 0xD5, "conv.ovf.u", None, P(1), U(1), Next;
    Add_Ovf = 0xD6, "add.ovf", None, P(2), U(1), Next;
    Add_Ovf_Un = 0xD7, "add.ovf.un", None, P(2), U(1), Next;
    Mul_Ovf = 0xD8, "mul.ovf", None, P(2), U(1), Next;
    Mul_Ovf_Un = 0xD9, "mul.ovf.un", None, P(2), U(1), Next;
    Sub_Ovf = 0xDA, "sub.ovf", None, P(2), U(1), Next;
    Sub_Ovf_Un = 0xDB, "sub.ovf.un", None, P(2), U(1), Next;
    Endfinally = 0xDC, "endfinally", None, PopAll, U(0), Return;
    Leave = 0xDD, "leave", BrTarget, PopAll, U(0), Branch;
    Leave_S = 0xDE, "leave.s", ShortBrTarget, PopAll, U(0), Branch;
    Stind_I = 0xDF, "stind.i", None, P(2), U(0), Next;
    Conv_U = 0xE0, "conv.u", None, P(1), U(1), Next;
    Arglist = 0xFE00, "arglist", None, P(0), U(1), Next;
    Ceq = 0xFE01, "ceq", None, P(2), U(1), Next;
    Cgt = 0xFE02, "cgt", None, P(2), U(1), Next;
    Cgt_Un = 0xFE03, "cgt.un", None, P(2), U(1), Next;
    Clt = 0xFE04, "clt", None, P(2), U(1), Next;
    Clt_Un = 0xFE05, "clt.un", None, P(2), U(1), Next;
    Ldftn = 0xFE06, "ldftn", Method, P(0), U(1), Next;
    Ldvirtftn = 0xFE07, "ldvirtftn", Method, P(1), U(1), Next;
    Ldarg = 0xFE09, "ldarg", Arg, P(0), U(1), Next;
    Ldarga = 0xFE0A, "ldarga", Arg, P(0), U(1), Next;
    Starg = 0xFE0B, "starg", Arg, P(1), U(0), Next;
    Ldloc = 0xFE0C, "ldloc", Local, P(0), U(1), Next;
    Ldloca = 0xFE0D, "ldloca", Local, P(0), U(1), Next;
    Stloc = 0xFE0E, "stloc", Local, P(1), U(0), Next;
    Localloc = 0xFE0F, "localloc", None, P(1), U(1), Next;
    Endfilter = 0xFE11, "endfilter", None, P(1), U(0), Return;
    Unaligned = 0xFE12, "unaligned.", ShortI, P(0), U(0), Prefix;
    Volatile = 0xFE13, "volatile.", None, P(0), U(0), Prefix;
    Tail = 0xFE14, "tail.", None, P(0), U(0), Prefix;
    Initobj = 0xFE15, "initobj", Type, P(1), U(0), Next;
    Constrained = 0xFE16, "constrained.", Type, P(0), U(0), Prefix;
    Cpblk = 0xFE17, "cpblk", None, P(3), U(0), Next;
    Initblk = 0xFE18, "initblk", None, P(3), U(0), Next;
    No = 0xFE19, "no.", ShortI, P(0), U(0), Prefix;
    Rethrow = 0xFE1A, "rethrow", None, P(0), U(0), Throw;
    Sizeof = 0xFE1C, "sizeof", Type, P(0), U(1), Next;
    Refanytype = 0xFE1D, "refanytype", None, P(1), U(1), Next;
    Readonly = 0xFE1E, "readonly.", None, P(0), U(0), Prefix;
}

/// Each encoding's family (low byte, plus 256 for `FE xx`): its general form and the operand
/// a macro form implies. Derived from the table's names when the crate is compiled: `<op>.s`
/// is the short form of `<op>` (`br.s`, `ldarg.s`, `ldc.i4.s`), and `<op>.<n>` or `<op>.m1`
/// without an operand is `<op>` with the operand `n` or −1 (`ldloc.2`, `ldc.i4.m1`), where
/// `<op>` takes an operand.
static FAMILIES: [(Opcode, Option<i32>); 512] = {
    let mut t = [(Opcode::Nop, None); 512];
    let mut i = 0;
    while i < ALL.len() {
        t[family_slot(ALL[i].opcode)] = family_by_name(&ALL[i]);
        i += 1;
    }
    t
};

const fn family_slot(op: Opcode) -> usize {
    let code = op as u16;
    (code & 0xFF) as usize + if code >> 8 == 0xFE { 256 } else { 0 }
}

/// Whether `a[..len]` is `b`.
const fn prefix_is(a: &[u8], len: usize, b: &[u8]) -> bool {
    if len != b.len() {
        return false;
    }
    let mut k = 0;
    while k < len {
        if a[k] != b[k] {
            return false;
        }
        k += 1;
    }
    true
}

const fn family_by_name(info: &OpInfo) -> (Opcode, Option<i32>) {
    let own = (info.opcode, None);
    let name = info.name.as_bytes();
    // The last dot splits base and suffix.
    let mut dot = name.len();
    while dot > 0 && name[dot - 1] != b'.' {
        dot -= 1;
    }
    if dot == 0 || dot == name.len() {
        return own;
    }
    let base_len = dot - 1;
    let mut g = 0;
    let general = loop {
        if g == ALL.len() {
            return own;
        }
        let candidate = &ALL[g];
        if !matches!(candidate.operand, OperandKind::None)
            && prefix_is(name, base_len, candidate.name.as_bytes())
        {
            break candidate.opcode;
        }
        g += 1;
    };
    let suffix_len = name.len() - dot;
    if suffix_len == 1 && name[dot] == b's' {
        return (general, None);
    }
    if !matches!(info.operand, OperandKind::None) {
        return own;
    }
    if suffix_len == 2 && name[dot] == b'm' && name[dot + 1] == b'1' {
        return (general, Some(-1));
    }
    let mut value = 0i32;
    let mut k = dot;
    while k < name.len() {
        if !name[k].is_ascii_digit() {
            return own;
        }
        value = value * 10 + (name[k] - b'0') as i32;
        k += 1;
    }
    (general, Some(value))
}

/// Marks a byte with no opcode in the lookup tables below.
const UNDEFINED: u8 = u8::MAX;

/// Index into [`ALL`] for each first byte (one-byte opcodes) and each second byte after `FE`.
struct Lookup {
    one: [u8; 256],
    two: [u8; 256],
}

static LOOKUP: Lookup = {
    assert!(ALL.len() < UNDEFINED as usize);
    let mut one = [UNDEFINED; 256];
    let mut two = [UNDEFINED; 256];
    let mut i = 0;
    while i < ALL.len() {
        let code = ALL[i].opcode as u16;
        if code >> 8 == 0xFE {
            two[(code & 0xFF) as usize] = i as u8;
        } else {
            assert!(code >> 8 == 0 && code != 0xFE);
            one[code as usize] = i as u8;
        }
        i += 1;
    }
    Lookup { one, two }
};

/// What the decoder needs of one opcode byte, in one small entry: the hot loops read nothing
/// else.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DecodeEntry {
    pub opcode: Option<Opcode>,
    pub operand: OperandKind,
    /// Opcode plus operand bytes; for `switch`, without its table; 0 when undefined.
    pub len: u8,
}

pub(crate) struct DecodeTables {
    /// By first byte. `FE` has `len` 0 and no opcode: the second byte decides.
    pub one: [DecodeEntry; 256],
    /// By the byte after `FE`.
    pub two: [DecodeEntry; 256],
}

pub(crate) static DECODE: DecodeTables = {
    const NONE: DecodeEntry = DecodeEntry {
        opcode: None,
        operand: OperandKind::None,
        len: 0,
    };
    let mut one = [NONE; 256];
    let mut two = [NONE; 256];
    let mut i = 0;
    while i < ALL.len() {
        let info = &ALL[i];
        let code = info.opcode as u16;
        let operand_len = match info.operand.fixed_size() {
            Some(n) => n,
            None => 4,
        };
        let two_byte = code >> 8 == 0xFE;
        let entry = DecodeEntry {
            opcode: Some(info.opcode),
            operand: info.operand,
            len: (if two_byte { 2 } else { 1 } + operand_len) as u8,
        };
        if two_byte {
            two[(code & 0xFF) as usize] = entry;
        } else {
            one[code as usize] = entry;
        }
        i += 1;
    }
    DecodeTables { one, two }
};

/// Length of each one-byte instruction by its first byte; 0 for `FE`, `switch` and undefined
/// bytes, which take the full decoder. One byte an entry keeps the table in four cache lines.
pub(crate) static FAST_LEN: [u8; 256] = {
    let mut len = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let e = DECODE.one[i];
        if e.opcode.is_some() && i != 0x45 {
            len[i] = e.len;
        }
        i += 1;
    }
    len
};

/// Length of each two-byte instruction `FE xx` by its second byte; 0 for prefixes and
/// undefined bytes.
pub(crate) static FAST_LEN_FE: [u8; 256] = {
    let mut len = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        len[i] = DECODE.two[i].len;
        i += 1;
    }
    let mut k = 0;
    while k < ALL.len() {
        let code = ALL[k].opcode as u16;
        if code >> 8 == 0xFE && matches!(ALL[k].flow, Flow::Prefix) {
            len[(code & 0xFF) as usize] = 0;
        }
        k += 1;
    }
    len
};

impl Opcode {
    /// The one-byte opcode encoded by `byte`, if any. `0xFE` (the two-byte escape) is not one.
    #[inline]
    pub fn from_byte(byte: u8) -> Option<Opcode> {
        match LOOKUP.one[byte as usize] {
            UNDEFINED => None,
            i => Some(ALL[i as usize].opcode),
        }
    }

    /// The two-byte opcode `FE byte`, if any.
    #[inline]
    pub fn from_fe_byte(byte: u8) -> Option<Opcode> {
        match LOOKUP.two[byte as usize] {
            UNDEFINED => None,
            i => Some(ALL[i as usize].opcode),
        }
    }

    /// The opcode with encoding `code` (`0x00XX` or `0xFEXX`).
    pub fn from_u16(code: u16) -> Option<Opcode> {
        match code >> 8 {
            0 => Opcode::from_byte(code as u8),
            0xFE => Opcode::from_fe_byte(code as u8),
            _ => None,
        }
    }

    /// Static facts about this opcode.
    #[inline]
    pub fn info(self) -> &'static OpInfo {
        let code = self as u16;
        let table = if code >> 8 == 0xFE {
            &LOOKUP.two
        } else {
            &LOOKUP.one
        };
        // Every variant was placed in LOOKUP when the table was built.
        &ALL[table[(code & 0xFF) as usize] as usize]
    }

    /// The ECMA-335 mnemonic, e.g. `ldarg.s`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// What follows the opcode bytes.
    pub fn operand_kind(self) -> OperandKind {
        self.info().operand
    }

    /// Where control goes after the instruction.
    pub fn flow(self) -> Flow {
        self.info().flow
    }

    /// The encoding as a `u16`: `0x00XX` or `0xFEXX`.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Number of opcode bytes: 1 or 2.
    pub fn size(self) -> usize {
        if (self as u16) >> 8 == 0xFE { 2 } else { 1 }
    }

    /// True for `unaligned.`, `volatile.`, `tail.`, `constrained.`, `readonly.` and `no.`.
    pub fn is_prefix(self) -> bool {
        self.flow() == Flow::Prefix
    }

    /// The general form of the opcode's family: `br` for `br.s`, `ldarg` for `ldarg.0` and
    /// `ldarg.s`, `ldc.i4` for `ldc.i4.m1`; `self` for an opcode of no family.
    pub const fn general_form(self) -> Opcode {
        FAMILIES[family_slot(self)].0
    }

    /// The operand a macro form implies (`ldloc.2`: 2, `ldc.i4.m1`: −1), as its general form
    /// would take it; `None` for every other opcode.
    pub const fn implied_operand(self) -> Option<i32> {
        FAMILIES[family_slot(self)].1
    }

    /// The long form of a short branch (`br.s` → `br`), or `self` when there is none.
    pub fn long_form(self) -> Opcode {
        let code = self as u16;
        match code {
            0x2B..=0x37 => Opcode::from_byte(code as u8 + 0x0D).unwrap_or(self),
            0xDE => Opcode::Leave,
            _ => self,
        }
    }

    /// The short form of a long branch (`br` → `br.s`), or `self` when there is none.
    pub fn short_form(self) -> Opcode {
        let code = self as u16;
        match code {
            0x38..=0x44 => Opcode::from_byte(code as u8 - 0x0D).unwrap_or(self),
            0xDD => Opcode::Leave_S,
            _ => self,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_counts_match_partition_iii() {
        let one = ALL.iter().filter(|i| i.opcode.size() == 1).count();
        let two = ALL.iter().filter(|i| i.opcode.size() == 2).count();
        // 00–23, 25–76, 79–A5, B3–BA, C2, C3, C6, D0–E0; FE 00–07, 09–0F, 11–1A, 1C–1E.
        assert_eq!((one, two), (36 + 82 + 45 + 8 + 3 + 17, 8 + 7 + 10 + 3));
        let prefixes: Vec<_> = ALL
            .iter()
            .filter(|i| i.opcode.is_prefix())
            .map(|i| i.name)
            .collect();
        assert_eq!(
            prefixes,
            [
                "unaligned.",
                "volatile.",
                "tail.",
                "constrained.",
                "no.",
                "readonly."
            ]
        );
    }

    #[test]
    fn table_is_sorted_and_unique() {
        for pair in ALL.windows(2) {
            assert!(
                pair[0].opcode < pair[1].opcode,
                "{} / {}",
                pair[0].name,
                pair[1].name
            );
        }
        let mut names: Vec<_> = ALL.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn lookups_round_trip() {
        for info in ALL {
            assert_eq!(info.opcode.info(), info);
            assert_eq!(Opcode::from_u16(info.opcode.code()), Some(info.opcode));
        }
        assert_eq!(Opcode::from_byte(0xFE), None);
        for b in 0xF0..=0xFFu8 {
            assert_eq!(Opcode::from_byte(b), None, "{b:#x}");
        }
    }

    #[test]
    fn families_come_from_the_table() {
        use Opcode::*;
        let fam = |op: Opcode| (op.general_form(), op.implied_operand());
        for info in ALL {
            let (general, implied) = fam(info.opcode);
            if info.operand == OperandKind::ShortBrTarget {
                assert_eq!(general, info.opcode.long_form());
            } else if general != info.opcode {
                assert_ne!(general.operand_kind(), OperandKind::None, "{}", info.name);
            } else {
                assert_eq!(implied, None, "{}", info.name);
            }
        }
        let implied: Vec<(&str, Opcode, i32)> = ALL
            .iter()
            .filter_map(|i| {
                let (general, implied) = fam(i.opcode);
                implied.map(|v| (i.name, general, v))
            })
            .collect();
        assert_eq!(implied.len(), 4 + 4 + 4 + 10, "{implied:?}");
        assert!(implied.contains(&("ldarg.3", Ldarg, 3)));
        assert!(implied.contains(&("stloc.0", Stloc, 0)));
        assert!(implied.contains(&("ldc.i4.m1", Ldc_I4, -1)));
        assert!(implied.contains(&("ldc.i4.8", Ldc_I4, 8)));
        let short: Vec<&str> = ALL
            .iter()
            .filter(|i| fam(i.opcode).0 != i.opcode && fam(i.opcode).1.is_none())
            .map(|i| i.name)
            .collect();
        assert_eq!(short.len(), 13 + 1 + 7, "{short:?}");
        for op in [Ldelem_I4, Conv_Ovf_I1_Un, Cgt_Un, Ldc_R4, Unbox_Any] {
            assert_eq!(fam(op), (op, None));
        }
    }

    #[test]
    fn branch_forms_pair_up() {
        for info in ALL {
            let op = info.opcode;
            if info.operand == OperandKind::ShortBrTarget {
                let long = op.long_form();
                assert_eq!(long.operand_kind(), OperandKind::BrTarget, "{op}");
                assert_eq!(long.short_form(), op);
                assert_eq!(format!("{long}.s"), op.name());
                assert_eq!((long.info().pops, long.info().flow), (info.pops, info.flow));
            } else if info.operand == OperandKind::BrTarget {
                assert_eq!(op.short_form().long_form(), op);
            } else {
                assert_eq!((op.long_form(), op.short_form()), (op, op));
            }
        }
    }
}
