//! ildasm-style disassembly (in progress).
