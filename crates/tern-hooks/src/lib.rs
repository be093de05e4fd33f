//! Lifecycle hooks: an event bus with three kinds of subscriber.
//!
//! Flow: the agent loop and the gateway call [`HookBus::emit`] at each lifecycle point →
//! in-process [`Subscriber`]s are called inline (they must be quick) → command hooks
//! (`[[hooks]]` in `config.toml`, the event as JSON on stdin) and webhooks (`[[webhooks]]`,
//! the event POSTed with an HMAC-SHA256 signature, retried with backoff) run on tasks of
//! their own, each bounded by its timeout, so a slow, failing or crashing hook never delays
//! the caller → for `pre_tool_call`, [`HookBus::pre_tool_call`] waits (bounded) for the
//! subscribers' verdicts: one `block` blocks the call, otherwise one `allow` lets a
//! dangerous command through without asking → on shutdown, [`HookBus::flush`] waits
//! (bounded) for the deliveries still in flight.
//!
//! [`HookBus::from_config`] builds the bus from `[[hooks]]` and `[[webhooks]]`; failures of
//! hooks are logged with the hook's name and never reach the caller.
//!
//! Every event and field is documented in `docs/hooks.md`.

mod command;
mod events;
mod webhook;

pub use events::*;
pub use webhook::{
    DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, error_chain, signed_post,
    webhook_signature,
};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tern_config::{CommandHookConfig, WebhookConfig};
use tokio::sync::Notify;

use command::CommandHook;
use webhook::Webhook;

/// What subscribers decided about a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolGate {
    /// Nobody objected: the normal rules (dangerous-command approval) apply.
    Proceed,
    /// A subscriber allowed it: a dangerous command runs without asking (hard-line
    /// commands stay blocked).
    Allow { hook: String },
    /// A subscriber blocked it; the model reads `message`.
    Block { hook: String, message: String },
}

/// An in-process subscriber. Called inline on the emitting task: keep it quick and never
/// block (hand slow work to a task of your own).
pub trait Subscriber: Send + Sync {
    /// A name for logs.
    fn name(&self) -> &str;
    fn on_event(&self, event: &Envelope);
    /// For `pre_tool_call`: a verdict, or `None` to abstain.
    fn gate_tool_call(&self, _event: &Envelope) -> Option<ToolGate> {
        None
    }
}

/// Why hooks could not be set up from the configuration.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// A subscriber lists an event that does not exist.
    #[error("{subscriber}: unknown event {event:?} (known: {known}; or \"*\" for all)", known = EVENT_NAMES.join(", "))]
    UnknownEvent { subscriber: String, event: String },
    /// A subscriber's settings are unusable.
    #[error("{subscriber}: {message}")]
    Invalid { subscriber: String, message: String },
    /// The HTTP client shared by the webhooks could not be built (e.g. no TLS roots).
    #[error("cannot create the HTTP client for webhooks: {0}")]
    HttpClient(#[source] reqwest::Error),
}

/// The events one configured subscriber wants.
#[derive(Debug, Clone)]
pub(crate) struct EventFilter {
    /// `"*"` was listed.
    all: bool,
    names: Vec<&'static str>,
}

impl EventFilter {
    /// From configured names; `"*"` means every event. An empty list is an error, since a
    /// subscriber without events is surely a mistake.
    pub(crate) fn parse(subscriber: &str, events: &[String]) -> Result<Self, HookError> {
        if events.is_empty() {
            return Err(HookError::Invalid {
                subscriber: subscriber.to_owned(),
                message: "`events` must not be empty (list event names, or \"*\" for all)"
                    .to_owned(),
            });
        }
        let mut filter = EventFilter {
            all: false,
            names: Vec::new(),
        };
        for event in events {
            let event = event.trim();
            if event == "*" {
                filter.all = true;
            } else if let Some(&known) = EVENT_NAMES.iter().find(|&&n| n == event) {
                filter.names.push(known);
            } else {
                return Err(HookError::UnknownEvent {
                    subscriber: subscriber.to_owned(),
                    event: event.to_owned(),
                });
            }
        }
        Ok(filter)
    }

    pub(crate) fn matches(&self, event: &str) -> bool {
        self.all || self.names.contains(&event)
    }
}

