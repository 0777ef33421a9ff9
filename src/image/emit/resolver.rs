//! Verification of code that uses what a [`MetadataBuilder`] added: tokens of rows past the
//! image's tables, `ldstr` tokens past its `#US` heap, and a method's locals once a transform has
//! given it a new local signature. Everything else is the image's resolver's answer.

use super::MetadataBuilder;
use crate::image::tables::{Table, Token, USER_STRING_TABLE};
use crate::opcode::{Opcode, OperandKind};
use crate::verify::resolver::{token_passes, us_entry_fits};
use crate::verify::{CallSig, MethodSig, Resolver, tokens_pass_by_counts};

/// What verification needs to know of a builder's additions, taken once they are all made.
#[derive(Debug, Clone)]
pub struct Additions {
    /// Row counts of the image's tables, by table number below 64 (0 where no table is), as
    /// [`crate::verify::TokenLimits`] has them.
    original_rows: [u32; 64],
    /// Row counts with the added rows, the same way.
    rows: [u32; 64],
    /// Size of the image's `#US` heap: `ldstr` offsets from here on are added entries.
    user_strings_base: u32,
    /// One bit per byte of the `#US` heap's added part (from `user_strings_base` on): set
    /// where an added entry starts.
    user_string_starts: Vec<u64>,
    /// The call signatures of added MemberRefs, by row past the image's last (a probe run
    /// adds a handful, asked about on every call instruction: no hashing).
    calls: Vec<Option<CallSig>>,
}

impl MetadataBuilder<'_, '_> {
    /// The facts [`EmitResolver`] answers from.
    pub fn additions(&self) -> Additions {
        let h = self.image.tables_header();
        let mut a = Additions {
            original_rows: [0; 64],
            rows: [0; 64],
            user_strings_base: self.user_strings.appended_at() as u32,
            user_string_starts: self.user_strings.appended_starts(),
            calls: Vec::new(),
        };
        for t in Table::ALL {
            a.original_rows[t as usize] = h.rows(t);
            a.rows[t as usize] = self.rows(t);
        }
        let first = a.original_rows[Table::MemberRef as usize];
        a.calls = vec![None; (a.rows[Table::MemberRef as usize] - first) as usize];
        for (token, row) in self.added_rows(Table::MemberRef) {
            let sig = self
                .blobs
                .entry(row[2])
                .and_then(|b| crate::image::sig::method_sig_summary(b).ok());
            if let Some(s) = sig {
                let fixed = s.sentinel_index.map_or(s.param_count, |i| i as u32);
                let (Ok(param_count), Some(extra)) = (
                    u16::try_from(fixed),
                    s.param_count
                        .checked_sub(fixed)
                        .and_then(|e| u16::try_from(e).ok()),
                ) else {
                    continue;
                };
                let Some(slot) = token
                    .rid()
                    .checked_sub(first + 1)
                    .and_then(|i| a.calls.get_mut(i as usize))
                else {
                    continue;
                };
                *slot = Some(CallSig {
                    has_this: s.has_this,
                    explicit_this: s.explicit_this,
                    param_count,
                    returns_void: s.returns_void,
                    vararg_extra: extra,
                });
            }
        }
        a
    }
}

impl Additions {
    /// Whether `token` names a row added past the image's table.
    #[inline]
    pub fn is_added_row(&self, token: u32) -> bool {
        // `Table` numbers are the token's table byte.
        let (t, rid) = ((token >> 24) as usize, token & 0x00FF_FFFF);
        t < 64 && rid > self.original_rows[t] && rid <= self.rows[t]
    }

    /// Whether `token` is an `ldstr` token of an added `#US` entry.
    #[inline]
    pub fn is_added_string(&self, token: u32) -> bool {
        let t = Token(token);
        if t.table_byte() != USER_STRING_TABLE || t.rid() < self.user_strings_base {
            return false;
        }
        let at = (t.rid() - self.user_strings_base) as usize;
        self.user_string_starts
            .get(at / 64)
            .is_some_and(|w| w & (1 << (at % 64)) != 0)
    }
}

/// A resolver over another one (usually the image's) that also knows the additions, and the
/// local count of the method being verified when a transform changed its locals.
#[derive(Debug)]
pub struct EmitResolver<'r, R: Resolver + ?Sized> {
    /// The resolver of the image.
    pub inner: &'r R,
    /// What the builder added.
    pub additions: &'r Additions,
    /// The method's local count under its new local signature, when it has one.
    pub locals: Option<u32>,
}

impl<R: Resolver + ?Sized> Resolver for EmitResolver<'_, R> {
    fn method(&self) -> Option<MethodSig> {
        self.inner.method()
    }

    fn local_count(&self) -> Option<u32> {
        self.locals.or_else(|| self.inner.local_count())
    }

    fn call_sig(&self, opcode: Opcode, token: u32) -> Option<CallSig> {
        // Most calls are to the image's own rows: the map is only asked about added ones.
        if opcode != Opcode::Calli
            && let t = Token(token)
            && t.table() == Some(Table::MemberRef)
            && let Some(Some(sig)) = t
                .rid()
                .checked_sub(self.additions.original_rows[Table::MemberRef as usize] + 1)
                .and_then(|i| self.additions.calls.get(i as usize))
        {
            return Some(*sig);
        }
        self.inner.call_sig(opcode, token)
    }

    fn token_exists(&self, token: u32) -> Option<bool> {
        if self.additions.is_added_row(token) {
            return Some(true);
        }
        self.inner.token_exists(token)
    }

    fn string_exists(&self, token: u32) -> Option<bool> {
        if self.additions.is_added_string(token) {
            return Some(true);
        }
        self.inner.string_exists(token)
    }

    fn token_fits(&self, kind: OperandKind, token: u32) -> bool {
        self.inner.token_fits(kind, token)
    }

    /// The default's answer, with the image's tokens left to the inner resolver's batch (the
    /// image resolver answers those from row counts without a call per token), in runs.
    fn tokens_pass(&self, tokens: &[(OperandKind, u32)]) -> bool {
        // An inner resolver that answers from counts, for the same tables: one loop over
        // counts that include the added rows, with added strings told by their start bits.
        let a = self.additions;
        if let Some(limits) = self.inner.token_limits()
            && *limits.rows == a.original_rows
        {
            let string = u32::from(USER_STRING_TABLE) << 24;
            return tokens_pass_by_counts(
                tokens,
                &a.rows,
                |rid| {
                    if rid < a.user_strings_base {
                        us_entry_fits(limits.user_strings, rid)
                    } else {
                        a.is_added_string(string | rid)
                    }
                },
                |kind, token| token_passes(self, kind, token),
            );
        }
        const RUN: usize = 32;
        let mut run = [(OperandKind::None, 0u32); RUN];
        let mut n = 0;
        for &(kind, token) in tokens {
            let added = if kind == OperandKind::String {
                self.additions.is_added_string(token)
            } else {
                // Added rows start past the image's last, so never at row 0.
                self.additions.is_added_row(token)
            };
            if added {
                if !self.inner.token_fits(kind, token) {
                    return false;
                }
                continue;
            }
            run[n] = (kind, token);
            n += 1;
            if n == RUN {
                if !self.inner.tokens_pass(&run) {
                    return false;
                }
                n = 0;
            }
        }
        self.inner.tokens_pass(&run[..n])
    }
}
