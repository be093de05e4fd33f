//! Chat channels: talking to the agent from a chat app (issue 15).
//!
//! - [`platform`]: the seam every platform adapter implements ([`platform::Platform`]);
//! - [`pairing`]: who, besides a channel's `allowed_users`, may talk to the agent;
//! - [`matrix`]: the Matrix adapter (client-server API `/sync` long poll; unencrypted rooms).
//!
//! The Telegram and Matrix adapters and the runtime that connects them to sessions, the
//! inbox and the gateway come next and build on these.

pub mod matrix;
pub mod pairing;
pub mod platform;
