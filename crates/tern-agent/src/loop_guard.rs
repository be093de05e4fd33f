//! The loop guard: a model that makes the same tool call again and again within a turn.
//!
//! Small models stuck on a failing call repeat it until the iteration limit, each time with
//! a longer prompt (one run against llama.cpp made the same failing call 28 times). A call
//! counts as a repeat when the tool, its arguments (as JSON, so key order and spacing do not
//! matter) and the result the model got are all the same as an earlier call of the turn:
//! - at `warn_after` repeats the result the model reads gets a plain note that it is
//!   repeating itself and should change its approach;
//! - at `stop_after` the turn ends with [`crate::TurnStatus::LoopDetected`] and a message that
//!   says why.
//!
//! A call that varies its arguments, or whose result changes (a command waiting for
//! something that eventually happens), is not a repeat.

use std::collections::HashMap;

use serde_json::Value;

/// `[agent] loop_guard`, `loop_warn_after`, `loop_stop_after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopGuardSettings {
    pub enabled: bool,
    /// Identical calls in a turn after which the model is told it is repeating itself.
    pub warn_after: u32,
    /// Identical calls in a turn after which the turn ends.
    pub stop_after: u32,
}

impl Default for LoopGuardSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            warn_after: 3,
            stop_after: 5,
        }
    }
}

/// Why a turn was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stopped {
    pub tool: String,
    pub times: u32,
}

impl Stopped {
    /// What the turn ends with, stored as the assistant's answer.
    pub(crate) fn message(&self) -> String {
        format!(
            "I stopped: I called `{}` {} times in this turn with the same arguments and got the \
             same result each time, so repeating it was not getting anywhere (loop guard). Send \
             another message to let me try a different approach, or change \
             agent.loop_stop_after (or set agent.loop_guard = false) in config.toml.",
            self.tool, self.times
        )
    }
}

/// One turn's count of identical calls.
#[derive(Debug)]
pub(crate) struct LoopGuard {
    settings: LoopGuardSettings,
    seen: HashMap<(String, String, String), u32>,
    stopped: Option<Stopped>,
}

impl LoopGuard {
    pub(crate) fn new(settings: &LoopGuardSettings) -> Self {
        Self {
            settings: settings.clone(),
            seen: HashMap::new(),
            stopped: None,
        }
    }

    /// Counts a finished call and returns the content the model is given for it: `content`
    /// itself, or with the note once the call has been repeated `warn_after` times.
    pub(crate) fn observe(&mut self, tool: &str, arguments: &str, content: String) -> String {
        if !self.settings.enabled {
            return content;
        }
        let key = (tool.to_owned(), canonical(arguments), content.clone());
        let times = {
            let n = self.seen.entry(key).or_insert(0);
            *n += 1;
            *n
        };
        if times >= self.settings.stop_after && self.stopped.is_none() {
            self.stopped = Some(Stopped {
                tool: tool.to_owned(),
                times,
            });
        }
        if times < self.settings.warn_after {
            return content;
        }
        with_note(content, &self.note(times))
    }

    /// Set once a call reached `stop_after`: the turn ends after this answer's calls.
    pub(crate) fn stopped(&self) -> Option<&Stopped> {
        self.stopped.as_ref()
    }

    fn note(&self, times: u32) -> String {
        format!(
            "You have made this exact call {times} times in this turn (same tool, same \
             arguments) and got the same result each time. Repeating it will not change the \
             result: change your approach (other arguments, another tool), or stop and tell \
             the user what is blocking you. After {} identical calls the turn is stopped.",
            self.settings.stop_after
        )
    }
}

/// Arguments as comparable text: parsed JSON re-serialised (key order and spacing aside),
/// or the raw string when it is not JSON.
fn canonical(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v) => sorted(v).to_string(),
        Err(_) => arguments.trim().to_owned(),
    }
}

/// `v` with every object's keys in order, whatever map serde_json was built with.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> =
                m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// The tool result with the note: a `loop_warning` field beside the result's own when it is
/// a JSON object (tool results are), else the note appended as text.
fn with_note(content: String, note: &str) -> String {
    match serde_json::from_str::<Value>(&content) {
        Ok(Value::Object(mut m)) => {
            m.insert("loop_warning".to_owned(), Value::String(note.to_owned()));
            Value::Object(m).to_string()
        }
        _ => format!("{content}\n\n[loop_warning] {note}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(warn_after: u32, stop_after: u32) -> LoopGuard {
        LoopGuard::new(&LoopGuardSettings {
            enabled: true,
            warn_after,
            stop_after,
        })
    }

    #[test]
    fn warns_at_the_nth_repeat_and_stops_at_the_mth() {
        let mut g = guard(3, 5);
        let err = r#"{"error":"no such file"}"#.to_owned();
        for i in 1..=5 {
            // Key order and spacing differ; the call is the same.
            let args = if i % 2 == 0 {
                r#"{"path": "a", "offset": 1}"#
            } else {
                r#"{"offset":1,"path":"a"}"#
            };
            let out = g.observe("read_file", args, err.clone());
            let v: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v["error"], "no such file");
            assert_eq!(v.get("loop_warning").is_some(), i >= 3, "call {i}: {out}");
            assert_eq!(g.stopped().is_some(), i >= 5, "call {i}");
        }
        assert_eq!(
            g.stopped(),
            Some(&Stopped {
                tool: "read_file".into(),
                times: 5
            })
        );
    }

    #[test]
    fn other_arguments_tools_or_results_are_not_repeats() {
        let mut g = guard(2, 3);
        for i in 0..10 {
            let out = g.observe(
                "terminal",
                &format!(r#"{{"command":"ls {i}"}}"#),
                "{}".into(),
            );
            assert_eq!(out, "{}");
        }
        for i in 0..10 {
            let out = g.observe(
                "terminal",
                r#"{"command":"make"}"#,
                format!("{{\"n\":{i}}}"),
            );
            assert!(!out.contains("loop_warning"));
        }
        assert!(g.stopped().is_none());
    }

    #[test]
    fn off_means_off_and_non_json_results_get_the_note_as_text() {
        let mut g = LoopGuard::new(&LoopGuardSettings {
            enabled: false,
            ..Default::default()
        });
        for _ in 0..10 {
            assert_eq!(g.observe("t", "{}", "x".into()), "x");
        }
        assert!(g.stopped().is_none());
        let mut g = guard(1, 9);
        let out = g.observe("t", "not json", "plain".into());
        assert!(out.starts_with("plain\n\n[loop_warning] You have made this exact call 1 times"));
    }
}
