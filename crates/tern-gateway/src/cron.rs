//! Scheduled jobs in the gateway: the scheduler (`tern_cron::Scheduler`) runs in the upkeep,
//! and each claimed occurrence runs here as a turn like any other.
//!
//! # A run, at a glance
//!
//! 1. Its session: the job's own (history accumulates), or a new one (`source: cron`, titled
//!    with the job and the occurrence, owned by the job's API key), recorded with the
//!    occurrence at once. A job delivering to a chat attaches the session to that chat, so
//!    the channel's delivery cursor sends what the run says, like any chat answer.
//! 2. `cron_run_started`; then admission like any turn: a place under the gateway's cap
//!    (waited for, never refused), a place in the session's queue (behind its running turn).
//! 3. An agent job runs the prompt as a turn with the job's toolsets (within the gateway's;
//!    `cron` only with `[cron] allow_runs_to_schedule`); a script job runs its command through
//!    the sandboxed `terminal` tool and appends the command and its output to the session.
//!    `tern cron stop` and the job's timeout interrupt it; a run that asks a human ends its turn
//!    `waiting`, and the durable wait resumes the session later like any other.
//! 4. `cron_run_finished`; the scheduler records the outcome. A run cut short by the shutdown
//!    is left `running`: the next start marks it `interrupted` (and retries it if the job
//!    says so), as after a `kill -9`.

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use jiff::tz::TimeZone;
use serde_json::json;
use tern_agent::{AgentEvent, EventSink, StopReason, TurnRequest, TurnStatus};
use tern_cron::scheduler::BoxFuture;
use tern_cron::{Clock, RunContext, RunEnd, Runner, Scheduler};
use tern_hooks::{CronRunFinished, CronRunStarted, HookEvent, SessionStart};
use tern_store::cron::{CronJob, CronJobKind, CronOccurrence, CronTarget, DeliverTo};
use tern_store::{NewMessage, NewSession};

use crate::Gateway;

/// The toolset of the `cronjob` tool.
pub const CRON_TOOLSET: &str = tern_cron::tools::TOOLSET;

/// The scheduler of a gateway and what its API needs.
pub struct CronSetup {
    pub scheduler: Arc<Scheduler>,
    runner: Arc<GatewayCronRunner>,
    /// The zone of schedules written without one (`[cron] timezone`, else the machine's).
    pub tz: TimeZone,
    /// Whether the scheduler runs (`[cron] enabled`).
    pub enabled: bool,
}

impl CronSetup {
    /// A scheduler on `store` reading `clock`; its runs go through the gateway it is given to
    /// ([`crate::GatewayParts::cron`]).
    pub fn new(
        store: tern_store::Store,
        clock: Arc<dyn Clock>,
        tz: TimeZone,
        enabled: bool,
        allow_runs_to_schedule: bool,
    ) -> Self {
        let runner = Arc::new(GatewayCronRunner {
            gw: OnceLock::new(),
            allow_runs_to_schedule,
        });
        CronSetup {
            scheduler: Scheduler::new(store, clock, runner.clone()),
            runner,
            tz,
            enabled,
        }
    }

    /// The defaults: the wall clock, the machine's zone, enabled, runs may not schedule.
    pub fn system(store: tern_store::Store) -> Self {
        Self::new(
            store,
            Arc::new(tern_cron::SystemClock),
            TimeZone::system(),
            true,
            false,
        )
    }

    pub(crate) fn bind(&self, gw: Weak<Gateway>) {
        let _ = self.runner.gw.set(gw);
    }
}

/// Runs the scheduler's occurrences in the gateway.
struct GatewayCronRunner {
    gw: OnceLock<Weak<Gateway>>,
    allow_runs_to_schedule: bool,
}

impl Runner for GatewayCronRunner {
    fn run(
        &self,
        job: CronJob,
        occurrence: CronOccurrence,
        cx: RunContext,
    ) -> BoxFuture<'_, RunEnd> {
        Box::pin(async move {
            let Some(gw) = self.gw.get().and_then(Weak::upgrade) else {
                return RunEnd::CutShort;
            };
            gw.run_cron(job, occurrence, cx, self.allow_runs_to_schedule)
                .await
        })
    }
}

