//! The human inbox: where an agent's requests for a human decision or for information
//! wait for a person, spoken over the Pump Up agent API (the contract is the `pumpup-sdk`
//! 0.0.10 Python package on PyPI).
//!
//! An agent opens an *approval request* (approve, reject, …) or an *elicitation request*
//! (a small form of typed fields), gets back a request id at once, and later polls for
//! the result. The inbox shows the request to a human, checks what they submit, and
//! records the outcome.
//!
//! - [`fields`]: the ten elicitation field kinds ([`Field`]), the agent's pre-fills
//!   ([`FieldBid`]), and the checks on field definitions and on answers;
//! - [`outcome`]: approval outcomes, recommendations, and the [`ApprovalResult`] and
//!   [`ElicitationResult`] an agent polls for;
//! - [`model`]: projects, tasks, the event log and the agents' request bodies;
//! - [`service`]: the durable service, [`Inbox`], on the session store's database —
//!   tasks, requests, decide-once decisions, idempotent creates, the event log (its module
//!   docs give the flow at a glance);
//! - [`error`]: [`InboxError`] and the HTTP status and body each failure maps to.
//!
//! The HTTP API, reviewers and the web inbox come next.
//!
//! # Validating an answer
//!
//! 1. When an agent opens an elicitation request, [`validate_field_defs`] checks its
//!    `fields`: unusable definitions (duplicate ids, inverted ranges, a select without
//!    options, …) are refused up front with every problem listed, instead of producing a
//!    form nobody can submit.
//! 2. When showing the form, [`bid_applies`] tells which of the agent's recommendations
//!    are valid values and can be pre-filled; the others are shown only as suggestions.
//! 3. When the human submits, [`validate_answers`] checks the answers against the same
//!    definitions: required fields answered, no unknown ids, each value right for its
//!    kind (text length and format, number range and integrality, slider steps, options,
//!    real calendar dates and times within bounds). On failure it returns every
//!    [`FieldError`] (`{fieldId, code, message}`, the message in plain words for the
//!    human) so the form can mark all problems at once; on success it returns the
//!    normalized answers, which become the `fields` of the [`ElicitationResult`].
//!
//! Dates and times are parsed by small hand-written parsers (no chrono/time dependency):
//! `YYYY-MM-DD`, RFC 3339 with an offset, and `HH:MM[:SS]`.

mod config_projects;
mod datetime;
pub mod error;
pub mod fields;
mod idempotency;
pub mod model;
pub mod notify;
pub mod outcome;
pub mod policy;
pub mod reviewers;
pub mod service;
mod store;
pub mod uploads;

pub use error::InboxError;
pub use service::{Inbox, review};

pub use fields::{
    Field, FieldBid, FieldDefError, FieldError, TextFormat, bid_applies, validate_answers,
    validate_field_defs,
};
pub use outcome::{
    ApprovalRecommendation, ApprovalResult, AuthoritySnapshot, ElicitationResult, Outcome,
    OutcomeType, Timestamp, TimestampError,
};
