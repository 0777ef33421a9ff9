//! The opcode table (in progress).
