//! Reading the REPL's lines: rustyline with a history file and Tab completion of the slash
//! commands on a terminal, plain line reads otherwise. The terminal approver reads its
//! answers through the same reader.

use std::path::PathBuf;

use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;

use super::complete_command;

/// What reading a line gave.
pub enum Input {
    Line(String),
    Interrupted,
    Eof,
}

/// Tab completion of slash commands at the start of the line.
struct ReplHelper;

impl Completer for ReplHelper {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &rustyline::Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let head = &line[..pos];
        if !head.starts_with('/') || head.contains(char::is_whitespace) {
            return Ok((0, Vec::new()));
        }
        Ok((0, complete_command(head)))
    }
}

impl Hinter for ReplHelper {
    type Hint = String;
}
impl Highlighter for ReplHelper {}
impl Validator for ReplHelper {}
impl rustyline::Helper for ReplHelper {}

/// Line editing with a history file; plain line reads when stdin is not a terminal.
pub struct LineReader {
    editor: Option<rustyline::Editor<ReplHelper, DefaultHistory>>,
    history: PathBuf,
}

impl LineReader {
    pub fn new(history: PathBuf) -> Self {
        let editor = rustyline::Editor::<ReplHelper, DefaultHistory>::new()
            .ok()
            .map(|mut e| {
                e.set_helper(Some(ReplHelper));
                let _ = e.load_history(&history);
                e
            });
        Self { editor, history }
    }

    pub fn read(&mut self, prompt: &str) -> Input {
        match &mut self.editor {
            Some(e) => match e.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = e.add_history_entry(line.as_str());
                        let _ = e.append_history(&self.history);
                    }
                    Input::Line(line)
                }
                Err(ReadlineError::Interrupted) => Input::Interrupted,
                Err(_) => Input::Eof,
            },
            None => {
                let mut line = String::new();
                match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => Input::Eof,
                    Ok(_) => Input::Line(line.trim_end_matches(['\n', '\r']).to_owned()),
                }
            }
        }
    }

    /// A line, or `None` on Ctrl-C / end of input.
    pub fn read_line(&mut self, prompt: &str) -> Option<String> {
        match self.read(prompt) {
            Input::Line(l) => Some(l),
            Input::Interrupted | Input::Eof => None,
        }
    }
}
