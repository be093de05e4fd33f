//! The `inbox` toolset: the model asks a human (`request_approval`, `request_elicitation`),
//! keeps the reviewer informed (`record_action`, `report_exception`, `add_note`), checks a
//! request once (`get_decision`) and reads how to do all that well (`inbox_guide`).
//!
//! # A request at a glance
//!
//! 1. The arguments are checked with the inbox's own types (Pump Up shapes; field
//!    definitions with [`validate_field_defs`]); attachments are workspace-relative paths
//!    that must stay inside the workspace, symlinks resolved. Bad input is a tool error and
//!    nothing is stored.
//! 2. A retried call (same session, tool call id and message) finds its wait
//!    (`tern-wait:<session>:<call>@<seq>`, see [`crate::call_occurrence`]) and only completes
//!    what is missing: it returns the same request id and creates nothing new. A later call
//!    that reuses the id (another message) is another occurrence and asks anew. A call of
//!    the same message that reuses the id with other arguments is not a retry either: it is
//!    refused, rather than answered with the other call's request.
//! 3. Otherwise: the session's task ([`InboxClient::session_task`], one per session), the
//!    attachments uploaded, then [`Store::create_wait`] records the wait `pending` with what
//!    is asked (`{"kind", …the create body without projectName/taskId}`).
//! 4. [`InboxTools::send_request`] sends it: the attachments are attached to the task (an
//!    action, idempotency key `tern-attach:<session>:<call>@<seq>`), the request is created
//!    (`tern-req:<session>:<call>@<seq>`), its id stored with [`Store::set_wait_request`], and
//!    `wait_created` emitted; a decision taken already (an auto-approve policy decides inside
//!    the create) is read at once ([`crate::follow::settle_new_request`]). Every step is
//!    idempotent, so a crash anywhere in between is repaired by running it again. The keys
//!    use the session that asked ([`Wait::origin_session`]), even after a reset moved the
//!    wait to its successor.
//! 5. The tool returns `{"requestId", "status": "pending"}` at once; it never waits for the
//!    human. The model ends its turn and is resumed with the decision ([`crate::resume`]).
//!
//! # When the inbox cannot be reached
//!
//! Before the wait is recorded (task, uploads) nothing is kept and the error says nothing
//! was asked. After it, the wait stays `pending` without a request id and the error tells
//! the model not to ask again: [`InboxTools::send_unsent`] (run by the gateway's upkeep)
//! sends it later with the same keys, and the decision then resumes the session as usual.
//! A request the inbox refuses outright (a 4xx, e.g. an unknown `transitionsTo`) cannot
//! succeed later: its wait is cancelled so the session does not wait forever.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use schemars::generate::SchemaGenerator;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_hooks::{HookBus, HookEvent, WaitCreated};
use tern_inbox::fields::{Field, FieldBid, validate_field_defs};
use tern_inbox::model::MetadataPatch;
use tern_inbox::outcome::ApprovalRecommendation;
use tern_store::{NewWait, Store, StoreError, Wait, WaitKind, WaitStatus};
use tern_tools::{Registry, Tool, ToolContext, ToolError, ToolResult};

use crate::client::{ClientError, InboxClient, LogKind, RequestKind, TaskRef};
use crate::guide::{GUIDE, SYSTEM_PROMPT_LINE};

/// The toolset's name, as in `agent.toolsets`.
pub const TOOLSET: &str = "inbox";

/// The inbox project the sessions' tasks are created in unless configured otherwise.
pub const DEFAULT_PROJECT: &str = tern_inbox::service::DEFAULT_PROJECT;

/// Keys of a wait's `request` JSON that belong in the create body (the rest is what the
/// waits machinery keeps for itself: `kind`, `attachmentFiles`, a command's particulars).
const BODY_KEYS: &[&str] = &[
    "projectName",
    "taskId",
    "summary",
    "keyValueContext",
    "recommendation",
    "fields",
    "attachments",
    "externalTraceId",
];

/// What the tools need; shared by every call (and by the gateway's upkeep for
/// [`InboxTools::send_unsent`]).
pub struct InboxTools {
    pub store: Store,
    pub client: Arc<dyn InboxClient>,
    /// The inbox project of the sessions' tasks ([`DEFAULT_PROJECT`] unless set).
    pub project: String,
    pub hooks: Arc<HookBus>,
    /// Waits whose request is being sent in this process: a tool call and the upkeep's
    /// [`InboxTools::send_unsent`] never send the same wait at once, so `wait_created` is
    /// emitted once.
    sending: Mutex<HashSet<String>>,
    /// Woken when a request turns out decided as soon as it is created
    /// ([`InboxTools::with_wakeup`]).
    wakeup: Option<crate::resume::Wakeup>,
}

