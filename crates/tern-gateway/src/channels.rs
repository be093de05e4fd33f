//! Chat channels in the gateway: each configured channel ([`ChannelSpec`]) runs as part of
//! the upkeep, with the gateway as its [`Host`]: a chat's turns are admitted, queued,
//! stopped and drained like the HTTP API's, and its requests are decided in this gateway's
//! inbox.

use std::sync::Arc;

use tern_agent::{Agent, AgentEvent, EventSink};
use tern_channels::platform::{BoxFuture, Platform};
use tern_channels::runtime::{Admission, Channel, ChannelSettings, Host, HostError, TurnDefaults};
use tern_channels::signing::CallbackKey;
use tern_hooks::{HookBus, HookEvent, SessionStart};
use tern_inbox::Inbox;
use tern_store::NewSession;
use tokio_util::sync::CancellationToken;

use crate::{Gateway, TurnManager};

/// How long a stopping channel's tasks get to end.
const CHANNEL_STOP: std::time::Duration = std::time::Duration::from_secs(10);

/// One configured channel: its platform adapter and settings.
pub struct ChannelSpec {
    pub settings: ChannelSettings,
    pub platform: Arc<dyn Platform>,
}

/// The channels of a gateway and the key that signs their buttons.
pub struct ChannelsSetup {
    pub channels: Vec<ChannelSpec>,
    pub key: CallbackKey,
}

/// The gateway as its channels see it.
struct GatewayHost {
    agent: Arc<Agent>,
    inbox: Option<Inbox>,
    turns: Arc<TurnManager>,
    hooks: Arc<HookBus>,
    defaults: TurnDefaults,
    model: String,
    closing: CancellationToken,
    link_base: Option<String>,
}

impl Host for GatewayHost {
    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn inbox(&self) -> Option<&Inbox> {
        self.inbox.as_ref()
    }

    fn turn_defaults(&self) -> TurnDefaults {
        self.defaults.clone()
    }

    fn admit<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<Admission, HostError>> {
        Box::pin(async move {
            let permit = tokio::select! {
                p = self.turns.permit_wait() => p.map_err(|_| HostError::ShuttingDown)?,
                () = self.closing.cancelled() => return Err(HostError::ShuttingDown),
            };
            let guard = self
                .turns
                .register(session_id, permit, self.agent.enqueue(session_id))
                .map_err(|e| HostError::Busy(e.message))?;
            let ticket = guard
                .ticket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| HostError::Busy("no place in the session's queue".into()))?;
            let slot = guard.slot.clone();
            let events: EventSink = Arc::new(move |ev: AgentEvent| match &ev {
                AgentEvent::TurnStarted { turn_id } => slot.mark_running(turn_id),
                AgentEvent::TurnFinished { .. } => slot.mark_finished(),
                _ => {}
            });
            Ok(Admission {
                ticket,
                interrupt: guard.slot.interrupt.clone(),
                events,
                guard: Box::new(guard),
            })
        })
    }

    fn create_session<'a>(
        &'a self,
        source: &'a str,
        title: Option<String>,
    ) -> BoxFuture<'a, Result<String, HostError>> {
        Box::pin(async move {
            let s = self
                .agent
                .store()
                .create_session(NewSession {
                    id: None,
                    title,
                    source: source.to_owned(),
                    model: Some(self.model.clone()),
                    parent_id: None,
                    system_prompt: None,
                    // No key created it: only admin keys see it through the API.
                    owner: None,
                    toolsets: None,
                })
                .await?;
            self.hooks.emit(HookEvent::SessionStart(SessionStart {
                session_id: s.id.clone(),
                source: source.to_owned(),
                model: s.model.clone(),
                parent_id: None,
            }));
            Ok(s.id)
        })
    }

    fn stop(&self, session_id: &str) -> bool {
        self.turns
            .stop(session_id, tern_agent::StopReason::UserInterrupt)
            .is_some()
    }

    fn is_busy(&self, session_id: &str) -> bool {
        self.turns.is_busy(session_id)
    }

    fn inbox_link(&self, request_id: &str) -> Option<String> {
        self.link_base
            .as_ref()
            .map(|b| format!("{b}/inbox/requests/{request_id}"))
    }
}

