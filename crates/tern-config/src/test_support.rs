//! Helpers shared by the unit tests: a temporary home, a config file, a fake environment.

use std::collections::HashMap;
use std::fs;

use crate::Home;

pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

pub(crate) fn no_env(_: &str) -> Option<String> {
    None
}

pub(crate) fn temp_home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        root: dir.path().join("home"),
    };
    home.ensure().unwrap();
    (dir, home)
}

pub(crate) fn write_config(home: &Home, text: &str) {
    fs::write(home.config_path(), text).unwrap();
}

pub(crate) const HOOKS_TOML: &str = r#"
[gateway]
max_concurrent_turns = 4

[[hooks]]
name = "audit"
events = ["turn_start", "turn_end"]
command = "cat >> /tmp/audit.jsonl"
timeout_ms = 250

[[hooks]]
events = ["*"]
command = "true"

[[webhooks]]
url = "https://hooks.example/tern"
secret = "0123456789abcdef-secret"

[[webhooks]]
name = "ops"
url = "http://user:hunter2pass@ops.example:8080/in?x=1"
secret = "another-secret-of-length"
events = ["agent_loop_stopped"]
timeout_ms = 1000
max_attempts = 2
retry_base_ms = 10
"#;

/// A `config.toml` that sets every key of every section, arrays of tables included, each to
/// a value other than its default. `render::tests` checks it stays complete as the types grow.
pub(crate) const FULL_TOML: &str = r#"
[model]
base_url = "http://user:modelpass-9876@llm.example:11434/v1"
api_key = "sk-model-key-0123456789"
name = "llama3"
timeout_secs = 30
max_retries = 1
stream = false
context_length = 32768
vision = true

[agent]
max_iterations = 5
toolsets = ["terminal"]
system_prompt = "be brief"
loop_guard = false
loop_warn_after = 2
loop_stop_after = 4

[tools]
terminal_timeout_secs = 10
terminal_max_timeout_secs = 20
output_limit_chars = 100
read_limit_bytes = 200

[approvals]
allowlist = ["ls"]

[gateway]
listen = "0.0.0.0:9000"
max_concurrent_turns = 2
max_body_bytes = 4096
drain_timeout_secs = 1
idle_reset = "24h"

[[hooks]]
name = "audit"
events = ["turn_end"]
command = "cat >> /tmp/audit.jsonl"
timeout_ms = 250

[[hooks]]
name = "argv"
events = ["*"]
command = ["notify-send", "tern", "a b"]
timeout_ms = 300

[[webhooks]]
name = "ops"
url = "https://user:webhookpass-1234@ops.example/in"
secret = "webhook-secret-0123456789"
events = ["turn_end"]
timeout_ms = 1000
max_attempts = 2
retry_base_ms = 10

[inbox]
public_url = "https://inbox.example"
max_upload_bytes = 1000
keep_waits_on_reset = true
url = "https://remote.example"
key = "inbox-agent-key-0123456789"
poll_interval = "10s"

[inbox.policy]
expires_after = "2h"
expiry_outcome = "APPROVE"
always_review = ["deploy_prod"]

[[inbox.policy.auto_approve]]
project = "ops"
action = "read_logs"
task = "t1"

[[inbox.policy.auto_approve]]
project = "ops"
summary = "^Restart [a-z]+$"

[[inbox.policy.rate_limit]]
action = "send_email"
max = 10
window = "1h"

[[inbox.notify]]
url = "https://hooks.example/inbox"
secret = "notify-secret-0123456789"
max_attempts = 3
retry_base_ms = 20
timeout_ms = 30

[[inbox.projects]]
name = "refunds"
initial_step = "triage"
steps = [{ name = "triage", owner = "AGENT", exits = ["review"] }, { name = "review", owner = "HUMAN" }]

[processes]
max_running = 3
keep_finished = "2h"
log_max_bytes = 8192
backend = "ssh"
watch_interval = "5s"

[processes.ssh]
host = "build-box"
user = "deploy"
port = 2222
identity_file = "~/.ssh/id_ed25519"
options = ["ServerAliveInterval=30"]
workdir = "~/app"

[sandbox]
mode = "read-only"
network = true
writable_roots = ["/srv/out"]
protected_paths = ["/srv/keys"]

[sandbox.env]
keep = ["GITHUB_TOKEN"]
remove = ["AWS_*"]

[delegate]
max_iterations = 12
max_concurrent = 4
max_depth = 2

[memory]
memory_char_limit = 3000
user_char_limit = 1000

[cron]
enabled = false
timezone = "Europe/Paris"
allow_agent_scheduling = true
allow_runs_to_schedule = true
max_jobs_per_session = 5

[compaction]
threshold_percent = 75
keep_recent_percent = 20
elide_tool_output_chars = 4000

[[channels.telegram]]
name = "home"
token = "123456:telegram-bot-token-0123456789"
api_url = "http://127.0.0.1:8081"
allowed_users = [123456789, "987654321"]
reviewers = { 123456789 = "alice" }
progress = "all"
poll_timeout = "20s"
enabled = false

[[channels.telegram]]
name = "work"
token_env = "WORK_BOT_TOKEN"

[[channels.telegram]]
token_file = "secrets/telegram.token"

[[channels.matrix]]
name = "synapse"
homeserver = "https://matrix.example.org"
user_id = "@bot:example.org"
access_token = "syt_matrix-access-token-0123456789"
allowed_users = ["@alice:example.org"]
reviewers = { "@alice:example.org" = "alice" }
progress = "off"
poll_timeout = "10s"
enabled = false

[[channels.matrix]]
name = "lab"
homeserver = "http://127.0.0.1:8008"
user_id = "@bot:localhost"
access_token_env = "MATRIX_TOKEN"

[[channels.matrix]]
homeserver = "http://127.0.0.1:8009"
user_id = "@bot:other.localhost"
access_token_file = "/run/secrets/matrix.token"

[mcp_servers.github]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-github"]
env = { GITHUB_TOKEN = "mcp-env-secret-0123456789" }
cwd = "/srv/mcp"
startup_timeout = "20s"
tool_timeout = "2m"
enabled_tools = ["search_issues"]
disabled_tools = ["delete_repo"]
enabled = false

[mcp_servers.remote]
url = "https://mcp.example/mcp"
headers = { Authorization = "Bearer mcp-header-secret-0123456789" }
bearer_token_env = "MCP_TOKEN"
"#;
