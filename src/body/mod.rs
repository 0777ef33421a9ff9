//! Method-body codec (in progress).
