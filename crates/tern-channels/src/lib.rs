//! Chat channels: talking to the agent from a chat app (issue 15).
//!
//! - [`platform`]: the seam every platform adapter implements ([`platform::Platform`]);
//! - [`pairing`]: who, besides a channel's `allowed_users`, may talk to the agent;
//! - [`format`]: markdown as each platform shows it, split at the platform's length limit;
//! - [`signing`]: signed callback data, so a tap on a button can be trusted.
//!
//! The Telegram and Matrix adapters and the runtime that connects them to sessions, the
//! inbox and the gateway come next and build on these.

pub mod format;
pub mod pairing;
pub mod platform;
pub mod signing;
