//! The rewriter: an editable, label-based form of method bodies, edits on it, and a layout back
//! to bytes with branch relaxation to a fixpoint.
//!
//! ```text
//! Body ──Method::from_body──► Method ──edit / transforms──► Method ──layout──► body bytes
//! ```

pub mod edit;
pub mod layout;
pub mod lift;
pub mod method;

pub use edit::{BlockId, EditError, EditSummary, Editor, Regions, Targets};
pub use layout::{
    BranchForms, Layout, LayoutError, LayoutInfo, LayoutOptions, MaxStackPolicy, layout,
};
pub use lift::IrError;
pub use method::{
    EhClause, HeaderInfo, Instr, Label, Method, Operand, Prefix, Prefixes, RawSection, SwitchTable,
    UNBOUND,
};
