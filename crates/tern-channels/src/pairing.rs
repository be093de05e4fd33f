//! DM pairing: who, besides a channel's configured `allowed_users`, may talk to the agent.
//!
//! An unknown user who writes to the bot gets a one-time code ([`Pairing::request`]); the
//! owner approves it with `tern pairing approve PLATFORM CODE` ([`Pairing::approve`]) and may
//! later revoke the user ([`Pairing::revoke`]). The rules follow Hermes Agent's pairing
//! (`gateway/pairing.py`):
//!
//! - a code is 8 characters from an alphabet without look-alikes (no 0/O, 1/I/L), valid
//!   1 hour, stored only as a salted SHA-256 hash and compared in constant time;
//! - a user gets at most one code per 10 minutes, a platform has at most 3 pending codes;
//! - 5 consecutive failed approvals on a platform lock it for 1 hour: no approvals and no new
//!   codes; a successful approval resets the count.
//!
//! Every function takes the current time (`now_ms`) so the rules can be tested with a clock
//! the test controls. Each step is one write transaction ([`Store::begin_write`]).

use serde::Serialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;
use tern_store::pairing::{self as db, NewPending};
use tern_store::{Store, StoreError};

/// The letters a code is made of: no 0/O, 1/I/L, which read alike on a phone.
pub const ALPHABET: &[u8] = b"ABCDEFGHJKMNPQRSTUVWXYZ23456789";
/// Characters in a code.
pub const CODE_LENGTH: usize = 8;
/// How long a code is valid.
pub const CODE_TTL_MS: i64 = 60 * 60 * 1000;
/// At most one code per user in this time.
pub const RATE_LIMIT_MS: i64 = 10 * 60 * 1000;
/// At most this many pending codes per platform.
pub const MAX_PENDING_PER_PLATFORM: usize = 3;
/// Consecutive failed approvals that lock a platform.
pub const MAX_FAILED_APPROVALS: i64 = 5;
/// How long a platform stays locked.
pub const LOCKOUT_MS: i64 = 60 * 60 * 1000;

#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no randomness for a pairing code: {0}")]
    Random(String),
    #[error("no pending pairing code {code} on {platform} (see `tern pairing list`)")]
    UnknownCode { platform: String, code: String },
    #[error(
        "pairing code {code} on {platform} has expired; the user gets a new one by writing to the bot again"
    )]
    Expired { platform: String, code: String },
    #[error(
        "`{code}` is not a pairing code: a code is {CODE_LENGTH} characters from {}",
        alphabet()
    )]
    Malformed { code: String },
    #[error(
        "pairing on {platform} is locked after {MAX_FAILED_APPROVALS} failed approvals, until {locked_until} (ms since the epoch)"
    )]
    LockedOut { platform: String, locked_until: i64 },
    #[error("{user_id} is not an approved user on {platform} (see `tern pairing list`)")]
    NotApproved { platform: String, user_id: String },
}

pub type Result<T> = std::result::Result<T, PairingError>;

fn alphabet() -> &'static str {
    // ASCII by construction.
    std::str::from_utf8(ALPHABET).unwrap_or_default()
}

/// What an unknown user's request for a code came to, and so what the adapter tells them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CodeRequest {
    /// A new code: send it to the user with "ask the owner to run
    /// `tern pairing approve PLATFORM CODE`". It is shown only now.
    Issued { code: String, expires_at: i64 },
    /// The user got a code less than 10 minutes ago: no new one. Tell them their code was
    /// already sent and they may ask again after `retry_at`.
    RateLimited { retry_at: i64 },
    /// The platform already has 3 pending codes: tell the user to try again later.
    PlatformFull,
    /// Too many failed approvals: tell the user pairing is paused until `until`.
    LockedOut { until: i64 },
    /// The user is approved already; the adapter should not have asked.
    AlreadyApproved,
}

/// A user approved by their code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approved {
    pub platform: String,
    pub user_id: String,
    pub display_name: String,
}

/// DM pairing over the store.
#[derive(Debug, Clone)]
pub struct Pairing {
    store: Store,
}

impl Pairing {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    /// Whether a user may talk to the agent: listed in the channel's configured
    /// `allowed_users`, or approved by pairing and not revoked.
    pub async fn is_allowed(
        &self,
        platform: &str,
        user_id: &str,
        allowed_users: &[String],
    ) -> Result<bool> {
        if allowed_users.iter().any(|u| u == user_id) {
            return Ok(true);
        }
        Ok(self.store.pairing_is_approved(platform, user_id).await?)
    }

