//! tern-mcp's integration tests, in one binary: each test binary links the whole workspace,
//! so one binary builds and links once. They run the real `@modelcontextprotocol/server-everything`
//! from npm (`tests/mcp`, `npm ci --no-audit --no-fund` there) under Node.js.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

mod common;
mod suite;
