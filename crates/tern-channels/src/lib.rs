//! Chat channels: talking to the agent from a chat app (issue 15).
//!
//! - [`platform`]: the seam every platform adapter implements ([`platform::Platform`]);
//! - [`runtime`]: one configured channel connected to sessions, the inbox and the gateway;
//! - [`pairing`]: who, besides a channel's `allowed_users`, may talk to the agent;
//! - [`format`](mod@format): markdown to each platform's formatting, split at the platform's length limit;
//! - [`signing`]: signed callback data, so a tap on a button can be trusted;
//! - [`tools`]: the model's `send_file`, to send a file to the session's chat;
//! - [`telegram`]: the Telegram adapter (Bot API, long polling);
//! - [`matrix`]: the Matrix adapter (client-server API `/sync` long poll; unencrypted rooms).

pub mod format;
pub mod matrix;
pub mod pairing;
pub mod platform;
pub mod runtime;
pub mod signing;
pub mod telegram;
pub mod tools;
