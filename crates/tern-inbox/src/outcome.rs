//! What a human decided: approval outcomes and the result records an agent polls for.
//!
//! Shapes mirror the Pump Up SDK (`pumpup-sdk` 0.0.10: `outcome.py`, `outcome_type.py`,
//! `approval_recommendation.py`, `approval_result.py`, `authority_snapshot.py`,
//! `elicitation_result.py`) with its camelCase wire names; optional properties are left
//! out of the JSON when unset, and unknown extra properties are ignored on input.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::datetime::{self, Instant};

/// The decision on an approval request. `SCREAMING_SNAKE_CASE` on the wire.
///
/// The SDK types this as an open enum (any string accepted, for forward compatibility).
/// The inbox is the side that records decisions, so it accepts only these five: an
/// unknown outcome is a mistake to reject, not a value to pass along.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutcomeType {
    Approve,
    Reject,
    EditAndApprove,
    Escalate,
    RequestMoreInfo,
}

/// `{type, reasonCode?, note?}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    #[serde(rename = "type")]
    pub kind: OutcomeType,
    /// A machine-readable reason, e.g. for a rejection; free-form in the API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    /// The human's own words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Outcome {
    /// An outcome with no reason code and no note.
    pub fn new(kind: OutcomeType) -> Self {
        Outcome {
            kind,
            reason_code: None,
            note: None,
        }
    }
}

/// The agent's suggested decision, shown to the human: `{outcome, confidence?, rationale?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecommendation {
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

/// Who was allowed to decide, as it stood when they decided: `{subject?, tags?}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthoritySnapshot {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// The body of `GET api/approval-requests/{id}/result` once decided:
/// `{requestId, taskId, outcome, decidedAt, decidedBy?, authoritySnapshot?,
/// recommendationSnapshot?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalResult {
    pub request_id: String,
    pub task_id: String,
    pub outcome: Outcome,
    pub decided_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_snapshot: Option<AuthoritySnapshot>,
    /// The agent's recommendation as the human saw it when deciding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation_snapshot: Option<ApprovalRecommendation>,
}

/// The body of `GET api/elicitation-requests/{id}/result` once answered:
/// `{requestId, taskId, answeredAt, answeredBy?, fields?}`.
///
/// `fields` (field id → answer) is optional in the SDK, so it is here too; the inbox
/// fills it with the output of [`crate::fields::validate_answers`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationResult {
    pub request_id: String,
    pub task_id: String,
    pub answered_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Map<String, Value>>,
}

/// A point in time as the API writes it: an RFC 3339 date-time with an offset, such as
/// `2024-05-01T07:30:00Z` or `2024-05-01T09:30:00.123456+02:00` (the SDK sends Python's
/// `isoformat()`, `Z` for UTC). Checked on the way in; kept as written so it goes back
/// out unchanged; ordered by the instant it names, whatever the offset.
#[derive(Debug, Clone)]
pub struct Timestamp {
    text: String,
    instant: Instant,
}

