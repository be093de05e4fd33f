//! `delegate_task` (toolset `delegate`): the model hands a task to a child session and gets
//! its final answer back.
//!
//! Flow of a call: the agent gives every tool call of a model answer whose turn enables
//! `delegate` a [`Children`] ([`subagents`]) in [`ToolContext::subagents`] → the tool checks
//! its arguments (one `goal`, or a batch of `tasks`, as in Hermes Agent) and asks
//! [`SubAgents::run_child`] for each task → each child waits for one of the answer's
//! `max_concurrent` places → a child session is stored (`source = "delegate"`,
//! `parent_id` = the caller, the caller's owner, a system prompt that makes it a focused
//! worker) → one turn of it runs on a task of its own with its own iteration budget, the
//! caller's working directory and approver, and the caller's toolsets or fewer (never
//! `inbox` or `memory`; `delegate` only above the depth limit) → its final answer is the
//! tool's result; a child that failed or was interrupted is a tool error the model reads.
//!
//! An interrupt of the parent's turn triggers the children's interrupts with the same
//! reason; each child ends as any interrupted turn does (open tool calls answered, then the
//! `[interrupted]` marker). The child runs on a task of its own so that this cleanup
//! finishes even when the parent's turn stops waiting for the tool.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_hooks::{HookEvent, SessionStart, StopReason};
use tern_store::{NewSession, Session, Store};
use tern_tools::{
    ChildOutcome, ChildStatus, ChildTask, Registry, SubAgents, Tool, ToolContext, ToolError,
    ToolResult,
};
use tokio::sync::Semaphore;

use crate::{Agent, Interrupt, TurnRequest, TurnStatus, default_system_prompt};

/// The toolset of `delegate_task`.
pub const TOOLSET: &str = "delegate";

/// The `source` of a child session.
pub const CHILD_SOURCE: &str = "delegate";

/// Toolsets a child never gets: a human cannot be asked from inside another turn (the
/// child's wait would resume a session nobody reads), and memory is the user's, written by
/// the agent they talk to (Hermes blocks both for the same reasons).
const NEVER_FOR_CHILDREN: &[&str] = &["inbox", "memory"];

/// What a child added to its system prompt says.
const CHILD_PROMPT: &str = "You are a subagent: another agent delegated one task to you. \
    You do not see its conversation; your first message is the task and what it told you \
    about it. Work on that task alone, with the tools you have. When you are done, answer \
    with a short report for that agent: what you did, what you found, the files you created \
    or changed, and anything that went wrong. Your answer is all it will see.";

/// The limits of child sessions (`[delegate]` in `config.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelegateSettings {
    /// Model calls per child turn.
    pub max_iterations: u32,
    /// Children of one model answer running at once; the others wait.
    pub max_concurrent: usize,
    /// How deep sessions nest: 1 lets the agent delegate while its children cannot.
    pub max_depth: u32,
}

impl Default for DelegateSettings {
    fn default() -> Self {
        Self {
            max_iterations: 30,
            max_concurrent: 3,
            max_depth: 1,
        }
    }
}

/// Adds `delegate_task` to `registry`.
pub fn register(registry: &mut Registry) {
    registry.add(DelegateTask);
}

/// `delegate_task`: runs tasks in child sessions.
pub struct DelegateTask;

/// A task of a batch.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskArgs {
    /// What the subagent should achieve: specific and self-contained.
    #[schemars(length(min = 1))]
    pub goal: String,
    /// What the subagent needs to know for this task.
    #[serde(default)]
    pub context: Option<String>,
    /// Toolsets for this task (default: yours).
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
}

/// Arguments of `delegate_task`: one `goal`, or `tasks` to run in parallel.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegateArgs {
    /// What the subagent should achieve. Be specific and self-contained: the subagent knows
    /// nothing of your conversation.
    #[serde(default)]
    pub goal: Option<String>,
    /// What the subagent needs to know: file paths, error messages, constraints, the
    /// language to answer in.
    #[serde(default)]
    pub context: Option<String>,
    /// Toolsets the subagent may use, among yours (default: all of yours that subagents
    /// may have).
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
    /// Batch mode: several tasks, each its own subagent, run in parallel (a few at a time;
    /// the rest wait). With `tasks`, leave `goal`, `context` and `toolsets` out.
    #[serde(default)]
    #[schemars(length(min = 1, max = 16))]
    pub tasks: Option<Vec<TaskArgs>>,
}

