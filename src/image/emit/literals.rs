//! Methods' full names as `#US` literals, for probes that take the name: each name is
//! `Namespace.Type::` + `Method` + `(params)`, and the first and last pieces repeat (a type's
//! methods come in a run; methods share a few thousand signatures), so each is widened to
//! UTF-16 once and the literal is assembled from the widened pieces.

use super::heaps::widen_user_string;
use super::{EmitError, MetadataBuilder};
use crate::image::FullNameParts;
use crate::image::tables::Token;

/// The widened pieces of the names of one image's methods, reused from method to method.
#[derive(Debug, Default)]
pub struct MethodNameLiterals {
    /// The owner whose prefix `prefix` holds (`Some(None)`: the empty prefix of a method
    /// without one; `None`: nothing yet).
    owner: Option<Option<u32>>,
    prefix: Vec<u8>,
    prefix_special: bool,
    /// `(start, end, special)` in `pool` of each parameter list, by
    /// [`FullNameParts::params_id`].
    params: Vec<Option<(usize, usize, bool)>>,
    pool: Vec<u8>,
    name: Vec<u8>,
}

impl MethodNameLiterals {
    /// Pieces for the methods of one image (another image needs another one: owners and
    /// parameter lists are numbered per image).
    pub fn new() -> Self {
        Self::default()
    }

    /// [`Self::new`] with room for the pieces of `methods` names (their signatures' parameter
    /// lists, about one for every three methods, average ~30 UTF-16 bytes in mono 4.5).
    pub fn with_capacity(methods: usize) -> Self {
        let signatures = methods / 3;
        Self {
            params: Vec::with_capacity(signatures),
            pool: Vec::with_capacity(signatures * 32),
            ..Self::default()
        }
    }

    /// The `ldstr` token of the method's full name (a `#US` entry, reused when present): the
    /// same as [`MetadataBuilder::user_string`] of `parts` joined.
    pub fn literal(
        &mut self,
        builder: &mut MetadataBuilder<'_, '_>,
        parts: &FullNameParts<'_, '_>,
    ) -> Result<Token, EmitError> {
        if self.owner != Some(parts.owner) {
            self.prefix.clear();
            self.prefix_special = widen_user_string(parts.prefix, &mut self.prefix);
            self.owner = Some(parts.owner);
        }
        // Numbers are dense (one per list met); one far past them is widened without a slot.
        let id = parts.params_id as usize;
        if self.params.len() <= id && id < self.params.len() + (1 << 20) {
            self.params.resize(id + 1, None);
        }
        let (start, end, params_special) = match self.params.get(id) {
            Some(Some(piece)) => *piece,
            _ => {
                let start = self.pool.len();
                let special = widen_user_string(parts.params, &mut self.pool);
                let piece = (start, self.pool.len(), special);
                if let Some(slot) = self.params.get_mut(id) {
                    *slot = Some(piece);
                }
                piece
            }
        };
        self.name.clear();
        let name_special = widen_user_string(parts.name, &mut self.name);
        builder.user_string_parts(
            &[&self.prefix, &self.name, &self.pool[start..end]],
            self.prefix_special || name_special || params_special,
        )
    }
}