/// Why a wait's request could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The wait's stored request is not a JSON object (cannot happen for waits written by
    /// these tools).
    #[error("wait {0} has an unreadable request")]
    Corrupt(String),
    /// Another task of this process is sending it right now.
    #[error("wait {0} is being sent by another task")]
    Busy(String),
}

impl InboxTools {
    pub fn new(store: Store, client: Arc<dyn InboxClient>, hooks: Arc<HookBus>) -> Self {
        InboxTools {
            store,
            client,
            project: DEFAULT_PROJECT.to_owned(),
            hooks,
            sending: Mutex::new(HashSet::new()),
            wakeup: None,
        }
    }

    /// Wakes the resumer when a request is decided by the time its id is stored (an
    /// auto-approve policy decides inside the create).
    pub fn with_wakeup(mut self, wakeup: crate::resume::Wakeup) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    /// Creates the sessions' tasks in `project` instead of [`DEFAULT_PROJECT`].
    pub fn with_project(mut self, project: impl Into<String>) -> Self {
        self.project = project.into();
        self
    }

    /// Sends the request of a pending wait that has none yet and returns its id; returns
    /// the stored id at once when it has one. Idempotent: the task, the attachments and the
    /// request are created under keys derived from the session and the tool call, so a
    /// second send after a crash gets the originals back. Emits `wait_created` when it
    /// stores the request id.
    pub async fn send_request(&self, wait_id: &str) -> Result<String, SendError> {
        let _claim = self.claim(wait_id)?;
        // Read again under the claim: another task may have finished sending meanwhile.
        let wait = self
            .store
            .wait(wait_id)
            .await?
            .ok_or_else(|| SendError::Corrupt(wait_id.to_owned()))?;
        if let Some(id) = &wait.request_id {
            return Ok(id.clone());
        }
        let Ok(Value::Object(mut body)) = serde_json::from_str::<Value>(&wait.request) else {
            return Err(SendError::Corrupt(wait.id.clone()));
        };
        let files = body.get("attachmentFiles").cloned();
        body.retain(|k, _| BODY_KEYS.contains(&k.as_str()));
        // Keys from the session that asked, even if a reset moved the wait since: the same
        // task and request as a send before the move.
        let origin = wait.origin_session();
        let task = self.client.session_task(origin, &self.project).await?;
        body.entry("projectName")
            .or_insert_with(|| json!(task.project_name));
        body.entry("taskId").or_insert_with(|| json!(task.task_id));
        let call = call_key(&wait);
        // A request may show only files attached to its task: attach them first.
        let attach: Vec<Value> = files
            .as_ref()
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| Some(json!({"uploadId": f.get("uploadId")?, "label": f.get("path")?})))
            .collect();
        if !attach.is_empty() {
            let action = json!({
                "projectName": task.project_name,
                "taskId": task.task_id,
                "description": format!("Attached {} file(s) for a request", attach.len()),
                "addAttachments": attach,
            });
            let idem = format!("tern-attach:{origin}:{call}");
            self.client.log(LogKind::Action, action, &idem).await?;
        }
        let summary = body
            .get("summary")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let idem = format!("tern-req:{origin}:{call}");
        let request_id = self
            .client
            .create_request(request_kind(wait.kind), Value::Object(body), &idem)
            .await?;
        self.store.set_wait_request(&wait.id, &request_id).await?;
        tracing::info!(wait = %wait.id, request = %request_id, session = %wait.session_id, "inbox request created");
        self.hooks.emit(HookEvent::WaitCreated(WaitCreated {
            session_id: wait.session_id.clone(),
            source: self.source_of(&wait.session_id).await,
            wait_id: wait.id.clone(),
            request_id: request_id.clone(),
            kind: wait.kind.as_str().to_owned(),
            summary,
        }));
        // Decided already (by a policy, or before a crash let the id be stored): no follower
        // will report it, so it is read once now.
        crate::follow::settle_new_request(
            &self.store,
            &*self.client,
            &self.hooks,
            self.wakeup.as_ref(),
            &wait.id,
        )
        .await;
        Ok(request_id)
    }

    /// Sends every pending wait that has no request yet (the inbox was unreachable when it
    /// was asked, or the gateway stopped in between). Returns how many were sent; a wait
    /// that fails again is counted as an attempt and left for the next run, one the inbox
    /// refuses outright is cancelled.
    pub async fn send_unsent(&self) -> Result<usize, StoreError> {
        let mut sent = 0;
        for wait in self.store.waits_in(WaitStatus::Pending).await? {
            // A process wait is no inbox request: its process's exit makes it ready.
            if wait.request_id.is_some() || wait.kind == WaitKind::Process {
                continue;
            }
            match self.send_request(&wait.id).await {
                Ok(_) => sent += 1,
                Err(SendError::Busy(_)) => {}
                Err(e) => {
                    tracing::warn!(wait = %wait.id, error = %e, "cannot send an inbox request yet");
                    self.send_failed(&wait.id, &e).await?;
                }
            }
        }
        Ok(sent)
    }

    /// Records a failed send: an attempt when it may succeed later, otherwise the wait is
    /// cancelled (nothing would ever resume it).
    async fn send_failed(&self, wait_id: &str, e: &SendError) -> Result<(), StoreError> {
        self.store
            .wait_attempt_failed(wait_id, &e.to_string())
            .await?;
        if !is_transient(e) {
            self.store.cancel_wait(wait_id).await?;
        }
        Ok(())
    }

    fn claim(&self, wait_id: &str) -> Result<Claim<'_>, SendError> {
        let mut set = self.sending.lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(wait_id.to_owned()) {
            return Err(SendError::Busy(wait_id.to_owned()));
        }
        Ok(Claim {
            tools: self,
            wait_id: wait_id.to_owned(),
        })
    }

    /// The session's `source` for hook events; `unknown` if it cannot be read (a hook
    /// event is not worth failing a request over).
    async fn source_of(&self, session_id: &str) -> String {
        match self.store.get_session(session_id).await {
            Ok(Some(s)) => s.source,
            _ => "unknown".to_owned(),
        }
    }
}