impl Tool for DelegateTask {
    const NAME: &'static str = "delegate_task";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Hand work to subagents: each runs in a session of its \
        own, with its own conversation and tools, and only its final answer comes back to \
        you. Give either `goal` (one task, with optional `context` and `toolsets`) or `tasks` \
        (several, run in parallel). Use it for independent pieces of work, or work that \
        would fill your context with intermediate output; not for a single tool call. \
        Subagents know nothing of your conversation: put every path, error and constraint \
        they need in the goal or context. Their answers are their own reports: verify \
        what matters. Subagents cannot ask the user anything.";
    type Args = DelegateArgs;

    async fn run(&self, args: DelegateArgs, ctx: ToolContext) -> ToolResult {
        let subagents = ctx.subagents.clone().ok_or_else(|| {
            ToolError::new("delegate_task is not available in this turn (no subagents here)")
        })?;
        match (args.goal, args.tasks) {
            (Some(_), Some(_)) => Err(ToolError::new(
                "give either `goal` or `tasks`, not both; send the call again",
            )),
            (None, None) => Err(ToolError::new(
                "give `goal` (one task) or `tasks` (several); send the call again",
            )),
            (Some(goal), None) => {
                let task = task(goal, args.context, args.toolsets)?;
                single(subagents.run_child(task, &ctx).await?)
            }
            (None, Some(tasks)) => {
                if args.context.is_some() || args.toolsets.is_some() {
                    return Err(ToolError::new(
                        "with `tasks`, give `context` and `toolsets` in each task; send the \
                         call again",
                    ));
                }
                let tasks = tasks
                    .into_iter()
                    .map(|t| task(t.goal, t.context, t.toolsets))
                    .collect::<Result<Vec<_>, _>>()?;
                let runs = tasks.into_iter().map(|t| subagents.run_child(t, &ctx));
                batch(futures_util::future::join_all(runs).await)
            }
        }
    }
}

fn task(
    goal: String,
    context: Option<String>,
    toolsets: Option<Vec<String>>,
) -> Result<ChildTask, ToolError> {
    if goal.trim().is_empty() {
        return Err(ToolError::new(
            "`goal` is empty: say what the subagent should do",
        ));
    }
    Ok(ChildTask {
        goal,
        context: context.filter(|c| !c.trim().is_empty()),
        toolsets,
    })
}

/// One child's outcome as the tool's result: its answer, or an error that says why there is
/// none and where to look.
fn single(o: ChildOutcome) -> ToolResult {
    match o.status {
        ChildStatus::Completed => Ok(json!({
            "session_id": o.session_id,
            "status": o.status,
            "summary": o.summary,
            "iterations": o.iterations,
        })),
        _ => Err(ToolError::new(failure(&o))),
    }
}

fn failure(o: &ChildOutcome) -> String {
    let why = match o.status {
        ChildStatus::Completed => "finished".to_owned(),
        ChildStatus::Interrupted => "was interrupted before it finished".to_owned(),
        ChildStatus::MaxIterations => format!(
            "stopped at its limit of {} model calls without a final answer",
            o.iterations
        ),
        ChildStatus::Failed => format!(
            "failed: {}",
            o.error.as_deref().unwrap_or("no reason given")
        ),
    };
    format!("the subagent (session {}) {why}", o.session_id)
}

/// A batch's outcomes, in task order. An error only when no child finished, so that the
/// answers of those that did are never lost to one that did not.
fn batch(outcomes: Vec<Result<ChildOutcome, ToolError>>) -> ToolResult {
    let mut any_completed = false;
    let results: Vec<Value> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Ok(o) if o.status == ChildStatus::Completed => {
                any_completed = true;
                json!({"task_index": i, "session_id": o.session_id, "status": o.status,
                       "summary": o.summary, "iterations": o.iterations})
            }
            Ok(o) => json!({"task_index": i, "session_id": o.session_id, "status": o.status,
                            "error": failure(o), "iterations": o.iterations}),
            Err(e) => json!({"task_index": i, "status": "not_started", "error": e.0}),
        })
        .collect();
    if any_completed {
        Ok(json!({ "results": results }))
    } else {
        Err(ToolError::new(format!(
            "no subagent finished: {}",
            Value::Array(results)
        )))
    }
}

