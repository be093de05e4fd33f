//! Asking the human at the terminal for what an MCP server's `elicitation/create` wants:
//! [`TerminalElicitor`], the `Elicitor` `tern chat` gives its MCP servers.
//!
//! The human first chooses to answer, decline or cancel; answering asks each field in turn,
//! with its description, kind and default, until the text is acceptable for the field's type
//! ([`tern_mcp::elicit::value_from_text`]). An empty line takes the default, or skips an
//! optional field. Ctrl-C or Ctrl-D at any prompt cancels.

use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};
use tern_mcp::elicit::{ElicitField, FieldKind, value_from_text};
use tern_mcp::{ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor};
use tern_tools::BoxFuture;

use super::input::LineReader;

/// Where the questions are asked: a line read after a prompt (`None`: Ctrl-C or end of
/// input), and text shown.
pub trait Prompt {
    fn line(&mut self, prompt: &str) -> Option<String>;
    fn say(&mut self, text: &str);
}

impl Prompt for LineReader {
    fn line(&mut self, prompt: &str) -> Option<String> {
        self.read_line(prompt)
    }

    fn say(&mut self, text: &str) {
        eprintln!("{text}");
    }
}

/// The REPL's line reader, once the REPL has one: the servers start (and may ask) before it
/// exists, and a one-turn `tern chat -q` never has one.
pub type ReaderSlot = Arc<OnceLock<Arc<Mutex<LineReader>>>>;

/// Asks at the terminal, through the REPL's line reader.
pub struct TerminalElicitor {
    pub reader: ReaderSlot,
}

impl Elicitor for TerminalElicitor {
    fn elicit(
        &self,
        request: ElicitationRequest,
    ) -> BoxFuture<'_, Result<ElicitationAnswer, ElicitError>> {
        let reader = self.reader.get().map(Arc::clone);
        Box::pin(async move {
            let Some(reader) = reader else {
                return Err(ElicitError::Unavailable(
                    "`tern chat -q` has no terminal to ask at (run `tern chat` for a session that can ask)"
                        .to_owned(),
                ));
            };
            let cancel = request.cancel.clone();
            let asked = tokio::task::spawn_blocking(move || {
                let mut r = reader.lock().unwrap_or_else(|e| e.into_inner());
                ask(&mut *r, &request)
            });
            tokio::select! {
                a = asked => a.map_err(|e| ElicitError::Failed(format!("the prompt failed: {e}"))),
                // The turn was interrupted: the prompt's line is left to the REPL.
                () = cancel.cancelled() => Ok(ElicitationAnswer::Cancel),
            }
        })
    }
}

/// Asks `req` at `p`.
pub fn ask(p: &mut dyn Prompt, req: &ElicitationRequest) -> ElicitationAnswer {
    let during = req
        .tool
        .as_deref()
        .map(|t| format!(" (during `{t}`)"))
        .unwrap_or_default();
    p.say(&format!(
        "\n? MCP server `{}` asks{during}:\n  {}",
        req.server, req.message
    ));
    loop {
        let Some(choice) = p.line("[a]nswer, [d]ecline or [c]ancel? (default: answer) ") else {
            return ElicitationAnswer::Cancel;
        };
        match choice.trim().to_ascii_lowercase().as_str() {
            "" | "a" | "answer" => break,
            "d" | "decline" => return ElicitationAnswer::Decline,
            "c" | "cancel" => return ElicitationAnswer::Cancel,
            _ => p.say("Please answer a, d or c."),
        }
    }
    let mut content = Map::new();
    for field in &req.fields {
        match ask_field(p, field) {
            Asked::Value(v) => {
                content.insert(field.name.clone(), v);
            }
            Asked::Skipped => {}
            Asked::Cancelled => return ElicitationAnswer::Cancel,
        }
    }
    ElicitationAnswer::Accept { content }
}

enum Asked {
    Value(Value),
    Skipped,
    Cancelled,
}

