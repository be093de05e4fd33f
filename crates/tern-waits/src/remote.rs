//! A remote inbox (`[inbox] url = …, key = …`): the Pump Up agent API of another server over
//! HTTP ([`RemoteInbox`]), and following its decisions through outbound connections only
//! ([`RemoteFollower`]) — the gateway may sit behind NAT with no inbound port.
//!
//! # The follower at a glance
//!
//! ```text
//! cursor ← Store::remote_cursor(url)             (none: from the feed's beginning)
//! loop:  GET /api/decisions?after=cursor&wait=W   one long-poll for ALL open waits
//!        each item ─► Store::wait_by_request
//!              wait pending  ─► decided/expired: Store::wait_ready ─► Resumer::notify_ready
//!                               withdrawn:       Store::cancel_wait ─► wait_resolved (cancelled)
//!                               no result in the item: read …/result (settle); when
//!                               that fails ─► kept as below, read again by the rematch
//!              no wait (yet) ─► Store::remember_unmatched (matched when the wait appears)
//!        Store::set_remote_cursor(nextCursor)     after the items: a crash re-reads, harmlessly
//!        errors ─► backoff 1 s … 60 s, same cursor
//! 404 on /api/decisions (a server without tern's feed, e.g. the hosted Pump Up):
//!        every open wait's …/result, each every poll_interval (first at once after a start);
//!        errors count on the wait (Store::wait_attempt_failed) and back off, doubling up to
//!        an hour; every 30 min the feed is tried again
//! ```
//!
//! The feed's cost does not grow with the number of open waits: one request per long-poll
//! period, whatever is pending. `W` is `poll_interval`, at most 30 s (under the idle timeouts
//! of common proxies and NATs).
//!
//! # The client
//!
//! [`RemoteInbox`] is the waits' [`InboxClient`] over [`PumpUp`], the Pump Up agent API
//! client `tern ask` uses too. Withdrawing is tern's extension; a server without it
//! (404/405) is tolerated — the request then simply stays open there.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_hooks::{HookBus, WaitResolvedStatus};
use tern_inbox::review::RequestStatus;
use tern_inbox::service::decisions::{Decision, Decisions};
use tern_store::{Store, StoreError, Wait, WaitStatus, now_ms};
use tern_util::Backoff;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{
    BoxFuture, ClientError, ClientResult, InboxClient, LogKind, RequestKind, TaskRef,
};
use crate::follow::{Settled, settle};
use crate::pumpup::PumpUp;
use crate::resume::{Resumer, emit_resolved};

/// `[inbox] poll_interval` unless set.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The longest long-poll asked of the feed.
const MAX_LONG_POLL: Duration = Duration::from_secs(30);
/// Feed errors back off from 1 s, doubling, up to a minute.
const FEED_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// Polling errors back off from `poll_interval`, doubling, up to this.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(3600);
/// In polling mode, how often the feed is tried again (the server may have been upgraded).
const FEED_PROBE_EVERY: Duration = Duration::from_secs(1800);
/// In polling mode, how often the pending waits are listed again (a local query), so that
/// new waits are picked up without waiting a whole `poll_interval`.
const POLL_RELIST_EVERY: Duration = Duration::from_secs(5);
/// A decision the feed reported before its wait stored the request id is looked for this
/// often while it is recent (the wait should appear within milliseconds)…
const REMATCH_EVERY: Duration = Duration::from_secs(1);
const REMATCH_RECENT_MS: i64 = 120_000;
/// …and kept this long (an agent that shares the key may own it: it never matches).
const UNMATCHED_KEPT_MS: i64 = 7 * 24 * 3_600_000;

/// Another server's inbox, through its Pump Up agent API ([`PumpUp`]).
#[derive(Clone, Debug)]
pub struct RemoteInbox {
    api: PumpUp,
}

impl RemoteInbox {
    /// A client of the inbox at `url` (e.g. `https://inbox.example`) with the agent key
    /// `key`.
    pub fn new(url: &str, key: &str) -> ClientResult<Self> {
        Ok(RemoteInbox {
            api: PumpUp::new(url, key)?,
        })
    }

    /// The inbox's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.api.base_url()
    }

    /// One page of the decisions feed, waiting up to `wait` for one; `None` when the server
    /// has no feed (404).
    pub async fn decisions(
        &self,
        after: Option<&str>,
        wait: Duration,
    ) -> ClientResult<Option<Decisions>> {
        self.api.decisions(after, wait).await
    }
}

