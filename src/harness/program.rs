//! Runnable assemblies of generated methods: the programs `ilcheck generate` writes and
//! `ilcheck fuzz` gives a user's rewriter.
//!
//! A program holds M methods of [`generate`](crate::generate::valid), each with its synthetic
//! callees made real (static methods that compute the interpreter's call hash, fold it into a
//! trace checksum and throw the generated exception where the interpreter says they throw), a
//! runner per method that calls it on each of its inputs inside a `try`/`catch`, and a `Main`
//! that calls the runners. Every call prints one *result line* on standard output:
//!
//! ```text
//! @ M3#0 ret 42 trace -1288210135
//! @ M3#1 throw 77 trace 5
//! @ M4#0 void trace 0
//! @ M5#0 exception System.InvalidProgramException trace 0
//! @ M6#0 ret -9000000000 trace 0 ref 7 ref -3
//! @ M7#0 ret S 5 -81604378619 trace 0
//! @ M8#1 ret C -12 trace 0
//! ```
//!
//! A result of the value type `S` prints as `ret S A B` (its fields `a`, `b`), one of the class
//! `C` as `ret C X` (its field `x`); an `S` argument is built from its input `V` (`a` its low 32
//! bits, `b` all of it), a `C` argument is a new `C` with `x` = `V`. Every program defines `S`
//! and `C` at the tokens the generator uses, whether its methods use them or not.
//!
//! A method with `int32&` arguments is passed the addresses of `int32` locals of its runner,
//! set from its inputs; the line ends with their final values (` ref V`, in argument order),
//! whether the call returned or threw.
//!
//! A generated method may call an earlier one of the program ([`Peer`]): the call goes to the
//! real method when the program holds it with the signature the caller was generated against,
//! else to a stub `Gone_Mk` of that signature that returns zero (a minimised program may have
//! dropped the callee, or changed its signature).
//!
//! The [`Manifest`] lists the methods, their seeds and inputs, and the lines the interpreter
//! expects; other output (a probe's, say) is not a result line. The same seed gives the same
//! bytes, and the built image is read back and verified before it is returned.

use super::il::{Code, lay_out};
pub use super::runtime::RUNTIMECONFIG;
use crate::body::{Body, Clause};
use crate::generate::interp::PeerCode;
use crate::generate::interp::{self, Env, Outcome as RunOutcome, call_hash};
use crate::generate::valid::{
    ArgType, CLASS_CTOR, CLASS_TYPE, CLASS_X, Callee, EXCEPTION_CLASS, EXCEPTION_CTOR,
    EXCEPTION_VALUE, FIRST_CALLEE, Generated, OTHER_CLASS, Peer, STRUCT_A, STRUCT_B, STRUCT_TYPE,
    ValType, generate_calling,
};
use crate::generate::{Config, generate_from_bytes};
use crate::image::emit::AssemblyIdentity;
use crate::image::emit::EmitError;
use crate::image::emit::assembly::{
    AssemblyBuilder, ImageKind, SigType, field_sig, flags, locals_sig, method_sig,
};
use crate::image::tables::Token;
use crate::ir::{BranchForms, HeaderInfo, Instr, Method, Operand};
use crate::opcode::Opcode;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The first characters of every result line.
pub const RESULT_MARK: &str = "@ ";

/// Steps the interpreter may take per call (generated loops are bounded).
const FUEL: u64 = 2_000_000;

/// Bytes of choice stream each generated method is drawn from.
const CHOICE_BYTES: usize = 4096;

/// Why a program could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProgramError {
    /// The generator's settings are out of range ([`Config::check`]).
    #[error("generator config: {0}")]
    Config(#[from] crate::generate::ConfigError),
    /// More methods were asked for than a program holds ([`MAX_METHODS`]).
    #[error("{count} methods per program; allowed: 0 to {MAX_METHODS}")]
    TooManyMethods {
        /// The count asked for.
        count: u32,
    },
    /// Metadata could not be added.
    #[error("metadata: {0}")]
    Emit(#[from] EmitError),
    /// A method could not be laid out.
    #[error("method {method}: layout: {source}")]
    Layout {
        /// The method's name.
        method: String,
        /// Why.
        source: crate::ir::LayoutError,
    },
    /// The interpreter could not run a method to its end (a generator defect).
    #[error("method {method}: the interpreter could not run it: {reason}")]
    NotRunnable {
        /// The method's name.
        method: String,
        /// What happened.
        reason: NotRunnable,
    },
}

/// Why the interpreter could not run a generated method.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NotRunnable {
    /// Its laid-out body does not parse.
    #[error("its body does not parse: {0}")]
    Body(#[from] crate::body::DecodeError),
    /// On one of its inputs, the run ended neither with a return nor with the exception.
    #[error("input {input}: {outcome:?}")]
    Run {
        /// The input's index.
        input: usize,
        /// How the run ended.
        outcome: interp::Outcome,
    },
}

/// One generated method of a program: its name, the seed it was drawn from, and the method.
#[derive(Clone, Debug)]
pub struct ProgramMethod {
    /// Its name in the program (`M0`, `M1`, …).
    pub name: String,
    /// The seed of its choice stream ([`method_from_seed`]).
    pub seed: u64,
    /// The choice stream when it is not the seed's (a minimised method's).
    pub choices: Option<Vec<u8>>,
    /// The earlier methods of the program it was offered to call.
    pub peers: Vec<Peer>,
    /// The generated method (synthetic tokens).
    pub generated: Generated,
}

impl ProgramMethod {
    /// The method of `seed`, named `name`, offered to call `peers`.
    pub fn from_seed(name: String, seed: u64, config: &Config, peers: Vec<Peer>) -> Self {
        let bytes = seed_bytes(seed, CHOICE_BYTES);
        ProgramMethod {
            name,
            seed,
            choices: None,
            generated: generate_calling(&mut arbitrary::Unstructured::new(&bytes), config, &peers),
            peers,
        }
    }

    /// The method of an explicit choice stream (`seed` kept for the record), offered to call
    /// `peers`.
    pub fn from_choices(
        name: String,
        seed: u64,
        choices: Vec<u8>,
        config: &Config,
        peers: Vec<Peer>,
    ) -> Self {
        ProgramMethod {
            name,
            seed,
            generated: generate_calling(
                &mut arbitrary::Unstructured::new(&choices),
                config,
                &peers,
            ),
            choices: Some(choices),
            peers,
        }
    }

    /// Its choice stream: the explicit one, or the seed's.
    pub fn choice_bytes(&self) -> Vec<u8> {
        self.choices
            .clone()
            .unwrap_or_else(|| seed_bytes(self.seed, CHOICE_BYTES))
    }
}

/// What a program holds and what running it must print.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// The assembly's file name.
    pub assembly: String,
    /// The seed the program was generated from (when it was).
    pub seed: u64,
    /// The generator's settings the methods were drawn with.
    pub config: Config,
    /// The methods, in order.
    pub methods: Vec<ManifestMethod>,
}

