//! Shared helpers for the tern-hooks integration tests: sample events, configured hooks,
//! log capture and process-group inspection; waiting is `tern-test-support`'s.

#![allow(dead_code)] // Each test file uses a different subset.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tern_config::{CommandHookConfig, WebhookConfig};
use tern_hooks::*;

pub fn turn_start(input: &str) -> HookEvent {
    HookEvent::TurnStart(TurnStart {
        session_id: "sess-1".to_owned(),
        source: "cli".to_owned(),
        turn_id: "turn-1".to_owned(),
        input: input.to_owned(),
    })
}

pub fn turn_end() -> HookEvent {
    HookEvent::TurnEnd(TurnEnd {
        session_id: "sess-1".to_owned(),
        source: "cli".to_owned(),
        turn_id: "turn-1".to_owned(),
        status: TurnEndStatus::Completed,
        iterations: 2,
        usage: TokenUsage {
            prompt_tokens: 10,
            completion_tokens: 5,
        },
        error: None,
    })
}

pub fn pre_tool(command: &str) -> PreToolCall {
    PreToolCall {
        session_id: "sess-1".to_owned(),
        source: "api".to_owned(),
        turn_id: "turn-1".to_owned(),
        call_id: "call-1".to_owned(),
        tool: "terminal".to_owned(),
        arguments: serde_json::json!({ "command": command }).to_string(),
    }
}

pub fn hook(name: &str, events: &[&str], command: &str, timeout_ms: u64) -> CommandHookConfig {
    CommandHookConfig {
        name: Some(name.to_owned()),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        command: command.into(),
        timeout_ms,
    }
}

pub fn webhook(url: &str, secret: &str, events: &[&str]) -> WebhookConfig {
    WebhookConfig {
        name: Some("receiver".to_owned()),
        url: url.to_owned(),
        secret: secret.to_owned(),
        events: events.iter().map(|e| (*e).to_owned()).collect(),
        timeout_ms: 2000,
        max_attempts: 5,
        retry_base_ms: 20,
    }
}

/// Log lines written while the guard lives, on this thread (tests use the current-thread
/// runtime, so the hooks' tasks log here too).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines mentioning `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

pub struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter(Arc::clone(&self.0))
    }
}

pub fn capture_logs() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (logs, guard)
}

pub use tern_test_support::{PATIENCE, eventually, wait_until};

/// Waits until no process of group `pgid` is alive.
pub async fn until_group_gone(pgid: i32) {
    wait_until(PATIENCE, Duration::from_millis(10), async || {
        let alive = live_group_members(pgid);
        if alive.is_empty() {
            Ok(())
        } else {
            Err(format!("group {pgid} still alive: {alive:?}"))
        }
    })
    .await
}

/// Waits until `path` holds a process group id (a hook wrote its `$$`), and returns it.
pub async fn until_pgid(path: &Path) -> i32 {
    eventually(&format!("a pgid in {}", path.display()), async || {
        read(path).trim().parse().ok()
    })
    .await
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Processes of process group `pgid` that are still alive (zombies excluded: in a
/// container the init process may never reap orphans, and a zombie runs nothing).
pub fn live_group_members(pgid: i32) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may contain spaces, so split after ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(pgrp)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        if pgrp.parse::<i32>() == Ok(pgid) && *state != "Z" && *state != "X" {
            pids.push(pid);
        }
    }
    pids
}
