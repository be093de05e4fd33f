//! Tools the agent can call: a registry of typed tools grouped in toolsets.
//!
//! A tool implements [`Tool`] (see [`tool`]): its `Args` struct is both what the model's
//! arguments deserialise into and where the JSON schema the model sees is generated from.
//! The built-in tools are in [`tools`], one module each, listed in [`tools::builtin`].
//!
//! Flow of one call: the agent loop asks [`Registry::call`] with the tool name and the raw
//! argument string the model sent → the string is parsed as JSON (a parse failure, or a key
//! given twice, is an [`ArgsError`] the model can read) → the arguments are validated against the tool's
//! schema → deserialised into its `Args` → the tool runs with a [`ToolContext`] carrying the
//! working directory, the turn's cancellation token and the [`Approver`] for dangerous
//! commands → the result is JSON, returned to the model as the tool message content.

pub mod approval;
mod args;
pub mod danger;
pub mod escalation;
pub mod file_access;
pub mod lifeline;
pub mod session_context;
pub mod subagents;
pub mod tool;
pub mod tools;

pub use args::parse_arguments;
pub use session_context::SessionContext;
pub use subagents::{ChildOutcome, ChildStatus, ChildTask, SubAgents};
pub use tool::{ArgsError, DynTool, Tool, ToolSpec, Typed};
pub use tools::terminal;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use danger::{Verdict, check_command};

/// A boxed future, so tools can live behind `dyn`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The error a tool reports to the model. It is never a crash: the agent loop turns it into
/// a tool message `{"error": "..."}` and the model decides what to do next.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

pub type ToolResult = Result<Value, ToolError>;

/// What a reviewer (a human at the terminal, a policy, the inbox) decided about a
/// dangerous command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Run it this once.
    Once,
    /// Run it, and commands matching the same pattern for the rest of this session.
    Session,
    /// Run it, and this exact command from now on (saved to the allowlist).
    Always,
    /// Do not run it; the reason is told to the model.
    Deny { reason: String },
    /// Not run now: a human was asked and will decide later (the gateway's inbox). `message`
    /// tells the model what to do meanwhile (end its turn; it is resumed with the decision).
    Pending { message: String },
}

impl ApprovalDecision {
    /// Whether the command may run now.
    pub fn allows(&self) -> bool {
        matches!(
            self,
            ApprovalDecision::Once | ApprovalDecision::Session | ApprovalDecision::Always
        )
    }
}

/// A dangerous command waiting for a decision.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub session_id: String,
    /// The tool call that wants to run the command.
    pub call_id: String,
    /// Where that call sits in the transcript ([`ToolContext::call_seq`]).
    pub call_seq: i64,
    pub command: String,
    pub workdir: PathBuf,
    /// Stable key of the matched pattern (for session grants).
    pub pattern_key: &'static str,
    /// Plain-words description of why it is dangerous.
    pub description: &'static str,
    /// More for the reviewer to see (for a sandbox escalation: the policy and what was
    /// denied), as key and value.
    pub context: Vec<(&'static str, String)>,
}

/// Decides dangerous commands. The CLI asks the human; `-q` denies; `--yolo` allows; the
/// gateway (a later issue) routes to the human inbox.
pub trait Approver: Send + Sync {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision>;

    /// A grant a human already gave that covers `req`, without asking anyone (a `once`
    /// grant is used up). The sandbox asks this before running a command confined, so an
    /// escalation approved while the session waited runs outside at once. The default: none.
    fn granted<'a>(&'a self, _req: &'a ApprovalRequest) -> BoxFuture<'a, Option<ApprovalDecision>> {
        Box::pin(async { None })
    }
}

/// Denies every dangerous command; the default when nobody can be asked.
pub struct DenyAll {
    pub reason: String,
}

impl Approver for DenyAll {
    fn approve(&self, _req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let reason = self.reason.clone();
        Box::pin(async move { ApprovalDecision::Deny { reason } })
    }
}

/// Approves every (non hard-line) dangerous command: `--yolo`.
pub struct AllowAll;

impl Approver for AllowAll {
    fn approve(&self, _req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::Once })
    }
}

/// Limits that tools apply; from the configuration.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// What the agent's commands and the file tools may do on this machine. The default
    /// (for tests and embedders) is no sandbox; `tern` builds it from `[sandbox]`, whose
    /// default is `workspace-write`.
    pub sandbox: Arc<tern_sandbox::Sandbox>,
    /// Default `terminal` timeout in seconds when the model gives none.
    pub terminal_timeout_secs: u64,
    /// Largest timeout the model may ask for.
    pub terminal_max_timeout_secs: u64,
    /// Characters of command output returned to the model before it is cut.
    pub output_limit_chars: usize,
    /// Largest file `read_file` returns in one call, in bytes.
    pub read_limit_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            sandbox: Arc::new(tern_sandbox::Sandbox::full_access()),
            terminal_timeout_secs: 180,
            terminal_max_timeout_secs: 3600,
            output_limit_chars: 50_000,
            read_limit_bytes: 256 * 1024,
        }
    }
}

