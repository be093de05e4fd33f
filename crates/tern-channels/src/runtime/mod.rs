//! The channel runtime: one configured channel (a [`Platform`] and its settings) connected to
//! sessions, the inbox and the gateway ([`Host`]).
//!
//! # The flow at a glance
//!
//! - **In** ([`poll`]): one task long-polls the platform. Each batch is sorted: an event from a
//!   user who may not talk to the agent (not in `allowed_users`, not paired) is answered with a
//!   pairing code and never stored; the others are recorded **in the same transaction as the
//!   cursor after them** ([`Store::channel_record`]), so after a crash every update is either
//!   recorded and confirmed, or neither — none handled twice, none lost.
//! - **Handling** ([`dispatch`]): recorded events are handled in order. Commands (`/stop`,
//!   `/new`, …, [`commands`]) act at once; a message joins its chat's queue and becomes a
//!   turn of the chat's session, appended to the transcript in the transaction that marks the
//!   event appended ([`Store::channel_append_event`]); a tap, reaction or reply on a posted
//!   request decides it through the inbox ([`posts`]).
//! - **Out** ([`deliver`]): one task sends what the sessions of this channel produced — the
//!   assistant messages after each session's delivery cursor (so answers of turns that a
//!   decision, a background process or a schedule resumed reach the chat too, and a restart
//!   resends nothing already delivered), the requests asking a human (with signed buttons),
//!   their outcome once settled, tool progress, and the typing indicator. Hook events wake it.

mod chat;
mod commands;
mod deliver;
mod dispatch;
pub mod host;
mod poll;
mod posts;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tern_hooks::{Envelope, HookEvent, Subscriber};
use tern_store::Store;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use host::{Admission, Host, HostError, TurnDefaults};

use crate::pairing::Pairing;
use crate::platform::{ChatRef, Platform};
use crate::signing::CallbackKey;

/// Tool progress messages in the chat (Hermes's `HERMES_TOOL_PROGRESS_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// None.
    Off,
    /// One when the turn moves on to another tool.
    #[default]
    New,
    /// One per tool call.
    All,
}

/// One channel's settings.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// The configured name: the key of its cursor and chats in the store.
    pub name: String,
    /// Users who may talk to the agent without pairing (platform user ids).
    pub allowed_users: Vec<String>,
    /// Chat users who decide requests, and as which inbox reviewer.
    pub reviewers: BTreeMap<String, String>,
    pub progress: ProgressMode,
    /// Inbound files larger than this are refused.
    pub max_file_bytes: u64,
    /// Where inbound files go, relative to the turn's working directory.
    pub files_dir: PathBuf,
}

impl ChannelSettings {
    pub fn new(name: impl Into<String>) -> Self {
        ChannelSettings {
            name: name.into(),
            allowed_users: Vec::new(),
            reviewers: BTreeMap::new(),
            progress: ProgressMode::default(),
            max_file_bytes: 20 * 1024 * 1024,
            files_dir: PathBuf::from("chat-files"),
        }
    }
}

/// What the hook subscriber passes to the delivery task.
#[derive(Debug)]
enum Signal {
    TurnStarted(String),
    Tool {
        session: String,
        tool: String,
        arguments: String,
    },
    /// A running tool's progress (already throttled by the agent: one a second per call).
    ToolProgress {
        session: String,
        tool: String,
        progress: f64,
        total: Option<f64>,
    },
    TurnEnded(String),
    /// A scheduled run started: its session may have just been attached to a chat of this
    /// channel (`deliver = "CHANNEL:CHAT"`), which the routes loaded at start do not know.
    RoutesChanged,
}

/// What the tasks of one channel share.
pub(crate) struct Inner {
    pub(crate) settings: ChannelSettings,
    pub(crate) platform: Arc<dyn Platform>,
    pub(crate) host: Arc<dyn Host>,
    pub(crate) store: Store,
    pub(crate) pairing: Pairing,
    pub(crate) key: CallbackKey,
    /// Session → chat, for this channel's sessions (loaded at start, kept by binds).
    routes: RwLock<HashMap<String, ChatRef>>,
    /// Wakes the dispatcher: events were recorded.
    events: Notify,
    /// Wakes the delivery task: something may be there to send.
    outbound: Notify,
    signals: mpsc::UnboundedSender<Signal>,
    /// The channel's own tasks beyond the three loops (one per chat queue, stranger replies).
    tasks: TaskTracker,
    /// Strangers answered lately (user → when), so a flood gets one answer per window.
    strangers: std::sync::Mutex<HashMap<String, i64>>,
    /// Stranger replies in flight at most; more are dropped (they are not the agent's work).
    stranger_slots: Arc<tokio::sync::Semaphore>,
    /// Chats (chat, thread) with a `/compact` running: one at a time each.
    pub(crate) compacting: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    stop: CancellationToken,
}