/// A wait being sent; dropping it releases the wait.
struct Claim<'a> {
    tools: &'a InboxTools,
    wait_id: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.tools
            .sending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.wait_id);
    }
}

fn is_transient(e: &SendError) -> bool {
    match e {
        SendError::Client(c) => c.is_transient(),
        SendError::Store(_) | SendError::Busy(_) => true,
        SendError::Corrupt(_) => false,
    }
}

fn request_kind(kind: WaitKind) -> RequestKind {
    match kind {
        // A process wait is never sent (see `send_unsent`).
        WaitKind::Approval | WaitKind::Command | WaitKind::Process => RequestKind::Approval,
        WaitKind::Elicitation => RequestKind::Elicitation,
    }
}

/// The tool call's part of the idempotency keys: what follows the session in the wait's own
/// key (`<call>@<seq>`, or `<call>` for a wait recorded before occurrences), so that a send
/// after a crash uses the keys of the first; else the call id, else the wait id (for a wait
/// recorded otherwise, which these tools never do).
fn call_key(wait: &Wait) -> &str {
    wait.idem_key
        .strip_prefix("tern-wait:")
        .and_then(|rest| rest.strip_prefix(wait.origin_session()))
        .and_then(|rest| rest.strip_prefix(':'))
        .filter(|call| !call.is_empty())
        .or(wait.tool_call_id.as_deref())
        .unwrap_or(&wait.id)
}

/// Adds the `inbox` toolset to `registry`, with [`SYSTEM_PROMPT_LINE`] for the system
/// prompt of the turns that enable it (the guide offered as a skill).
pub fn register(registry: &mut Registry, ctx: Arc<InboxTools>) {
    registry.set_prompt_line(TOOLSET, SYSTEM_PROMPT_LINE);
    registry.add(RequestApproval(Arc::clone(&ctx)));
    registry.add(RequestElicitation(Arc::clone(&ctx)));
    registry.add(RecordAction(Arc::clone(&ctx)));
    registry.add(ReportException(Arc::clone(&ctx)));
    registry.add(AddNote(Arc::clone(&ctx)));
    registry.add(GetDecision(ctx));
    registry.add(InboxGuide);
}

/// The sentence that offers the guide as a skill, ending both request tools' descriptions.
macro_rules! guide_pointer {
    () => {
        " Read `inbox_guide` first (when to ask, how, and what to do after)."
    };
}

/// `request_approval`: a human approves or rejects one concrete action.
pub struct RequestApproval(pub Arc<InboxTools>);

impl Tool for RequestApproval {
    const NAME: &'static str = "request_approval";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = concat!(
        "Ask a human reviewer to approve or reject one concrete action before you \
         take it (irreversible or costly actions). Returns {\"requestId\", \
         \"status\": \"pending\"} at once; then END YOUR TURN: you will be resumed \
         with the decision in this conversation. Never poll.",
        guide_pointer!()
    );
    type Args = ApprovalArgs;

    async fn run(&self, args: ApprovalArgs, ctx: ToolContext) -> ToolResult {
        request(&self.0, check_approval(args)?, ctx, WaitKind::Approval).await
    }
}