/// One method of a [`Manifest`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ManifestMethod {
    /// The method's name in `Ilcheck.Program`.
    pub name: String,
    /// Its MethodDef token, `0x06xxxxxx`.
    pub token: String,
    /// The seed of its choice stream.
    pub seed: u64,
    /// The choice stream as hex when it is not the seed's (a minimised method's); trailing
    /// zero bytes are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<String>,
    /// Argument vectors it is called with, in order (for an `int32&` argument, the initial
    /// value of the `int32` it points to).
    pub inputs: Vec<Vec<i64>>,
    /// The result lines the calls print, in order.
    pub expected: Vec<String>,
    /// The earlier methods it was offered to call, with the signatures it was generated
    /// against.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<Peer>,
}

impl Manifest {
    /// The methods again, from their seeds or choice streams and [`Manifest::config`] (an
    /// error when [`Config::check`] refuses it: a manifest is input like any other).
    pub fn program_methods(&self) -> Result<Vec<ProgramMethod>, String> {
        self.config
            .check()
            .map_err(|e| format!("manifest config: {e}"))?;
        self.methods
            .iter()
            .map(|m| match &m.choices {
                None => Ok(ProgramMethod::from_seed(
                    m.name.clone(),
                    m.seed,
                    &self.config,
                    m.peers.clone(),
                )),
                Some(hex) => {
                    let bytes = (0..hex.len() / 2)
                        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
                        .collect::<Result<Vec<u8>, _>>()
                        .map_err(|_| format!("method {}: choices are not hex", m.name))?;
                    Ok(ProgramMethod::from_choices(
                        m.name.clone(),
                        m.seed,
                        bytes,
                        &self.config,
                        m.peers.clone(),
                    ))
                }
            })
            .collect()
    }

    /// Reads the manifest beside an assembly: `NAME.manifest.json` for `NAME.exe`.
    pub fn beside(assembly: &std::path::Path) -> Option<std::path::PathBuf> {
        let stem = assembly.file_stem()?.to_str()?;
        Some(assembly.with_file_name(format!("{stem}.manifest.json")))
    }

    /// Every expected result line, in the order the program prints them.
    pub fn expected_lines(&self) -> Vec<&str> {
        self.methods
            .iter()
            .flat_map(|m| m.expected.iter().map(String::as_str))
            .collect()
    }
}

/// A built program: the assembly's bytes and its manifest.
#[derive(Clone, Debug)]
pub struct Program {
    /// The PE file.
    pub bytes: Vec<u8>,
    /// What it holds and prints.
    pub manifest: Manifest,
}

/// The result lines of a program's output: the lines that start with [`RESULT_MARK`].
pub fn result_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| l.starts_with(RESULT_MARK))
        .collect()
}

/// A reproducible stream of bytes from a seed (splitmix64).
pub fn seed_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The seed of method `index` of the program with seed `seed`.
pub fn method_seed(seed: u64, index: u64) -> u64 {
    let b = seed_bytes(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F), 8);
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

/// The generated method of a seed.
pub fn method_from_seed(seed: u64, config: &Config) -> Generated {
    generate_from_bytes(&seed_bytes(seed, CHOICE_BYTES), config)
}

/// Most earlier methods a generated method is offered to call: the latest ones that call no
/// other method.
pub const MAX_PEERS: usize = 3;

/// `count` methods for the program of `seed`, named `M0`, `M1`, …; each is offered to call
/// the [`MAX_PEERS`] latest earlier ones that call no other (when [`Config::peer_calls`]).
pub fn generate_methods(seed: u64, count: u32, config: &Config) -> Vec<ProgramMethod> {
    // Reserved only up to what a program holds: `count` is the caller's.
    let mut methods: Vec<ProgramMethod> = Vec::with_capacity(count.min(MAX_METHODS) as usize);
    let mut leaves: Vec<Peer> = Vec::new();
    for i in 0..count {
        let peers = if config.peer_calls {
            leaves[leaves.len().saturating_sub(MAX_PEERS)..].to_vec()
        } else {
            Vec::new()
        };
        let m = ProgramMethod::from_seed(
            format!("M{i}"),
            method_seed(seed, u64::from(i)),
            config,
            peers,
        );
        if !m.generated.calls_peers {
            leaves.push(Peer::of(i, &m.generated));
        }
        methods.push(m);
    }
    methods
}

/// The method a call to `peer` goes to among `earlier`: `M{index}` with the signature the
/// caller was generated against, calling no other method itself; `None`: a stub.
fn resolve_peer<'m>(peer: &Peer, earlier: &'m [ProgramMethod]) -> Option<&'m ProgramMethod> {
    let name = format!("M{}", peer.index);
    earlier.iter().find(|m| {
        m.name == name && !m.generated.calls_peers && Peer::of(peer.index, &m.generated) == *peer
    })
}

