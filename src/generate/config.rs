//! The knobs of the valid-body generator, in the manner of wasm-smith's `Config`: every feature
//! can be switched off, and sizes are bounded so that generated bodies stay cheap to check.

/// The branch forms the generator asks for. Layout widens a short branch that does not fit, so
/// every mix yields valid code.
///
/// `short` and `long` are relative weights of the form of each branch. `forced_long` and `edge`
/// are weights of two statements made for the branch forms, against the other statements'
/// weights (a store has 4, an `if` 3, a `nop` 1); 0 switches them off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BranchMix {
    /// Short (`br.s`, `leave.s`, …) forms.
    pub short: u8,
    /// Long forms even where a short one would fit.
    pub long: u8,
    /// A short conditional branch around a block of more than 127 bytes, so layout must widen
    /// it.
    pub forced_long: u8,
    /// A short branch whose displacement is at or near a limit of the short form: forward
    /// +127 down to +124, or a loop's backward branch of −128 up to −125. The span holds code
    /// a rewriter grows (`ret`s a probe weaver turns into `leave`s, calls), so a rewriter that
    /// does not widen it writes a wrapped displacement.
    pub edge: u8,
}

impl Default for BranchMix {
    fn default() -> Self {
        BranchMix {
            short: 6,
            long: 3,
            forced_long: 1,
            edge: 1,
        }
    }
}

/// Which clause kinds try regions may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClauseKinds {
    /// `catch` clauses.
    pub catch: bool,
    /// `filter` clauses.
    pub filter: bool,
    /// `finally` clauses.
    pub finally: bool,
    /// `fault` clauses.
    pub fault: bool,
}

impl Default for ClauseKinds {
    fn default() -> Self {
        ClauseKinds::ALL
    }
}

impl ClauseKinds {
    /// Every kind.
    pub const ALL: ClauseKinds = ClauseKinds {
        catch: true,
        filter: true,
        finally: true,
        fault: true,
    };

    /// Whether any kind is allowed.
    pub fn any(&self) -> bool {
        self.catch || self.filter || self.finally || self.fault
    }
}

