//! The real MCP server the tests run, found or explained.

use std::io;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};

use tern_config::McpServerConfig;
use tern_mcp::McpClient;

/// `tests/mcp/node_modules/@modelcontextprotocol/server-everything`'s entry point (its
/// package.json `bin`); fails, saying what to install, when node or the package is missing.
pub fn everything_entry() -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "these tests run MCP servers under Node.js, and `node` cannot be run ({node:?}): install Node.js 20 or later"
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci --no-audit --no-fund` in {}",
        entry.display(),
        root.display()
    );
    entry
}

/// A `[mcp_servers.NAME]` table, as the configuration file would give it.
pub fn config(toml_text: &str) -> McpServerConfig {
    toml::from_str(toml_text).unwrap()
}

/// The configuration of server-everything over stdio, with `extra` TOML lines.
pub fn everything_config(extra: &str) -> McpServerConfig {
    let entry = everything_entry();
    config(&format!(
        "command = \"node\"\nargs = [{:?}, \"stdio\"]\n{extra}",
        entry.display().to_string()
    ))
}

/// server-everything behind `tee`, which copies every message tern sends it to `log`, so a
/// test sees what the server received.
pub async fn everything_teed(log: &std::path::Path, extra: &str) -> Arc<McpClient> {
    let entry = everything_entry();
    let script = format!(
        "tee {} | exec node {} stdio",
        shell_quote(&log.display().to_string()),
        shell_quote(&entry.display().to_string())
    );
    Arc::new(
        McpClient::start(
            "everything",
            &config(&format!(
                "command = \"sh\"\nargs = [\"-c\", {script:?}]\n{extra}"
            )),
        )
        .await
        .unwrap(),
    )
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The messages in a [`everything_teed`] log with `method`.
pub fn sent(log: &std::path::Path, method: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["method"] == method)
        .collect()
}

/// server-everything, started and initialized as `everything`.
pub async fn everything(extra: &str) -> Arc<McpClient> {
    Arc::new(
        McpClient::start("everything", &everything_config(extra))
            .await
            .unwrap(),
    )
}

/// What tracing logged while a [`capture_logs`] guard was held, on this thread (a
/// current-thread runtime's spawned tasks included).
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
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
    // With a single dispatcher in the process, tracing caches each callsite's interest as
    // the thread that first reaches it sees it: a test without a subscriber that starts a
    // server first would switch tern-mcp's log lines off for this one. A second dispatcher,
    // kept for good, makes the interest everyone's, each event then going to its thread's.
    static SECOND: std::sync::OnceLock<tracing::Dispatch> = std::sync::OnceLock::new();
    SECOND.get_or_init(|| tracing::Dispatch::new(tracing_subscriber::registry()));
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    (logs.clone(), tracing::subscriber::set_default(subscriber))
}
