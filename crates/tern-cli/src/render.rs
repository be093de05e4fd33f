//! How a turn looks on the terminal: answers on stdout, progress on stderr.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tern_agent::{AgentEvent, EventSink};

/// Output settings of one turn.
#[derive(Clone, Copy)]
pub struct Style {
    /// Stream answer text to stdout as it arrives (interactive mode).
    pub stream_answer: bool,
    /// Use colours on stderr.
    pub color: bool,
}

impl Style {
    pub fn detect(stream_answer: bool) -> Self {
        Self {
            stream_answer,
            color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    pub fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }

    pub fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }

    pub fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
}

/// A one-line summary of a tool call's arguments.
pub fn summarize_args(name: &str, raw: &str) -> String {
    let v: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let key = match name {
        "terminal" => "command",
        "read_file" | "write_file" | "patch_file" | "list_dir" => "path",
        _ => "",
    };
    let s = v
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| raw.to_owned());
    one_line(&s, 100)
}

pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        let mut t: String = flat.chars().take(max).collect();
        t.push('…');
        t
    } else {
        flat
    }
}

/// The event sink that prints progress lines.
pub fn sink(style: Style) -> EventSink {
    // (an unfinished line is on stdout, text of the current answer was streamed)
    let state = Arc::new(Mutex::new((false, false)));
    Arc::new(move |ev: AgentEvent| {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        let (open, streamed) = &mut *st;
        let mut err = std::io::stderr().lock();
        match ev {
            AgentEvent::AssistantDelta { text } if style.stream_answer => {
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "{text}");
                let _ = out.flush();
                *open = !text.ends_with('\n');
                *streamed = true;
            }
            AgentEvent::AssistantMessage {
                content,
                tool_calls,
            } => {
                if style.stream_answer && *open {
                    println!();
                    *open = false;
                }
                // A server that does not stream: print the final answer whole.
                if style.stream_answer
                    && !*streamed
                    && tool_calls == 0
                    && let Some(c) = &content
                {
                    println!("{c}");
                }
                *streamed = false;
                // Text that comes with tool calls is the model thinking aloud: show it dimmed.
                if !style.stream_answer
                    && tool_calls > 0
                    && let Some(c) = content.filter(|c| !c.trim().is_empty())
                {
                    let _ = writeln!(err, "{}", style.dim(&one_line(&c, 200)));
                }
            }
            AgentEvent::ToolStarted {
                name, arguments, ..
            } => {
                let _ = writeln!(
                    err,
                    "{} {name} {}",
                    style.dim("→"),
                    style.dim(&summarize_args(&name, &arguments))
                );
            }
            AgentEvent::ToolFinished {
                name,
                ok,
                duration_ms,
                content,
                ..
            } => {
                let secs = duration_ms as f64 / 1000.0;
                if ok {
                    let exit = serde_json::from_str::<Value>(&content)
                        .ok()
                        .and_then(|v| v.get("exit_code").and_then(Value::as_i64))
                        .filter(|c| *c != 0)
                        .map(|c| format!(" exit {c}"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        err,
                        "{} {name}{exit} {}",
                        style.dim("✓"),
                        style.dim(&format!("({secs:.2}s)"))
                    );
                } else {
                    let msg = serde_json::from_str::<Value>(&content)
                        .ok()
                        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or(content);
                    let _ = writeln!(
                        err,
                        "{} {name}: {} {}",
                        style.red("✗"),
                        one_line(&msg, 160),
                        style.dim(&format!("({secs:.2}s)"))
                    );
                }
            }
            AgentEvent::ModelRetry {
                attempt,
                delay_ms,
                error,
            } => {
                let _ = writeln!(
                    err,
                    "{}",
                    style.yellow(&format!(
                        "model call failed ({}); retry {attempt} in {:.1}s",
                        // Whole: the cause ("connection refused") is at its end.
                        one_line(&error, 2000),
                        delay_ms as f64 / 1000.0
                    ))
                );
            }
            _ => {}
        }
    })
}
