//! Chat channels: talking to the agent from a chat app (issue 15).
//!
//! - [`platform`]: the seam every platform adapter implements ([`platform::Platform`]);
//! - [`pairing`]: who, besides a channel's `allowed_users`, may talk to the agent;
//! - [`telegram`]: the Telegram adapter (Bot API, long polling).
//!
//! The Telegram and Matrix adapters and the runtime that connects them to sessions, the
//! inbox and the gateway come next and build on these.

pub mod pairing;
pub mod platform;
pub mod telegram;
