//! tern-channels's integration tests, in one binary: each test binary links the whole
//! workspace, so one binary builds and links once.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

mod suite;