fn ask_field(p: &mut dyn Prompt, f: &ElicitField) -> Asked {
    if let Some(d) = &f.description {
        p.say(&format!("  {d}"));
    }
    let mut hints = Vec::new();
    if f.required {
        hints.push("required".to_owned());
    }
    hints.push(kind_hint(&f.kind));
    let default = f.default.as_ref().map(|d| match d {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let prompt = format!(
        "  {} ({}){}: ",
        f.title,
        hints.join(", "),
        default
            .as_ref()
            .map(|d| format!(" [{d}]"))
            .unwrap_or_default()
    );
    loop {
        let Some(line) = p.line(&prompt) else {
            return Asked::Cancelled;
        };
        if line.trim().is_empty() {
            match (&f.default, f.required) {
                (Some(d), _) => return Asked::Value(d.clone()),
                (None, false) => return Asked::Skipped,
                (None, true) => {
                    p.say("  This one is required.");
                    continue;
                }
            }
        }
        match value_from_text(f, &line) {
            Ok(v) => return Asked::Value(v),
            Err(expected) => p.say(&format!("  Expected {expected}.")),
        }
    }
}

/// What to type, in a few words.
fn kind_hint(kind: &FieldKind) -> String {
    let labels = |k: &FieldKind| -> String {
        k.options()
            .iter()
            .map(|c| c.label.as_str())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    match kind {
        FieldKind::Text { format, .. } => format.clone().unwrap_or_else(|| "text".to_owned()),
        FieldKind::Number { integer: true, .. } => "whole number".to_owned(),
        FieldKind::Number { .. } => "number".to_owned(),
        FieldKind::Boolean => "y/n".to_owned(),
        FieldKind::Choice { .. } => format!("one of {}", labels(kind)),
        FieldKind::MultiChoice { .. } => format!("any of {}, comma-separated", labels(kind)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tern_mcp::elicit::parse_schema;
    use tokio_util::sync::CancellationToken;

    /// Answers from a script; records what was shown and asked.
    struct Script {
        answers: Vec<&'static str>,
        shown: Vec<String>,
    }

    impl Prompt for Script {
        fn line(&mut self, prompt: &str) -> Option<String> {
            self.shown.push(prompt.to_owned());
            if self.answers.is_empty() {
                return None;
            }
            Some(self.answers.remove(0).to_owned())
        }

        fn say(&mut self, text: &str) {
            self.shown.push(text.to_owned());
        }
    }

    fn request() -> ElicitationRequest {
        let fields = parse_schema(&json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "description": "Your full name"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ok": {"type": "boolean", "title": "Agree"},
                "pet": {"type": "string", "enum": ["p1", "p2"], "enumNames": ["Cats", "Dogs"], "default": "p1"},
                "note": {"type": "string"}
            },
            "required": ["name", "age"]
        }))
        .unwrap();
        ElicitationRequest {
            server: "srv".into(),
            tool: Some("signup".into()),
            message: "Who are you?".into(),
            fields,
            call: None,
            cancel: CancellationToken::new(),
        }
    }

    fn run(answers: Vec<&'static str>) -> (ElicitationAnswer, Vec<String>) {
        let mut s = Script {
            answers,
            shown: Vec::new(),
        };
        let a = ask(&mut s, &request());
        (a, s.shown)
    }

    #[test]
    fn each_field_is_asked_until_its_answer_fits_its_type() {
        // Fields come required first: age, name; then note, ok, pet.
        let (answer, shown) = run(vec![
            "",      // answer
            "",      // age: required, asked again
            "forty", // not a number, asked again
            "36", "Ada", "",    // note: optional, skipped
            "yes", // ok
            "",    // pet: the default
        ]);
        assert_eq!(
            answer,
            ElicitationAnswer::Accept {
                content: json!({"name": "Ada", "age": 36, "ok": true, "pet": "p1"})
                    .as_object()
                    .cloned()
                    .unwrap()
            }
        );
        let text = shown.join("\n");
        assert!(
            text.contains("MCP server `srv` asks (during `signup`):\n  Who are you?"),
            "{text}"
        );
        assert!(text.contains("  Your full name"), "{text}");
        assert!(text.contains("  Name (required, text): "), "{text}");
        assert!(text.contains("  This one is required."), "{text}");
        assert!(text.contains("  Expected a number."), "{text}");
        assert!(text.contains("  pet (one of Cats / Dogs) [p1]: "), "{text}");
    }

    #[test]
    fn decline_cancel_and_a_closed_terminal() {
        assert_eq!(run(vec!["d"]).0, ElicitationAnswer::Decline);
        assert_eq!(run(vec!["cancel"]).0, ElicitationAnswer::Cancel);
        // Ctrl-D halfway through cancels rather than sending half a form.
        assert_eq!(run(vec!["a", "Ada"]).0, ElicitationAnswer::Cancel);
        let (answer, shown) = run(vec!["maybe", "d"]);
        assert_eq!(answer, ElicitationAnswer::Decline);
        assert!(shown.contains(&"Please answer a, d or c.".to_owned()));
    }
}