/// A generated method a call goes to, with its laid-out code and clauses.
type PeerBody<'m> = (&'m ProgramMethod, Vec<u8>, Vec<Clause>);

/// A method's laid-out code and clauses, for the interpreter.
fn interp_code(m: &ProgramMethod) -> Result<(Vec<u8>, Vec<Clause>), ProgramError> {
    let bytes = m
        .generated
        .encode()
        .map_err(|source| ProgramError::Layout {
            method: m.name.clone(),
            source,
        })?;
    let body = Body::parse(&bytes).map_err(|e| ProgramError::NotRunnable {
        method: m.name.clone(),
        reason: e.into(),
    })?;
    Ok((body.code.to_vec(), body.clauses().collect()))
}

/// Most generated methods in one program: each is a body, a manifest entry and a call in
/// `Main`; more add nothing a run of several programs does not.
pub const MAX_METHODS: u32 = 10_000;

/// The program of `seed`: `count` generated methods and a `Main` that runs them. A `config`
/// that [`Config::check`] refuses, or a `count` above [`MAX_METHODS`], is an error.
pub fn generate_program(
    name: &str,
    seed: u64,
    count: u32,
    config: &Config,
) -> Result<Program, ProgramError> {
    config.check()?;
    if count > MAX_METHODS {
        return Err(ProgramError::TooManyMethods { count });
    }
    let methods = generate_methods(seed, count, config);
    let mut p = build_program(name, &methods, config)?;
    p.manifest.seed = seed;
    Ok(p)
}