/// A string that is not an RFC 3339 date-time with an offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 date-time with an offset (like 2024-05-01T07:30:00Z): {0:?}")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// Parses an RFC 3339 date-time with an offset.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        let instant = datetime::parse_rfc3339(text).map_err(|_| TimestampError(text.to_owned()))?;
        Ok(Timestamp {
            text: text.to_owned(),
            instant,
        })
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmmZ` for milliseconds since the Unix epoch. Clamped to years
    /// 0001–9999, the range four-digit years (and the SDK's Python `datetime`) can hold.
    pub fn from_unix_millis(unix_millis: i64) -> Self {
        let text = datetime::format_rfc3339_millis(unix_millis);
        let clamped = unix_millis.clamp(datetime::MIN_UNIX_MILLIS, datetime::MAX_UNIX_MILLIS);
        Timestamp {
            text,
            instant: Instant::from_unix_millis(clamped),
        }
    }

    /// The current time, to the millisecond, in UTC.
    pub fn now() -> Self {
        Self::from_unix_millis(tern_util::now_ms())
    }

    /// The string as it was written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Milliseconds since the Unix epoch (sub-millisecond digits are dropped).
    pub fn unix_millis(&self) -> i64 {
        self.instant.unix_millis()
    }
}

// Equality is by instant, like the ordering: `…T09:30:00+02:00` and `…T07:30:00Z` are the
// same moment. Use `as_str` to compare the spelling.
impl PartialEq for Timestamp {
    fn eq(&self, other: &Self) -> bool {
        self.instant == other.instant
    }
}

impl Eq for Timestamp {}

impl PartialOrd for Timestamp {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timestamp {
    fn cmp(&self, other: &Self) -> Ordering {
        self.instant.cmp(&other.instant)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T>(wire: Value) -> T
    where
        T: Serialize + for<'de> Deserialize<'de>,
    {
        let parsed: T = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), wire);
        parsed
    }

    #[test]
    fn outcome_types_are_screaming_snake_case() {
        for (kind, wire) in [
            (OutcomeType::Approve, "APPROVE"),
            (OutcomeType::Reject, "REJECT"),
            (OutcomeType::EditAndApprove, "EDIT_AND_APPROVE"),
            (OutcomeType::Escalate, "ESCALATE"),
            (OutcomeType::RequestMoreInfo, "REQUEST_MORE_INFO"),
        ] {
            assert_eq!(serde_json::to_value(kind).unwrap(), json!(wire));
            assert_eq!(
                serde_json::from_value::<OutcomeType>(json!(wire)).unwrap(),
                kind
            );
        }
        assert!(serde_json::from_value::<OutcomeType>(json!("approve")).is_err());
        assert!(serde_json::from_value::<OutcomeType>(json!("MAYBE")).is_err());
    }

    #[test]
    fn outcome_minimal_and_full() {
        let o: Outcome = round_trip(json!({"type": "APPROVE"}));
        assert_eq!(o, Outcome::new(OutcomeType::Approve));
        let o: Outcome = round_trip(
            json!({"type": "REJECT", "reasonCode": "OVER_BUDGET", "note": "Too pricey"}),
        );
        assert_eq!(o.kind, OutcomeType::Reject);
        assert_eq!(o.reason_code.as_deref(), Some("OVER_BUDGET"));
        assert_eq!(o.note.as_deref(), Some("Too pricey"));
        // null optionals read as absent, like the SDK's `Optional[...] = None`.
        let o: Outcome = serde_json::from_value(json!({"type": "ESCALATE", "note": null})).unwrap();
        assert_eq!(o, Outcome::new(OutcomeType::Escalate));
        assert!(
            serde_json::from_value::<Outcome>(json!({"note": "x"})).is_err(),
            "type is required"
        );
    }

    #[test]
    fn recommendation_round_trip() {
        let r: ApprovalRecommendation = round_trip(json!({
            "outcome": {"type": "EDIT_AND_APPROVE", "note": "fix the amount"},
            "confidence": 0.8,
            "rationale": "matches policy"
        }));
        assert_eq!(r.confidence, Some(0.8));
        round_trip::<ApprovalRecommendation>(json!({"outcome": {"type": "APPROVE"}}));
    }

    #[test]
    fn approval_result_round_trip() {
        let full = json!({
            "requestId": "evt_1",
            "taskId": "task_1",
            "outcome": {"type": "REQUEST_MORE_INFO", "reasonCode": "MISSING_PO"},
            "decidedAt": "2024-05-01T12:00:00.123456+02:00",
            "decidedBy": "alice@example.com",
            "authoritySnapshot": {"subject": "alice", "tags": ["finance", "lead"]},
            "recommendationSnapshot": {"outcome": {"type": "APPROVE"}, "confidence": 0.5}
        });
        let r: ApprovalResult = round_trip(full);
        assert_eq!(r.decided_at.as_str(), "2024-05-01T12:00:00.123456+02:00");
        assert_eq!(
            r.decided_at,
            Timestamp::parse("2024-05-01T10:00:00.123456Z").unwrap()
        );

        let minimal = json!({
            "requestId": "evt_1",
            "taskId": "task_1",
            "outcome": {"type": "APPROVE"},
            "decidedAt": "2024-05-01T12:00:00Z"
        });
        let r: ApprovalResult = round_trip(minimal.clone());
        assert_eq!(r.authority_snapshot, None);

        let mut bad = minimal;
        bad["decidedAt"] = json!("2024-05-01 12:00");
        assert!(serde_json::from_value::<ApprovalResult>(bad).is_err());
    }

    #[test]
    fn elicitation_result_round_trip() {
        let r: ElicitationResult = round_trip(json!({
            "requestId": "evt_2",
            "taskId": "task_1",
            "answeredAt": "2024-05-01T12:00:00.500000+02:00",
            "answeredBy": "bob",
            "fields": {"email": "a@b.co", "count": 3, "agree": true, "tags": ["x", "y"]}
        }));
        assert_eq!(r.fields.as_ref().map(Map::len), Some(4));
        let r: ElicitationResult = round_trip(json!({
            "requestId": "evt_2",
            "taskId": "task_1",
            "answeredAt": "2024-05-01T10:00:00Z"
        }));
        assert_eq!(r.fields, None, "fields is optional in the SDK");
    }

    #[test]
    fn timestamps() {
        let t = Timestamp::from_unix_millis(1_714_548_600_123);
        assert_eq!(t.as_str(), "2024-05-01T07:30:00.123Z");
        assert_eq!(t.unix_millis(), 1_714_548_600_123);
        assert_eq!(t.to_string(), "2024-05-01T07:30:00.123Z");
        assert_eq!("2024-05-01T07:30:00.123Z".parse::<Timestamp>().unwrap(), t);

        let early: Timestamp = "2024-05-01T09:00:00+02:00".parse().unwrap(); // 07:00Z
        let late: Timestamp = "2024-05-01T07:15:00Z".parse().unwrap();
        assert!(early < late, "ordered by instant, not by spelling");
        assert!("2024-05-01T07:00:00Z".parse::<Timestamp>().unwrap() == early);

        assert!(Timestamp::parse("yesterday").is_err());
        assert!(
            Timestamp::parse("2024-05-01T07:30:00").is_err(),
            "offset required"
        );
        assert_eq!(
            Timestamp::from_unix_millis(i64::MAX).as_str(),
            "9999-12-31T23:59:59.999Z"
        );

        let now = Timestamp::now();
        assert!(now > t);
        assert_eq!(Timestamp::parse(now.as_str()).unwrap(), now);
    }
}
