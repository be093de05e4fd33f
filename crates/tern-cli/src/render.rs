//! How a turn looks on the terminal: answers on stdout (markdown rendered when stdout is a
//! terminal, plain otherwise), progress on stderr — each tool call, a preview of what it
//! printed (all of it with `--verbose`), retries with their cause, and the tokens a turn used.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};
use serde_json::Value;
use tern_agent::{AgentEvent, EventSink};
use tern_llm::Usage;

/// Lines of a tool's output shown without `--verbose`.
pub const PREVIEW_LINES: usize = 4;
/// Characters of one preview line shown without `--verbose`.
pub const PREVIEW_WIDTH: usize = 160;

/// Output settings of one turn.
#[derive(Clone, Copy)]
pub struct Style {
    /// Stream answer text to stdout as it arrives (interactive mode).
    pub stream_answer: bool,
    /// Use colours on stderr.
    pub color: bool,
    /// Render answers as markdown for the terminal (stdout is one).
    pub markdown: bool,
    /// Colours in the rendered markdown.
    pub markdown_color: bool,
    /// Show tools' whole output, not a preview.
    pub verbose: bool,
}

impl Style {
    pub fn detect(stream_answer: bool, verbose: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some();
        let markdown = std::io::stdout().is_terminal();
        Self {
            stream_answer,
            color: std::io::stderr().is_terminal() && !no_color,
            markdown,
            markdown_color: markdown && !no_color,
            verbose,
        }
    }

    /// An answer as it goes to stdout: rendered markdown on a terminal, else as it is.
    pub fn answer(&self, text: &str) -> String {
        if self.markdown {
            let mut md = Markdown::new(self.markdown_color);
            md.push(text);
            md.finish()
        } else {
            text.to_owned()
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
        "search_files" => "pattern",
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
    struct State {
        /// An unfinished line is on stdout.
        open: bool,
        /// Text of the current answer was streamed.
        streamed: bool,
        md: Markdown,
    }
    let state = Arc::new(Mutex::new(State {
        open: false,
        streamed: false,
        md: Markdown::new(style.markdown_color),
    }));
    Arc::new(move |ev: AgentEvent| {
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        let mut err = std::io::stderr().lock();
        match ev {
            AgentEvent::AssistantDelta { text } if style.stream_answer => {
                let mut out = std::io::stdout().lock();
                if style.markdown {
                    // Whole blocks only: a heading or a code block is rendered once complete.
                    let _ = write!(out, "{}", st.md.push(&text));
                } else {
                    let _ = write!(out, "{text}");
                    st.open = !text.ends_with('\n');
                }
                let _ = out.flush();
                st.streamed = true;
            }
            // The answer broke off and is asked for again. Text already printed stays on the
            // screen, so it is marked void; text still held (an unfinished markdown block) is
            // dropped, so the retried answer is not shown after half of itself.
            AgentEvent::AnswerDiscarded if style.stream_answer => {
                st.md = Markdown::new(style.markdown_color);
                if st.open {
                    println!();
                    st.open = false;
                }
                let _ = std::io::stdout().flush();
                st.streamed = false;
                let _ = writeln!(
                    err,
                    "{}",
                    style.yellow("[the answer broke off; the text above is discarded]")
                );
            }
            AgentEvent::AssistantMessage {
                content,
                tool_calls,
            } => {
                if style.stream_answer && style.markdown {
                    let rest = st.md.finish();
                    if !rest.is_empty() {
                        print!("{rest}");
                    }
                }
                if style.stream_answer && st.open {
                    println!();
                    st.open = false;
                }
                // A server that does not stream: print the final answer whole.
                if style.stream_answer
                    && !st.streamed
                    && tool_calls == 0
                    && let Some(c) = &content
                {
                    let shown = style.answer(c);
                    print!("{shown}");
                    if !shown.ends_with('\n') {
                        println!();
                    }
                }
                let _ = std::io::stdout().flush();
                st.streamed = false;
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
                    for line in preview(&tool_output(&content), style.verbose) {
                        let _ = writeln!(err, "  {}", style.dim(&line));
                    }
                } else {
                    // Whole: an error's advice (such as --yolo) is often at its end.
                    let msg = serde_json::from_str::<Value>(&content)
                        .ok()
                        .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or(content);
                    let _ = writeln!(
                        err,
                        "{} {name}: {} {}",
                        style.red("✗"),
                        msg.trim_end(),
                        style.dim(&format!("({secs:.2}s)"))
                    );
                }
            }
            AgentEvent::ToolProgress {
                name,
                progress,
                total,
                message,
                ..
            } => {
                let _ = writeln!(
                    err,
                    "  {} {name} {}",
                    style.dim("⋯"),
                    style.dim(&progress_text(progress, total, message.as_deref()))
                );
            }
            // An interrupted answer has no message event: what was held back is shown.
            AgentEvent::TurnFinished { .. } if style.stream_answer => {
                let rest = st.md.finish();
                if !rest.is_empty() {
                    print!("{rest}");
                }
                if st.open {
                    println!();
                    st.open = false;
                }
                let _ = std::io::stdout().flush();
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
                        error.trim_end(),
                        delay_ms as f64 / 1000.0
                    ))
                );
            }
            _ => {}
        }
    })
}