    /// An unknown user asks to pair: a new code, or why not.
    pub async fn request(
        &self,
        platform: &str,
        user_id: &str,
        display_name: &str,
        now_ms: i64,
    ) -> Result<CodeRequest> {
        if self.store.pairing_is_approved(platform, user_id).await? {
            return Ok(CodeRequest::AlreadyApproved);
        }
        let mut tx = self.store.begin_write().await?;
        if let (_, Some(until)) = db::failures(&mut tx, platform).await?
            && until > now_ms
        {
            return Ok(CodeRequest::LockedOut { until });
        }
        db::delete_expired(&mut tx, platform, now_ms).await?;
        if let Some(created) = db::pending_created_at(&mut tx, platform, user_id).await?
            && now_ms - created < RATE_LIMIT_MS
        {
            return Ok(CodeRequest::RateLimited {
                retry_at: created + RATE_LIMIT_MS,
            });
        }
        let others = db::pending_hashes(&mut tx, platform)
            .await?
            .into_iter()
            .filter(|p| p.user_id != user_id)
            .count();
        if others >= MAX_PENDING_PER_PLATFORM {
            return Ok(CodeRequest::PlatformFull);
        }
        let code = new_code()?;
        let salt = random_hex(16)?;
        let expires_at = now_ms + CODE_TTL_MS;
        db::put_pending(
            &mut tx,
            NewPending {
                platform,
                user_id,
                display_name,
                code_salt: &salt,
                code_hash: &hash_code(&salt, &code),
                created_at: now_ms,
                expires_at,
            },
        )
        .await?;
        tx.commit().await.map_err(StoreError::from)?;
        tracing::info!(platform, user_id, "pairing code issued");
        Ok(CodeRequest::Issued { code, expires_at })
    }

    /// The owner approves a code. A wrong code counts toward the platform's lockout; a
    /// malformed or expired one does not (it cannot be a guess that might succeed).
    pub async fn approve(
        &self,
        platform: &str,
        code: &str,
        reviewer: Option<&str>,
        now_ms: i64,
    ) -> Result<Approved> {
        let code = code.trim().to_ascii_uppercase();
        if code.len() != CODE_LENGTH || !code.bytes().all(|b| ALPHABET.contains(&b)) {
            return Err(PairingError::Malformed { code });
        }
        let mut tx = self.store.begin_write().await?;
        let (failures, locked_until) = db::failures(&mut tx, platform).await?;
        if let Some(until) = locked_until
            && until > now_ms
        {
            return Err(PairingError::LockedOut {
                platform: platform.to_owned(),
                locked_until: until,
            });
        }
        // Every pending code is hashed and compared, matched or not, so the time taken says
        // nothing about which code came close.
        let mut found = None;
        for p in db::pending_hashes(&mut tx, platform).await? {
            let matches: bool = hash_code(&p.code_salt, &code)
                .as_bytes()
                .ct_eq(p.code_hash.as_bytes())
                .into();
            if matches {
                found = Some(p);
            }
        }
        let result = match found {
            Some(p) if p.expires_at <= now_ms => {
                db::delete_pending(&mut tx, platform, &p.user_id).await?;
                Err(PairingError::Expired {
                    platform: platform.to_owned(),
                    code,
                })
            }
            Some(p) => {
                db::delete_pending(&mut tx, platform, &p.user_id).await?;
                db::put_approved(
                    &mut tx,
                    platform,
                    &p.user_id,
                    &p.display_name,
                    reviewer,
                    now_ms,
                )
                .await?;
                db::set_failures(&mut tx, platform, 0, None).await?;
                tracing::info!(platform, user_id = p.user_id, "pairing approved");
                Ok(Approved {
                    platform: platform.to_owned(),
                    user_id: p.user_id,
                    display_name: p.display_name,
                })
            }
            None => {
                let failures = failures + 1;
                if failures >= MAX_FAILED_APPROVALS {
                    let until = now_ms + LOCKOUT_MS;
                    tracing::warn!(platform, until, "pairing locked after failed approvals");
                    db::set_failures(&mut tx, platform, 0, Some(until)).await?;
                } else {
                    db::set_failures(&mut tx, platform, failures, None).await?;
                }
                Err(PairingError::UnknownCode {
                    platform: platform.to_owned(),
                    code,
                })
            }
        };
        // The failure count and the removal of a used or expired code are kept either way.
        tx.commit().await.map_err(StoreError::from)?;
        result
    }

    /// Revokes an approved user: they may no longer talk to the agent (unless listed in the
    /// configured `allowed_users`).
    pub async fn revoke(&self, platform: &str, user_id: &str, now_ms: i64) -> Result<()> {
        let mut tx = self.store.begin_write().await?;
        let revoked = db::revoke(&mut tx, platform, user_id, now_ms).await?;
        tx.commit().await.map_err(StoreError::from)?;
        if !revoked {
            return Err(PairingError::NotApproved {
                platform: platform.to_owned(),
                user_id: user_id.to_owned(),
            });
        }
        tracing::info!(platform, user_id, "pairing revoked");
        Ok(())
    }
}

/// Hex SHA-256 of the salt and the code.
fn hash_code(salt: &str, code: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(code.as_bytes());
    hex::encode(h.finalize())
}

fn random_hex(n: usize) -> Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| PairingError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// A random code; bytes past the largest multiple of the alphabet's size are drawn again, so
/// every letter is equally likely.
fn new_code() -> Result<String> {
    let n = ALPHABET.len();
    let limit = 256 - 256 % n;
    let mut code = String::with_capacity(CODE_LENGTH);
    while code.len() < CODE_LENGTH {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).map_err(|e| PairingError::Random(e.to_string()))?;
        for &byte in b.iter().filter(|&&x| usize::from(x) < limit) {
            if code.len() == CODE_LENGTH {
                break;
            }
            code.push(char::from(ALPHABET[usize::from(byte) % n]));
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests;