/// What the key that owns a job may do now (keys are revoked, sessions deleted and their ids
/// reused after a job was made: its rights are checked at every run).
enum Rights {
    /// The CLI's jobs (no key), the server key's, an admin key's.
    Admin,
    /// An agent key's: only its own sessions, and chats they talk to.
    Agent(String),
    /// The key was revoked.
    Revoked,
}

/// Runs `fut` to its end; `tern cron stop` (`stop`) or the job's timeout interrupts the turn or
/// script it drives (once), which then ends by itself. The drain interrupts it at shutdown
/// like any turn.
async fn interruptible<T>(
    fut: impl std::future::Future<Output = T>,
    interrupt: &tern_agent::Interrupt,
    stop: &tokio_util::sync::CancellationToken,
    timeout: Duration,
) -> T {
    tokio::pin!(fut);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut armed = true;
    loop {
        tokio::select! {
            out = &mut fut => return out,
            () = stop.cancelled(), if armed => {
                interrupt.trigger(StopReason::CronStop);
                armed = false;
            }
            () = &mut deadline, if armed => {
                interrupt.trigger(StopReason::Timeout);
                armed = false;
            }
        }
    }
}

fn finished(status: &str, outcome: impl Into<String>, output: Option<String>) -> RunEnd {
    RunEnd::Finished {
        status: status.to_owned(),
        outcome: outcome.into(),
        output,
    }
}

/// A run's title: the job's name (or id) and the occurrence's time.
fn run_title(job: &CronJob, o: &CronOccurrence) -> String {
    let when = jiff::Timestamp::from_millisecond(o.scheduled_at)
        .map(|t| t.to_string())
        .unwrap_or_default();
    format!("cron: {} @ {when}", job.name.as_deref().unwrap_or(&job.id))
}

impl Gateway {
    /// Starts the scheduler in the upkeep (unless `[cron] enabled = false`).
    pub(crate) fn spawn_cron(self: &Arc<Self>, upkeep: &crate::Upkeep) {
        if !self.cron.enabled {
            tracing::info!("scheduled jobs are off ([cron] enabled = false)");
            return;
        }
        upkeep.track(self.cron.scheduler.spawn(upkeep.stop_token().clone()));
    }

    /// The scheduler, for the API and the `cronjob` tool.
    pub fn cron(&self) -> &CronSetup {
        &self.cron
    }

