//! Agent API keys: generation, hashing, constant-time checks.
//!
//! A key is `tern_` followed by 64 hex characters (256 random bits). The store keeps only
//! its SHA-256; a request's bearer token is hashed and compared, in constant time, with
//! every active key's hash (and with `TERN_SERVER_KEY`'s, when set).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tern_store::{KeyKind, Session, Store};

/// Shortest `TERN_SERVER_KEY` accepted (as Hermes requires).
pub const MIN_SERVER_KEY_LEN: usize = 16;

/// The identity of `TERN_SERVER_KEY`, which has no row in the store: its name, and the owner
/// of what it creates. Not hex, so no stored key's id can be it.
pub const SERVER_KEY_ID: &str = "TERN_SERVER_KEY";

/// Names no key may be given: the owners the gateway uses itself. Ownership follows key ids,
/// so such a name would grant nothing, but a key called `tern-agent` would still pass for
/// the gateway's own agents wherever people read owners and "withdrawn by" lines.
pub const RESERVED_NAMES: [&str; 2] = [tern_waits::client::EMBEDDED_OWNER, SERVER_KEY_ID];

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the system random generator failed: {0}")]
    Random(String),
    #[error("TERN_SERVER_KEY must be at least {MIN_SERVER_KEY_LEN} characters")]
    ServerKeyTooShort,
    #[error(
        "`{0}` is reserved for the gateway's own use (its agents and TERN_SERVER_KEY); choose another name"
    )]
    ReservedName(String),
    #[error(transparent)]
    Store(#[from] tern_store::StoreError),
    #[error("cannot write the key file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A new random key.
pub fn generate_key() -> Result<String, KeyError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(format!("tern_{}", hex::encode(bytes)))
}

/// Hex SHA-256 of a key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// The part of a key shown in listings.
pub fn key_prefix(key: &str) -> String {
    key.chars().take(12).collect()
}

/// Whether `name` is one of [`RESERVED_NAMES`] (whatever its case or surrounding spaces).
pub fn is_reserved_name(name: &str) -> bool {
    let name = name.trim();
    RESERVED_NAMES.iter().any(|r| r.eq_ignore_ascii_case(name))
}

/// Creates an agent key named `name` and returns it (the only time it is seen).
pub async fn create_key(store: &Store, name: &str) -> Result<String, KeyError> {
    create_key_of_kind(store, name, KeyKind::Agent).await
}

/// Creates a key of `kind` named `name` and returns it (the only time it is seen).
pub async fn create_key_of_kind(
    store: &Store,
    name: &str,
    kind: KeyKind,
) -> Result<String, KeyError> {
    if is_reserved_name(name) {
        return Err(KeyError::ReservedName(name.trim().to_owned()));
    }
    let key = generate_key()?;
    store
        .create_key(name, kind, &hash_key(&key), &key_prefix(&key))
        .await?;
    Ok(key)
}

/// Checks bearer tokens.
#[derive(Clone)]
pub struct Authenticator {
    store: Store,
    server_key_hash: Option<[u8; 32]>,
}

impl Authenticator {
    pub fn new(store: Store, server_key: Option<&str>) -> Result<Self, KeyError> {
        let server_key_hash = match server_key {
            Some(k) if k.chars().count() < MIN_SERVER_KEY_LEN => {
                return Err(KeyError::ServerKeyTooShort);
            }
            Some(k) => Some(Sha256::digest(k.as_bytes()).into()),
            None => None,
        };
        Ok(Self {
            store,
            server_key_hash,
        })
    }

    /// The key `token` is, or `None`. Keys can be created and revoked while the gateway
    /// runs, so the active hashes are read on each check (one indexed query).
    pub async fn check(&self, token: &str) -> Option<CallerKey> {
        let candidate: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        if let Some(h) = &self.server_key_hash
            && bool::from(h.ct_eq(&candidate))
        {
            // The environment's single key is the operator's: it sees every session.
            found = Some(CallerKey {
                id: SERVER_KEY_ID.to_owned(),
                name: SERVER_KEY_ID.to_owned(),
                admin: true,
            });
        }
        let keys = match self.store.active_keys().await {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(error = %e, "cannot read API keys");
                return found;
            }
        };
        for key in keys {
            let Ok(bytes) = hex::decode(&key.hash) else {
                continue;
            };
            // Every key is compared, whatever matched before, so timing says nothing about
            // which key (or how much of one) matched.
            if bytes.len() == 32 && bool::from(bytes.ct_eq(&candidate)) && found.is_none() {
                found = Some(CallerKey {
                    id: key.id,
                    name: key.name,
                    admin: key.kind == KeyKind::Admin,
                });
            }
        }
        found
    }
}

/// The API key a request authenticated with, put in the request's extensions by the key
/// check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallerKey {
    /// The key's immutable id ([`SERVER_KEY_ID`] for `TERN_SERVER_KEY`): the owner of what
    /// the key creates in the inbox. A name can pass to a new key once its key is revoked;
    /// an id never does.
    pub id: String,
    /// Its name, for people: what reviewers see as who withdrew a request.
    pub name: String,
    /// An admin key (`tern keys create NAME --admin`, the first key, `TERN_SERVER_KEY`)
    /// sees every session; an agent key only those it created.
    pub admin: bool,
}

impl CallerKey {
    /// Whether this key may see and use session `s`. Sessions no key created (`tern chat`,
    /// and those from before sessions had owners) are the admin keys' alone.
    pub fn sees(&self, s: &Session) -> bool {
        self.admin || s.owner.as_deref() == Some(self.id.as_str())
    }
}

/// On a first start with no key at all, creates one named `default` and writes it to
/// `gateway.key` (mode 0600) under `home`; returns the file's path. It is an admin key: the
/// operator's own, which `tern sessions delete` uses to ask the running gateway; agents get
/// keys of their own (`tern keys create NAME`).
pub async fn ensure_first_key(
    store: &Store,
    home: &Path,
    server_key: bool,
) -> Result<Option<PathBuf>, KeyError> {
    if server_key || !store.active_keys().await?.is_empty() {
        return Ok(None);
    }
    let key = create_key_of_kind(store, "default", KeyKind::Admin).await?;
    let path = home.join("gateway.key");
    // Atomic and 0600 from the start: the key is never readable by others, nor half there.
    let contents = format!("{key}\n");
    let p = path.clone();
    tokio::task::spawn_blocking(move || tern_util::fs::write_private(&p, contents.as_bytes()))
        .await
        .map_err(|e| KeyError::Write {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?
        .map_err(|source| KeyError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(Some(path))
}
