//! Instruction iterator (in progress).
