//! What can go wrong in the inbox service, and how each failure is answered over HTTP.

use serde_json::{Value, json};
use tern_store::StoreError;

use crate::fields::FieldError;

/// What every inbox operation returns.
pub type Result<T, E = InboxError> = std::result::Result<T, E>;

/// An inbox operation that did not happen. Nothing is stored when one is returned: every
/// write runs in one transaction, rolled back on any error.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// No such project, task or request — or one that belongs to another agent key, which
    /// must not learn that it exists.
    #[error("{0} not found")]
    NotFound(String),
    /// The request itself is wrong (a blank name, unusable field definitions, …).
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// A human's answers do not fit the form; every problem, per field.
    #[error("the answers are not valid: {}", join(.0))]
    InvalidAnswers(Vec<FieldError>),
    /// The request was decided (or answered) before; the first decision stands.
    #[error("the request has already been decided")]
    AlreadyDecided,
    /// The agent withdrew the request (tern's extension): it has no result and never will.
    #[error("request {0} was withdrawn")]
    Withdrawn(String),
    /// `transitionsTo` names no step of the project, or one the current step cannot exit to.
    #[error("invalid transition: {0}")]
    InvalidTransition(String),
    /// The `Idempotency-Key` was first used with another method or path.
    #[error("the idempotency key was already used for another method or path")]
    IdempotencyMismatch,
    /// The `Idempotency-Key` was first used with a different request on the same path: the
    /// first request stands, and this one stored nothing.
    #[error(
        "the idempotency key was already used with a different request; send a new key for a \
         new request"
    )]
    IdempotencyKeyReused,
    /// A `[[inbox.policy.rate_limit]]` for the request's action is exhausted; nothing was
    /// stored. Answered 429 with `Retry-After`.
    #[error(
        "rate limit: at most {max} requests with action {action:?} per {window}; retry in {retry_after_secs} s"
    )]
    RateLimited {
        action: String,
        max: u32,
        /// The window as configured, e.g. `1h`.
        window: String,
        retry_after_secs: u64,
    },
    /// An upload's file could not be moved into the uploads directory.
    #[error("cannot store the upload: {0}")]
    Files(#[source] std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for InboxError {
    fn from(e: sqlx::Error) -> Self {
        InboxError::Store(StoreError::Db(e))
    }
}

fn join(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl InboxError {
    /// The HTTP status the API answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            InboxError::NotFound(_) => 404,
            InboxError::Invalid { .. }
            | InboxError::InvalidAnswers(_)
            | InboxError::InvalidTransition(_)
            // Not 409: the SDK retries 409s, and a key reused elsewhere stays reused.
            | InboxError::IdempotencyMismatch => 400,
            InboxError::AlreadyDecided | InboxError::Withdrawn(_) => 409,
            // Unprocessable rather than 409 for the same reason: retrying cannot help.
            InboxError::IdempotencyKeyReused => 422,
            InboxError::RateLimited { .. } => 429,
            InboxError::Files(_) | InboxError::Store(_) => 500,
        }
    }

    /// Seconds after which a refused create may succeed (`Retry-After`), for a rate limit.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            InboxError::RateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The response body, in the Pump Up shapes: `{"code", "message"}` for a 400 (and for the
    /// 422 of a reused idempotency key) and `{"error"}` otherwise. Invalid answers also list
    /// `errors` (`[{fieldId, code, message}]`) so a form can mark every field at once. A store
    /// failure says no more than "internal error": its details are for the log, not for the
    /// client.
    pub fn body(&self) -> Value {
        match self {
            InboxError::Invalid { code, message } => json!({"code": code, "message": message}),
            InboxError::InvalidAnswers(errors) => json!({
                "code": "invalid_answers",
                "message": self.to_string(),
                "errors": errors,
            }),
            InboxError::InvalidTransition(_) => {
                json!({"code": "invalid_transition", "message": self.to_string()})
            }
            InboxError::IdempotencyMismatch | InboxError::IdempotencyKeyReused => {
                json!({"code": "idempotency_key_reused", "message": self.to_string()})
            }
            InboxError::NotFound(_)
            | InboxError::AlreadyDecided
            | InboxError::Withdrawn(_)
            | InboxError::RateLimited { .. } => {
                json!({"error": self.to_string()})
            }
            InboxError::Files(_) | InboxError::Store(_) => json!({"error": "internal error"}),
        }
    }
}
