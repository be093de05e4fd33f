//! The parts of the Matrix client-server API (v3) the adapter reads: the `/sync` answer and
//! the standard error body. Event contents stay `serde_json::Value`: they are user-written,
//! and one odd event must not make a whole sync fail to parse.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

/// The answer of `GET /_matrix/client/v3/sync`.
#[derive(Debug, Deserialize)]
pub(crate) struct SyncResponse {
    pub next_batch: String,
    #[serde(default)]
    pub rooms: Rooms,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Rooms {
    /// Rooms the user is in, by room id (sorted, so a batch's order is stable).
    #[serde(default)]
    pub join: BTreeMap<String, JoinedRoom>,
    /// Rooms the user is invited to; only their ids matter.
    #[serde(default)]
    pub invite: BTreeMap<String, serde::de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct JoinedRoom {
    #[serde(default)]
    pub timeline: Timeline,
    #[serde(default)]
    pub state: Events,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Timeline {
    #[serde(default)]
    pub events: Vec<RoomEvent>,
    /// More events happened than the timeline carries (a gap before its first event).
    #[serde(default)]
    pub limited: bool,
    /// Where to paginate backwards from to fill that gap.
    #[serde(default)]
    pub prev_batch: Option<String>,
}

/// The answer of `GET /rooms/{roomId}/messages`.
#[derive(Debug, Deserialize)]
pub(crate) struct MessagesResponse {
    #[serde(default)]
    pub chunk: Vec<RoomEvent>,
    /// The token to continue from; absent at the end.
    #[serde(default)]
    pub end: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Events {
    #[serde(default)]
    pub events: Vec<RoomEvent>,
}

/// A room event; `content` is read field by field.
#[derive(Debug, Deserialize)]
pub(crate) struct RoomEvent {
    #[serde(default)]
    pub event_id: String,
    #[serde(default)]
    pub sender: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub state_key: Option<String>,
    #[serde(default)]
    pub content: Value,
}

/// The standard error body: `{"errcode": "M_…", "error": "…", "retry_after_ms": …}`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub errcode: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
}

/// The event types the adapter reads from timelines.
pub(crate) const TIMELINE_TYPES: [&str; 2] = ["m.room.message", "m.reaction"];

/// The sync filter, inline: room timelines with messages and reactions only, the members of
/// their senders (for display names), and nothing else (no presence, account data, receipts
/// or typing).
pub(crate) fn sync_filter() -> String {
    json!({
        "presence": { "types": [] },
        "account_data": { "types": [] },
        "room": {
            "timeline": { "types": TIMELINE_TYPES, "limit": 100 },
            "state": {
                "types": ["m.room.member"],
                "lazy_load_members": true,
                "include_redundant_members": true,
            },
            "ephemeral": { "types": [] },
            "account_data": { "types": [] },
        },
    })
    .to_string()
}