/// The children of one model answer of the turn `req`, or `None` when the turn does not
/// enable delegation.
pub(crate) fn subagents(agent: &Agent, req: &TurnRequest) -> Option<Arc<dyn SubAgents>> {
    if !req.toolsets.iter().any(|t| t == TOOLSET) {
        return None;
    }
    let limits = *agent.delegation();
    Some(Arc::new(Children {
        agent: agent.with_max_iterations(limits.max_iterations),
        parent: req.session_id.clone(),
        parent_toolsets: req.toolsets.clone(),
        parent_interrupt: req.interrupt.clone(),
        limits,
        places: Arc::new(Semaphore::new(limits.max_concurrent.max(1))),
    }))
}

/// Runs the child sessions of one model answer (see the module docs).
struct Children {
    /// The parent's agent with the children's iteration budget.
    agent: Agent,
    parent: String,
    parent_toolsets: Vec<String>,
    parent_interrupt: Interrupt,
    limits: DelegateSettings,
    /// `max_concurrent` places shared by the answer's calls (and the tasks of each).
    places: Arc<Semaphore>,
}

impl SubAgents for Children {
    fn run_child<'a>(
        &'a self,
        task: ChildTask,
        ctx: &'a ToolContext,
    ) -> tern_tools::BoxFuture<'a, Result<ChildOutcome, ToolError>> {
        Box::pin(self.run(task, ctx))
    }
}