/// What a tool printed, from its result: a command's output, a file's content, a
/// directory's entries, or else the result itself.
/// A tool's progress as shown: `3/5 (60%)`, or `3` without a total, then its message.
pub fn progress_text(progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    let mut text = match total {
        Some(t) if t > 0.0 => format!("{progress}/{t} ({:.0}%)", progress / t * 100.0),
        _ => progress.to_string(),
    };
    if let Some(m) = message.filter(|m| !m.trim().is_empty()) {
        text.push_str(": ");
        text.push_str(&one_line(m, 120));
    }
    text
}

pub fn tool_output(content: &str) -> String {
    let Ok(v) = serde_json::from_str::<Value>(content) else {
        return content.to_owned();
    };
    for key in ["output", "content"] {
        if let Some(s) = v.get(key).and_then(Value::as_str) {
            return s.to_owned();
        }
    }
    if let Some(entries) = v.get("entries").and_then(Value::as_array) {
        return entries
            .iter()
            .filter_map(|e| {
                let name = e.get("name")?.as_str()?;
                let dir = e.get("type").and_then(Value::as_str) == Some("dir");
                Some(format!("{name}{}", if dir { "/" } else { "" }))
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    content.to_owned()
}

/// The lines shown of a tool's output: the first [`PREVIEW_LINES`], each at most
/// [`PREVIEW_WIDTH`] characters, then a line saying how much more there is; all of it when
/// `verbose`.
pub fn preview(output: &str, verbose: bool) -> Vec<String> {
    let lines: Vec<&str> = output.trim_end().lines().collect();
    if verbose {
        return lines.into_iter().map(str::to_owned).collect();
    }
    let mut shown: Vec<String> = lines
        .iter()
        .take(PREVIEW_LINES)
        .map(|l| {
            if l.chars().count() > PREVIEW_WIDTH {
                let mut t: String = l.chars().take(PREVIEW_WIDTH).collect();
                t.push('…');
                t
            } else {
                (*l).to_owned()
            }
        })
        .collect();
    if lines.len() > PREVIEW_LINES {
        let more = lines.len() - PREVIEW_LINES;
        shown.push(format!(
            "… {more} more line{} (--verbose shows all)",
            if more == 1 { "" } else { "s" }
        ));
    }
    shown
}

/// The tokens a turn used, as the model reported them; `None` when it reported none.
pub fn usage_line(u: &Usage) -> Option<String> {
    (u.prompt_tokens + u.completion_tokens > 0).then(|| {
        format!(
            "tokens: {} prompt + {} completion",
            u.prompt_tokens, u.completion_tokens
        )
    })
}

/// Markdown rendered for the terminal as it streams in: text is held until the block it
/// belongs to is complete (a blank line outside a code fence), then that block is shown.
pub struct Markdown {
    color: bool,
    pending: String,
    /// How much of `pending` was scanned for block ends (whole lines).
    scanned: usize,
    in_fence: bool,
    /// A block was shown already: the next one is set apart by a blank line.
    shown_any: bool,
}

impl Markdown {
    pub fn new(color: bool) -> Self {
        Self {
            color,
            pending: String::new(),
            scanned: 0,
            in_fence: false,
            shown_any: false,
        }
    }

    /// Takes streamed text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        self.pending.push_str(text);
        let mut cut = None;
        while let Some(nl) = self.pending[self.scanned..].find('\n') {
            let line = &self.pending[self.scanned..self.scanned + nl];
            let t = line.trim_start();
            if t.starts_with("```") || t.starts_with("~~~") {
                self.in_fence = !self.in_fence;
            } else if !self.in_fence && line.trim().is_empty() {
                cut = Some(self.scanned + nl + 1);
            }
            self.scanned += nl + 1;
        }
        let Some(cut) = cut else {
            return String::new();
        };
        let block: String = self.pending.drain(..cut).collect();
        self.scanned -= cut;
        self.render(&block)
    }

    /// The rest, rendered; the renderer is then ready for the next answer.
    pub fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        let out = self.render(&rest);
        self.scanned = 0;
        self.in_fence = false;
        self.shown_any = false;
        out
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color && !s.is_empty() {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    fn render(&mut self, md: &str) -> String {
        if md.trim().is_empty() {
            return String::new();
        }
        let mut w = Writer::default();
        // Open inline styles, outermost first, re-applied after a reset.
        let mut styles: Vec<&'static str> = Vec::new();
        // For each open list: the next item's number, or `None` for bullets.
        let mut lists: Vec<Option<u64>> = Vec::new();
        let mut link: Vec<String> = Vec::new();
        let mut in_code = false;
        for ev in Parser::new(md) {
            match ev {
                Event::Start(tag) => match tag {
                    Tag::Paragraph if lists.is_empty() => self.block_gap(&mut w),
                    Tag::Heading { level, .. } => {
                        self.block_gap(&mut w);
                        styles.push(if level == HeadingLevel::H1 {
                            "1;4"
                        } else {
                            "1"
                        });
                        w.style(self.color, &styles);
                    }
                    Tag::BlockQuote(_) => {
                        self.block_gap(&mut w);
                        w.prefix.push_str("│ ");
                    }
                    Tag::CodeBlock(kind) => {
                        if lists.is_empty() {
                            self.block_gap(&mut w);
                        }
                        in_code = true;
                        if let CodeBlockKind::Fenced(lang) = kind
                            && !lang.is_empty()
                        {
                            w.text(&self.paint("2", &format!("  {lang}")));
                            w.newline();
                        }
                    }
                    Tag::List(start) => {
                        if lists.is_empty() {
                            self.block_gap(&mut w);
                        } else {
                            w.end_line();
                        }
                        lists.push(start);
                    }
                    Tag::Item => {
                        w.end_line();
                        let depth = lists.len().saturating_sub(1);
                        let marker = match lists.last_mut() {
                            Some(Some(n)) => {
                                let m = format!("{n}. ");
                                *n += 1;
                                m
                            }
                            _ => "• ".to_owned(),
                        };
                        w.text(&format!("{}{marker}", "  ".repeat(depth)));
                    }
                    Tag::Emphasis => {
                        styles.push("3");
                        w.style(self.color, &styles);
                    }
                    Tag::Strong => {
                        styles.push("1");
                        w.style(self.color, &styles);
                    }
                    Tag::Strikethrough => {
                        styles.push("9");
                        w.style(self.color, &styles);
                    }
                    Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                        link.push(dest_url.into_string());
                    }
                    _ => {}
                },
                Event::End(tag) => match tag {
                    TagEnd::Paragraph | TagEnd::Heading(_) => {
                        if matches!(tag, TagEnd::Heading(_)) {
                            styles.pop();
                            w.style(self.color, &styles);
                        }
                        w.end_line();
                    }
                    TagEnd::BlockQuote(_) => {
                        w.prefix.truncate(w.prefix.len().saturating_sub("│ ".len()));
                        w.end_line();
                    }
                    TagEnd::CodeBlock => {
                        in_code = false;
                        w.end_line();
                    }
                    TagEnd::List(_) => {
                        lists.pop();
                        w.end_line();
                    }
                    TagEnd::Item => w.end_line(),
                    TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                        styles.pop();
                        w.style(self.color, &styles);
                    }
                    TagEnd::Link | TagEnd::Image => {
                        if let Some(url) = link.pop() {
                            w.text(&self.paint("2", &format!(" ({url})")));
                        }
                    }
                    _ => {}
                },
                Event::Text(t) if in_code => {
                    for (i, line) in t.trim_end_matches('\n').split('\n').enumerate() {
                        if i > 0 {
                            w.newline();
                        }
                        w.text(&format!("    {}", self.paint("36", line)));
                    }
                }
                Event::Text(t) => w.text(&t),
                Event::Code(c) => {
                    if self.color {
                        w.text(&self.paint("36", &c));
                        w.style(self.color, &styles);
                    } else {
                        w.text(&format!("`{c}`"));
                    }
                }
                Event::SoftBreak | Event::HardBreak => w.newline(),
                Event::Rule => {
                    self.block_gap(&mut w);
                    w.text(&self.paint("2", "────────"));
                    w.end_line();
                }
                Event::Html(h) | Event::InlineHtml(h) => w.text(&h),
                Event::FootnoteReference(f) => w.text(&format!("[{f}]")),
                Event::TaskListMarker(done) => w.text(if done { "[x] " } else { "[ ] " }),
                _ => {}
            }
        }
        w.end_line();
        w.out
    }

    /// A blank line before a top-level block, unless it is the answer's first.
    fn block_gap(&mut self, w: &mut Writer) {
        w.end_line();
        if self.shown_any {
            w.out.push('\n');
        }
        self.shown_any = true;
    }
}

/// Rendered text, with a prefix (block quotes) at the start of each line.
#[derive(Default)]
struct Writer {
    out: String,
    prefix: String,
    mid_line: bool,
}

impl Writer {
    fn text(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if !self.mid_line {
            self.out.push_str(&self.prefix);
            self.mid_line = true;
        }
        self.out.push_str(s);
    }

    fn newline(&mut self) {
        self.out.push('\n');
        self.mid_line = false;
    }

    /// Ends the current line, if one is open.
    fn end_line(&mut self) {
        if self.mid_line {
            self.newline();
        }
    }

    /// Resets the terminal's style and applies `styles` again.
    fn style(&mut self, color: bool, styles: &[&str]) {
        if !color {
            return;
        }
        self.out.push_str("\x1b[0m");
        for s in styles {
            self.out.push_str(&format!("\x1b[{s}m"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_shows_the_share_done_and_the_message() {
        assert_eq!(progress_text(3.0, Some(5.0), None), "3/5 (60%)");
        assert_eq!(
            progress_text(0.5, None, Some("halfway\nthere")),
            "0.5: halfway there"
        );
    }

    #[test]
    fn markdown_without_colour_keeps_the_structure() {
        let mut md = Markdown::new(false);
        let out = md.push("# Plan\n\nSome **bold** and `code`.\n\n- one\n- two\n  1. sub\n\n```rust\nfn main() {}\n\n}\n```\n\nend");
        let out = out + &md.finish();
        assert_eq!(
            out,
            "Plan\n\nSome bold and `code`.\n\n• one\n• two\n  1. sub\n\n  rust\n    fn main() {}\n    \n    }\n\nend\n"
        );
    }

    #[test]
    fn markdown_streams_whole_blocks_and_colours_headings() {
        let mut md = Markdown::new(true);
        assert_eq!(md.push("## Tit"), "");
        assert_eq!(md.push("le\n"), "", "a block is shown once it ends");
        let first = md.push("\nbody");
        assert!(first.contains("\x1b[1mTitle"), "{first:?}");
        assert!(!first.contains("##"), "{first:?}");
        // A blank line inside a code fence does not end the block.
        assert_eq!(md.push("\n\n```\na\n\nb"), "\nbody\n");
        let rest = md.finish();
        assert!(
            rest.contains("a\x1b[0m\n") && rest.contains("b"),
            "{rest:?}"
        );
    }

    #[test]
    fn preview_cuts_long_output_with_a_marker() {
        let out = (1..=10)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let p = preview(&out, false);
        assert_eq!(p.len(), PREVIEW_LINES + 1);
        assert_eq!(p[0], "line 1");
        assert_eq!(p[PREVIEW_LINES], "… 6 more lines (--verbose shows all)");
        assert_eq!(preview(&out, true).len(), 10);
        assert!(preview(&"x".repeat(500), false)[0].ends_with('…'));
        assert_eq!(tool_output(r#"{"output":"a\nb","exit_code":0}"#), "a\nb");
        assert_eq!(
            tool_output(
                r#"{"entries":[{"name":"src","type":"dir"},{"name":"a.rs","type":"file"}]}"#
            ),
            "src/\na.rs"
        );
    }
}
