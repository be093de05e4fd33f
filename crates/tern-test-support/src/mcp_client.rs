//! A real MCP client no one here wrote: the official TypeScript SDK's, driven through
//! `tests/mcp/tern-client.mjs` (JSON lines in and out) under Node.js, for the tests of tern as
//! an MCP server. Needs `npm ci --no-audit --no-fund` in `tests/mcp`; fails saying so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long one answer of the client may take: a bound that only turns a hang into a
/// failure.
const ANSWER_WITHIN: Duration = crate::PATIENCE;

/// `tests/mcp`, with the SDK installed; fails, saying what to install, when it is not.
pub fn client_dir() -> PathBuf {
    let node = std::process::Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "the MCP server tests run the TypeScript SDK's client under Node.js, and `node` cannot \
         be run ({node:?}): install Node.js 20 or later"
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let sdk = root.join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(
        sdk.is_file(),
        "{} is missing: run `npm ci --no-audit --no-fund` in {}",
        sdk.display(),
        root.display()
    );
    root
}

/// The TypeScript SDK's client, connected (or not: [`McpDriver::connect_failure`]).
pub struct McpDriver {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Lines read while looking for another one (progress of other calls, answers).
    seen: Vec<Value>,
    /// What the client said on connecting.
    pub hello: Value,
}

impl McpDriver {
    /// Connects over streamable HTTP to `url` with `key` as the bearer token (none: `None`).
    pub async fn http(url: &str, key: Option<&str>) -> McpDriver {
        let mut args = vec!["http".to_owned(), url.to_owned()];
        args.extend(key.map(str::to_owned));
        Self::start(args, &[]).await
    }

    /// Runs `command args…` and connects to it over stdio; `env` is added to the client's
    /// environment, which the server inherits.
    pub async fn stdio(command: &Path, args: &[&str], env: &[(&str, &str)]) -> McpDriver {
        let mut all = vec!["stdio".to_owned(), command.display().to_string()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        Self::start(all, env).await
    }

    async fn start(args: Vec<String>, env: &[(&str, &str)]) -> McpDriver {
        let dir = client_dir();
        let mut cmd = Command::new("node");
        cmd.arg(dir.join("tern-client.mjs"))
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("cannot run node");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut driver = McpDriver {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            next_id: 0,
            seen: Vec::new(),
            hello: Value::Null,
        };
        driver.hello = driver.read_line().await;
        driver
    }

    /// Whether it connected.
    pub fn connected(&self) -> bool {
        self.hello["event"] == "connected"
    }

    /// Why it could not connect (the SDK's message and HTTP status), or a failed test.
    pub fn connect_failure(&self) -> (String, Value) {
        assert_eq!(
            self.hello["event"], "connect_failed",
            "expected the connection to fail: {}",
            self.hello
        );
        (
            self.hello["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            self.hello["code"].clone(),
        )
    }

    async fn read_line(&mut self) -> Value {
        let line = tokio::time::timeout(ANSWER_WITHIN, self.lines.next_line())
            .await
            .expect("the MCP client did not answer in time")
            .expect("cannot read the MCP client's output")
            .expect("the MCP client exited");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"))
    }

    async fn send(&mut self, mut cmd: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        cmd["id"] = json!(id);
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{cmd}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        id
    }

    /// The next line about command `id` that `pick` accepts (lines about other commands are
    /// kept for later).
    async fn line_for(&mut self, id: u64, pick: impl Fn(&Value) -> bool) -> Value {
        let matches = |v: &Value| v["id"] == json!(id) && pick(v);
        if let Some(i) = self.seen.iter().position(matches) {
            return self.seen.remove(i);
        }
        loop {
            let v = self.read_line().await;
            if matches(&v) {
                return v;
            }
            self.seen.push(v);
        }
    }

    /// `tools/list`: the tools.
    pub async fn list_tools(&mut self) -> Vec<Value> {
        let id = self.send(json!({"op": "list"})).await;
        let v = self.line_for(id, |_| true).await;
        v["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {v}"))
            .clone()
    }

    /// Starts `tools/call` (with a progress token) and returns its command id.
    pub async fn start_call(&mut self, name: &str, arguments: Value) -> u64 {
        self.send(json!({"op": "call", "name": name, "arguments": arguments}))
            .await
    }

    /// The answer to call `id`: `Ok(result)` (a `CallToolResult`, maybe `isError`) or
    /// `Err(message)` for a protocol error or a cancelled call.
    pub async fn answer(&mut self, id: u64) -> Result<Value, String> {
        let v = self.line_for(id, |v| v.get("event").is_none()).await;
        match v.get("result") {
            Some(r) => Ok(r.clone()),
            None => Err(v["error"].as_str().unwrap_or_default().to_owned()),
        }
    }

    /// The next progress notification of call `id`.
    pub async fn progress(&mut self, id: u64) -> Value {
        self.line_for(id, |v| v["event"] == "progress").await
    }

    /// Aborts call `id` (the client sends `notifications/cancelled`).
    pub async fn cancel(&mut self, id: u64) {
        let c = self.send(json!({"op": "cancel", "target": id})).await;
        self.line_for(c, |_| true).await;
    }

    /// Calls `name` and returns its result.
    pub async fn call(&mut self, name: &str, arguments: Value) -> Result<Value, String> {
        let id = self.start_call(name, arguments).await;
        self.answer(id).await
    }

    /// Calls `name`, expecting success: its structured content.
    pub async fn ok(&mut self, name: &str, arguments: Value) -> Value {
        let r = self
            .call(name, arguments.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} {arguments}: {e}"));
        assert_ne!(r["isError"], json!(true), "{name} {arguments}: {r}");
        r["structuredContent"].clone()
    }

    /// Calls `name`, expecting a tool error: its text.
    pub async fn tool_error(&mut self, name: &str, arguments: Value) -> String {
        let r = self
            .call(name, arguments.clone())
            .await
            .unwrap_or_else(|e| panic!("{name} {arguments}: {e}"));
        assert_eq!(
            r["isError"],
            json!(true),
            "{name} {arguments}: expected a tool error: {r}"
        );
        r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Closes the client (stdin's end) and waits for it to exit.
    pub async fn close(mut self) {
        drop(self.stdin.take());
        let _ = tokio::time::timeout(ANSWER_WITHIN, self.child.wait()).await;
    }
}
