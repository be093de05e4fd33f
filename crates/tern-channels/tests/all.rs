//! tern-channels' integration tests, in one binary: one module per file in `suite/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

mod suite;