/// `request_elicitation`: a human fills in a form.
pub struct RequestElicitation(pub Arc<InboxTools>);

impl Tool for RequestElicitation {
    const NAME: &'static str = "request_elicitation";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = concat!(
        "Ask a human reviewer to fill in values only a human knows (a form of \
         `fields`). Returns {\"requestId\", \"status\": \"pending\"} at once; \
         then END YOUR TURN: you will be resumed with the answers in this \
         conversation. Never poll.",
        guide_pointer!()
    );
    type Args = ElicitationArgs;

    async fn run(&self, args: ElicitationArgs, ctx: ToolContext) -> ToolResult {
        request(
            &self.0,
            check_elicitation(args)?,
            ctx,
            WaitKind::Elicitation,
        )
        .await
    }
}

/// `record_action`: logs what the agent did.
pub struct RecordAction(pub Arc<InboxTools>);

impl Tool for RecordAction {
    const NAME: &'static str = "record_action";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Log something you did in the reviewer's inbox (never \
        waits for anyone). May move the session's task to another step (`transitionsTo`), \
        patch its metadata and attach workspace files.";
    type Args = ActionArgs;

    async fn run(&self, a: ActionArgs, ctx: ToolContext) -> ToolResult {
        require_text("description", &a.description)?;
        let mut body = Map::new();
        body.insert("description".into(), json!(a.description));
        insert_some(&mut body, "detail", a.detail)?;
        insert_some(&mut body, "transitionsTo", a.transitions_to)?;
        insert_some(&mut body, "metadataPatch", a.metadata_patch)?;
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        let files = a.attachments.unwrap_or_default();
        log(&self.0, body, &files, ctx, LogKind::Action).await
    }
}

/// `report_exception`: logs that something went wrong.
pub struct ReportException(pub Arc<InboxTools>);

impl Tool for ReportException {
    const NAME: &'static str = "report_exception";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Log in the reviewer's inbox that something went wrong \
        (never waits for anyone). May move the session's task to another step.";
    type Args = ExceptionArgs;

    async fn run(&self, a: ExceptionArgs, ctx: ToolContext) -> ToolResult {
        require_text("message", &a.message)?;
        let mut body = Map::new();
        body.insert("message".into(), json!(a.message));
        insert_some(&mut body, "detail", a.detail)?;
        insert_some(&mut body, "transitionsTo", a.transitions_to)?;
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        log(&self.0, body, &[], ctx, LogKind::Exception).await
    }
}

/// `add_note`: a remark on the session's task.
pub struct AddNote(pub Arc<InboxTools>);

impl Tool for AddNote {
    const NAME: &'static str = "add_note";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Add a remark to the session's task in the reviewer's \
        inbox (never waits for anyone).";
    type Args = NoteArgs;

    async fn run(&self, a: NoteArgs, ctx: ToolContext) -> ToolResult {
        require_text("message", &a.message)?;
        let mut body = Map::new();
        body.insert("message".into(), json!(a.message));
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        log(&self.0, body, &[], ctx, LogKind::Note).await
    }
}

/// `get_decision`: reads a request's decision once.
pub struct GetDecision(pub Arc<InboxTools>);

impl Tool for GetDecision {
    const NAME: &'static str = "get_decision";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Check once whether a request of this session was \
        decided, and read the decision. Not for waiting: after asking, end your turn; the \
        decision comes to you as a message.";
    type Args = DecisionArgs;

    async fn run(&self, a: DecisionArgs, ctx: ToolContext) -> ToolResult {
        decision(&self.0, a, ctx).await
    }
}

/// `inbox_guide`: how to ask a human well.
pub struct InboxGuide;

impl Tool for InboxGuide {
    const NAME: &'static str = "inbox_guide";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "The guide to asking a human through the inbox: when \
        to ask, how to write the request, and what to do after asking. Read it before your \
        first request.";
    type Args = GuideArgs;

    async fn run(&self, _: GuideArgs, _: ToolContext) -> ToolResult {
        Ok(json!({ "guide": GUIDE }))
    }
}

// ---------------------------------------------------------------------------------------
// Arguments: the Pump Up create bodies without projectName and taskId (the session's task
// supplies them), attachments as workspace paths.
// ---------------------------------------------------------------------------------------

/// The arguments of `request_approval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalArgs {
    /// One line: exactly what you want to do.
    #[schemars(length(min = 1))]
    pub summary: String,
    #[serde(default)]
    #[schemars(schema_with = "key_value_schema")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// What you suggest, and why.
    #[serde(default)]
    #[schemars(schema_with = "approval_recommendation_schema")]
    pub recommendation: Option<ApprovalRecommendation>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

