//! Grants in front of an [`Approver`]: the allowlist of exact commands and per-session
//! pattern grants are checked first; only what they do not cover reaches the human.
//!
//! Flow: a dangerous command → allowlisted exactly? run → the session already granted its
//! pattern? run → ask the inner approver → `Session` records a grant for the pattern,
//! `Always` adds the exact command to the allowlist and calls the persist hook (the CLI
//! writes it to `config.toml`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};

/// Saves an "always" decision; returns a message on failure (logged, not fatal).
pub type PersistFn = Box<dyn Fn(&str) -> Result<(), PersistError> + Send + Sync>;

/// Why the allowlist entry could not be saved (the saver's own error: the config writer's).
pub type PersistError = Box<dyn std::error::Error + Send + Sync>;

pub struct Grants {
    inner: Arc<dyn Approver>,
    state: Mutex<State>,
    persist: Option<PersistFn>,
}

#[derive(Default)]
struct State {
    allowlist: HashSet<String>,
    session: HashSet<(String, &'static str)>,
}

impl Grants {
    pub fn new(inner: Arc<dyn Approver>, allowlist: impl IntoIterator<Item = String>) -> Self {
        Self {
            inner,
            state: Mutex::new(State {
                allowlist: allowlist.into_iter().map(|c| c.trim().to_owned()).collect(),
                session: HashSet::new(),
            }),
            persist: None,
        }
    }

    pub fn with_persist(mut self, persist: PersistFn) -> Self {
        self.persist = Some(persist);
        self
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The sets stay consistent whatever panicked while holding the lock.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Approver for Grants {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async move {
            let escalation = req.pattern_key == crate::escalation::PATTERN_KEY;
            {
                let st = self.state();
                // The allowlist lets a command past the dangerous-command check; it never
                // takes one out of the sandbox.
                if !escalation && st.allowlist.contains(req.command.trim()) {
                    return ApprovalDecision::Always;
                }
                if st
                    .session
                    .contains(&(req.session_id.clone(), req.pattern_key))
                {
                    return ApprovalDecision::Session;
                }
            }
            let session_id = req.session_id.clone();
            let key = req.pattern_key;
            let command = req.command.trim().to_owned();
            let d = self.inner.approve(req).await;
            match &d {
                ApprovalDecision::Session => {
                    self.state().session.insert((session_id, key));
                }
                // "Always outside the sandbox" would hold in any directory of any session:
                // kept to this session (see docs/security.md).
                ApprovalDecision::Always if escalation => {
                    self.state().session.insert((session_id, key));
                    return ApprovalDecision::Session;
                }
                ApprovalDecision::Always => {
                    self.state().allowlist.insert(command.clone());
                    if let Some(p) = &self.persist
                        && let Err(e) = p(&command)
                    {
                        tracing::warn!(error = %e, "could not save the allowlist entry");
                    }
                }
                _ => {}
            }
            d
        })
    }

    fn granted<'a>(&'a self, req: &'a ApprovalRequest) -> BoxFuture<'a, Option<ApprovalDecision>> {
        Box::pin(async move {
            self.state()
                .session
                .contains(&(req.session_id.clone(), req.pattern_key))
                .then_some(ApprovalDecision::Session)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Scripted(Mutex<Vec<ApprovalDecision>>, AtomicUsize);

    impl Approver for Scripted {
        fn approve(&self, _req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
            self.1.fetch_add(1, Ordering::SeqCst);
            let d = self.0.lock().unwrap().remove(0);
            Box::pin(async move { d })
        }
    }

    fn req(session: &str, cmd: &str, key: &'static str) -> ApprovalRequest {
        ApprovalRequest {
            session_id: session.into(),
            call_id: "call-1".into(),
            call_seq: 0,
            command: cmd.into(),
            workdir: ".".into(),
            pattern_key: key,
            description: "d",
            context: Vec::new(),
        }
    }

    #[tokio::test]
    async fn session_grant_covers_the_pattern_in_that_session_only() {
        let inner = Arc::new(Scripted(
            Mutex::new(vec![
                ApprovalDecision::Session,
                ApprovalDecision::Deny { reason: "x".into() },
            ]),
            AtomicUsize::new(0),
        ));
        let g = Grants::new(inner.clone(), []);
        assert_eq!(
            g.approve(req("a", "rm -r x", "recursive_delete")).await,
            ApprovalDecision::Session
        );
        assert_eq!(
            g.approve(req("a", "rm -r y", "recursive_delete")).await,
            ApprovalDecision::Session
        );
        assert!(
            !g.approve(req("b", "rm -r y", "recursive_delete"))
                .await
                .allows()
        );
        assert_eq!(inner.1.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn always_persists_the_exact_command() {
        let inner = Arc::new(Scripted(
            Mutex::new(vec![ApprovalDecision::Always]),
            AtomicUsize::new(0),
        ));
        let saved = Arc::new(Mutex::new(Vec::new()));
        let s2 = saved.clone();
        let g = Grants::new(inner.clone(), ["git push --force".to_owned()]).with_persist(Box::new(
            move |c| {
                s2.lock().unwrap().push(c.to_owned());
                Ok(())
            },
        ));
        assert!(g.approve(req("a", "git push --force", "k")).await.allows());
        assert_eq!(
            inner.1.load(Ordering::SeqCst),
            0,
            "allowlisted: nobody asked"
        );
        assert!(g.approve(req("a", "rm -r build ", "k2")).await.allows());
        assert!(g.approve(req("b", "rm -r build", "k2")).await.allows());
        assert_eq!(inner.1.load(Ordering::SeqCst), 1);
        assert_eq!(*saved.lock().unwrap(), vec!["rm -r build".to_owned()]);
    }
}