/// Everything a tool handler may use. Cheap to clone.
#[derive(Clone)]
pub struct ToolContext {
    pub session_id: String,
    /// The model's id of this tool call; with the session id and `call_seq` it keys what a
    /// call creates outside the process (an inbox request), so a retried call creates
    /// nothing twice.
    pub call_id: String,
    /// The transcript position (`seq`) of the assistant message that carried this call: the
    /// same when that call is run again, another for a later call that reuses the id, as
    /// some models send `call_1` every turn. 0 for a call with no stored message.
    pub call_seq: i64,
    pub workdir: PathBuf,
    /// Cancelled when the turn is interrupted: handlers stop at once and kill their children.
    pub cancel: CancellationToken,
    pub approver: Arc<dyn Approver>,
    pub limits: ToolLimits,
    /// A `pre_tool_call` hook allowed this call: a dangerous command runs without asking
    /// (hard-line commands stay blocked).
    pub preapproved: bool,
    /// Runs child sessions (the `delegate` toolset); `None` where the turn does not enable
    /// delegation, or outside a turn.
    pub subagents: Option<Arc<dyn SubAgents>>,
    /// The toolsets of the calling turn, so a tool can keep what it hands on within them (a
    /// scheduled job's toolsets). [`Registry::call`] sets it from the toolsets it enforces,
    /// whatever the caller put here.
    pub toolsets: Arc<[String]>,
    /// Where the tool reports what it has besides its result, while it runs.
    pub report: ToolReport,
}

/// What a running tool reports besides its result, to whoever runs the turn. `Default`:
/// nowhere (outside a turn, and in tests).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ToolReport {
    /// Images the call produced, for a model that accepts images: the agent takes them after
    /// the call. The tool's result still describes each one in words, for models that do not.
    pub images: ToolImages,
    /// Where the tool's progress goes (an MCP server's `notifications/progress`); `None`:
    /// nobody is listening.
    pub progress: Option<ProgressSink>,
}

impl std::fmt::Debug for ToolReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolReport")
            .field("images", &self.images.len())
            .field("progress", &self.progress.is_some())
            .finish_non_exhaustive()
    }
}

/// An image a tool produced.
#[derive(Clone, PartialEq, Eq)]
pub struct ToolImage {
    /// E.g. `image/png`.
    pub mime_type: String,
    /// The image's bytes in base64, as MCP carries them.
    pub data: String,
}

impl ToolImage {
    /// The number of bytes `data` decodes to, without decoding it.
    pub fn decoded_len(&self) -> usize {
        base64_decoded_len(&self.data)
    }
}

impl std::fmt::Debug for ToolImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the data: megabytes of base64 in a log line help no one.
        write!(
            f,
            "ToolImage({}, {} bytes)",
            self.mime_type,
            self.decoded_len()
        )
    }
}

/// The images of one call, shared by the tool that pushes them and the agent that takes
/// them. Cheap to clone.
#[derive(Clone, Default)]
pub struct ToolImages(Arc<std::sync::Mutex<Vec<ToolImage>>>);

impl ToolImages {
    pub fn push(&self, image: ToolImage) {
        self.lock().push(image);
    }

    /// The images pushed so far, leaving none.
    pub fn take(&self) -> Vec<ToolImage> {
        std::mem::take(&mut *self.lock())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ToolImage>> {
        // Every operation on the list is one call: a panic cannot leave it half-changed.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The size of the bytes a base64 text encodes, without decoding it.
pub fn base64_decoded_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3
        + match data.len() % 4 {
            2 => 1,
            3 => 2,
            _ => 0,
        })
    .saturating_sub(padding)
}

impl ToolReport {
    /// A report whose progress goes to `sink`.
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// Reports progress, if anyone listens.
    pub fn progress(&self, progress: ToolProgress) {
        if let Some(sink) = &self.progress {
            sink(progress);
        }
    }
}

/// Receives a running tool's progress; called on the tool's task, so it must not block.
pub type ProgressSink = Arc<dyn Fn(ToolProgress) + Send + Sync>;

/// How far a running tool has got, as MCP's `notifications/progress` says it: `progress`
/// grows with each report; `total`, when known, is where it ends.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolProgress {
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

impl ToolContext {
    /// Resolves a path argument against the working directory.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.workdir.join(p)
        }
    }
}

struct Entry {
    tool: Arc<dyn DynTool>,
    // Compiled lazily: most runs call only a few tools, and start-up time matters.
    validator: OnceLock<Result<jsonschema::Validator, ArgsError>>,
}