/// The arguments of `request_elicitation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElicitationArgs {
    /// One line: what you need and why.
    #[schemars(length(min = 1))]
    pub summary: String,
    #[schemars(schema_with = "fields_schema")]
    pub fields: Vec<Field>,
    #[serde(default)]
    #[schemars(schema_with = "key_value_schema")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// Pre-filled values you suggest, per field.
    #[serde(default)]
    #[schemars(schema_with = "field_bids_schema")]
    pub recommendation: Option<Vec<FieldBid>>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

/// The arguments of `record_action`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionArgs {
    #[schemars(length(min = 1))]
    pub description: String,
    /// Structured details (any JSON object).
    #[serde(default)]
    pub detail: Option<Map<String, Value>>,
    /// A step of the project.
    #[serde(default)]
    pub transitions_to: Option<String>,
    /// `set` overwrites keys, `setOnce` sets missing keys, `unset` removes keys.
    #[serde(default)]
    #[schemars(schema_with = "metadata_patch_schema")]
    pub metadata_patch: Option<MetadataPatch>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

/// The arguments of `report_exception`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptionArgs {
    #[schemars(length(min = 1))]
    pub message: String,
    /// Structured details (any JSON object).
    #[serde(default)]
    pub detail: Option<Map<String, Value>>,
    /// A step of the project.
    #[serde(default)]
    pub transitions_to: Option<String>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

/// The arguments of `add_note`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NoteArgs {
    #[schemars(length(min = 1))]
    pub message: String,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

/// The arguments of `get_decision`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionArgs {
    #[schemars(length(min = 1))]
    pub request_id: String,
}

/// `inbox_guide` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuideArgs {}

fn require_text(name: &str, value: &str) -> Result<(), ToolError> {
    if value.trim().is_empty() {
        return Err(ToolError::new(format!("`{name}` must not be empty")));
    }
    Ok(())
}

/// The tool call's identity, which keys everything it creates: the session, the call id,
/// and the call's occurrence ([`crate::call_occurrence`]).
fn call_ids(ctx: &ToolContext) -> Result<(&str, &str, String), ToolError> {
    if ctx.session_id.is_empty() || ctx.call_id.is_empty() {
        return Err(ToolError::new(
            "the inbox tools need a session and a tool call id (internal error)",
        ));
    }
    let occurrence = crate::call_occurrence(&ctx.call_id, ctx.call_seq);
    Ok((&ctx.session_id, &ctx.call_id, occurrence))
}

// ---------------------------------------------------------------------------------------
// Attachments
// ---------------------------------------------------------------------------------------

/// A checked attachment: the path as the model gave it, and the real file.
#[derive(Debug, Clone)]
struct LocalFile {
    shown: String,
    real: PathBuf,
}

/// Checks that `shown` names a regular file inside `workdir`: relative, without `..`, and
/// still inside once every symlink is resolved.
async fn confine(workdir: &Path, shown: &str) -> Result<LocalFile, ToolError> {
    let refuse = |why: &str| {
        Err(ToolError::new(format!(
            "attachment {shown:?} refused: {why}; attachments are paths relative to the \
             workspace, inside it"
        )))
    };
    if shown.trim().is_empty() {
        return refuse("empty path");
    }
    let path = Path::new(shown);
    if path.is_absolute() || path.has_root() {
        return refuse("absolute path");
    }
    if path.components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return refuse("`..` leads out of the workspace");
    }
    let root = tokio::fs::canonicalize(workdir)
        .await
        .map_err(|e| ToolError::new(format!("cannot resolve the workspace: {e}")))?;
    let real = match tokio::fs::canonicalize(root.join(path)).await {
        Ok(p) => p,
        Err(e) => return refuse(&format!("cannot open it ({e})")),
    };
    if !real.starts_with(&root) {
        return refuse("it is a link leading out of the workspace");
    }
    match tokio::fs::metadata(&real).await {
        Ok(m) if m.is_file() => {}
        Ok(_) => return refuse("not a regular file"),
        Err(e) => return refuse(&format!("cannot open it ({e})")),
    }
    Ok(LocalFile {
        shown: shown.to_owned(),
        real,
    })
}

async fn confine_all(ctx: &ToolContext, paths: &[String]) -> Result<Vec<LocalFile>, ToolError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let file = confine(&ctx.workdir, p).await?;
        // The same file twice would be attached twice under two labels; once is enough.
        if seen.insert(file.real.clone()) {
            out.push(file);
        }
    }
    Ok(out)
}