impl Children {
    async fn run(&self, task: ChildTask, ctx: &ToolContext) -> Result<ChildOutcome, ToolError> {
        let store = self.agent.store();
        let parent = store.session(&self.parent).await.map_err(store_error)?;
        let depth = depth(store, &parent).await? + 1;
        if depth > self.limits.max_depth {
            return Err(ToolError::new(format!(
                "a subagent cannot delegate further: sessions nest at most {} deep \
                 ([delegate] max_depth); do the work yourself",
                self.limits.max_depth
            )));
        }
        let toolsets = self.child_toolsets(task.toolsets.as_deref(), depth)?;
        // A child waits for its place before its session exists: what is stored is what ran.
        // Biased: a place freed by a child the interrupt ended must not start another.
        let _place = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => {
                return Err(ToolError::new("interrupted before the subagent started"));
            }
            p = self.places.clone().acquire_owned() => p.map_err(|_| {
                ToolError::new("delegation is shutting down")
            })?,
        };
        let child = self
            .create_session(&parent, &ctx.workdir, &toolsets)
            .await?;
        let interrupt = Interrupt::new();
        let turn = tokio::spawn({
            let agent = self.agent.clone();
            let req = TurnRequest {
                session_id: child.id.clone(),
                input: first_message(&task),
                input_appended: false,
                interrupt: interrupt.clone(),
                system_prompt: None,
                approver: ctx.approver.clone(),
                workdir: ctx.workdir.clone(),
                toolsets,
                events: None,
                ticket: None,
            };
            async move { agent.run_turn(req).await }
        });
        tokio::pin!(turn);
        let result = tokio::select! {
            r = &mut turn => r,
            () = ctx.cancel.cancelled() => {
                interrupt.trigger(self.parent_interrupt.reason().unwrap_or(StopReason::ApiStop));
                turn.await
            }
        };
        let outcome = match result {
            Ok(Ok(o)) => {
                let status = match o.status {
                    TurnStatus::Completed => ChildStatus::Completed,
                    TurnStatus::Interrupted => ChildStatus::Interrupted,
                    TurnStatus::MaxIterations => ChildStatus::MaxIterations,
                    // The child's own explanation (why it stopped) is the error.
                    TurnStatus::ContextFull => ChildStatus::Failed,
                    TurnStatus::LoopDetected => ChildStatus::Failed,
                };
                let failed = status == ChildStatus::Failed;
                ChildOutcome {
                    session_id: child.id,
                    status,
                    error: if failed { o.text.clone() } else { None },
                    summary: o.text,
                    iterations: o.iterations,
                }
            }
            Ok(Err(e)) => failed(child.id, e.to_string()),
            Err(e) => failed(child.id, format!("its task ended abnormally: {e}")),
        };
        tracing::info!(parent = %self.parent, child = %outcome.session_id,
                       status = ?outcome.status, "subagent finished");
        Ok(outcome)
    }

    /// The toolsets a child at `depth` gets: those asked for (default: the parent's), each
    /// one the parent has, without those children never get.
    fn child_toolsets(
        &self,
        asked: Option<&[String]>,
        depth: u32,
    ) -> Result<Vec<String>, ToolError> {
        let allowed = |t: &str| {
            self.parent_toolsets.iter().any(|p| p == t)
                && !NEVER_FOR_CHILDREN.contains(&t)
                && (t != TOOLSET || depth < self.limits.max_depth)
        };
        let toolsets: Vec<String> = match asked {
            Some(asked) => {
                if let Some(bad) = asked.iter().find(|t| !allowed(t)) {
                    let offer: Vec<&str> = self
                        .parent_toolsets
                        .iter()
                        .map(String::as_str)
                        .filter(|t| allowed(t))
                        .collect();
                    return Err(ToolError::new(format!(
                        "a subagent cannot have the toolset `{bad}`; it may have: {}",
                        offer.join(", ")
                    )));
                }
                asked.to_vec()
            }
            None => self
                .parent_toolsets
                .iter()
                .filter(|t| allowed(t))
                .cloned()
                .collect(),
        };
        Ok(toolsets)
    }

    async fn create_session(
        &self,
        parent: &Session,
        workdir: &std::path::Path,
        toolsets: &[String],
    ) -> Result<Session, ToolError> {
        let settings = self.agent.settings();
        let base = settings
            .system_prompt
            .clone()
            .unwrap_or_else(|| default_system_prompt(workdir));
        let child = self
            .agent
            .store()
            .create_session(NewSession {
                source: CHILD_SOURCE.to_owned(),
                model: Some(settings.model.clone()).filter(|m| !m.is_empty()),
                parent_id: Some(parent.id.clone()),
                system_prompt: Some(format!("{base}\n\n{CHILD_PROMPT}")),
                owner: parent.owner.clone(),
                // Kept for every later turn of the child (a resumed wait's included).
                toolsets: Some(toolsets.to_vec()),
                ..Default::default()
            })
            .await
            .map_err(store_error)?;
        self.agent
            .hooks()
            .emit(HookEvent::SessionStart(SessionStart {
                session_id: child.id.clone(),
                source: child.source.clone(),
                model: child.model.clone(),
                parent_id: child.parent_id.clone(),
            }));
        Ok(child)
    }
}

fn first_message(task: &ChildTask) -> String {
    match &task.context {
        Some(c) => format!("{}\n\nContext:\n{c}", task.goal.trim()),
        None => task.goal.trim().to_owned(),
    }
}

fn failed(session_id: String, error: String) -> ChildOutcome {
    ChildOutcome {
        session_id,
        status: ChildStatus::Failed,
        summary: None,
        error: Some(error),
        iterations: 0,
    }
}

fn store_error(e: tern_store::StoreError) -> ToolError {
    ToolError::new(format!("the session store: {e}"))
}

/// How many delegations deep `session` is: 0 for a session a person or API client started.
/// Walked up the `parent_id` links of child sessions (a reset's successor also has a
/// parent, but is no child).
async fn depth(store: &Store, session: &Session) -> Result<u32, ToolError> {
    let mut depth = 0;
    let mut s = session.clone();
    while s.source == CHILD_SOURCE {
        depth += 1;
        let Some(parent) = s.parent_id.clone() else {
            break;
        };
        // A loop of links cannot be made through the tool, but a bound costs nothing.
        if depth > 64 {
            break;
        }
        s = store.session(&parent).await.map_err(store_error)?;
    }
    Ok(depth)
}

#[cfg(test)]
mod tests;