/// What the generator may produce.
///
/// As JSON (`ilcheck generate --config FILE`), every field is optional: the ones given replace
/// the defaults, an unknown one is an error.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Statements in the method's outermost block, at least and at most (nested blocks are
    /// smaller). The choice stream running out ends blocks at the minimum.
    pub min_statements: u32,
    /// See `min_statements`.
    pub max_statements: u32,
    /// Deepest nesting of `if`, loops, switches and try regions.
    pub max_nesting: u32,
    /// Deepest nesting of try regions (0: no exception handling).
    pub max_eh_depth: u32,
    /// Which clause kinds try regions may get.
    pub clause_kinds: ClauseKinds,
    /// How often branches take each form.
    pub branches: BranchMix,
    /// Whether `switch` statements are generated, and their most targets.
    pub switches: bool,
    /// See `switches`.
    pub max_switch_targets: u32,
    /// Loops with a backward branch, bounded by a counter local.
    pub loops: bool,
    /// Percent of bodies kept tiny-header eligible (no locals, no EH, small code, MaxStack ≤ 8).
    pub tiny_percent: u8,
    /// Most locals and arguments the method declares (loop counters come on top of the locals).
    pub max_locals: u16,
    /// Most arguments the method declares.
    pub max_args: u16,
    /// Calls to a synthetic module of static methods with int32 parameters.
    pub calls: bool,
    /// Most synthetic callees and their most parameters.
    pub max_callees: u32,
    /// See `max_callees`.
    pub max_call_params: u16,
    /// Whether a synthetic callee may throw (deterministically, by a hash of its arguments).
    pub throwing_calls: bool,
    /// Prefixes: `tail.` calls in tail position.
    pub prefixes: bool,
    /// Percent of bodies that get a straight-line block pushing the code beyond 64 KiB (fat EH
    /// clauses); keep it low, such bodies are slow to check.
    pub huge_percent: u8,
    /// Percent of bodies that get more than 20 clauses (a fat EH section).
    pub many_clauses_percent: u8,
    /// Nesting of expressions (operands of operators, calls and conditionals).
    pub max_expr_depth: u32,
    /// Percent of bodies whose first instruction heads a loop: a backward branch to IL_0000
    /// (needs `loops`; the counter counts up from the zeroed local, so InitLocals is set).
    pub entry_loop_percent: u8,
    /// Percent of bodies whose first statement is a try region, starting at IL_0000 (inside
    /// the entry loop when there is one).
    pub entry_try_percent: u8,
    /// Percent of bodies that end with a try region whose last handler ends the body: its last
    /// instruction is the body's (`endfinally`, or a catch's backward `leave`, `throw` or
    /// `rethrow`); the block the region leaves to comes before it.
    pub end_handler_percent: u8,
    /// Percent of bodies that never need more than one stack slot (leaf operands only) and
    /// declare exactly the MaxStack they need, 0 or 1, in a fat header (they get a local).
    pub lean_stack_percent: u8,
    /// Percent of arguments that are `int32&` (by reference): the body reads and writes the
    /// caller's `int32` through them, and the program prints its final value.
    pub byref_percent: u8,
    /// Percent of arguments, locals and return types that are `int64` (0: every value is an
    /// `int32`); comparisons and branches take `int64` operands now and then when it is not 0.
    pub int64_percent: u8,
    /// Calls between the generated methods of a program: a method may call one of the latest
    /// earlier methods that call no other, outside loops.
    pub peer_calls: bool,
    /// Percent of the arguments, locals, return types and stored values not made `int64`
    /// that are the value type `S` (fields `int32 a`, `int64 b`); when it is not 0, bodies
    /// (other than tiny ones) also `initobj` and set fields of `S` locals and read fields
    /// of `S` values. A return type gets two chances (about twice the share). 0: no `S`, and
    /// no choice is read for it.
    pub struct_percent: u8,
    /// Percent of the arguments, locals, return types and stored values neither `int64` nor
    /// `S` that are the class `C` (field `int32 x`, constructor `.ctor(int32)`); when it is
    /// not 0, bodies (other than tiny ones) also create `C`s and read and write their field.
    /// 0: no `C`, and no choice is read for it.
    pub object_percent: u8,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            min_statements: 1,
            max_statements: 12,
            max_nesting: 4,
            max_eh_depth: 3,
            clause_kinds: ClauseKinds::ALL,
            branches: BranchMix::default(),
            switches: true,
            max_switch_targets: 5,
            loops: true,
            tiny_percent: 15,
            max_locals: 6,
            max_args: 4,
            calls: true,
            max_callees: 4,
            max_call_params: 3,
            throwing_calls: true,
            prefixes: true,
            huge_percent: 0,
            many_clauses_percent: 3,
            max_expr_depth: 3,
            entry_loop_percent: 20,
            entry_try_percent: 12,
            end_handler_percent: 30,
            lean_stack_percent: 15,
            byref_percent: 15,
            int64_percent: 20,
            peer_calls: true,
            struct_percent: 12,
            object_percent: 12,
        }
    }
}

/// A [`Config`] field outside the range [`Config::check`] allows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {value}; allowed: {min} to {max}{note}")]
pub struct ConfigError {
    /// The field, as JSON names it (`branches.short` for a nested one).
    pub field: &'static str,
    /// The value given.
    pub value: u64,
    /// The least value allowed.
    pub min: u64,
    /// The greatest value allowed.
    pub max: u64,
    /// Why the bound is what it is, when it depends on another field (else empty).
    pub note: &'static str,
}