/// Counts hook deliveries running on tasks of their own, so [`HookBus::flush`] can wait for
/// them. A counter and a [`Notify`] rather than a task tracker so that concurrent flushes
/// and emits during a flush need no open/close dance.
#[derive(Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// One delivery in flight; dropping it (the task finished, panicked or was dropped by a
/// runtime shutting down) counts it as done.
struct InFlightGuard(Arc<InFlight>);

impl InFlight {
    fn start(self: &Arc<Self>) -> InFlightGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(Arc::clone(self))
    }

    async fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Register interest before checking, so a guard dropped in between still wakes us.
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.count.load(Ordering::SeqCst) == 0;
            }
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The event bus. Cheap to share behind an `Arc`.
#[derive(Default)]
pub struct HookBus {
    subscribers: RwLock<Vec<Arc<dyn Subscriber>>>,
    commands: Vec<Arc<CommandHook>>,
    webhooks: Vec<Arc<Webhook>>,
    /// One client for every webhook, so connections are pooled; `None` without webhooks.
    client: Option<reqwest::Client>,
    in_flight: Arc<InFlight>,
}

impl HookBus {
    /// A bus with no subscribers; add in-process ones with [`HookBus::subscribe`].
    pub fn new() -> Self {
        Self::default()
    }

    /// A bus with the configured command hooks and webhooks (in configuration order, which
    /// is also the order of precedence for `pre_tool_call` verdicts). Checks every event
    /// name against [`EVENT_NAMES`] (`"*"` = all) and every setting, since callers may
    /// build the structs without going through `tern_config::load`.
    pub fn from_config(
        hooks: &[CommandHookConfig],
        webhooks: &[WebhookConfig],
    ) -> Result<HookBus, HookError> {
        let commands = hooks
            .iter()
            .map(|h| CommandHook::from_config(h).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let webhooks = webhooks
            .iter()
            .map(|w| Webhook::from_config(w).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let client = if webhooks.is_empty() {
            None
        } else {
            Some(webhook::client().map_err(HookError::HttpClient)?)
        };
        Ok(HookBus {
            commands,
            webhooks,
            client,
            ..HookBus::default()
        })
    }

    /// Adds an in-process subscriber.
    pub fn subscribe(&self, s: Arc<dyn Subscriber>) {
        self.subscribers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(s);
    }

    fn subscribers(&self) -> Vec<Arc<dyn Subscriber>> {
        self.subscribers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Publishes an event. In-process subscribers are called inline; command hooks and
    /// webhooks subscribed to it start on tasks of their own, so this never waits for them
    /// (outside a Tokio runtime they are skipped, with a warning).
    pub fn emit(&self, event: HookEvent) {
        let env = Envelope::now(event);
        for s in self.subscribers() {
            s.on_event(&env);
        }
        self.spawn_deliveries(&env, true);
    }

    /// Starts the deliveries of `env` on tasks: webhooks always, command hooks when
    /// `commands` (the `pre_tool_call` gate runs its command hooks itself).
    fn spawn_deliveries(&self, env: &Envelope, commands: bool) {
        let event = env.event.name();
        let hooks: Vec<Arc<CommandHook>> = if commands {
            self.commands
                .iter()
                .filter(|h| h.wants(event))
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let webhooks: Vec<Arc<Webhook>> = self
            .webhooks
            .iter()
            .filter(|w| w.wants(event))
            .cloned()
            .collect();
        if hooks.is_empty() && webhooks.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                event,
                "no async runtime to run hooks on: command hooks and webhooks skipped"
            );
            return;
        };
        let json: Arc<str> = env.to_json().into();
        for hook in hooks {
            let guard = self.in_flight.start();
            let json = Arc::clone(&json);
            runtime.spawn(async move {
                let _guard = guard;
                // The outcome is logged by `run`; a fire-and-forget hook has no verdict.
                let _ = hook.run(event, &json).await;
            });
        }
        if let Some(client) = &self.client {
            let body = bytes::Bytes::copy_from_slice(json.as_bytes());
            for hook in webhooks {
                let guard = self.in_flight.start();
                let client = client.clone();
                let body = body.clone();
                runtime.spawn(async move {
                    let _guard = guard;
                    hook.deliver(&client, event, body).await;
                });
            }
        }
    }

    /// Publishes a `pre_tool_call` event and collects verdicts. In-process subscribers are
    /// asked first, then the command hooks subscribed to `pre_tool_call`, which run
    /// concurrently, each bounded by its timeout (a hook that fails, times out or prints
    /// no verdict abstains). The first `block` wins (in-process subscribers in subscription
    /// order, then hooks in configuration order); otherwise the first `allow`; otherwise
    /// [`ToolGate::Proceed`]. Webhooks get the event without a say in it.
    ///
    /// Dropping the future (the turn was interrupted) kills the hooks still running.
    pub async fn pre_tool_call(&self, event: PreToolCall) -> ToolGate {
        let env = Envelope::now(HookEvent::PreToolCall(event));
        let mut block = None;
        let mut allow = None;
        for s in self.subscribers() {
            s.on_event(&env);
            match s.gate_tool_call(&env) {
                Some(b @ ToolGate::Block { .. }) if block.is_none() => block = Some(b),
                Some(a @ ToolGate::Allow { .. }) if allow.is_none() => allow = Some(a),
                _ => {}
            }
        }
        if let Some(block) = block {
            // Decided already: the command hooks still see the event, but in the
            // background, so the decision is not delayed by them.
            self.spawn_deliveries(&env, true);
            return block;
        }
        self.spawn_deliveries(&env, false);

        let event_name = env.event.name();
        let hooks: Vec<&Arc<CommandHook>> = self
            .commands
            .iter()
            .filter(|h| h.wants(event_name))
            .collect();
        if !hooks.is_empty() {
            let json = env.to_json();
            let verdicts =
                futures_util::future::join_all(hooks.iter().map(|h| h.gate(event_name, &json)))
                    .await;
            for verdict in verdicts.into_iter().flatten() {
                match verdict {
                    b @ ToolGate::Block { .. } if block.is_none() => block = Some(b),
                    a @ ToolGate::Allow { .. } if allow.is_none() => allow = Some(a),
                    _ => {}
                }
            }
        }
        block.or(allow).unwrap_or(ToolGate::Proceed)
    }

    /// Waits until the command hooks and webhook deliveries started by [`HookBus::emit`]
    /// have finished, at most `timeout`. Returns whether none is left (`false`: some are
    /// still running, e.g. a webhook between retries). Deliveries started while waiting
    /// are waited for too.
    pub async fn flush(&self, timeout: Duration) -> bool {
        self.in_flight.wait_idle(timeout).await
    }

    /// Command hooks and webhook deliveries started by [`HookBus::emit`] and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.count.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_event() -> Vec<HookEvent> {
        let s = || "s".to_owned();
        vec![
            HookEvent::SessionStart(SessionStart {
                session_id: s(),
                source: s(),
                model: None,
                parent_id: None,
            }),
            HookEvent::SessionEnd(SessionEnd {
                session_id: s(),
                source: s(),
                reason: SessionEndReason::Deleted,
            }),
            HookEvent::SessionReset(SessionReset {
                session_id: s(),
                source: s(),
                new_session_id: s(),
                interrupted: false,
            }),
            HookEvent::TurnStart(TurnStart {
                session_id: s(),
                source: s(),
                turn_id: s(),
                input: s(),
            }),
            HookEvent::TurnEnd(TurnEnd {
                session_id: s(),
                source: s(),
                turn_id: s(),
                status: TurnEndStatus::Completed,
                iterations: 1,
                usage: TokenUsage::default(),
                error: None,
            }),
            HookEvent::PreLlmCall(PreLlmCall {
                session_id: s(),
                source: s(),
                turn_id: s(),
                iteration: 1,
                model: s(),
                message_count: 2,
            }),
            HookEvent::PostLlmCall(PostLlmCall {
                session_id: s(),
                source: s(),
                turn_id: s(),
                iteration: 1,
                model: s(),
                duration_ms: 3,
                tool_calls: 0,
                usage: None,
                error: None,
            }),
            HookEvent::PreToolCall(PreToolCall {
                session_id: s(),
                source: s(),
                turn_id: s(),
                call_id: s(),
                tool: s(),
                arguments: s(),
            }),
            HookEvent::PostToolCall(PostToolCall {
                session_id: s(),
                source: s(),
                turn_id: s(),
                call_id: s(),
                tool: s(),
                ok: true,
                duration_ms: 1,
                result: s(),
            }),
            HookEvent::ToolProgress(ToolProgress {
                session_id: s(),
                source: s(),
                turn_id: s(),
                call_id: s(),
                tool: s(),
                progress: 3.0,
                total: Some(5.0),
                message: None,
            }),
            HookEvent::AgentLoopStopped(AgentLoopStopped {
                session_id: s(),
                source: s(),
                reason: StopReason::ApiStop,
                invalidation_reason: "turn".to_owned(),
                turn_id: s(),
            }),
            HookEvent::WaitCreated(WaitCreated {
                session_id: s(),
                source: s(),
                wait_id: s(),
                request_id: s(),
                kind: "approval".to_owned(),
                summary: s(),
            }),
            HookEvent::WaitResolved(WaitResolved {
                session_id: s(),
                source: s(),
                wait_id: s(),
                request_id: None,
                kind: "approval".to_owned(),
                status: WaitResolvedStatus::Delivered,
                decided_by: None,
                outcome: None,
            }),
            HookEvent::ProcessStarted(ProcessStarted {
                session_id: s(),
                source: s(),
                process_id: s(),
                pid: 42,
                command: s(),
                workdir: s(),
                pty: false,
            }),
            HookEvent::ProcessExited(ProcessExited {
                session_id: s(),
                source: s(),
                process_id: s(),
                pid: 42,
                command: s(),
                state: "exited".to_owned(),
                exit_code: Some(0),
                signal: None,
            }),
            HookEvent::PreCompact(PreCompact {
                session_id: s(),
                source: s(),
                turn_id: None,
                reason: CompactReason::Manual,
                tokens_before: 9000,
                context_length: 8000,
            }),
            HookEvent::PostCompact(PostCompact {
                session_id: s(),
                source: s(),
                turn_id: Some(s()),
                reason: CompactReason::Auto,
                tokens_before: 9000,
                tokens_after: 3000,
                messages_compacted: 40,
                outputs_elided: 3,
                error: None,
            }),
            HookEvent::CronRunStarted(CronRunStarted {
                session_id: s(),
                job_id: s(),
                job_name: None,
                occurrence_id: 7,
                scheduled_at: 1,
                kind: "agent".to_owned(),
                trigger: "schedule".to_owned(),
                attempt: 1,
            }),
            HookEvent::CronRunFinished(CronRunFinished {
                run: CronRunStarted {
                    session_id: s(),
                    job_id: s(),
                    job_name: Some(s()),
                    occurrence_id: 7,
                    scheduled_at: 1,
                    kind: "script".to_owned(),
                    trigger: "manual".to_owned(),
                    attempt: 2,
                },
                status: "completed".to_owned(),
                outcome: "exit 0".to_owned(),
                duration_ms: 12,
            }),
        ]
    }

    #[test]
    fn every_event_is_named_in_event_names_and_its_json_tag() {
        let events = every_event();
        let names: Vec<&str> = events.iter().map(HookEvent::name).collect();
        assert_eq!(names, EVENT_NAMES);
        for event in events {
            let json: serde_json::Value =
                serde_json::from_str(&Envelope::now(event.clone()).to_json()).unwrap();
            assert_eq!(json["event"], event.name());
            assert!(json["timestamp"].as_i64().unwrap() > 0);
            assert_eq!(json["session_id"], "s");
        }
    }

    /// The field names (first column) of the table in `section`, in order.
    fn table_fields(section: &str) -> Vec<String> {
        section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once('`'))
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// The first ```json block of `section`.
    fn json_example(section: &str) -> serde_json::Value {
        let start = section.find("```json\n").expect("a json example") + 8;
        let len = section[start..].find("```").expect("a closed json block");
        serde_json::from_str(&section[start..start + len]).expect("the example is JSON")
    }

    /// The keys of `value` and, for nested objects, `key.nested`, in order.
    fn key_paths(value: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
        if let Some(map) = value.as_object() {
            for (k, v) in map {
                out.push(format!("{prefix}{k}"));
                key_paths(v, &format!("{prefix}{k}."), out);
            }
        }
    }

    fn sorted_key_paths(value: &serde_json::Value) -> Vec<String> {
        let mut keys = Vec::new();
        key_paths(value, "", &mut keys);
        keys.sort();
        keys
    }

    #[test]
    fn docs_describe_every_event_and_field_exactly() {
        let docs = include_str!("../../../docs/hooks.md");
        let mut sample = every_event();
        // Fill the optional fields so nested objects show up in the serialized sample.
        for event in &mut sample {
            if let HookEvent::PostLlmCall(e) = event {
                e.usage = Some(TokenUsage::default());
            }
        }
        for event in sample {
            let name = event.name();
            let heading = format!("\n### `{name}`\n");
            let start = docs
                .find(&heading)
                .unwrap_or_else(|| panic!("docs/hooks.md has no section {heading:?}"));
            let rest = &docs[start + heading.len()..];
            let section = &rest[..rest.find("\n### ").unwrap_or(rest.len())];

            let actual: serde_json::Value =
                serde_json::from_str(&Envelope::now(event.clone()).to_json()).unwrap();
            let top_level: Vec<String> = actual
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let mut documented = table_fields(section);
            documented.sort();
            assert_eq!(documented, top_level, "table of `{name}`");

            let example = json_example(section);
            assert_eq!(example["event"], name, "example of `{name}`");
            assert_eq!(
                sorted_key_paths(&example),
                sorted_key_paths(&actual),
                "example of `{name}`"
            );
            // Same JSON types, null standing in for any optional field's value.
            for (key, value) in actual.as_object().unwrap() {
                let documented = &example[key];
                let same_kind = std::mem::discriminant(value) == std::mem::discriminant(documented)
                    || documented.is_null()
                    || value.is_null();
                assert!(same_kind, "`{name}`.{key}: {documented} vs {value}");
            }
        }
    }

    #[test]
    fn filter_star_and_names() {
        let f = EventFilter::parse("h", &["turn_end".to_owned()]).unwrap();
        assert!(f.matches("turn_end"));
        assert!(!f.matches("turn_start"));
        let f = EventFilter::parse("h", &["*".to_owned()]).unwrap();
        assert!(EVENT_NAMES.iter().all(|e| f.matches(e)));
        let err = EventFilter::parse("h", &["turn_begin".to_owned()]).unwrap_err();
        assert!(matches!(err, HookError::UnknownEvent { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("h: unknown event \"turn_begin\""), "{msg}");
        assert!(EventFilter::parse("h", &[]).is_err());
    }

    #[test]
    fn from_config_rejects_unknown_events() {
        let hook = CommandHookConfig {
            name: Some("audit".to_owned()),
            events: vec!["turn_end".to_owned(), "nope".to_owned()],
            command: "true".into(),
            timeout_ms: 100,
        };
        let msg = HookBus::from_config(&[hook], &[])
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("audit") && msg.contains("\"nope\""), "{msg}");

        let webhook = WebhookConfig {
            name: None,
            url: "http://127.0.0.1:9/x".to_owned(),
            secret: "0123456789abcdef".to_owned(),
            events: vec!["session_begin".to_owned()],
            timeout_ms: 100,
            max_attempts: 1,
            retry_base_ms: 1,
        };
        let msg = HookBus::from_config(&[], &[webhook])
            .err()
            .unwrap()
            .to_string();
        assert!(msg.contains("session_begin"), "{msg}");
    }

    #[tokio::test]
    async fn flush_with_nothing_in_flight_returns_at_once() {
        let bus = HookBus::new();
        assert!(bus.flush(Duration::from_secs(5)).await);
        assert_eq!(bus.in_flight(), 0);
    }

    #[test]
    fn emit_without_a_runtime_skips_hooks_without_panicking() {
        let hook = CommandHookConfig {
            name: None,
            events: vec!["*".to_owned()],
            command: "true".into(),
            timeout_ms: 100,
        };
        let bus = HookBus::from_config(&[hook], &[]).unwrap();
        bus.emit(every_event().remove(0));
        assert_eq!(bus.in_flight(), 0);
    }
}