/// All known tools, by name.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Entry>,
    /// Lines a toolset adds to the system prompt of the turns that enable it (e.g. how to
    /// use it well), by toolset.
    prompt_lines: BTreeMap<&'static str, String>,
    /// What a toolset adds from durable state to the turns that enable it, by toolset.
    contexts: Vec<(&'static str, Arc<dyn SessionContext>)>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// The registry with every built-in tool ([`tools::builtin`] lists them).
    pub fn builtin() -> Self {
        let mut r = Self::new();
        tools::builtin(&mut r);
        r
    }

    /// Adds a typed tool (replacing one of the same name).
    pub fn add<T: Tool>(&mut self, tool: T) {
        self.register(Arc::new(Typed::new(tool)));
    }

    /// Adds a tool given as a [`DynTool`] (replacing one of the same name).
    pub fn register(&mut self, tool: Arc<dyn DynTool>) {
        let name = tool.spec().name;
        self.tools.insert(
            name,
            Entry {
                tool,
                validator: OnceLock::new(),
            },
        );
    }

    /// Sets the line `toolset` adds to the system prompt of the turns that enable it
    /// (replacing an earlier one).
    pub fn set_prompt_line(&mut self, toolset: &'static str, line: impl Into<String>) {
        self.prompt_lines.insert(toolset, line.into());
    }

    /// Registers what `toolset` adds from durable state to the turns that enable it (see
    /// [`SessionContext`]).
    pub fn add_context(&mut self, toolset: &'static str, context: Arc<dyn SessionContext>) {
        self.contexts.push((toolset, context));
    }

    /// The session contexts of the enabled toolsets, in registration order.
    pub fn contexts<'a>(
        &'a self,
        toolsets: &'a [String],
    ) -> impl Iterator<Item = &'a Arc<dyn SessionContext>> + 'a {
        self.contexts
            .iter()
            .filter(move |(t, _)| toolsets.iter().any(|e| e == *t))
            .map(|(_, c)| c)
    }

    /// The system prompt lines of the enabled toolsets, in toolset name order.
    pub fn prompt_lines<'a>(
        &'a self,
        toolsets: &'a [String],
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.prompt_lines
            .iter()
            .filter(move |(t, _)| toolsets.iter().any(|e| e == *t))
            .map(|(_, line)| line.as_str())
    }

    /// Names of all toolsets, sorted.
    pub fn toolsets(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.tools.values().map(|e| e.tool.spec().toolset).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Checks toolset names; returns the unknown ones.
    pub fn unknown_toolsets<'a>(&self, names: &'a [String]) -> Vec<&'a str> {
        let known = self.toolsets();
        names
            .iter()
            .map(String::as_str)
            .filter(|n| !known.contains(n))
            .collect()
    }

    /// Specs of the tools in the enabled toolsets.
    pub fn specs<'a>(&'a self, toolsets: &'a [String]) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        self.tools
            .values()
            .map(|e| e.tool.spec())
            .filter(move |s| toolsets.iter().any(|t| t == s.toolset))
    }

    /// OpenAI `tools` array for the enabled toolsets.
    pub fn schemas(&self, toolsets: &[String]) -> Vec<Value> {
        self.specs(toolsets)
            .map(|s| {
                json!({
                    "type": "function",
                    "function": {
                        "name": s.name,
                        "description": s.description,
                        "parameters": s.parameters,
                    }
                })
            })
            .collect()
    }

    /// Runs one tool call: parse, check it is enabled, validate, run.
    pub async fn call(
        &self,
        name: &str,
        raw_args: &str,
        toolsets: &[String],
        mut ctx: ToolContext,
    ) -> ToolResult {
        let entry = self
            .tools
            .get(name)
            .filter(|e| toolsets.iter().any(|t| t == e.tool.spec().toolset))
            .ok_or_else(|| {
                let names: Vec<_> = self.specs(toolsets).map(|s| s.name).collect();
                ToolError::new(format!(
                    "unknown tool `{name}`; the available tools are: {}",
                    names.join(", ")
                ))
            })?;
        let args = parse_arguments(raw_args)?;
        let validator = entry
            .validator
            .get_or_init(|| {
                jsonschema::validator_for(&entry.tool.spec().parameters).map_err(|e| {
                    ArgsError::BrokenSchema {
                        tool: name.to_owned(),
                        reason: e.to_string(),
                    }
                })
            })
            .as_ref()
            .map_err(|e| ToolError::from(e.clone()))?;
        let problems: Vec<String> = validator
            .iter_errors(&args)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect();
        if !problems.is_empty() {
            return Err(ArgsError::Invalid {
                tool: name.to_owned(),
                problems: problems.join("; "),
            }
            .into());
        }
        ctx.toolsets = Arc::from(toolsets);
        entry.tool.call(args, ctx).await
    }
}

/// Turns a tool result into the tool message content the model reads: a JSON value as JSON,
/// except a result that is only text (an MCP server's), which the model reads as it is rather
/// than as a quoted JSON string with its newlines and quotes escaped.
pub fn result_to_content(r: &ToolResult) -> String {
    match r {
        Ok(Value::String(text)) => text.clone(),
        Ok(v) => v.to_string(),
        Err(e) => json!({ "error": e.0 }).to_string(),
    }
}