    async fn run_cron(
        self: Arc<Self>,
        job: CronJob,
        o: CronOccurrence,
        cx: RunContext,
        allow_runs_to_schedule: bool,
    ) -> RunEnd {
        let started = Instant::now();
        let rights = match self.rights(&job).await {
            Ok(r) => r,
            Err(e) => return finished("failed", format!("failed: {e}"), None),
        };
        if let Rights::Revoked = rights {
            return self
                .pause_failing(&job, "the API key that owns the job was revoked")
                .await;
        }
        let session_id = match self
            .cron_session(&job, &o, &rights, allow_runs_to_schedule)
            .await
        {
            Ok(s) => s,
            Err(end) => return end,
        };
        if let Err(e) = self.store.cron_set_session(o.id, &session_id).await {
            tracing::error!(error = %e, "cannot record a scheduled run's session");
        }
        if let DeliverTo::Chat {
            channel,
            chat_id,
            thread_id,
        } = &job.deliver_to
        {
            let may = match &rights {
                Rights::Agent(key) => {
                    self.agent_may_deliver(&job, key, channel, chat_id, thread_id)
                        .await
                }
                _ => true,
            };
            if !may {
                return self
                    .pause_failing(
                        &job,
                        "the job's key has no session talking to its chat any more",
                    )
                    .await;
            }
            match self
                .store
                .channel_attach_session(channel, chat_id, thread_id, &session_id)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(job = %job.id, session = %session_id, "the run's session already talks to another chat; its answer goes there")
                }
                Err(e) => tracing::error!(error = %e, "cannot attach a scheduled run to its chat"),
            }
        }
        let kind = match job.kind {
            CronJobKind::Agent => "agent",
            CronJobKind::Script => "script",
        };
        let trigger = if o.manual { "manual" } else { "schedule" };
        let run = CronRunStarted {
            session_id: session_id.clone(),
            job_id: job.id.clone(),
            job_name: job.name.clone(),
            occurrence_id: o.id,
            scheduled_at: o.scheduled_at,
            kind: kind.to_owned(),
            trigger: trigger.to_owned(),
            attempt: o.attempt,
        };
        self.hooks.emit(HookEvent::CronRunStarted(run.clone()));
        let end = self
            .run_admitted(&job, &session_id, &cx, allow_runs_to_schedule)
            .await;
        if let RunEnd::Finished {
            status, outcome, ..
        } = &end
        {
            tracing::info!(job = %job.id, occurrence = o.id, session = %session_id, status, outcome, "scheduled run ended");
            self.hooks.emit(HookEvent::CronRunFinished(CronRunFinished {
                run,
                status: status.clone(),
                outcome: outcome.clone(),
                duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
            }));
        }
        end
    }

    /// The rights of the key that owns `job`, as of now.
    async fn rights(&self, job: &CronJob) -> Result<Rights, tern_store::StoreError> {
        let Some(owner) = &job.owner_key else {
            return Ok(Rights::Admin);
        };
        if owner == crate::auth::SERVER_KEY_ID {
            return Ok(Rights::Admin);
        }
        let keys = self.store.active_keys().await?;
        Ok(match keys.iter().find(|k| &k.id == owner) {
            Some(k) if k.kind == tern_store::KeyKind::Admin => Rights::Admin,
            Some(k) => Rights::Agent(k.id.clone()),
            None => Rights::Revoked,
        })
    }

    /// Whether an agent key's job may post to a chat: one of its sessions (the job's own, or
    /// the one that made it) still talks to that chat.
    async fn agent_may_deliver(
        &self,
        job: &CronJob,
        key: &str,
        channel: &str,
        chat_id: &str,
        thread_id: &str,
    ) -> bool {
        let target = match &job.target {
            CronTarget::Session(id) => Some(id.as_str()),
            CronTarget::NewSession => None,
        };
        for s in [target, job.created_by_session.as_deref()]
            .into_iter()
            .flatten()
        {
            let owned = matches!(self.store.get_session(s).await, Ok(Some(x)) if x.owner.as_deref() == Some(key));
            let routed = matches!(self.store.channel_route(s).await, Ok(Some(r))
                if r.channel == channel && r.chat_id == chat_id && r.thread_id == thread_id);
            if owned && routed {
                return true;
            }
        }
        false
    }

    /// Pauses a job that can no longer run as made, and ends this run `failed`, saying why.
    async fn pause_failing(&self, job: &CronJob, why: &str) -> RunEnd {
        tracing::warn!(job = %job.id, why, "a scheduled job is paused");
        if let Err(e) = self.store.set_cron_enabled(&job.id, false, None).await {
            tracing::error!(error = %e, "cannot pause a scheduled job");
        }
        finished("failed", format!("failed: {why}; the job is paused"), None)
    }

    /// The run's session: the job's own, or a new one.
    async fn cron_session(
        &self,
        job: &CronJob,
        o: &CronOccurrence,
        rights: &Rights,
        allow_runs_to_schedule: bool,
    ) -> Result<String, RunEnd> {
        if let CronTarget::Session(id) = &job.target {
            return match self.store.get_session(id).await {
                // An agent key's job runs only in a session of that key: a session deleted
                // and its id reused by another key is not the job's.
                Ok(Some(s)) if matches!(rights, Rights::Agent(k) if s.owner.as_deref() != Some(k.as_str())) => {
                    Err(self
                        .pause_failing(job, &format!("session {id} is not the job's key's"))
                        .await)
                }
                Ok(Some(s)) if s.status != tern_store::SessionStatus::Ended => Ok(s.id),
                Ok(Some(_)) => Err(finished(
                    "failed",
                    format!("failed: session {id} has ended (reset); edit the job's session"),
                    None,
                )),
                Ok(None) => Err(finished(
                    "failed",
                    format!("failed: session {id} no longer exists"),
                    None,
                )),
                Err(e) => Err(finished("failed", format!("failed: {e}"), None)),
            };
        }
        let created = self
            .store
            .create_session(NewSession {
                id: None,
                title: Some(run_title(job, o)),
                source: tern_cron::tools::RUN_SOURCE.into(),
                model: Some(self.settings.model.clone()),
                parent_id: None,
                system_prompt: None,
                // The job's key owns its runs: an agent key reads them through the API.
                owner: job.owner_key.clone(),
                // Its toolsets stay the job's when a decision resumes it later.
                toolsets: Some(self.cron_toolsets(job, allow_runs_to_schedule)),
            })
            .await
            .map_err(|e| {
                finished(
                    "failed",
                    format!("failed: cannot create the session: {e}"),
                    None,
                )
            })?;
        self.hooks.emit(HookEvent::SessionStart(SessionStart {
            session_id: created.id.clone(),
            source: "cron".into(),
            model: created.model.clone(),
            parent_id: None,
        }));
        Ok(created.id)
    }

    /// The toolsets of a job's turns: its own within the gateway's, `cron` only when runs
    /// may schedule.
    fn cron_toolsets(&self, job: &CronJob, allow_runs_to_schedule: bool) -> Vec<String> {
        let base = &self.settings.toolsets;
        let mut t: Vec<String> = match &job.toolsets {
            Some(wanted) => wanted
                .iter()
                .filter(|w| base.contains(w))
                .cloned()
                .collect(),
            None => base.clone(),
        };
        if !allow_runs_to_schedule {
            t.retain(|s| s != CRON_TOOLSET);
        }
        t
    }

    /// Admits the run like any turn, then runs it; the stop and the timeout interrupt it.
    async fn run_admitted(
        self: &Arc<Self>,
        job: &CronJob,
        session_id: &str,
        cx: &RunContext,
        allow_runs_to_schedule: bool,
    ) -> RunEnd {
        let permit = tokio::select! {
            p = self.turns.permit_wait() => match p {
                Ok(p) => p,
                Err(_) => return RunEnd::CutShort,
            },
            () = cx.shutdown.cancelled() => return RunEnd::CutShort,
            () = self.closing.cancelled() => return RunEnd::CutShort,
            () = cx.stop.cancelled() => return finished("stopped", "stopped before it started (tern cron stop)", None),
        };
        let guard = match self
            .turns
            .register(session_id, permit, self.agent.enqueue(session_id))
        {
            Ok(g) => g,
            Err(e) => return finished("failed", format!("failed: {}", e.message), None),
        };
        let Some(ticket) = guard
            .ticket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return finished("failed", "failed: no place in the session's queue", None);
        };
        let interrupt = guard.slot.interrupt.clone();
        let timeout = Duration::from_millis(
            u64::try_from(job.timeout_ms.unwrap_or(i64::MAX).max(1)).unwrap_or(u64::MAX),
        );
        // The stop and the timeout interrupt the turn (or the script) through `interruptible`;
        // the drain interrupts it at shutdown like any turn.
        match job.kind {
            CronJobKind::Agent => {
                let slot = guard.slot.clone();
                let events: EventSink = Arc::new(move |ev: AgentEvent| match &ev {
                    AgentEvent::TurnStarted { turn_id } => slot.mark_running(turn_id),
                    AgentEvent::TurnFinished { .. } => slot.mark_finished(),
                    _ => {}
                });
                let req = TurnRequest {
                    session_id: session_id.to_owned(),
                    input: job.prompt.clone(),
                    input_appended: false,
                    interrupt: interrupt.clone(),
                    system_prompt: None,
                    approver: self.approver.clone(),
                    workdir: self.settings.workdir.clone(),
                    toolsets: self.cron_toolsets(job, allow_runs_to_schedule),
                    events: Some(events),
                    ticket: Some(ticket),
                };
                let agent = self.agent.clone();
                // On a task of its own, so the guard is dropped when the turn ends whatever
                // happens to this future.
                let task = tokio::spawn(async move {
                    let r = agent.run_turn(req).await;
                    drop(guard);
                    r
                });
                match interruptible(task, &interrupt, &cx.stop, timeout).await {
                    Ok(Ok(out)) => self.turn_end(session_id, &out, &interrupt, timeout).await,
                    Ok(Err(e)) => finished("failed", format!("failed: {e}"), None),
                    Err(e) => finished("failed", format!("failed: the turn's task: {e}"), None),
                }
            }
            CronJobKind::Script => {
                let ticket = ticket.ready().await;
                let end = interruptible(
                    self.run_script(job, session_id, &interrupt, timeout),
                    &interrupt,
                    &cx.stop,
                    timeout,
                )
                .await;
                drop(ticket);
                drop(guard);
                end
            }
        }
    }

    /// How an agent run's turn ended, in the scheduler's words.
    async fn turn_end(
        &self,
        session_id: &str,
        out: &tern_agent::TurnOutcome,
        interrupt: &tern_agent::Interrupt,
        timeout: Duration,
    ) -> RunEnd {
        let text = out.text.clone();
        match out.status {
            TurnStatus::Interrupted => match interrupt.reason() {
                Some(StopReason::Shutdown) => RunEnd::CutShort,
                Some(StopReason::CronStop) => finished("stopped", "stopped (tern cron stop)", text),
                Some(StopReason::Timeout) => finished(
                    "timed_out",
                    format!("timed out after {}", humantime::format_duration(timeout)),
                    text,
                ),
                Some(r) => finished("stopped", format!("stopped ({r:?})"), text),
                None => finished("stopped", "stopped", text),
            },
            TurnStatus::Completed => {
                // A turn that asked a human ends with its wait open: the session resumes
                // when the human decides, like any other.
                let waiting = self.store.has_open_waits(session_id).await.unwrap_or(false);
                if waiting {
                    finished(
                        "waiting",
                        "waiting (the session resumes when its wait is answered)",
                        text,
                    )
                } else {
                    finished("completed", "completed", text)
                }
            }
            TurnStatus::MaxIterations => finished("failed", "failed: too many model calls", text),
            TurnStatus::LoopDetected => finished(
                "failed",
                "failed: the model repeated the same tool call",
                text,
            ),
            TurnStatus::ContextFull => finished(
                "failed",
                "failed: the transcript no longer fits the window",
                text,
            ),
        }
    }

    /// Runs a script job's command through the sandboxed `terminal` tool and appends the
    /// command and its output to the session (whence a chat gets it).
    async fn run_script(
        &self,
        job: &CronJob,
        session_id: &str,
        interrupt: &tern_agent::Interrupt,
        timeout: Duration,
    ) -> RunEnd {
        let script = job.script.clone().unwrap_or_default();
        let secs = timeout.as_secs().clamp(1, 24 * 3600);
        let args = json!({"command": script, "timeout": secs}).to_string();
        let ctx = tern_tools::ToolContext {
            session_id: session_id.to_owned(),
            call_id: format!("cron-{}", job.id),
            call_seq: 0,
            workdir: self.settings.workdir.clone(),
            cancel: interrupt.token().clone(),
            approver: self.approver.clone(),
            limits: self.agent.settings().limits.clone(),
            preapproved: false,
            subagents: None,
            toolsets: Default::default(),
            report: Default::default(),
        };
        let result = self
            .agent
            .registry()
            .call("terminal", &args, &["terminal".to_owned()], ctx)
            .await;
        let (status, outcome, output) = match &result {
            _ if interrupt.reason() == Some(StopReason::Shutdown) => return RunEnd::CutShort,
            _ if interrupt.reason() == Some(StopReason::CronStop) => (
                "stopped",
                "stopped (tern cron stop)".to_owned(),
                result
                    .as_ref()
                    .ok()
                    .and_then(|v| v["output"].as_str().map(str::to_owned)),
            ),
            Ok(v) => {
                let code = v["exit_code"].as_i64();
                let out = v["output"].as_str().unwrap_or_default().to_owned();
                match code {
                    Some(0) => ("completed", "exit 0".to_owned(), Some(out)),
                    Some(c) => ("failed", format!("failed: exit {c}"), Some(out)),
                    None if v["timed_out"].as_bool() == Some(true)
                        || interrupt.reason() == Some(StopReason::Timeout) =>
                    {
                        (
                            "timed_out",
                            format!("timed out after {}", humantime::format_duration(timeout)),
                            Some(out),
                        )
                    }
                    None => ("failed", "failed: no exit status".to_owned(), Some(out)),
                }
            }
            Err(e) => ("failed", format!("failed: {e}"), None),
        };
        let name = job.name.as_deref().unwrap_or(&job.id);
        let shown = output.as_deref().unwrap_or_default();
        let messages = [
            NewMessage::new(
                tern_llm::Role::User,
                format!("[scheduled script `{name}`] $ {script}"),
            ),
            NewMessage::new(
                tern_llm::Role::Assistant,
                format!("{outcome}\n\n```\n{}\n```", shown.trim_end()),
            ),
        ];
        if let Err(e) = self.store.append_messages(session_id, &messages).await {
            tracing::error!(error = %e, "cannot append a script run's output to its session");
        }
        finished(status, outcome, output)
    }
}
