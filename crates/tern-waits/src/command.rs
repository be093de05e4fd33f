//! Dangerous `terminal` commands approved through the inbox.
//!
//! In the gateway nobody sits at a terminal, so a dangerous command cannot wait for a yes at
//! a prompt. It becomes an approval request in the inbox, the turn ends, and the decision
//! resumes the session; an approval becomes a durable grant that lets the resumed agent run
//! the command.
//!
//! # Flow at a glance
//!
//! 1. `terminal` classifies the command ([`tern_tools::danger`]): hard-line commands are
//!    refused there and never reach an approver; dangerous ones ask [`InboxApprover`].
//! 2. [`InboxApprover`] answers from, in order: the allowlist (exact command, from
//!    `config.toml` and earlier `always` decisions); the durable grants
//!    ([`Store::use_command_grant`]: `always` for the command, `session` for its pattern in
//!    this session, else an unused `once` grant for the exact command and working directory,
//!    consumed as it is found).
//! 3. Nothing covers it: it records a wait of kind `command` (idempotency key
//!    `tern-wait:<session>:<call id>@<seq>`, see [`crate::call_occurrence`]), creates an
//!    approval request in the session's task (key `tern-req:<session>:<call id>@<seq>`;
//!    `keyValueContext` with `action = command`, `command`, `workdir`, `pattern`), emits
//!    `wait_created`, and answers [`ApprovalDecision::Pending`] with a message that tells the
//!    model the request id and to end its turn. A retried call (same call id, same message)
//!    finds the same wait and the same request; a later call that reuses the id gets its own.
//! 4. The decision lands; before delivering it, the resumer calls [`on_decided`] (through
//!    [`resume_hook`], which also puts an `always` command on the allowlist): `APPROVE`
//!    or `EDIT_AND_APPROVE` record a grant whose scope is the outcome's `reasonCode` —
//!    `once` (the default, also for an unknown code), `session` or `always` — and anything
//!    else records none. [`crate::decision::command_message_hint`] is the sentence the decision message ends
//!    with (run it again now, or do not retry).
//! 5. The resumed agent runs the command again (a new call): the grant answers in step 2.
//!    An `always` grant is also written to the allowlist in `config.toml` when the approver
//!    first meets it (and at start, [`InboxApprover::sync_allowlist`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tern_config::Home;
use tern_hooks::{HookBus, HookEvent, WaitCreated};
use tern_store::{CommandGrant, GrantScope, NewCommandGrant, NewWait, Store, Wait, WaitKind};
use tern_tools::danger::{Verdict, check_command};
use tern_tools::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};

use crate::client::{ClientError, InboxClient, RequestKind};
use crate::decision::{approves, scope_of};

/// The `keyValueContext` `action` of a command's approval request; the web inbox shows the
/// scope choices for requests that carry it.
pub const ACTION: &str = "command";