/// The enabled channels of `config`, ready to start, and the key that signs their buttons
/// (`$TERN_HOME/channels.key`). A channel whose secret cannot be read or whose adapter cannot
/// be built is left out with a clear error in the log (and in `tern channels status`): the
/// rest of the gateway, and the other channels, start anyway. `None` without channels.
pub async fn from_config(
    home: &tern_config::Home,
    config: &tern_config::ChannelsConfig,
    store: &tern_store::Store,
) -> Option<ChannelsSetup> {
    let env = |k: &str| std::env::var(k).ok();
    let mut channels = Vec::new();
    let failed = |name: &str, platform: &str, error: String| {
        tracing::error!(channel = name, platform, error = %error, "the channel cannot start; the gateway goes on without it");
        (name.to_owned(), platform.to_owned(), error)
    };
    let mut failures = Vec::new();
    for t in config.telegram.iter().filter(|t| t.enabled) {
        let token = match t.resolve_secret(&home.root, &env) {
            Ok(s) => s,
            Err(e) => {
                failures.push(failed(&t.name, "telegram", e.to_string()));
                continue;
            }
        };
        let mut settings = tern_channels::telegram::TelegramSettings::new(token);
        settings.api_url = t.api_url().to_owned();
        settings.poll_timeout = t.poll_timeout();
        match tern_channels::telegram::Telegram::new(settings) {
            Ok(platform) => channels.push(ChannelSpec {
                settings: channel_settings(&t.name, &t.allowed_users, &t.reviewers, t.progress),
                platform: Arc::new(platform),
            }),
            Err(e) => failures.push(failed(&t.name, "telegram", e.to_string())),
        }
    }
    for m in config.matrix.iter().filter(|m| m.enabled) {
        let token = match m.resolve_secret(&home.root, &env) {
            Ok(s) => s,
            Err(e) => {
                failures.push(failed(&m.name, "matrix", e.to_string()));
                continue;
            }
        };
        match matrix_platform(m, token) {
            Ok(platform) => channels.push(ChannelSpec {
                settings: channel_settings(&m.name, &m.allowed_users, &m.reviewers, m.progress),
                platform,
            }),
            Err(e) => failures.push(failed(&m.name, "matrix", e)),
        }
    }
    for (name, platform, error) in failures {
        let _ = store.channel_error(&name, &platform, &error).await;
    }
    if channels.is_empty() {
        return None;
    }
    let key_path = home.root.join("channels.key");
    let key = match tokio::task::spawn_blocking(move || CallbackKey::load_or_create(&key_path))
        .await
    {
        Ok(Ok(k)) => k,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "the chat channels cannot sign their buttons, so none starts");
            return None;
        }
        Err(e) => {
            tracing::error!(error = %e, "the chat channels cannot sign their buttons, so none starts");
            return None;
        }
    };
    Some(ChannelsSetup { channels, key })
}

fn channel_settings(
    name: &str,
    allowed: &[String],
    reviewers: &std::collections::BTreeMap<String, String>,
    progress: tern_config::ProgressMode,
) -> ChannelSettings {
    let mut s = ChannelSettings::new(name);
    s.allowed_users = allowed.to_vec();
    s.reviewers = reviewers.clone();
    s.progress = match progress {
        tern_config::ProgressMode::Off => tern_channels::runtime::ProgressMode::Off,
        tern_config::ProgressMode::New => tern_channels::runtime::ProgressMode::New,
        tern_config::ProgressMode::All => tern_channels::runtime::ProgressMode::All,
    };
    s
}

/// The Matrix adapter of `m`.
fn matrix_platform(
    m: &tern_config::MatrixChannelConfig,
    token: String,
) -> Result<Arc<dyn Platform>, String> {
    let mut settings =
        tern_channels::matrix::MatrixSettings::new(m.homeserver(), m.user_id.clone(), token);
    settings.poll_timeout = m.poll_timeout();
    tern_channels::matrix::Matrix::new(settings)
        .map(|p| Arc::new(p) as Arc<dyn Platform>)
        .map_err(|e| e.to_string())
}

impl Gateway {
    /// Starts the configured channels; each stops with the upkeep.
    pub(crate) fn spawn_channels(self: &Arc<Self>, upkeep: &crate::Upkeep) {
        let Some(setup) = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        if setup.channels.is_empty() {
            return;
        }
        let host: Arc<dyn Host> = Arc::new(GatewayHost {
            agent: self.agent.clone(),
            inbox: self.waits.follows_embedded().then(|| self.inbox.clone()),
            turns: self.turns.clone(),
            hooks: self.hooks.clone(),
            defaults: TurnDefaults {
                approver: self.approver.clone(),
                workdir: self.settings.workdir.clone(),
                toolsets: self.settings.toolsets.clone(),
            },
            model: self.settings.model.clone(),
            closing: self.closing.clone(),
            link_base: self.inbox_settings.public_url.clone(),
        });
        for spec in setup.channels {
            let channel = Channel::new(
                spec.settings,
                spec.platform,
                host.clone(),
                setup.key.clone(),
            );
            self.hooks.subscribe(channel.subscriber());
            let stop = upkeep.stop_token().clone();
            upkeep.spawn(async move {
                let running = channel.start(&stop).await;
                stop.cancelled().await;
                let name = running.name().to_owned();
                if !running.join(CHANNEL_STOP).await {
                    tracing::warn!(channel = name, "the channel's tasks did not end in time");
                }
            });
        }
    }
}