impl InboxClient for RemoteInbox {
    fn session_task<'a>(
        &'a self,
        session_id: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, ClientResult<TaskRef>> {
        Box::pin(async move {
            let body = json!({
                "name": format!("session {session_id}"),
                "projectName": project,
                "externalId": session_id,
            });
            let task_id = self
                .api
                .create_task(&body, &format!("tern-task:{session_id}"))
                .await?;
            Ok(TaskRef {
                task_id,
                project_name: project.to_owned(),
            })
        })
    }

    fn create_request<'a>(
        &'a self,
        kind: RequestKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move { self.api.create_request(kind, &body, idem).await })
    }

    fn log<'a>(
        &'a self,
        kind: LogKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move { self.api.log(kind, &body, idem).await })
    }

    fn result<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
    ) -> BoxFuture<'a, ClientResult<Option<Value>>> {
        Box::pin(async move { self.api.result(kind, request_id).await })
    }

    fn withdraw<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ClientResult<()>> {
        Box::pin(async move {
            match self.api.withdraw(kind, request_id, reason).await {
                Ok(()) => Ok(()),
                // A server without tern's extension: the request stays open there.
                Err(ClientError::Refused {
                    status: 404 | 405, ..
                }) => {
                    tracing::debug!(
                        request = request_id,
                        "the remote inbox cannot withdraw requests; left open there"
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    }

    fn upload<'a>(
        &'a self,
        path: &'a Path,
        file_name: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move { self.api.upload(path, file_name).await })
    }
}

/// How a round of following ended.
enum Ended {
    Stopped,
    /// The server has no decisions feed: poll instead.
    NoFeed,
    /// Time to look for the feed again.
    Probe,
}

/// Follows a remote inbox's decisions; see the module docs.
pub struct RemoteFollower {
    store: Store,
    inbox: Arc<RemoteInbox>,
    hooks: Arc<HookBus>,
    resumer: Arc<Resumer>,
    poll_interval: Duration,
}

impl RemoteFollower {
    pub fn new(
        store: Store,
        inbox: Arc<RemoteInbox>,
        hooks: Arc<HookBus>,
        resumer: Arc<Resumer>,
        poll_interval: Duration,
    ) -> Self {
        RemoteFollower {
            store,
            inbox,
            hooks,
            resumer,
            poll_interval: poll_interval.max(Duration::from_secs(1)),
        }
    }

    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    /// Follows the feed, or polls when the server has none, until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            match self.follow_feed(&stop).await {
                Ended::Stopped => return,
                Ended::NoFeed | Ended::Probe => {
                    tracing::info!(
                        inbox = self.inbox.base_url(),
                        every = ?self.poll_interval,
                        "the remote inbox has no decisions feed; polling each open request's result"
                    );
                    match self.poll(&stop).await {
                        Ended::Stopped => return,
                        Ended::NoFeed | Ended::Probe => {}
                    }
                }
            }
        }
    }

    fn long_poll(&self) -> Duration {
        self.poll_interval.min(MAX_LONG_POLL)
    }

    /// The feed, page after page; see the module docs.
    async fn follow_feed(&self, stop: &CancellationToken) -> Ended {
        let url = self.inbox.base_url().to_owned();
        let mut failures: u32 = 0;
        let mut cursor = loop {
            match self.store.remote_cursor(&url).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the remote inbox's cursor");
                    failures += 1;
                    if !pause(stop, FEED_BACKOFF.delay(failures)).await {
                        return Ended::Stopped;
                    }
                }
            }
        };
        failures = 0;
        match self
            .store
            .prune_unmatched(now_ms() - UNMATCHED_KEPT_MS)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(decisions = n, "forgot old decisions that matched no wait"),
            Err(e) => tracing::warn!(error = %e, "cannot prune unmatched decisions"),
        }
        let mut recent_unmatched = self.rematch().await;
        loop {
            let asked = Instant::now();
            let wait = self.long_poll();
            let page = {
                let fetch = self.inbox.decisions(cursor.as_deref(), wait);
                tokio::pin!(fetch);
                loop {
                    tokio::select! {
                        page = &mut fetch => break page,
                        () = stop.cancelled() => return Ended::Stopped,
                        () = tokio::time::sleep(REMATCH_EVERY), if recent_unmatched => {
                            recent_unmatched = self.rematch().await;
                        }
                    }
                }
            };
            match page {
                Ok(None) => return Ended::NoFeed,
                Ok(Some(page)) => {
                    failures = 0;
                    let empty = page.items.is_empty();
                    match self.apply_page(&page).await {
                        Ok(_) => {}
                        Err(e) => {
                            // The cursor stays: the page is read again after the pause.
                            tracing::error!(error = %e, "cannot record decisions from the remote inbox");
                            if !pause(stop, Duration::from_secs(5)).await {
                                return Ended::Stopped;
                            }
                            continue;
                        }
                    }
                    if cursor.as_deref() != Some(page.next_cursor.as_str()) {
                        if let Err(e) = self.store.set_remote_cursor(&url, &page.next_cursor).await
                        {
                            // Harmless: the next start re-reads from the saved one.
                            tracing::warn!(error = %e, "cannot save the remote inbox's cursor");
                        }
                        cursor = Some(page.next_cursor);
                    }
                    recent_unmatched = self.rematch().await;
                    // A server that answers an empty page before the wait is over (one
                    // shutting down, or one that ignores `wait`) is not asked again at once.
                    if empty && asked.elapsed() < wait && !pause(stop, wait - asked.elapsed()).await
                    {
                        return Ended::Stopped;
                    }
                }
                Err(e) => {
                    failures += 1;
                    let delay = FEED_BACKOFF.delay(failures);
                    if e.is_transient() {
                        tracing::warn!(error = %e, retry_in = ?delay, "the remote inbox's decisions feed failed");
                    } else {
                        tracing::error!(error = %e, retry_in = ?delay, "the remote inbox refused the decisions feed (is [inbox] key right?)");
                    }
                    if !pause(stop, delay).await {
                        return Ended::Stopped;
                    }
                }
            }
        }
    }

    /// Applies a page's items; `true` when one was kept for later (it matched no wait, or
    /// its result could not be read).
    async fn apply_page(&self, page: &Decisions) -> Result<bool, StoreError> {
        let mut unmatched = false;
        for item in &page.items {
            match self.store.wait_by_request(&item.request_id).await? {
                Some(w) => match self.apply(&w, item).await {
                    Ok(()) => {}
                    Err(ApplyError::Store(e)) => return Err(e),
                    Err(ApplyError::Unread(e)) => {
                        // The cursor moves past this item, so it is kept like a decision
                        // without a wait: `rematch` reads it again (its wait exists) until
                        // it lands, without holding up the other decisions.
                        tracing::warn!(wait = %w.id, request = %item.request_id, error = %e, "cannot read a decision yet; kept to retry");
                        let json = serde_json::to_string(item)
                            .map_err(|e| StoreError::Corrupt(format!("a feed item: {e}")))?;
                        self.store
                            .remember_unmatched(&item.request_id, &json)
                            .await?;
                        unmatched = true;
                    }
                },
                None => {
                    let json = serde_json::to_string(item)
                        .map_err(|e| StoreError::Corrupt(format!("a feed item: {e}")))?;
                    self.store
                        .remember_unmatched(&item.request_id, &json)
                        .await?;
                    unmatched = true;
                }
            }
        }
        Ok(unmatched)
    }

    /// Moves a pending wait on with a decision from the feed.
    async fn apply(&self, w: &Wait, item: &Decision) -> Result<(), ApplyError> {
        if w.status != WaitStatus::Pending {
            return Ok(());
        }
        match (item.status, &item.result) {
            (RequestStatus::Withdrawn, _) => {
                if let Some(w) = self.store.cancel_wait(&w.id).await? {
                    tracing::info!(wait = %w.id, request = %item.request_id, "the request was withdrawn; the wait is cancelled");
                    emit_resolved(
                        &self.hooks,
                        &self.store,
                        &w,
                        WaitResolvedStatus::Cancelled,
                        None,
                    )
                    .await;
                }
            }
            (RequestStatus::Pending, _) => {}
            (_, Some(result)) => {
                let decided_by = ["decidedBy", "answeredBy"]
                    .iter()
                    .find_map(|k| result.get(*k).and_then(Value::as_str));
                if self
                    .store
                    .wait_ready(&w.id, &result.to_string(), decided_by)
                    .await?
                    .is_some()
                {
                    tracing::debug!(wait = %w.id, request = %item.request_id, "decision landed (remote feed)");
                    self.resumer.notify_ready();
                }
            }
            (_, None) => {
                // Settled without a result in the feed: read it the usual way. A failure
                // is the caller's to keep (logging it alone would lose the decision: the
                // cursor moves on and the feed never reports it again).
                settle(&self.store, &*self.inbox, &self.hooks, &self.resumer, w)
                    .await
                    .map_err(ApplyError::Unread)?;
            }
        }
        Ok(())
    }

    /// Applies kept decisions whose wait has appeared; `true` while a recent one is still
    /// unmatched.
    async fn rematch(&self) -> bool {
        match self.store.matched_unmatched().await {
            Ok(matched) => {
                for (request_id, json) in matched {
                    let applied = match serde_json::from_str::<Decision>(&json) {
                        Ok(item) => match self.store.wait_by_request(&request_id).await {
                            Ok(Some(w)) => self.apply(&w, &item).await,
                            Ok(None) => Ok(()),
                            Err(e) => Err(e.into()),
                        },
                        Err(e) => {
                            tracing::warn!(request = %request_id, error = %e, "dropping an unreadable kept decision");
                            Ok(())
                        }
                    };
                    match applied {
                        Ok(()) => {
                            if let Err(e) = self.store.forget_unmatched(&request_id).await {
                                tracing::warn!(error = %e, "cannot forget a matched decision");
                            }
                        }
                        // Kept: tried again after the next page.
                        Err(ApplyError::Unread(e)) => {
                            tracing::warn!(request = %request_id, error = %e, "cannot read a kept decision yet")
                        }
                        Err(e) => {
                            tracing::error!(request = %request_id, error = %e, "cannot apply a kept decision")
                        }
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot look for kept decisions"),
        }
        self.store
            .has_unmatched_since(now_ms() - REMATCH_RECENT_MS)
            .await
            .unwrap_or(false)
    }

    /// The fallback: each open wait's result every `poll_interval`; see the module docs.
    async fn poll(&self, stop: &CancellationToken) -> Ended {
        let started = Instant::now();
        // wait id → (when to read next, failures in a row).
        let mut due: HashMap<String, (Instant, u32)> = HashMap::new();
        let mut first_pass = true;
        loop {
            if started.elapsed() >= FEED_PROBE_EVERY {
                return Ended::Probe;
            }
            let now = Instant::now();
            match self.store.waits_in(WaitStatus::Pending).await {
                Ok(waits) => {
                    let open: std::collections::HashSet<&str> =
                        waits.iter().map(|w| w.id.as_str()).collect();
                    due.retain(|id, _| open.contains(id.as_str()));
                    for w in waits.iter().filter(|w| w.request_id.is_some()) {
                        // Just started: every wait at once (decided while we were away?);
                        // later, a new wait after one interval.
                        let first = if first_pass {
                            now
                        } else {
                            now + self.poll_interval
                        };
                        let entry = due.entry(w.id.clone()).or_insert((first, 0));
                        if entry.0 > now {
                            continue;
                        }
                        if stop.is_cancelled() {
                            return Ended::Stopped;
                        }
                        match settle(&self.store, &*self.inbox, &self.hooks, &self.resumer, w).await
                        {
                            Ok(Settled::Pending) => *entry = (now + self.poll_interval, 0),
                            Ok(_) => {
                                due.remove(&w.id);
                            }
                            Err(e) => {
                                entry.1 += 1;
                                let delay = Backoff::new(self.poll_interval, MAX_POLL_BACKOFF)
                                    .delay(entry.1);
                                entry.0 = Instant::now() + delay;
                                tracing::warn!(wait = %w.id, error = %e, retry_in = ?delay, "cannot read a request's result from the remote inbox");
                                if let Err(e) =
                                    self.store.wait_attempt_failed(&w.id, &e.to_string()).await
                                {
                                    tracing::warn!(error = %e, "cannot count a failed poll");
                                }
                            }
                        }
                    }
                    first_pass = false;
                }
                Err(e) => tracing::error!(error = %e, "cannot list the pending waits"),
            }
            let next = due
                .values()
                .map(|(at, _)| *at)
                .min()
                .unwrap_or(now + POLL_RELIST_EVERY)
                .min(Instant::now() + POLL_RELIST_EVERY);
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = stop.cancelled() => return Ended::Stopped,
            }
        }
    }
}

/// Why a feed item could not be applied.
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its result could not be read from the inbox (the item had none).
    #[error("cannot read the result: {0}")]
    Unread(ClientError),
}

/// Sleeps `delay`; `false` when `stop` came first.
async fn pause(stop: &CancellationToken, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_not_in_debug_output() {
        let inbox = RemoteInbox::new("http://inbox.example/", "secret-key").unwrap();
        assert_eq!(inbox.base_url(), "http://inbox.example");
        assert!(!format!("{inbox:?}").contains("secret-key"));
    }
}