/// The longest command quoted in a request's summary (the full command is in its context).
const SUMMARY_COMMAND_CHARS: usize = 160;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Store(#[from] tern_store::StoreError),
    #[error(transparent)]
    Inbox(#[from] ClientError),
    /// A command wait whose stored request lacks what a grant needs.
    #[error("wait {0} does not describe a command: {1}")]
    NotACommand(String, &'static str),
    /// The session's waits were cancelled (deleted or reset) before this one was asked.
    #[error("the session's waits were cancelled")]
    Cancelled,
}

/// The idempotency key of a command's wait; `occurrence` is [`crate::call_occurrence`].
pub fn wait_key(session_id: &str, occurrence: &str) -> String {
    format!("tern-wait:{session_id}:{occurrence}")
}

/// The idempotency key of a command's approval request; `occurrence` is
/// [`crate::call_occurrence`].
pub fn request_key(session_id: &str, occurrence: &str) -> String {
    format!("tern-req:{session_id}:{occurrence}")
}

/// What the model is told while the request is open.
pub fn pending_reason(request_id: &str) -> String {
    format!(
        "This command needs a human's approval: request {request_id} is open in the inbox. \
         End your turn now; you will be resumed with the decision. Do not run another \
         command to get around it."
    )
}

/// The approver of the gateway: dangerous commands go to the inbox (see the module docs).
pub struct InboxApprover {
    store: Store,
    client: Arc<dyn InboxClient>,
    project: String,
    hooks: Option<Arc<HookBus>>,
    home: Option<Home>,
    allowlist: Mutex<HashSet<String>>,
    /// Woken when a request is decided by the time its id is stored ([`InboxApprover::with_wakeup`]).
    wakeup: Option<crate::resume::Wakeup>,
}

impl InboxApprover {
    /// An approver creating its requests in the inbox's default project; `allowlist` is
    /// `[approvals] allowlist` of the configuration.
    pub fn new(
        store: Store,
        client: Arc<dyn InboxClient>,
        allowlist: impl IntoIterator<Item = String>,
    ) -> Self {
        InboxApprover {
            store,
            client,
            project: tern_inbox::service::DEFAULT_PROJECT.to_owned(),
            hooks: None,
            home: None,
            allowlist: Mutex::new(allowlist.into_iter().map(|c| c.trim().to_owned()).collect()),
            wakeup: None,
        }
    }

    /// Wakes the resumer when a request is decided by the time its id is stored (an
    /// auto-approve policy decides inside the create).
    pub fn with_wakeup(mut self, wakeup: crate::resume::Wakeup) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    /// The project of the sessions' tasks.
    pub fn with_project(mut self, project: impl Into<String>) -> Self {
        self.project = project.into();
        self
    }

    /// Emits `wait_created` when a command's request is created.
    pub fn with_hooks(mut self, hooks: Arc<HookBus>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Writes `always` decisions to the allowlist of this home's `config.toml`.
    pub fn with_home(mut self, home: Home) -> Self {
        self.home = Some(home);
        self
    }

    /// [`on_decided`], and an `always` grant goes to the allowlist at once.
    pub async fn decided(
        &self,
        wait: &Wait,
        result: &Value,
    ) -> Result<Option<CommandGrant>, CommandError> {
        let grant = on_decided(&self.store, wait, result).await?;
        if let Some(g) = grant.as_ref().filter(|g| g.scope == GrantScope::Always) {
            self.remember_always(&g.command).await;
        }
        Ok(grant)
    }

    fn allowlist(&self) -> MutexGuard<'_, HashSet<String>> {
        // A set of strings stays consistent whatever panicked while holding the lock.
        self.allowlist.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds every `always` grant to the allowlist (memory and `config.toml`); returns how
    /// many were new here. The gateway calls it at start: a decision recorded while it was
    /// down, or whose config write failed, reaches the file.
    pub async fn sync_allowlist(&self) -> Result<usize, CommandError> {
        let mut added = 0;
        for command in self.store.always_command_grants().await? {
            if self.remember_always(&command).await {
                added += 1;
            }
        }
        Ok(added)
    }

    /// Puts an `always` command on the allowlist; whether it was not there yet.
    async fn remember_always(&self, command: &str) -> bool {
        if !self.allowlist().insert(command.to_owned()) {
            return false;
        }
        if let Some(home) = self.home.clone() {
            let cmd = command.to_owned();
            // A small file rewrite; off the runtime's threads all the same.
            let saved = tokio::task::spawn_blocking(move || {
                tern_config::add_to_allowlist(&home, &cmd).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            if let Err(e) = saved {
                // The grant in the store still holds; the next start retries the write.
                tracing::warn!(error = %e, command, "could not add the command to the allowlist in config.toml");
            }
        }
        true
    }

    async fn decide(&self, req: ApprovalRequest) -> ApprovalDecision {
        let command = req.command.trim().to_owned();
        // terminal refuses hard-line commands before asking; this approver never offers one
        // for approval whoever calls it.
        if let Verdict::Forbidden { description, .. } = check_command(&command) {
            return ApprovalDecision::Deny {
                reason: format!(
                    "this command is on tern's hard-line list ({description}) and is never \
                     run, not even with approval"
                ),
            };
        }
        let escalation = req.pattern_key == tern_tools::escalation::PATTERN_KEY;
        // The allowlist lets a command past the dangerous-command check; it never takes one
        // out of the sandbox.
        if !escalation && self.allowlist().contains(&command) {
            return ApprovalDecision::Always;
        }
        let workdir = req.workdir.to_string_lossy().into_owned();
        match self
            .store
            .use_command_grant(&req.session_id, &command, &workdir, req.pattern_key)
            .await
        {
            Ok(Some(g)) => {
                tracing::info!(session_id = %req.session_id, grant = %g.id, scope = g.scope.as_str(), "a reviewer's grant allows the command");
                return match g.scope {
                    GrantScope::Once => ApprovalDecision::Once,
                    GrantScope::Session => ApprovalDecision::Session,
                    GrantScope::Always => {
                        self.remember_always(&command).await;
                        ApprovalDecision::Always
                    }
                };
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "cannot read the command grants");
                return ApprovalDecision::Deny {
                    reason: format!(
                        "tern could not check this command's approvals ({e}); it was not run"
                    ),
                };
            }
        }
        match self.ask(&req, &command, &workdir).await {
            Ok(request_id) => ApprovalDecision::Pending {
                message: pending_reason(&request_id),
            },
            Err(e) => {
                tracing::warn!(error = %e, session_id = %req.session_id, "could not ask the inbox to approve a command");
                ApprovalDecision::Deny {
                    reason: format!(
                        "this command needs a human's approval, and the inbox could not be \
                         asked ({e}); nobody was asked. Do not run another command to get \
                         around it"
                    ),
                }
            }
        }
    }

    /// Records the wait and creates the request (or finds those of a retried call); returns
    /// the request's id.
    async fn ask(
        &self,
        req: &ApprovalRequest,
        command: &str,
        workdir: &str,
    ) -> Result<String, CommandError> {
        let session = req.session_id.as_str();
        let call = req.call_id.as_str();
        let occurrence = crate::call_occurrence(call, req.call_seq);
        let task = self.client.session_task(session, &self.project).await?;
        let escalation = req.pattern_key == tern_tools::escalation::PATTERN_KEY;
        let summary = if escalation {
            // The description says it all: "run outside the sandbox: …".
            let what = req.description;
            let mut what = what.chars();
            let first = what
                .next()
                .map(|c| c.to_uppercase().to_string())
                .unwrap_or_default();
            format!(
                "{first}{}: {}",
                what.as_str(),
                shorten(command, SUMMARY_COMMAND_CHARS)
            )
        } else {
            format!(
                "Run a dangerous command ({}): {}",
                req.description,
                shorten(command, SUMMARY_COMMAND_CHARS)
            )
        };
        let pattern = format!("{} ({})", req.pattern_key, req.description);
        let mut context = json!({
            "action": ACTION,
            "command": command,
            "workdir": workdir,
            "pattern": pattern,
            "scope": if escalation {
                "approve with reason code once (default: this command runs once outside the \
                 sandbox) or session (commands of this session may leave the sandbox); \
                 $TERN_HOME stays out of reach either way"
            } else {
                "approve with reason code once (default), session (this pattern, for \
                 the rest of the session) or always (this command, allowlisted)"
            },
        });
        for (k, v) in &req.context {
            context[*k] = json!(v);
        }
        // What was asked, as the inbox tools record it (`kind` and the create body without
        // projectName/taskId, so that the upkeep can send it should a crash come before the
        // request exists), with the command's particulars for on_decided and the message.
        let asked = json!({
            "kind": WaitKind::Command.as_str(),
            "summary": summary,
            "keyValueContext": context,
            "command": command,
            "workdir": workdir,
            "patternKey": req.pattern_key,
            "patternDescription": req.description,
        });
        let body = json!({
            "projectName": task.project_name,
            "taskId": task.task_id,
            "summary": summary,
            "keyValueContext": context,
        });
        let (wait, _fresh) = self
            .store
            .create_wait(&NewWait {
                session_id: session,
                idem_key: &wait_key(session, &occurrence),
                tool_call_id: Some(call),
                kind: WaitKind::Command,
                request: &asked.to_string(),
            })
            .await?;
        if let Some(id) = wait.request_id {
            // A retried call: its request exists.
            return Ok(id);
        }
        if wait.status != tern_store::WaitStatus::Pending {
            return Err(CommandError::Cancelled);
        }
        let created = self
            .client
            .create_request(
                RequestKind::Approval,
                body,
                &request_key(session, &occurrence),
            )
            .await;
        let request_id = match created {
            Ok(id) => id,
            Err(e) => {
                // The model is told nobody was asked; no wait may keep the session waiting.
                if let Err(fe) = self.store.forget_unrequested_wait(&wait.id).await {
                    tracing::error!(error = %fe, wait_id = %wait.id, "cannot remove a wait whose request failed");
                }
                return Err(e.into());
            }
        };
        self.store.set_wait_request(&wait.id, &request_id).await?;
        tracing::info!(session_id = session, wait_id = %wait.id, request_id, "a dangerous command awaits approval in the inbox");
        if let Some(hooks) = &self.hooks {
            let source = match self.store.get_session(session).await {
                Ok(Some(s)) => s.source,
                _ => String::new(),
            };
            hooks.emit(HookEvent::WaitCreated(WaitCreated {
                session_id: session.to_owned(),
                source,
                wait_id: wait.id.clone(),
                request_id: request_id.clone(),
                kind: WaitKind::Command.as_str().to_owned(),
                summary,
            }));
        }
        // Decided already (an auto-approve policy): no follower will report it.
        let hooks = self.hooks.clone().unwrap_or_default();
        crate::follow::settle_new_request(
            &self.store,
            &*self.client,
            &hooks,
            self.wakeup.as_ref(),
            &wait.id,
        )
        .await;
        Ok(request_id)
    }
}

impl Approver for InboxApprover {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(self.decide(req))
    }

    /// A reviewer's grant for the command (a `once` grant is used up); never the allowlist.
    fn granted<'a>(&'a self, req: &'a ApprovalRequest) -> BoxFuture<'a, Option<ApprovalDecision>> {
        Box::pin(async move {
            let command = req.command.trim();
            let workdir = req.workdir.to_string_lossy();
            match self
                .store
                .use_command_grant(&req.session_id, command, &workdir, req.pattern_key)
                .await
            {
                Ok(Some(g)) => {
                    tracing::info!(session_id = %req.session_id, grant = %g.id, scope = g.scope.as_str(), pattern = req.pattern_key, "a reviewer's grant covers the command");
                    Some(match g.scope {
                        GrantScope::Once => ApprovalDecision::Once,
                        GrantScope::Session | GrantScope::Always => ApprovalDecision::Session,
                    })
                }
                Ok(None) => None,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the command grants");
                    None
                }
            }
        })
    }
}

/// The resumer's hook for `kind = command` waits: [`InboxApprover::decided`] before the
/// decision is delivered (an error delays the delivery, which is retried).
pub fn resume_hook(approver: Arc<InboxApprover>) -> crate::resume::CommandHook {
    Arc::new(move |wait: Wait, result: Value| {
        let approver = approver.clone();
        Box::pin(async move {
            approver
                .decided(&wait, &result)
                .await
                .map(|_| ())
                .map_err(Into::into)
        })
    })
}

/// Called by the resumer for a `command` wait before its decision is delivered, so that the
/// grant exists when the resumed turn runs the command. An approval records the grant (once
/// per wait, however often this is called); any other decision records none. Returns the
/// grant, `None` for a decision that grants nothing or a wait of another kind.
pub async fn on_decided(
    store: &Store,
    wait: &Wait,
    result: &Value,
) -> Result<Option<CommandGrant>, CommandError> {
    if wait.kind != WaitKind::Command || !approves(result) {
        return Ok(None);
    }
    let asked: Value = serde_json::from_str(&wait.request)
        .map_err(|_| CommandError::NotACommand(wait.id.clone(), "its request is not JSON"))?;
    let field = |k: &'static str| {
        asked
            .get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| CommandError::NotACommand(wait.id.clone(), k))
    };
    let decided_by = result
        .get("decidedBy")
        .and_then(Value::as_str)
        .or(wait.decided_by.as_deref());
    let pattern_key = field("patternKey")?;
    let scope = match scope_of(result) {
        // "Always outside the sandbox" would hold in any directory of any session: a
        // reviewer's `always` on an escalation is kept to the session.
        GrantScope::Always if pattern_key == tern_tools::escalation::PATTERN_KEY => {
            GrantScope::Session
        }
        scope => scope,
    };
    let (grant, fresh) = store
        .add_command_grant(&NewCommandGrant {
            wait_id: &wait.id,
            session_id: &wait.session_id,
            scope,
            command: field("command")?,
            workdir: field("workdir")?,
            pattern_key,
            decided_by,
        })
        .await?;
    if fresh {
        tracing::info!(session_id = %wait.session_id, wait_id = %wait.id, scope = grant.scope.as_str(), "a reviewer approved a command");
    }
    Ok(Some(grant))
}

/// At most `max` characters of `s`, with `…` when cut.
fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_shortened_in_the_summary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcd", 3), "abc…");
        assert_eq!(shorten("ééé", 2), "éé…");
    }
}
