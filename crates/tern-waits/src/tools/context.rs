//! The toolset's shared state, [`InboxTools`], and the machinery that sends a recorded wait's
//! request to the inbox (by a tool call, or later by the gateway's upkeep).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tern_hooks::{HookBus, HookEvent, WaitCreated};
use tern_store::{Store, StoreError, Wait, WaitKind, WaitStatus};

use crate::client::{ClientError, InboxClient, LogKind, RequestKind};

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
    pub(super) async fn send_failed(&self, wait_id: &str, e: &SendError) -> Result<(), StoreError> {
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

pub(super) fn is_transient(e: &SendError) -> bool {
    match e {
        SendError::Client(c) => c.is_transient(),
        SendError::Store(_) | SendError::Busy(_) => true,
        SendError::Corrupt(_) => false,
    }
}

pub(super) fn request_kind(kind: WaitKind) -> RequestKind {
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
