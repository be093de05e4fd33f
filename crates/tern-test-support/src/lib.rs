//! What the workspace's tests share: waiting for a condition with a bound ([`wait`]),
//! temporary homes ([`TempHome`]), small HTTP helpers ([`http`]), the harness that runs a
//! real binary with a temporary home and starts `tern gateway` as a child process
//! ([`Env`], [`Running`]), and process inspection ([`procs`]).
//!
//! It depends on no product crate, so that every crate's tests (tern-gateway's own included)
//! can use it; what a harness needs of a product (the `tern` binary's path, which exists only
//! in tern-cli's tests) is passed in. The scripted model stays in `tern-fake-model`.

// Test support: a broken setup fails the test that uses it, loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod http;
pub mod mcp_client;
pub mod procs;
pub mod synapse;
pub mod telegram;
pub mod wait;

mod env;
mod home;

pub use env::{Env, Running, assert_exit, assert_ok, stderr, stdout};
pub use home::TempHome;
pub use http::{http_get, http_post};
pub use procs::{modes_under, process_ended};
pub use wait::{PATIENCE, eventually, wait_until, wait_until_blocking};