/// The result lines the interpreter expects of `m`, one per input; its calls to generated
/// methods go to those of `earlier` (see `resolve_peer`), or to stubs.
pub fn expected_lines(
    m: &ProgramMethod,
    earlier: &[ProgramMethod],
) -> Result<Vec<String>, ProgramError> {
    let g = &m.generated;
    let fail = |reason: NotRunnable| ProgramError::NotRunnable {
        method: m.name.clone(),
        reason,
    };
    let (code, clauses) = interp_code(m)?;
    let callees: Vec<(&Peer, Option<PeerBody<'_>>)> = g
        .peers
        .iter()
        .map(|p| {
            let body = match resolve_peer(p, earlier) {
                Some(c) => {
                    let (code, clauses) = interp_code(c)?;
                    Some((c, code, clauses))
                }
                None => None,
            };
            Ok((p, body))
        })
        .collect::<Result<_, ProgramError>>()?;
    let peers: Vec<PeerCode<'_>> = callees
        .iter()
        .map(|(p, body)| PeerCode {
            token: p.token(),
            args: &p.args,
            ret: p.ret,
            body: body
                .as_ref()
                .map(|(c, code, clauses)| (&code[..], &clauses[..], c.generated.env(FUEL))),
        })
        .collect();
    let env = Env {
        peers: &peers,
        ..g.env(FUEL)
    };
    g.inputs
        .iter()
        .enumerate()
        .map(|(i, args)| {
            let run = interp::run(&code, &clauses, args, &env);
            let trace = run.trace.iter().fold(0i32, |t, e| {
                t.wrapping_mul(31)
                    .wrapping_add(call_hash(e.token, &e.args) as i32)
            });
            let outcome = match run.outcome {
                RunOutcome::Returned(Some(v)) => format!("ret {v}"),
                RunOutcome::Returned(None) => "void".to_string(),
                RunOutcome::Threw(v) => format!("throw {v}"),
                outcome => return Err(fail(NotRunnable::Run { input: i, outcome })),
            };
            let refs: String = run.refs.iter().map(|v| format!(" ref {v}")).collect();
            Ok(format!(
                "{RESULT_MARK}{}#{i} {outcome} trace {trace}{refs}",
                m.name
            ))
        })
        .collect()
}

/// The references and members every program uses.
struct Common {
    exception: Token,
    /// `System.Object::.ctor`, which `C`'s constructor calls.
    object_ctor: Token,
    s_space: Token,
    s_struct: Token,
    s_class: Token,
    trace: Token,
    exception_ctor: Token,
    int_to_string: Token,
    long_to_string: Token,
    concat2: Token,
    concat3: Token,
    concat4: Token,
    get_type: Token,
    object_to_string: Token,
    write_line: Token,
    /// The `ldstr` literals of result lines.
    s_ret: Token,
    s_void: Token,
    s_throw: Token,
    s_exception: Token,
    s_trace: Token,
    s_ref: Token,
}

/// Builds the program of `methods` (see the module documentation).
pub fn build_program(
    name: &str,
    methods: &[ProgramMethod],
    config: &Config,
) -> Result<Program, ProgramError> {
    let mut b = AssemblyBuilder::new(name, [1, 0, 0, 0], ImageKind::Exe)?;
    let corlib = b.assembly_ref(&AssemblyIdentity {
        name: "mscorlib".into(),
        version: [4, 0, 0, 0],
        culture: String::new(),
        public_key_or_token: vec![0xB7, 0x7A, 0x5C, 0x56, 0x19, 0x34, 0xE0, 0x89],
        full_public_key: false,
    })?;
    let object = b.type_ref(corlib, "System", "Object")?;
    let exception = b.type_ref(corlib, "System", "Exception")?;
    let string = b.type_ref(corlib, "System", "String")?;
    let int32 = b.type_ref(corlib, "System", "Int32")?;
    let int64 = b.type_ref(corlib, "System", "Int64")?;
    let console = b.type_ref(corlib, "System", "Console")?;
    let type_ = b.type_ref(corlib, "System", "Type")?;
    let void_ctor = method_sig(true, SigType::Void, &[])?;
    let value_type = b.type_ref(corlib, "System", "ValueType")?;
    let c = Common {
        exception,
        object_ctor: b.member_ref(object, ".ctor", &void_ctor)?,
        s_space: b.user_string(" ")?,
        s_struct: b.user_string("ret S ")?,
        s_class: b.user_string("ret C ")?,
        trace: Token(0),
        exception_ctor: b.member_ref(exception, ".ctor", &void_ctor)?,
        int_to_string: b.member_ref(int32, "ToString", &method_sig(true, SigType::String, &[])?)?,
        long_to_string: b.member_ref(
            int64,
            "ToString",
            &method_sig(true, SigType::String, &[])?,
        )?,
        concat2: b.member_ref(
            string,
            "Concat",
            &method_sig(false, SigType::String, &[SigType::String; 2])?,
        )?,
        concat3: b.member_ref(
            string,
            "Concat",
            &method_sig(false, SigType::String, &[SigType::String; 3])?,
        )?,
        concat4: b.member_ref(
            string,
            "Concat",
            &method_sig(false, SigType::String, &[SigType::String; 4])?,
        )?,
        get_type: b.member_ref(
            object,
            "GetType",
            &method_sig(true, SigType::Class(type_), &[])?,
        )?,
        object_to_string: b.member_ref(
            object,
            "ToString",
            &method_sig(true, SigType::String, &[])?,
        )?,
        write_line: b.member_ref(
            console,
            "WriteLine",
            &method_sig(false, SigType::Void, &[SigType::String])?,
        )?,
        s_ret: b.user_string("ret ")?,
        s_void: b.user_string("void")?,
        s_throw: b.user_string("throw ")?,
        s_exception: b.user_string("exception ")?,
        s_trace: b.user_string(" trace ")?,
        s_ref: b.user_string(" ref ")?,
    };
    let mut c = c;

    // The generator's fixed tokens: TypeDef 2 is the exception, TypeDef 3 the class no code
    // throws, Field 1 the exception's value, MethodDef 1 its constructor. A type's members
    // follow its row, so the exception's come before the next type's row.
    let public_class = flags::TYPE_PUBLIC | flags::TYPE_BEFORE_FIELD_INIT;
    let gen_exception = b.type_def(
        public_class,
        "Ilcheck",
        "GeneratedException",
        Some(exception),
    )?;
    let value = b.field(flags::FIELD_PUBLIC, "Value", &field_sig(SigType::I4)?)?;
    let ctor_flags = flags::METHOD_PUBLIC
        | flags::METHOD_HIDE_BY_SIG
        | flags::METHOD_SPECIAL_NAME
        | flags::METHOD_RT_SPECIAL_NAME;
    let ctor = b.method(
        ctor_flags,
        ".ctor",
        &method_sig(true, SigType::Void, &[SigType::I4])?,
        &exception_ctor_body(&c, value)?,
    )?;
    let other = b.type_def(public_class, "Ilcheck", "OtherException", Some(exception))?;
    // TypeDef 4 the value type `S`, Fields 2 and 3 its `a` and `b`; TypeDef 5 the class `C`,
    // Field 4 its `x`, MethodDef 2 its constructor. Every program has them, used or not, so
    // that their tokens are fixed.
    let s_type = b.type_def(
        flags::TYPE_PUBLIC | flags::TYPE_SEQUENTIAL_LAYOUT | flags::TYPE_SEALED,
        "Ilcheck",
        "S",
        Some(value_type),
    )?;
    let s_a = b.field(flags::FIELD_PUBLIC, "a", &field_sig(SigType::I4)?)?;
    let s_b = b.field(flags::FIELD_PUBLIC, "b", &field_sig(SigType::I8)?)?;
    let c_type = b.type_def(public_class, "Ilcheck", "C", Some(object))?;
    let c_x = b.field(flags::FIELD_PUBLIC, "x", &field_sig(SigType::I4)?)?;
    let c_ctor = b.method(
        ctor_flags,
        ".ctor",
        &method_sig(true, SigType::Void, &[SigType::I4])?,
        &class_ctor_body(&c, c_x)?,
    )?;
    debug_assert_eq!(
        (gen_exception.0, other.0, value.0, ctor.0),
        (
            EXCEPTION_CLASS,
            OTHER_CLASS,
            EXCEPTION_VALUE,
            EXCEPTION_CTOR
        )
    );
    debug_assert_eq!(
        (s_type.0, s_a.0, s_b.0, c_type.0, c_x.0, c_ctor.0),
        (
            STRUCT_TYPE,
            STRUCT_A,
            STRUCT_B,
            CLASS_TYPE,
            CLASS_X,
            CLASS_CTOR
        )
    );

    b.type_def(
        public_class | flags::TYPE_ABSTRACT | flags::TYPE_SEALED,
        "Ilcheck",
        "Program",
        Some(object),
    )?;
    c.trace = b.field(
        flags::FIELD_PUBLIC | flags::FIELD_STATIC,
        "Trace",
        &field_sig(SigType::I4)?,
    )?;

    let static_flags = flags::METHOD_PUBLIC | flags::METHOD_STATIC | flags::METHOD_HIDE_BY_SIG;
    // Callees that behave alike are one method (the interpreter's hash takes the synthetic
    // token): fewer methods for the rewriter to rewrite and the runtimes to compile.
    let mut callees: Vec<Callee> = methods
        .iter()
        .flat_map(|m| m.generated.callees.iter().copied())
        .collect();
    callees.sort_by_key(|c| (c.token, c.params, c.returns_void, c.may_throw));
    callees.dedup();
    let mut callee_tokens = std::collections::HashMap::with_capacity(callees.len());
    for callee in &callees {
        let params = vec![SigType::I4; callee.params as usize];
        let ret = if callee.returns_void {
            SigType::Void
        } else {
            SigType::I4
        };
        let name = format!(
            "C{}_{}{}{}",
            callee.token - FIRST_CALLEE,
            callee.params,
            if callee.returns_void { "v" } else { "i" },
            if callee.may_throw { "t" } else { "" }
        );
        let body = callee_body(&c, callee).map_err(|source| ProgramError::Layout {
            method: name.clone(),
            source,
        })?;
        let t = b.method(
            static_flags,
            &name,
            &method_sig(false, ret, &params)?,
            &body,
        )?;
        callee_tokens.insert(*callee, t);
    }
    // Stubs for the calls to generated methods the program does not hold as the callers
    // expect them.
    let mut stubs: std::collections::HashMap<Peer, Token> = std::collections::HashMap::new();
    for (i, m) in methods.iter().enumerate() {
        for p in &m.generated.peers {
            if resolve_peer(p, &methods[..i]).is_none() && !stubs.contains_key(p) {
                let name = format!("Gone_M{}_{}", p.index, stubs.len());
                let params: Vec<SigType> = p.args.iter().map(|&a| arg_sig(a)).collect();
                let ret = p.ret.map_or(SigType::Void, val_sig);
                // An `S` to return is zeroed in a local.
                let locals = if p.ret == Some(ValType::Struct) {
                    b.standalone_sig(&locals_sig(&[val_sig(ValType::Struct)])?)?
                } else {
                    Token(0)
                };
                let mut k = Code::new(8, locals);
                match p.ret {
                    None => {}
                    Some(ValType::I4) => {
                        k.i4(0);
                    }
                    Some(ValType::I8) => {
                        k.0.push(Instr::new(Opcode::Ldc_I8, Operand::Int64(0)));
                    }
                    Some(ValType::Struct) => {
                        k.var(Opcode::Ldloca, 0)
                            .tok(Opcode::Initobj, Token(STRUCT_TYPE))
                            .var(Opcode::Ldloc, 0);
                    }
                    Some(ValType::Class) => {
                        k.i4(0).tok(Opcode::Newobj, Token(CLASS_CTOR));
                    }
                }
                k.op(Opcode::Ret);
                let body = k.done().map_err(|source| ProgramError::Layout {
                    method: name.clone(),
                    source,
                })?;
                let t = b.method(
                    static_flags,
                    &name,
                    &method_sig(false, ret, &params)?,
                    &body,
                )?;
                stubs.insert(p.clone(), t);
            }
        }
    }
    let mut method_tokens: std::collections::HashMap<&str, Token> =
        std::collections::HashMap::new();
    let mut runners = Vec::with_capacity(methods.len());
    let mut manifest_methods = Vec::with_capacity(methods.len());
    for (index, m) in methods.iter().enumerate() {
        let g = &m.generated;
        let expected = expected_lines(m, &methods[..index])?;
        let peer_tokens: Vec<(u32, Token)> = g
            .peers
            .iter()
            .map(|p| {
                let real = resolve_peer(p, &methods[..index])
                    .and_then(|c| method_tokens.get(c.name.as_str()).copied());
                (
                    p.token(),
                    real.or_else(|| stubs.get(p).copied()).unwrap_or(Token(0)),
                )
            })
            .collect();
        let layout_err = |source| ProgramError::Layout {
            method: m.name.clone(),
            source,
        };
        // The method, then its runner: tokens in that order.
        let method_token = Token::new(
            crate::image::tables::Table::MethodDef,
            b.rows(crate::image::tables::Table::MethodDef) + 1,
        );
        let locals = if g.shape.locals > 0 {
            let types: Vec<SigType> = (0..g.shape.locals as usize)
                .map(|k| val_sig(g.shape.local_type(k)))
                .collect();
            b.standalone_sig(&locals_sig(&types)?)?
        } else {
            Token(0)
        };
        let mut method = g.method.clone();
        method.header.local_sig = locals.0;
        // Locals are read before they are written: the runtimes must zero them, as the
        // interpreter does.
        method.header.init_locals = g.shape.locals > 0;
        for ins in &mut method.instrs {
            if let Operand::Token(t) = &mut ins.operand
                && let Some(callee) = g.callees.iter().find(|c| c.token == *t)
                && let Some(real) = callee_tokens.get(callee)
            {
                *t = real.0;
            } else if let Operand::Token(t) = &mut ins.operand
                && let Some(&(_, real)) = peer_tokens.iter().find(|(synthetic, _)| synthetic == t)
            {
                *t = real.0;
            }
        }
        let body = lay_out(&method, BranchForms::KeepOriginal).map_err(layout_err)?;
        let params = param_sigs(g);
        let ret = g.shape.returns().map_or(SigType::Void, val_sig);
        let t = b.method(
            static_flags,
            &m.name,
            &method_sig(false, ret, &params)?,
            &body,
        )?;
        debug_assert_eq!(t, method_token);
        method_tokens.insert(&m.name, t);
        let mut labels = Vec::with_capacity(g.inputs.len());
        for i in 0..g.inputs.len() {
            labels.push(b.user_string(&format!("{RESULT_MARK}{}#{i} ", m.name))?);
        }
        let refs = g
            .shape
            .arg_types
            .iter()
            .filter(|&&t| t == ArgType::RefI4)
            .count();
        let mut runner_locals = vec![
            SigType::I4,
            SigType::Class(exception),
            SigType::String,
            SigType::I8,
        ];
        runner_locals.extend(std::iter::repeat_n(SigType::I4, refs));
        // An `S` argument is built, and an `S` result read, in the last local.
        runner_locals.push(val_sig(ValType::Struct));
        let runner_locals = b.standalone_sig(&locals_sig(&runner_locals)?)?;
        let body = runner_body(&c, g, method_token, runner_locals, &labels).map_err(layout_err)?;
        let runner = b.method(
            static_flags,
            &format!("Run_{}", m.name),
            &method_sig(false, SigType::Void, &[])?,
            &body,
        )?;
        runners.push(runner);
        manifest_methods.push(ManifestMethod {
            name: m.name.clone(),
            token: format!("{:#010x}", method_token.0),
            seed: m.seed,
            choices: m.choices.as_ref().map(|c| {
                let end = c.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                c[..end].iter().map(|b| format!("{b:02x}")).collect()
            }),
            inputs: g.inputs.clone(),
            expected,
            peers: m.peers.clone(),
        });
    }
    let mut main = Method::new(HeaderInfo {
        max_stack: 8,
        init_locals: false,
        local_sig: 0,
    });
    for r in &runners {
        main.push(Instr::new(Opcode::Call, Operand::Token(r.0)));
    }
    main.push(Instr::op(Opcode::Ret));
    let body =
        lay_out(&main, BranchForms::ShortestWhereFits).map_err(|source| ProgramError::Layout {
            method: "Main".into(),
            source,
        })?;
    let main = b.method(
        static_flags,
        "Main",
        &method_sig(false, SigType::Void, &[])?,
        &body,
    )?;
    b.set_entry_point(main);
    Ok(Program {
        bytes: b.build()?,
        manifest: Manifest {
            assembly: format!("{name}.exe"),
            seed: 0,
            config: config.clone(),
            methods: manifest_methods,
        },
    })
}

impl Program {
    /// Writes `NAME.exe`, `NAME.manifest.json` and `NAME.runtimeconfig.json` into `dir`, each
    /// atomically; returns the assembly's path.
    pub fn write_to(&self, dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
        let exe = dir.join(&self.manifest.assembly);
        let stem = self.manifest.assembly.trim_end_matches(".exe");
        crate::fsio::write_atomic(&exe, &self.bytes)?;
        let json = serde_json::to_string_pretty(&self.manifest).map_err(std::io::Error::other)?;
        crate::fsio::write_atomic(&dir.join(format!("{stem}.manifest.json")), json.as_bytes())?;
        crate::fsio::write_atomic(
            &dir.join(format!("{stem}.runtimeconfig.json")),
            RUNTIMECONFIG.as_bytes(),
        )?;
        Ok(exe)
    }
}

/// The signature type of a value type.
fn val_sig(t: ValType) -> SigType {
    match t {
        ValType::I4 => SigType::I4,
        ValType::I8 => SigType::I8,
        ValType::Struct => SigType::ValueType(Token(STRUCT_TYPE)),
        ValType::Class => SigType::Class(Token(CLASS_TYPE)),
    }
}

/// The signature type of an argument type.
fn arg_sig(t: ArgType) -> SigType {
    match t {
        ArgType::Val(v) => val_sig(v),
        ArgType::RefI4 => SigType::ByRef(&SigType::I4),
    }
}

/// The parameter types of a generated method.
fn param_sigs(g: &Generated) -> Vec<SigType> {
    (0..g.shape.args as usize)
        .map(|k| arg_sig(g.shape.arg_type(k)))
        .collect()
}

/// `GeneratedException::.ctor(int32)`: the base constructor, then the value.
fn exception_ctor_body(c: &Common, value: Token) -> Result<Vec<u8>, ProgramError> {
    let mut k = Code::new(8, Token(0));
    k.var(Opcode::Ldarg, 0)
        .tok(Opcode::Call, c.exception_ctor)
        .var(Opcode::Ldarg, 0)
        .var(Opcode::Ldarg, 1)
        .tok(Opcode::Stfld, value)
        .op(Opcode::Ret);
    k.done().map_err(|source| ProgramError::Layout {
        method: "GeneratedException::.ctor".into(),
        source,
    })
}

/// `C::.ctor(int32)`: the base constructor, then the field.
fn class_ctor_body(c: &Common, x: Token) -> Result<Vec<u8>, ProgramError> {
    let mut k = Code::new(8, Token(0));
    k.var(Opcode::Ldarg, 0)
        .tok(Opcode::Call, c.object_ctor)
        .var(Opcode::Ldarg, 0)
        .var(Opcode::Ldarg, 1)
        .tok(Opcode::Stfld, x)
        .op(Opcode::Ret);
    k.done().map_err(|source| ProgramError::Layout {
        method: "C::.ctor".into(),
        source,
    })
}

/// A synthetic callee made real: the interpreter's [`call_hash`] of its (synthetic) token and
/// arguments, folded into `Trace`; thrown as the generated exception when the interpreter's
/// callee throws; returned otherwise.
fn callee_body(c: &Common, callee: &Callee) -> Result<Vec<u8>, crate::ir::LayoutError> {
    let locals = Token(0);
    let mut k = Code::new(8, locals);
    // The hash lives on the stack: h = 0x811C9DC5 ^ token, then per argument byte
    // h = (h ^ byte) * 0x01000193.
    k.i4((0x811C_9DC5u32 ^ callee.token) as i32);
    for a in 0..callee.params {
        for byte in 0..4 {
            k.var(Opcode::Ldarg, a);
            if byte > 0 {
                k.i4(8 * byte).op(Opcode::Shr_Un);
            }
            k.i4(0xFF)
                .op(Opcode::And)
                .op(Opcode::Xor)
                .i4(0x0100_0193)
                .op(Opcode::Mul);
        }
    }
    // h ^= h >> 15 (logical).
    k.op(Opcode::Dup).i4(15).op(Opcode::Shr_Un).op(Opcode::Xor);
    // Trace = Trace * 31 + h.
    k.op(Opcode::Dup)
        .tok(Opcode::Ldsfld, c.trace)
        .i4(31)
        .op(Opcode::Mul)
        .op(Opcode::Add)
        .tok(Opcode::Stsfld, c.trace);
    if callee.may_throw {
        let no_throw = k.0.new_label();
        k.op(Opcode::Dup)
            .i4(3)
            .op(Opcode::And)
            .br(Opcode::Brtrue, no_throw)
            .i4(8)
            .op(Opcode::Shr_Un)
            .tok(Opcode::Newobj, Token(EXCEPTION_CTOR))
            .op(Opcode::Throw)
            .bind(no_throw);
    }
    if callee.returns_void {
        k.op(Opcode::Pop);
    }
    k.op(Opcode::Ret);
    k.done()
}

/// `Run_M`: calls the method on each input and prints one result line per call. Its locals:
/// 0 an `int32` to format, 1 the exception caught, 2 the outcome's text, 3 an `int64` to
/// format, then one `int32` per `int32&` argument, which the call gets the address of, then
/// an `S` (an `S` argument is built in it from its input, `a` the low 32 bits and `b` all of
/// it; an `S` result is stored there to read its fields).
fn runner_body(
    c: &Common,
    g: &Generated,
    method: Token,
    locals: Token,
    labels: &[Token],
) -> Result<Vec<u8>, crate::ir::LayoutError> {
    let (ret, void, throw, exception, trace) =
        (c.s_ret, c.s_void, c.s_throw, c.s_exception, c.s_trace);
    let mut k = Code::new(8, locals);
    // The runner's local behind each `int32&` argument.
    let mut cells = Vec::new();
    for a in 0..g.shape.args as usize {
        if g.shape.arg_type(a) == ArgType::RefI4 {
            cells.push((a, 4 + cells.len() as u16));
        }
    }
    let s_local = 4 + cells.len() as u16;
    for (args, &label) in g.inputs.iter().zip(labels) {
        let (try_start, try_end, handler, other, after) = (
            k.0.new_label(),
            k.0.new_label(),
            k.0.new_label(),
            k.0.new_label(),
            k.0.new_label(),
        );
        k.i4(0).tok(Opcode::Stsfld, c.trace);
        for &(a, cell) in &cells {
            k.i4(args[a] as i32).var(Opcode::Stloc, cell);
        }
        k.bind(try_start);
        for (a, &v) in args.iter().enumerate() {
            match g.shape.arg_type(a) {
                ArgType::Val(ValType::I4) => {
                    k.i4(v as i32);
                }
                ArgType::Val(ValType::I8) => {
                    k.0.push(Instr::new(Opcode::Ldc_I8, Operand::Int64(v)));
                }
                ArgType::Val(ValType::Struct) => {
                    k.var(Opcode::Ldloca, s_local)
                        .tok(Opcode::Initobj, Token(STRUCT_TYPE))
                        .var(Opcode::Ldloca, s_local)
                        .i4(v as i32)
                        .tok(Opcode::Stfld, Token(STRUCT_A))
                        .var(Opcode::Ldloca, s_local);
                    k.0.push(Instr::new(Opcode::Ldc_I8, Operand::Int64(v)));
                    k.tok(Opcode::Stfld, Token(STRUCT_B))
                        .var(Opcode::Ldloc, s_local);
                }
                ArgType::Val(ValType::Class) => {
                    k.i4(v as i32).tok(Opcode::Newobj, Token(CLASS_CTOR));
                }
                ArgType::RefI4 => {
                    let cell = cells.iter().find(|(x, _)| *x == a).map_or(0, |&(_, l)| l);
                    k.var(Opcode::Ldloca, cell);
                }
            }
        }
        k.tok(Opcode::Call, method);
        match g.shape.returns() {
            None => {
                k.tok(Opcode::Ldstr, void);
            }
            Some(ValType::I4) => {
                k.var(Opcode::Stloc, 0)
                    .tok(Opcode::Ldstr, ret)
                    .var(Opcode::Ldloca, 0)
                    .tok(Opcode::Call, c.int_to_string)
                    .tok(Opcode::Call, c.concat2);
            }
            Some(ValType::I8) => {
                k.var(Opcode::Stloc, 3)
                    .tok(Opcode::Ldstr, ret)
                    .var(Opcode::Ldloca, 3)
                    .tok(Opcode::Call, c.long_to_string)
                    .tok(Opcode::Call, c.concat2);
            }
            // `ret S a b`.
            Some(ValType::Struct) => {
                k.var(Opcode::Stloc, s_local)
                    .var(Opcode::Ldloca, s_local)
                    .tok(Opcode::Ldfld, Token(STRUCT_A))
                    .var(Opcode::Stloc, 0)
                    .var(Opcode::Ldloca, s_local)
                    .tok(Opcode::Ldfld, Token(STRUCT_B))
                    .var(Opcode::Stloc, 3)
                    .tok(Opcode::Ldstr, c.s_struct)
                    .var(Opcode::Ldloca, 0)
                    .tok(Opcode::Call, c.int_to_string)
                    .tok(Opcode::Ldstr, c.s_space)
                    .var(Opcode::Ldloca, 3)
                    .tok(Opcode::Call, c.long_to_string)
                    .tok(Opcode::Call, c.concat4);
            }
            // `ret C x`.
            Some(ValType::Class) => {
                k.tok(Opcode::Ldfld, Token(CLASS_X))
                    .var(Opcode::Stloc, 0)
                    .tok(Opcode::Ldstr, c.s_class)
                    .var(Opcode::Ldloca, 0)
                    .tok(Opcode::Call, c.int_to_string)
                    .tok(Opcode::Call, c.concat2);
            }
        }
        k.var(Opcode::Stloc, 2).br(Opcode::Leave, after);
        k.bind(try_end).bind(handler);
        k.var(Opcode::Stloc, 1)
            .var(Opcode::Ldloc, 1)
            .tok(Opcode::Isinst, Token(EXCEPTION_CLASS))
            .br(Opcode::Brfalse, other)
            .var(Opcode::Ldloc, 1)
            .tok(Opcode::Castclass, Token(EXCEPTION_CLASS))
            .tok(Opcode::Ldfld, Token(EXCEPTION_VALUE))
            .var(Opcode::Stloc, 0)
            .tok(Opcode::Ldstr, throw)
            .var(Opcode::Ldloca, 0)
            .tok(Opcode::Call, c.int_to_string)
            .tok(Opcode::Call, c.concat2)
            .var(Opcode::Stloc, 2)
            .br(Opcode::Leave, after);
        k.bind(other)
            .tok(Opcode::Ldstr, exception)
            .var(Opcode::Ldloc, 1)
            .tok(Opcode::Callvirt, c.get_type)
            .tok(Opcode::Callvirt, c.object_to_string)
            .tok(Opcode::Call, c.concat2)
            .var(Opcode::Stloc, 2)
            .br(Opcode::Leave, after);
        let handler_end = k.label();
        k.bind(handler_end)
            .catch(c.exception, try_start, try_end, handler, handler_end);
        k.bind(after)
            .tok(Opcode::Ldstr, label)
            .var(Opcode::Ldloc, 2)
            .tok(Opcode::Ldstr, trace)
            .tok(Opcode::Ldsfld, c.trace)
            .var(Opcode::Stloc, 0)
            .var(Opcode::Ldloca, 0)
            .tok(Opcode::Call, c.int_to_string)
            .tok(Opcode::Call, c.concat4);
        for &(_, cell) in &cells {
            k.tok(Opcode::Ldstr, c.s_ref)
                .var(Opcode::Ldloca, cell)
                .tok(Opcode::Call, c.int_to_string)
                .tok(Opcode::Call, c.concat3);
        }
        k.tok(Opcode::Call, c.write_line);
    }
    k.op(Opcode::Ret);
    k.done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_program() {
        let cfg = Config::default();
        let a = generate_program("p", 7, 5, &cfg).unwrap();
        let b = generate_program("p", 7, 5, &cfg).unwrap();
        assert_eq!(a.bytes, b.bytes);
        assert_eq!(a.manifest, b.manifest);
        let c = generate_program("p", 8, 5, &cfg).unwrap();
        assert_ne!(a.bytes, c.bytes);
    }

    #[test]
    fn a_manifest_gives_back_its_methods() {
        let cfg = Config::default();
        let p = generate_program("p", 3, 4, &cfg).unwrap();
        let mut methods = p.manifest.program_methods().unwrap();
        let mut choices = methods[1].choice_bytes();
        choices.truncate(100);
        let peers = methods[1].peers.clone();
        methods[1] =
            ProgramMethod::from_choices("M1".into(), methods[1].seed, choices, &cfg, peers);
        let q = build_program("p", &methods, &cfg).unwrap();
        let json = serde_json::to_string(&q.manifest).unwrap();
        let back: Manifest = serde_json::from_str(&json).unwrap();
        let again = build_program("p", &back.program_methods().unwrap(), &cfg).unwrap();
        assert_eq!(again.bytes, q.bytes);
        assert_ne!(q.bytes, p.bytes);
    }

    /// Methods call earlier methods that call no other, with the signatures recorded in the
    /// manifest; a manifest rebuilds the same bytes.
    #[test]
    fn generated_methods_call_earlier_ones() {
        let cfg = Config::default();
        let methods = generate_methods(11, 40, &cfg);
        let mut callers = 0;
        for (i, m) in methods.iter().enumerate() {
            assert!(m.peers.len() <= MAX_PEERS);
            for p in &m.peers {
                assert!((p.index as usize) < i, "{}: offered M{}", m.name, p.index);
                let callee = resolve_peer(p, &methods[..i]).expect("the callee is there");
                assert!(!callee.generated.calls_peers);
            }
            callers += m.generated.calls_peers as usize;
        }
        assert!(callers >= 10, "only {callers} of 40 methods call another");
        let p = build_program("p", &methods, &cfg).unwrap();
        assert!(p.manifest.methods.iter().any(|m| !m.peers.is_empty()));
        let again = build_program("p", &p.manifest.program_methods().unwrap(), &cfg).unwrap();
        assert_eq!(again.bytes, p.bytes);
        let off = Config {
            peer_calls: false,
            ..Config::default()
        };
        assert!(
            generate_methods(11, 40, &off)
                .iter()
                .all(|m| m.peers.is_empty() && !m.generated.calls_peers)
        );
    }

    /// A caller without its callee (dropped by minimisation) calls a stub that returns zero,
    /// and the interpreter expects just that.
    #[test]
    fn a_dropped_callee_becomes_a_stub() {
        let cfg = Config::default();
        let methods = generate_methods(11, 40, &cfg);
        let caller = methods
            .iter()
            .find(|m| m.generated.calls_peers)
            .expect("a caller")
            .clone();
        let alone = build_program("p", std::slice::from_ref(&caller), &cfg).unwrap();
        let with = build_program("p", &methods, &cfg).unwrap();
        let has = |bytes: &[u8], what: &[u8]| bytes.windows(what.len()).any(|w| w == what);
        assert!(has(&alone.bytes, b"Gone_M"));
        assert!(!has(&with.bytes, b"Gone_M"));
        assert_eq!(alone.manifest.methods.len(), 1);
        let expected_with = &with
            .manifest
            .methods
            .iter()
            .find(|m| m.name == caller.name)
            .unwrap()
            .expected;
        assert_eq!(
            alone.manifest.methods[0].expected.len(),
            expected_with.len()
        );
    }

    #[test]
    fn every_generated_method_gets_its_expected_lines() {
        let cfg = Config::default();
        let p = generate_program("p", 1, 20, &cfg).unwrap();
        assert_eq!(p.manifest.methods.len(), 20);
        for m in &p.manifest.methods {
            assert_eq!(m.expected.len(), m.inputs.len());
            for l in &m.expected {
                assert!(l.starts_with(&format!("{RESULT_MARK}{}#", m.name)), "{l}");
            }
        }
    }
}
