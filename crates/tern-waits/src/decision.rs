//! A decided wait as the model and the hooks read it: what its result says (who decided, the
//! outcome in one word, a command's scope) and the message its delivery appends to the
//! session ([`render_decision`]: an inbox decision, with what a dangerous command's scope now
//! allows, or a background process's exit or watch matches). Every text is deterministic, so
//! recovery renders the same one. The resumer, the command approver and the process waits
//! all read decisions through here.

use serde_json::Value;
use tern_procs::{ExitSummary, WatchBatch};
use tern_store::{GrantScope, Wait, WaitKind};

/// The reason codes a reviewer gives with an approval to choose its scope.
pub const SCOPE_ONCE: &str = "once";
pub const SCOPE_SESSION: &str = "session";
pub const SCOPE_ALWAYS: &str = "always";

pub(crate) fn parse_json(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

/// Who decided: the stored `decided_by`, else the result's `decidedBy` / `answeredBy`.
pub(crate) fn decided_by(w: &Wait, result: &Value) -> Option<String> {
    w.decided_by.clone().or_else(|| {
        ["decidedBy", "answeredBy"]
            .iter()
            .find_map(|k| result.get(*k).and_then(Value::as_str).map(str::to_owned))
    })
}

/// The decision in one word: an approval's outcome, `SUBMITTED` for an answered
/// elicitation, `EXPIRED` for one that expired unanswered.
pub(crate) fn outcome_word(w: &Wait, result: &Value) -> Option<String> {
    if let Some(t) = result.pointer("/outcome/type").and_then(Value::as_str) {
        return Some(t.to_owned());
    }
    if w.kind == WaitKind::Process {
        // EXITED or LOST (the supervisor died without recording an exit).
        return result
            .get("state")
            .and_then(Value::as_str)
            .map(str::to_uppercase);
    }
    match w.kind {
        WaitKind::Elicitation if result.get("fields").is_some() => Some("SUBMITTED".to_owned()),
        WaitKind::Elicitation if !result.is_null() => Some("EXPIRED".to_owned()),
        _ => None,
    }
}

/// The outcome type of a decision (`APPROVE`, …), if it has one.
fn outcome_type(result: &Value) -> Option<&str> {
    result.pointer("/outcome/type").and_then(Value::as_str)
}

/// Whether the decision approves the command.
pub fn approves(result: &Value) -> bool {
    matches!(outcome_type(result), Some("APPROVE" | "EDIT_AND_APPROVE"))
}

/// The scope a reviewer chose with the outcome's `reasonCode`: `once`, `session` or
/// `always` (any case); anything else, or none, is `once`, the narrowest.
pub fn scope_of(result: &Value) -> GrantScope {
    let code = result
        .pointer("/outcome/reasonCode")
        .and_then(Value::as_str)
        .map(|c| c.trim().to_ascii_lowercase());
    match code.as_deref() {
        Some(SCOPE_SESSION) => GrantScope::Session,
        Some(SCOPE_ALWAYS) => GrantScope::Always,
        _ => GrantScope::Once,
    }
}

/// The decision message: one user-role message saying what was asked, what was decided,
/// by whom, and the full result JSON. Deterministic, so recovery renders the same text.
pub fn render_decision(w: &Wait) -> String {
    if w.kind == WaitKind::Process {
        return render_exit(w);
    }
    let request = parse_json(Some(&w.request));
    let result = parse_json(w.result.as_deref());
    let summary = request
        .get("summary")
        .and_then(Value::as_str)
        .unwrap_or("(no summary)");
    let request_id = w
        .request_id
        .as_deref()
        .or_else(|| request.get("requestId").and_then(Value::as_str))
        .unwrap_or("?");
    let who = decided_by(w, &result)
        .map(|b| format!(" by {b}"))
        .unwrap_or_default();
    let expired = result
        .pointer("/outcome/reasonCode")
        .and_then(Value::as_str)
        == Some("expired")
        || (w.kind == WaitKind::Elicitation && !result.is_null() && result.get("fields").is_none());
    let mut out = String::new();
    let what = match w.kind {
        WaitKind::Approval => "approval request",
        WaitKind::Elicitation => "question (elicitation request)",
        WaitKind::Command => "request to run a dangerous command",
        WaitKind::Process => "background process",
    };
    out.push_str(&format!(
        "[inbox decision] Your {what} {request_id} (kind {}) has an answer.\n",
        w.kind.as_str()
    ));
    out.push_str(&format!("Asked: {summary}\n"));
    if let Some(cmd) = request.get("command").and_then(Value::as_str) {
        out.push_str(&format!("Command: {cmd}\n"));
    }
    match w.kind {
        WaitKind::Approval | WaitKind::Command | WaitKind::Process => {
            let outcome = outcome_word(w, &result).unwrap_or_else(|| "(unknown)".into());
            if expired {
                out.push_str(&format!(
                    "Decided: {outcome} — nobody decided before the request expired; it was \
                     settled as {outcome}.\n"
                ));
            } else {
                out.push_str(&format!("Decided: {outcome}{who}.\n"));
            }
            if let Some(note) = result.pointer("/outcome/note").and_then(Value::as_str) {
                out.push_str(&format!("Note: {note}\n"));
            }
            if let Some(code) = result
                .pointer("/outcome/reasonCode")
                .and_then(Value::as_str)
            {
                out.push_str(&format!("Reason code: {code}\n"));
            }
        }
        WaitKind::Elicitation => {
            if expired {
                out.push_str("Answered: nobody — the request expired without answers.\n");
            } else {
                out.push_str(&format!("Answered{who}:\n"));
                if let Some(fields) = result.get("fields").and_then(Value::as_object) {
                    for (k, v) in fields {
                        let v = match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        out.push_str(&format!("- {k}: {v}\n"));
                    }
                }
            }
        }
    }
    if w.kind == WaitKind::Command {
        // What the reviewer's scope allows, in the words the agent must follow.
        out.push_str(&command_message_hint(&result));
        out.push('\n');
    }
    out.push_str("Continue the task with this decision.\n\nFull result:\n");
    out.push_str(&serde_json::to_string_pretty(&result).unwrap_or_else(|_| "null".into()));
    out
}

/// The sentence a command's decision message ends with: what the agent may do now.
pub fn command_message_hint(result: &Value) -> String {
    if approves(result) {
        return match scope_of(result) {
            GrantScope::Once => "The command was approved once: run exactly the same command \
                again now, in the same working directory; it will run without asking, one \
                time. A changed or another dangerous command needs a new approval."
                .to_owned(),
            GrantScope::Session => "The command was approved for the rest of this session: \
                run it again now; commands of the same kind run without asking in this \
                session."
                .to_owned(),
            GrantScope::Always => "The command was approved always: run exactly the same \
                command again now; it is on the allowlist from now on."
                .to_owned(),
        };
    }
    let how = match outcome_type(result) {
        Some("REJECT") => "rejected".to_owned(),
        Some(other) => format!("not approved ({})", other.to_lowercase().replace('_', " ")),
        None => "not approved".to_owned(),
    };
    format!(
        "The command was {how} and was not run. Do not run it again, and do not run another \
         command to the same effect; tell the user, or continue without it."
    )
}

/// What a watch wait's request says it is (exit waits have no `event`).
pub(crate) const WATCH_EVENT: &str = "watch";

pub(crate) fn is_watch(w: &Wait) -> bool {
    request_field(w, "event").as_deref() == Some(WATCH_EVENT)
}

pub(crate) fn request_field(w: &Wait, key: &str) -> Option<String> {
    serde_json::from_str::<Value>(&w.request)
        .ok()?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

/// The message a process wait delivers: what ended, how, and its last lines.
/// Deterministic, so recovery renders the same text.
pub fn render_exit(w: &Wait) -> String {
    if is_watch(w) {
        return render_watch(w);
    }
    let summary: Option<ExitSummary> = w
        .result
        .as_deref()
        .and_then(|r| serde_json::from_str(r).ok());
    let id = request_field(w, "process_id").unwrap_or_else(|| "?".into());
    let command = request_field(w, "command").unwrap_or_default();
    let Some(s) = summary else {
        return format!("[process exited] Your background process {id} (`{command}`) has ended.");
    };
    let how = match (s.state.as_str(), s.exit_code, s.signal) {
        ("lost", ..) => {
            "was lost: its supervisor ended without recording an exit status".to_owned()
        }
        (_, _, Some(sig)) => format!("was killed by signal {sig}"),
        (_, Some(code), None) => format!("exited with code {code}"),
        _ => "exited".to_owned(),
    };
    let mut out = format!("[process exited] Your background process {id} (`{command}`) {how}.");
    if s.last_lines.is_empty() {
        out.push_str("\nIt wrote no output.");
    } else {
        out.push_str("\nLast lines:\n");
        out.push_str(&s.last_lines);
    }
    out.push_str("\n\nThe full output is available through the `process` tool (`log`).");
    out
}

/// The message a watch wait delivers: which lines matched which patterns.
fn render_watch(w: &Wait) -> String {
    let id = request_field(w, "process_id").unwrap_or_else(|| "?".into());
    let command = request_field(w, "command").unwrap_or_default();
    let batch: Option<WatchBatch> = serde_json::from_str::<Value>(&w.request)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("batch")?.clone()).ok());
    let Some(b) = batch else {
        return format!(
            "[process output matched] Your background process {id} (`{command}`) printed output matching its watch patterns."
        );
    };
    let lines = if b.total_matches == 1 {
        "a line".to_owned()
    } else {
        format!("{} lines", b.total_matches)
    };
    let state = if b.process_ended {
        "It has ended since"
    } else {
        "It is still running"
    };
    let mut out = format!(
        "[process output matched] Your background process {id} (`{command}`) printed {lines} matching its watch patterns. {state}."
    );
    for m in &b.matches {
        out.push_str(&format!("\n[{}] {}", m.pattern, m.line));
    }
    let hidden = b.total_matches.saturating_sub(b.matches.len() as u64);
    if hidden > 0 {
        out.push_str(&format!("\n… and {hidden} more matching lines."));
    }
    out.push_str(
        "\n\nMatches are told at most once per interval; the full output is available through the `process` tool (`log`).",
    );
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn scopes_and_hints_follow_the_outcome() {
        let r = |t: &str, code: Option<&str>| {
            let mut o = json!({"type": t});
            if let Some(c) = code {
                o["reasonCode"] = json!(c);
            }
            json!({"outcome": o})
        };
        assert_eq!(scope_of(&r("APPROVE", None)), GrantScope::Once);
        assert_eq!(
            scope_of(&r("APPROVE", Some("Session"))),
            GrantScope::Session
        );
        assert_eq!(
            scope_of(&r("APPROVE", Some(" always "))),
            GrantScope::Always
        );
        assert_eq!(scope_of(&r("APPROVE", Some("forever"))), GrantScope::Once);
        assert!(approves(&r("EDIT_AND_APPROVE", None)));
        assert!(!approves(&r("REJECT", Some("session"))));
        assert!(!approves(&json!({})));
        assert!(command_message_hint(&r("APPROVE", None)).contains("approved once"));
        assert!(command_message_hint(&r("APPROVE", Some("session"))).contains("this session"));
        let no = command_message_hint(&r("REJECT", None));
        assert!(no.contains("rejected") && no.contains("Do not run it again"));
        assert!(command_message_hint(&r("REQUEST_MORE_INFO", None)).contains("request more info"));
    }
}
