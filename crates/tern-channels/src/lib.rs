//! Chat channels: who may talk to the agent ([`pairing`]). The channel trait and the
//! Telegram and Matrix adapters (issue 15) come next and build on this.

pub mod pairing;