/// Uploads checked files; returns `(shown path, upload id)` pairs.
async fn upload_all(
    client: &dyn InboxClient,
    files: &[LocalFile],
) -> Result<Vec<(String, String)>, ToolError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let name = f
            .real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| f.shown.clone());
        let id = client.upload(&f.real, &name).await.map_err(|e| {
            ToolError::new(format!(
                "cannot upload {}: {e}; nothing was sent to the inbox",
                f.shown
            ))
        })?;
        out.push((f.shown.clone(), id));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// request_approval, request_elicitation
// ---------------------------------------------------------------------------------------

/// The checked create body (without projectName/taskId) and the attachments to upload.
struct Ask {
    body: Map<String, Value>,
    files: Vec<String>,
}

fn check_approval(a: ApprovalArgs) -> Result<Ask, ToolError> {
    require_text("summary", &a.summary)?;
    let mut body = Map::new();
    body.insert("summary".into(), json!(a.summary));
    insert_some(&mut body, "keyValueContext", a.key_value_context)?;
    if let Some(c) = a.recommendation.as_ref().and_then(|r| r.confidence)
        && !(0.0..=1.0).contains(&c)
    {
        return Err(ToolError::new(
            "`recommendation.confidence` must be between 0 and 1",
        ));
    }
    insert_some(&mut body, "recommendation", a.recommendation)?;
    insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
    Ok(Ask {
        body,
        files: a.attachments.unwrap_or_default(),
    })
}

fn check_elicitation(a: ElicitationArgs) -> Result<Ask, ToolError> {
    require_text("summary", &a.summary)?;
    if a.fields.is_empty() {
        return Err(ToolError::new(
            "`fields` must not be empty: there would be nothing to answer",
        ));
    }
    validate_field_defs(&a.fields).map_err(|errors| {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        ToolError::new(format!("invalid `fields`: {}", list.join("; ")))
    })?;
    for bid in a.recommendation.iter().flatten() {
        if !a.fields.iter().any(|f| f.id() == bid.field_id) {
            return Err(ToolError::new(format!(
                "the recommendation for {:?} names no field of the request",
                bid.field_id
            )));
        }
    }
    let mut body = Map::new();
    body.insert("summary".into(), json!(a.summary));
    body.insert("fields".into(), to_value(&a.fields)?);
    insert_some(&mut body, "keyValueContext", a.key_value_context)?;
    insert_some(&mut body, "recommendation", a.recommendation)?;
    insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
    Ok(Ask {
        body,
        files: a.attachments.unwrap_or_default(),
    })
}

/// Sets `key` in `body` when there is a value.
fn insert_some<T: serde::Serialize>(
    body: &mut Map<String, Value>,
    key: &str,
    value: Option<T>,
) -> Result<(), ToolError> {
    if let Some(v) = value {
        body.insert(key.into(), to_value(&v)?);
    }
    Ok(())
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new(format!("cannot encode arguments: {e}")))
}

fn store_error(e: StoreError) -> ToolError {
    tracing::error!(error = %e, "inbox tool: session store error");
    ToolError::new(format!(
        "cannot record the request ({e}); nothing was sent to the inbox"
    ))
}

fn nothing_asked(e: ClientError) -> ToolError {
    ToolError::new(format!(
        "{e}; nothing was sent to the inbox. If this persists, tell the user that the \
         inbox cannot be reached."
    ))
}

/// What a new call asks, in a form comparable with [`asked_of_stored`]: the create body,
/// the kind, and the attachments as the paths the model gave (upload ids differ per upload).
fn asked_of_new(body: &Map<String, Value>, kind: WaitKind, files: &[LocalFile]) -> Value {
    let mut asked = body.clone();
    asked.insert("kind".into(), json!(kind.as_str()));
    if !files.is_empty() {
        let paths: Vec<&str> = files.iter().map(|f| f.shown.as_str()).collect();
        asked.insert("attachmentFiles".into(), json!(paths));
    }
    Value::Object(asked)
}

/// What a stored wait asked (its `request` JSON), comparable with [`asked_of_new`].
fn asked_of_stored(request: &str) -> Value {
    let Ok(Value::Object(mut asked)) = serde_json::from_str::<Value>(request) else {
        // Unreadable: it matches no arguments, so the call is refused rather than answered
        // with a request nobody can read.
        return Value::Null;
    };
    asked.remove("attachments");
    if let Some(files) = asked.remove("attachmentFiles") {
        let paths: Vec<Value> = files
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| f.get("path").cloned().unwrap_or(Value::Null))
            .collect();
        asked.insert("attachmentFiles".into(), Value::Array(paths));
    }
    Value::Object(asked)
}