impl Inner {
    pub(crate) fn platform_name(&self) -> &'static str {
        self.platform.platform()
    }

    pub(crate) fn route(&self, session_id: &str) -> Option<ChatRef> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .cloned()
    }

    pub(crate) fn set_route(&self, session_id: &str, chat: &ChatRef) {
        self.routes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(session_id.to_owned(), chat.clone());
    }

    /// Reads which chat each of the channel's sessions talks to from the store: at start,
    /// and when a scheduled run's session may have been attached to a chat since.
    pub(crate) async fn load_routes(&self) {
        match self.store.channel_routes(&self.settings.name).await {
            Ok(routes) => {
                let mut map = self.routes.write().unwrap_or_else(|e| e.into_inner());
                for r in routes {
                    map.insert(
                        r.session_id,
                        ChatRef {
                            chat_id: r.chat_id,
                            thread_id: (!r.thread_id.is_empty()).then_some(r.thread_id),
                        },
                    );
                }
            }
            Err(e) => {
                tracing::warn!(channel = %self.settings.name, error = %e, "cannot read the channel's sessions")
            }
        }
    }

    pub(crate) fn wake_outbound(&self) {
        self.outbound.notify_one();
    }

    /// Whether the user may talk to the agent: configured, or paired and not revoked. An
    /// error of the store counts as "no" (for a decision, refusing is the safe side).
    pub(crate) async fn is_allowed(&self, user_id: &str) -> bool {
        match self.check_allowed(user_id).await {
            Ok(allowed) => allowed,
            Err(e) => {
                tracing::warn!(channel = %self.settings.name, error = %e, "cannot check whether a user is allowed; refusing");
                false
            }
        }
    }

    pub(crate) async fn check_allowed(
        &self,
        user_id: &str,
    ) -> Result<bool, crate::pairing::PairingError> {
        self.pairing
            .is_allowed(self.platform_name(), user_id, &self.settings.allowed_users)
            .await
    }
}

/// One configured channel, ready to run.
pub struct Channel {
    inner: Arc<Inner>,
    signals: mpsc::UnboundedReceiver<Signal>,
}

/// A running channel: its tasks, joined by [`RunningChannel::join`].
pub struct RunningChannel {
    name: String,
    inner: Arc<Inner>,
    loops: tokio::task::JoinSet<()>,
}

impl Channel {
    pub fn new(
        settings: ChannelSettings,
        platform: Arc<dyn Platform>,
        host: Arc<dyn Host>,
        key: CallbackKey,
    ) -> Self {
        let store = host.agent().store().clone();
        let (tx, rx) = mpsc::unbounded_channel();
        Channel {
            inner: Arc::new(Inner {
                pairing: Pairing::new(store.clone()),
                settings,
                platform,
                host,
                store,
                key,
                routes: RwLock::new(HashMap::new()),
                events: Notify::new(),
                outbound: Notify::new(),
                signals: tx,
                tasks: TaskTracker::new(),
                strangers: std::sync::Mutex::new(HashMap::new()),
                stranger_slots: Arc::new(tokio::sync::Semaphore::new(4)),
                compacting: std::sync::Mutex::new(std::collections::HashSet::new()),
                stop: CancellationToken::new(),
            }),
            signals: rx,
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.settings.name
    }

    /// The subscriber that tells this channel about its sessions' turns, tools and waits.
    /// Subscribe it to the agent's hook bus before [`Channel::start`].
    pub fn subscriber(&self) -> Arc<dyn Subscriber> {
        Arc::new(ChannelHooks {
            inner: Arc::downgrade(&self.inner),
        })
    }

    /// Starts the poll, dispatch and delivery tasks; they end when `stop` is cancelled.
    pub async fn start(self, stop: &CancellationToken) -> RunningChannel {
        let inner = self.inner;
        inner.load_routes().await;
        let child = inner.stop.clone();
        let parent = stop.clone();
        let mut loops = tokio::task::JoinSet::new();
        loops.spawn(async move {
            parent.cancelled().await;
            child.cancel();
        });
        loops.spawn(poll::run(inner.clone()));
        loops.spawn(dispatch::run(inner.clone()));
        loops.spawn(deliver::run(inner.clone(), self.signals));
        tracing::info!(channel = %inner.settings.name, platform = inner.platform_name(), "channel started");
        RunningChannel {
            name: inner.settings.name.clone(),
            inner,
            loops,
        }
    }
}

impl RunningChannel {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for every task of the channel to end (after the stop token was cancelled), at
    /// most `timeout`; whether they all did.
    pub async fn join(mut self, timeout: Duration) -> bool {
        self.inner.stop.cancel();
        self.inner.tasks.close();
        let all = async {
            while self.loops.join_next().await.is_some() {}
            self.inner.tasks.wait().await;
        };
        tokio::time::timeout(timeout, all).await.is_ok()
    }
}

/// Forwards the hook events of this channel's sessions to its delivery task. Called inline
/// by the hook bus: it only looks up the session and queues a signal.
struct ChannelHooks {
    inner: std::sync::Weak<Inner>,
}

impl Subscriber for ChannelHooks {
    fn name(&self) -> &str {
        "channel"
    }

    fn on_event(&self, env: &Envelope) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        // A scheduled run's session may have been attached to a chat after this channel
        // loaded its routes: they are read again, so its turn's waits and progress reach the
        // chat too; its answer is in the store, so one round at its end sends it.
        match &env.event {
            HookEvent::CronRunStarted(_) => {
                let _ = inner.signals.send(Signal::RoutesChanged);
                return;
            }
            HookEvent::CronRunFinished(_) => {
                inner.wake_outbound();
                return;
            }
            _ => {}
        }
        let session = env.event.session_id();
        if inner.route(session).is_none() {
            return;
        }
        let signal = match &env.event {
            HookEvent::TurnStart(_) => Signal::TurnStarted(session.to_owned()),
            HookEvent::PreToolCall(e) => Signal::Tool {
                session: session.to_owned(),
                tool: e.tool.clone(),
                arguments: e.arguments.clone(),
            },
            HookEvent::ToolProgress(e) => Signal::ToolProgress {
                session: session.to_owned(),
                tool: e.tool.clone(),
                progress: e.progress,
                total: e.total,
            },
            HookEvent::TurnEnd(_) => Signal::TurnEnded(session.to_owned()),
            HookEvent::WaitCreated(_)
            | HookEvent::WaitResolved(_)
            | HookEvent::PostLlmCall(_)
            | HookEvent::PostToolCall(_)
            | HookEvent::PostCompact(_) => {
                inner.wake_outbound();
                return;
            }
            _ => return,
        };
        let _ = inner.signals.send(signal);
    }
}
