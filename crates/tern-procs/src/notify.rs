//! `notify_on_complete`: what the process side offers to whoever turns a process's exit into
//! a resume of its session (the gateway, through `tern-waits`' durable waits).
//!
//! - [`ProcessNotifier::armed`] is called by the `terminal` tool right after a process with
//!   `notify_on_complete` started and *before* the tool answers, so the notification exists
//!   even when the process ends within the launching turn. An error is logged, not returned
//!   to the model: the process runs, and the exit path arms it again (idempotent per id).
//! - [`ExitSummary::of`] reads what the session is told when the process exits: the state,
//!   exit code, signal and the last lines of its output (control sequences stripped).

use serde::{Deserialize, Serialize};
use tern_tools::BoxFuture;

use crate::{ProcError, ProcInfo, ProcStatus, ProcessManager};

/// Lines of output an exit summary keeps at most.
pub const SUMMARY_LINES: usize = 20;
/// Bytes of the log's end read for the summary.
const SUMMARY_BYTES: usize = 4096;

/// Arms the notification of a process started with `notify_on_complete`.
pub trait ProcessNotifier: Send + Sync {
    /// `info` was just started by the tool call `call_id` of its session.
    fn armed<'a>(
        &'a self,
        call_id: &'a str,
        info: &'a ProcInfo,
    ) -> BoxFuture<'a, Result<(), ArmError>>;
}

/// Why a notification could not be armed (the notifier's own error: the waits' store).
pub type ArmError = Box<dyn std::error::Error + Send + Sync>;

/// What a session is told about its process's end.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitSummary {
    pub process_id: String,
    pub command: String,
    /// `exited`, or `lost` (its supervisor died without recording an exit).
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The last lines of output (at most [`SUMMARY_LINES`]), control sequences stripped.
    pub last_lines: String,
}

impl ExitSummary {
    /// The summary of `info`, which has ended; `None` while it still runs.
    pub async fn of(mgr: &ProcessManager, info: &ProcInfo) -> Result<Option<Self>, ProcError> {
        if info.status.is_running() {
            return Ok(None);
        }
        let tail = mgr.log(&info.id, None, Some(SUMMARY_BYTES)).await?;
        Ok(Some(Self {
            last_lines: last_lines(&tail.output, SUMMARY_LINES),
            ..Self::of_status(info)
        }))
    }

    /// The summary from the status alone (no output read; `last_lines` empty).
    pub fn of_status(info: &ProcInfo) -> Self {
        let (state, exit_code, signal) = match &info.status {
            ProcStatus::Running => ("running", None, None),
            ProcStatus::Exited {
                exit_code, signal, ..
            } => ("exited", *exit_code, *signal),
            ProcStatus::Lost => ("lost", None, None),
        };
        Self {
            process_id: info.id.clone(),
            command: info.command.clone(),
            state: state.to_owned(),
            exit_code,
            signal,
            last_lines: String::new(),
        }
    }
}

/// The last `n` non-empty-tail lines of `text` (trailing blank lines dropped).
fn last_lines(text: &str, n: usize) -> String {
    let trimmed = text.trim_end();
    let lines: Vec<&str> = trimmed.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn last_lines_keeps_the_tail_without_trailing_blanks() {
        assert_eq!(last_lines("a\nb\nc\n\n", 2), "b\nc");
        assert_eq!(last_lines("done\n", 20), "done");
        assert_eq!(last_lines("", 20), "");
    }
}