impl Config {
    /// Most statements in a body's outermost block: the statement budget is three times this,
    /// and each loop adds a counter local (see [`Config::MAX_LOCALS`]).
    pub const MAX_STATEMENTS: u32 = 10_000;
    /// Deepest nesting of blocks, and of try regions: generating recurses this deep.
    pub const MAX_NESTING: u32 = 64;
    /// Deepest nesting of expressions: generating recurses this deep, and the stack a call
    /// at each level fills grows with it.
    pub const MAX_EXPR_DEPTH: u32 = 16;
    /// Most targets of a `switch` (4 bytes each; a body may hold many switches).
    pub const MAX_SWITCH_TARGETS: u32 = 4_096;
    /// Most locals: local indexes are 16-bit, and loop counters come on top (one a loop, at
    /// most three times [`Config::MAX_STATEMENTS`]).
    pub const MAX_LOCALS: u16 = 32_768;
    /// Most arguments of a generated method: with calls to such methods nested
    /// [`Config::MAX_EXPR_DEPTH`] deep, the stack stays well within MaxStack's 16 bits.
    pub const MAX_ARGS: u16 = 1_024;
    /// Most parameters of a synthetic callee.
    pub const MAX_CALL_PARAMS: u16 = 64;
    /// Most synthetic callees of a method. Each is a method of the program with its own
    /// signature, so the program grows with callees times parameters times methods.
    pub const MAX_CALLEES: u32 = 64;

    /// Checks every count and percentage against its range, so that no setting makes the
    /// generator allocate or recurse without bound. The generator assumes a checked config
    /// (the defaults, [`Config::straight_line`] and [`Config::everything`] are).
    pub fn check(&self) -> Result<(), ConfigError> {
        let range = |field, value: u64, min: u64, max: u64, note| {
            if (min..=max).contains(&value) {
                Ok(())
            } else {
                Err(ConfigError {
                    field,
                    value,
                    min,
                    max,
                    note,
                })
            }
        };
        let counts: [(&'static str, u64, u64); 9] = [
            (
                "max_statements",
                self.max_statements.into(),
                Self::MAX_STATEMENTS.into(),
            ),
            (
                "max_nesting",
                self.max_nesting.into(),
                Self::MAX_NESTING.into(),
            ),
            (
                "max_eh_depth",
                self.max_eh_depth.into(),
                Self::MAX_NESTING.into(),
            ),
            (
                "max_expr_depth",
                self.max_expr_depth.into(),
                Self::MAX_EXPR_DEPTH.into(),
            ),
            (
                "max_switch_targets",
                self.max_switch_targets.into(),
                Self::MAX_SWITCH_TARGETS.into(),
            ),
            (
                "max_locals",
                self.max_locals.into(),
                Self::MAX_LOCALS.into(),
            ),
            ("max_args", self.max_args.into(), Self::MAX_ARGS.into()),
            (
                "max_call_params",
                self.max_call_params.into(),
                Self::MAX_CALL_PARAMS.into(),
            ),
            (
                "max_callees",
                self.max_callees.into(),
                Self::MAX_CALLEES.into(),
            ),
        ];
        for (field, value, max) in counts {
            range(field, value, 0, max, "")?;
        }
        range(
            "min_statements",
            self.min_statements.into(),
            0,
            self.max_statements.into(),
            " (at most max_statements)",
        )?;
        let percents = [
            ("tiny_percent", self.tiny_percent),
            ("huge_percent", self.huge_percent),
            ("many_clauses_percent", self.many_clauses_percent),
            ("entry_loop_percent", self.entry_loop_percent),
            ("entry_try_percent", self.entry_try_percent),
            ("end_handler_percent", self.end_handler_percent),
            ("lean_stack_percent", self.lean_stack_percent),
            ("byref_percent", self.byref_percent),
            ("int64_percent", self.int64_percent),
            ("struct_percent", self.struct_percent),
            ("object_percent", self.object_percent),
        ];
        for (field, value) in percents {
            range(field, value.into(), 0, 100, " (a percentage)")?;
        }
        Ok(())
    }

    /// Straight-line code without branches, EH or calls.
    pub fn straight_line() -> Config {
        Config {
            max_nesting: 0,
            max_eh_depth: 0,
            switches: false,
            loops: false,
            calls: false,
            prefixes: false,
            many_clauses_percent: 0,
            branches: BranchMix {
                forced_long: 0,
                edge: 0,
                ..BranchMix::default()
            },
            entry_loop_percent: 0,
            entry_try_percent: 0,
            end_handler_percent: 0,
            ..Config::default()
        }
    }

    /// Everything on, including bodies above 64 KiB now and then.
    pub fn everything() -> Config {
        Config {
            huge_percent: 2,
            many_clauses_percent: 5,
            ..Config::default()
        }
    }
}
