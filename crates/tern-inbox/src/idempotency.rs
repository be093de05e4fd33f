//! Idempotent creates: a create with an `Idempotency-Key` claims `(agent key, key)` in the
//! transaction that creates, and stores its response there; a repeat gets that response, the
//! same key with a different request is refused (see the service's module docs).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::Digest;
use tern_store::now_ms;

use crate::error::{InboxError, Result};
use crate::store::{self, Conn, corrupt, from_json, to_json};

/// Every create answers `201 Created` in the SDK.
const CREATED: i64 = 201;

/// An `Idempotency-Key` with the fingerprint of the request it came with, so that a repeat
/// with a different request can be told from a retry.
pub(crate) struct IdemKey<'a> {
    key: &'a str,
    /// Hex SHA-256 of the request's canonical JSON ([`canonical_json`]).
    fingerprint: String,
}

impl<'a> IdemKey<'a> {
    /// The key (if any) with the fingerprint of `request`, the create's parsed body: two
    /// bodies that differ only in whitespace, key order or an absent optional field are the
    /// same request.
    pub(crate) fn of<B: Serialize + ?Sized>(
        key: Option<&'a str>,
        request: &B,
    ) -> Result<Option<Self>> {
        let Some(key) = key else { return Ok(None) };
        let value = serde_json::to_value(request)
            .map_err(|e| corrupt(format!("cannot encode the request: {e}")))?;
        let mut canonical = String::new();
        canonical_json(&value, &mut canonical);
        Ok(Some(IdemKey {
            key,
            fingerprint: hex::encode(sha2::Sha256::digest(canonical.as_bytes())),
        }))
    }
}

/// Compact JSON with every object's keys sorted, whatever order the map keeps them in.
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Claims `(owner, key)` for this create. `None`: the claim is new, go on and create.
/// `Some(response)`: the key was used before for the same request; this is the original
/// response. The same key with another method or path is [`InboxError::IdempotencyMismatch`],
/// with another request [`InboxError::IdempotencyKeyReused`]; a key claimed before
/// fingerprints were recorded answers its original response to any request.
pub(crate) async fn claim_key<T: DeserializeOwned>(
    conn: &mut Conn,
    owner: &str,
    idem: Option<&IdemKey<'_>>,
    method_path: &'static str,
) -> Result<Option<T>> {
    let Some(idem) = idem else { return Ok(None) };
    let key = idem.key;
    if store::idempotency::claim(conn, owner, key, method_path, &idem.fingerprint, now_ms()).await?
    {
        return Ok(None);
    }
    // Someone used the key first. Their transaction has committed (the claim above waited
    // for it), and it stored the response along with the claim.
    let stored = store::idempotency::claimed(conn, owner, key).await?;
    if stored.method_path != method_path {
        return Err(InboxError::IdempotencyMismatch);
    }
    if stored.fingerprint.is_some_and(|p| p != idem.fingerprint) {
        return Err(InboxError::IdempotencyKeyReused);
    }
    let response = stored.response.ok_or_else(|| {
        corrupt(format!(
            "idempotency key {key:?} of {owner:?} has no response"
        ))
    })?;
    Ok(Some(from_json(&response, "idempotent response")?))
}

/// Stores the response of a create under its claimed key, in the same transaction.
pub(crate) async fn remember_response<T: Serialize>(
    conn: &mut Conn,
    owner: &str,
    idem: Option<&IdemKey<'_>>,
    response: &T,
) -> Result<()> {
    let Some(idem) = idem else { return Ok(()) };
    store::idempotency::remember(conn, owner, idem.key, &to_json(response)?, CREATED).await?;
    Ok(())
}