async fn request(tools: &InboxTools, ask: Ask, ctx: ToolContext, kind: WaitKind) -> ToolResult {
    let (session, call, occurrence) = call_ids(&ctx)?;
    let files = confine_all(&ctx, &ask.files).await?;
    let idem = format!("tern-wait:{session}:{occurrence}");

    let existing = tools
        .store
        .session_waits(session, false)
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|w| w.idem_key == idem);
    let wait = match existing {
        Some(w) => {
            // The key says "retry of that call", but only the same question may be answered
            // with the earlier request: two calls of one message with the same id would
            // otherwise get each other's request (and its decision) back.
            if asked_of_stored(&w.request) != asked_of_new(&ask.body, kind, &files) {
                return Err(ToolError::new(format!(
                    "tool call id {call:?} was already used in this message for a different \
                     request (wait {}); nothing was asked. The tool call ids must be unique: \
                     call the tool again in a new tool call.",
                    w.id
                )));
            }
            w
        }
        None => {
            // The task first: when the inbox is unreachable, nothing is recorded.
            let _task: TaskRef = tools
                .client
                .session_task(session, &tools.project)
                .await
                .map_err(nothing_asked)?;
            let uploaded = upload_all(tools.client.as_ref(), &files).await?;
            let mut request = ask.body;
            if !uploaded.is_empty() {
                request.insert(
                    "attachments".into(),
                    json!(uploaded.iter().map(|(_, id)| id).collect::<Vec<_>>()),
                );
                request.insert(
                    "attachmentFiles".into(),
                    json!(
                        uploaded
                            .iter()
                            .map(|(path, id)| json!({"path": path, "uploadId": id}))
                            .collect::<Vec<_>>()
                    ),
                );
            }
            request.insert("kind".into(), json!(kind.as_str()));
            let request = Value::Object(request).to_string();
            let (wait, _fresh) = tools
                .store
                .create_wait(&NewWait {
                    session_id: session,
                    idem_key: &idem,
                    tool_call_id: Some(call),
                    kind,
                    request: &request,
                })
                .await
                .map_err(store_error)?;
            wait
        }
    };
    if wait.status == WaitStatus::Cancelled {
        return Err(ToolError::new(format!(
            "this request was cancelled (wait {}); do not ask again unless the user wants you to",
            wait.id
        )));
    }
    let request_id = match wait.request_id.clone() {
        Some(id) => id,
        None => match tools.send_request(&wait.id).await {
            Ok(id) => id,
            Err(SendError::Busy(_)) => {
                return Err(ToolError::new(format!(
                    "this request (wait {}) is being sent right now; end your turn, you will \
                     be resumed with the decision",
                    wait.id
                )));
            }
            Err(e) if is_transient(&e) => {
                if let Err(se) = tools
                    .store
                    .wait_attempt_failed(&wait.id, &e.to_string())
                    .await
                {
                    tracing::warn!(error = %se, "cannot count a failed send");
                }
                return Err(ToolError::new(format!(
                    "the inbox is unreachable ({e}). Your request is saved (wait {}) and will be \
                     sent when the inbox is reachable again. Do not ask again: end your turn; \
                     you will be resumed with the decision in this conversation.",
                    wait.id
                )));
            }
            Err(e) => {
                if let Err(se) = tools.send_failed(&wait.id, &e).await {
                    tracing::warn!(error = %se, "cannot cancel a refused wait");
                }
                return Err(ToolError::new(format!(
                    "the inbox refused the request: {e}. Nothing is pending; fix the arguments \
                     and ask again."
                )));
            }
        },
    };
    let status = match wait.status {
        WaitStatus::Pending | WaitStatus::Ready => "pending",
        WaitStatus::Delivered => "decided",
        WaitStatus::Cancelled => "cancelled",
    };
    Ok(json!({
        "requestId": request_id,
        "status": status,
        "next": "End your turn now: you will be resumed with the decision in this \
                 conversation. Do not poll.",
    }))
}

// ---------------------------------------------------------------------------------------
// record_action, report_exception, add_note
// ---------------------------------------------------------------------------------------

/// Logs `body` (the create body without projectName/taskId) on the session's task, with
/// `files` (workspace paths) uploaded and attached.
async fn log(
    tools: &InboxTools,
    mut body: Map<String, Value>,
    files: &[String],
    ctx: ToolContext,
    kind: LogKind,
) -> ToolResult {
    let (session, _call, occurrence) = call_ids(&ctx)?;
    let files = confine_all(&ctx, files).await?;
    let task = tools
        .client
        .session_task(session, &tools.project)
        .await
        .map_err(nothing_asked)?;
    let uploaded = upload_all(tools.client.as_ref(), &files).await?;
    if !uploaded.is_empty() {
        body.insert(
            "addAttachments".into(),
            json!(
                uploaded
                    .iter()
                    .map(|(path, id)| json!({"uploadId": id, "label": path}))
                    .collect::<Vec<_>>()
            ),
        );
    }
    body.insert("projectName".into(), json!(task.project_name));
    body.insert("taskId".into(), json!(task.task_id));
    let idem = format!("tern-log:{session}:{occurrence}");
    let event_id = tools
        .client
        .log(kind, Value::Object(body), &idem)
        .await
        .map_err(|e| match e {
            ClientError::Refused { .. } => {
                ToolError::new(format!("the inbox refused it: {e}; nothing was logged"))
            }
            ClientError::Unreachable(_) => nothing_asked(e),
        })?;
    Ok(json!({ "eventId": event_id }))
}

