//! Resolving an image's signature-bearing rows in table order, before its methods are checked.
//!
//! A run that type-checks most of an image's methods asks for nearly every row that carries a
//! signature (on mono 4.5, 92% of the MethodDef, MemberRef and MethodSpec rows, 90% of the
//! TypeSpecs, 80% of the TypeRefs). Asked on demand, each first resolution comes in the middle
//! of a method's dataflow, in the order the code names them: the tables and the `#Blob` heap
//! are read at random, and the resolver's code and data compete with the checker's. Asked in
//! row order first, the same resolutions read the tables and heap front to back in one tight
//! loop, and the checker then finds every answer kept. The answers are the same either way:
//! each row is resolved by the same function, and what it resolves to does not depend on when
//! it is asked.

use super::system::TypeSystem;
use crate::image::sig::callconv;
use crate::image::{Table, Token};

/// Rows of a table visited by [`TypeSystem::read_ahead`].
fn tokens(ts: &TypeSystem<'_>, table: Table) -> impl Iterator<Item = Token> + use<> {
    let rows = ts.image().tables().rows(table);
    (1..=rows).map(move |rid| Token::new(table, rid))
}

impl TypeSystem<'_> {
    /// Resolves every TypeRef, TypeSpec, MemberRef (as a field or a method, as its signature
    /// says), MethodDef, Field, StandAloneSig (locals or a `calli` target) and MethodSpec row
    /// of the image being verified, in table order, keeping the answers (see the module
    /// documentation). Worth it when most of the image's methods are to be checked; the work
    /// is bounded by the image's rows, and a row that cannot be resolved is kept as such, as
    /// when it is first asked by a method.
    pub fn read_ahead(&mut self) {
        let image = self.image();
        let tables = image.tables();
        let blobs = image.blobs();
        // The leading byte of a row's signature blob, which says what the row is.
        let lead = |index: Result<u32, _>| {
            index
                .ok()
                .and_then(|i| blobs.get(i).ok())
                .and_then(|b| b.first().copied())
        };
        // Types first: the members' signatures and parents name them.
        for t in tokens(self, Table::TypeRef).chain(tokens(self, Table::TypeSpec)) {
            self.type_token(0, t);
        }
        for t in tokens(self, Table::MemberRef) {
            let field = lead(tables.member_ref(t.rid()).map(|r| r.signature))
                .is_some_and(|b| b & callconv::KIND_MASK == callconv::FIELD);
            if field {
                self.field(t);
            } else {
                self.method(t);
            }
        }
        for t in tokens(self, Table::MethodDef) {
            self.method(t);
        }
        for t in tokens(self, Table::Field) {
            self.field(t);
        }
        let mut locals = Vec::new();
        for t in tokens(self, Table::StandAloneSig) {
            let sig = tables.standalone_sig(t.rid()).map(|r| r.signature);
            if lead(sig) == Some(callconv::LOCAL_SIG) {
                locals.clear();
                self.locals_into(t, &mut locals);
            } else {
                self.standalone_method(t);
            }
        }
        for t in tokens(self, Table::MethodSpec) {
            self.method(t);
        }
    }
}