// ---------------------------------------------------------------------------------------
// get_decision
// ---------------------------------------------------------------------------------------

async fn decision(tools: &InboxTools, a: DecisionArgs, ctx: ToolContext) -> ToolResult {
    require_text("requestId", &a.request_id)?;
    let wait = tools
        .store
        .wait_by_request(&a.request_id)
        .await
        .map_err(|e| ToolError::new(format!("cannot read the request: {e}")))?
        .filter(|w| w.session_id == ctx.session_id)
        .ok_or_else(|| {
            ToolError::new(format!(
                "no request {:?} was made in this session; use the requestId that \
                 request_approval or request_elicitation returned",
                a.request_id
            ))
        })?;
    let result = tools
        .client
        .result(request_kind(wait.kind), &a.request_id)
        .await
        .map_err(|e| ToolError::new(format!("cannot read the decision: {e}")))?;
    Ok(match result {
        None => json!({
            "requestId": a.request_id,
            "status": "pending",
            "next": "No decision yet. End your turn: you will be resumed with the decision \
                     in this conversation. Do not poll.",
        }),
        Some(result) => json!({
            "requestId": a.request_id,
            "status": "decided",
            "result": result,
        }),
    })
}

// ---------------------------------------------------------------------------------------
// Schemas of the fields whose types are the inbox's own (`tern-inbox` checks them when the
// request is created; these tell the model their shape)
// ---------------------------------------------------------------------------------------

fn key_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Facts the reviewer needs, as short strings (what, where, why, impact, \
            how to undo). Add `action`: a stable machine name of the action, e.g. `deploy_prod`."
    })
}

fn attachments_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "description": "Files to show the reviewer: paths relative to the workspace, inside \
            it (no `..`, no absolute paths)."
    })
}

fn outcome_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "type": {
                "type": "string",
                "enum": ["APPROVE", "REJECT", "EDIT_AND_APPROVE", "ESCALATE", "REQUEST_MORE_INFO"]
            },
            "reasonCode": {"type": "string"},
            "note": {"type": "string"}
        },
        "required": ["type"],
        "additionalProperties": false
    })
}

fn approval_recommendation_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "outcome": outcome_schema(),
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "rationale": {"type": "string"}
        },
        "required": ["outcome"],
        "additionalProperties": false
    })
}

fn fields_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "description": "The form. Each field: `type`, a unique `id`, a \
            `label`, `required` (boolean), optional `description`. \
            Text: `format` (EMAIL, PHONE, URL), `minLength`, `maxLength`; \
            TextArea: `minLength`, `maxLength`; Number: `integerOnly` \
            (required), `min`, `max`; Slider: `min`, `max` (required), \
            `step`; Select / Multiselect: `options` (required); \
            DateField (`min`/`max` as YYYY-MM-DD), DateTime (RFC 3339), \
            Time (HH:MM).",
        "items": {
            "type": "object",
            "properties": {
                "type": {
                    "type": "string",
                    "enum": ["Text", "TextArea", "Number", "Slider", "Switch",
                             "Select", "Multiselect", "DateField", "DateTime",
                             "Time"]
                },
                "id": {"type": "string", "minLength": 1},
                "label": {"type": "string", "minLength": 1},
                "required": {"type": "boolean"},
                "description": {"type": "string"}
            },
            "required": ["type", "id", "label", "required"]
        }
    })
}

fn field_bids_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "fieldId": {"type": "string"},
                "value": {},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "rationale": {"type": "string"}
            },
            "required": ["fieldId", "value"],
            "additionalProperties": false
        }
    })
}

fn metadata_patch_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "set": {"type": "object"},
            "setOnce": {"type": "object"},
            "unset": {"type": "array", "items": {"type": "string"}}
        },
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_descriptions_point_to_the_guide() {
        for description in [
            RequestApproval::DESCRIPTION,
            RequestElicitation::DESCRIPTION,
        ] {
            assert!(description.contains(guide_pointer!()), "{description}");
            assert!(description.contains("END YOUR TURN"), "{description}");
        }
    }
}
