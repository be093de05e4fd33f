//! Reviewers: the people who decide the inbox's requests, and how they prove who they are.
//! Reviewers are separate from agent keys: nothing here accepts an agent key, so an agent can
//! never act as a reviewer.
//!
//! # The flow at a glance
//!
//! 1. A reviewer is added by name ([`Reviewers::add`]; the gateway's first start adds
//!    `admin` with [`Reviewers::ensure`]).
//! 2. [`Reviewers::login_token`] makes a one-time login token for them, shown to a person as
//!    a link `…/inbox/login/<token>`. It is valid for [`LOGIN_TTL_MS`] (24 h).
//! 3. Opening the link only checks it ([`Reviewers::login_token_owner`]) and shows a "Sign
//!    in" button, which calls [`Reviewers::login`]: in one transaction the token is consumed
//!    (a conditional `UPDATE … WHERE consumed_at IS NULL AND expires_at > now`, so of two
//!    racing uses exactly one wins) and a browser session is created, with its own session
//!    token (the cookie) and CSRF token ([`csrf_token`], derived from the session token, not
//!    stored). Sessions last [`SESSION_TTL_MS`] (30 days) from login.
//! 4. Each request with the cookie is checked by [`Reviewers::session`], which names the
//!    reviewer and gives the session's CSRF token; [`Reviewers::logout`] ends the session.
//! 5. Programs (the `tern inbox` CLI) use bearer tokens `tern_rv_<64 hex>` from
//!    [`Reviewers::bearer_token`], checked by [`Reviewers::check_bearer`].
//! 6. [`Reviewers::remove`] disables a reviewer: their sessions end, their tokens are revoked
//!    and their unused login links stop working; the row stays so old decisions keep a name.
//!
//! # Secrets
//!
//! Every secret is 256 random bits from the system generator, and only its SHA-256 is stored.
//! Bearer tokens are checked as the gateway checks agent keys: the candidate's hash is
//! compared in constant time with every active token's hash. Login and session tokens, of
//! which there can be many, are looked up by their hash through the table's index: the lookup
//! can at most reveal how much of a *hash* matched, which does not help to find a token.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tern_store::{Store, StoreError, now_ms};

use crate::service::Inbox;
use crate::store;
pub use crate::store::reviewers::Reviewer;

/// How long a login link works.
pub const LOGIN_TTL_MS: i64 = 24 * 60 * 60 * 1000;
/// How long a browser session lasts from login.
pub const SESSION_TTL_MS: i64 = 30 * 24 * 60 * 60 * 1000;
/// The start of every reviewer bearer token.
pub const BEARER_PREFIX: &str = "tern_rv_";
/// The reviewer the gateway creates on its first start.
pub const ADMIN: &str = "admin";
/// The longest reviewer name.
pub const MAX_NAME_LEN: usize = 64;

/// A reviewer operation that did not happen; nothing is stored when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum ReviewerError {
    #[error("no reviewer named {0:?}")]
    NotFound(String),
    #[error("a reviewer named {0:?} already exists")]
    Exists(String),
    #[error("invalid reviewer name {0:?}: use 1 to {MAX_NAME_LEN} letters, digits and . _ - @")]
    InvalidName(String),
    #[error("the system random generator failed: {0}")]
    Random(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type Result<T, E = ReviewerError> = std::result::Result<T, E>;

/// A session just created by a login: `token` goes into the cookie, and is seen only now.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub token: String,
    /// The session's CSRF token, [`csrf_token`] of `token`.
    pub csrf: String,
    pub reviewer: String,
    /// Milliseconds since the Unix epoch.
    pub expires_at: i64,
}

/// A live session, found by its token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub reviewer: String,
    /// The session's CSRF token, [`csrf_token`] of the session token.
    pub csrf: String,
    pub expires_at: i64,
}

/// The reviewers, their login links, sessions and tokens. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Reviewers {
    store: Store,
}

impl Inbox {
    /// The reviewers of this inbox (same database).
    pub fn reviewers(&self) -> Reviewers {
        Reviewers::new(self.store().clone())
    }
}

/// 32 random bytes as 64 hex characters.
fn random_hex() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ReviewerError::Random(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// The CSRF token of the session whose token is `session_token`: hex SHA-256 of
/// `"tern-csrf:" + session_token`. Derived rather than stored, so the database holds no
/// usable secret; a request that must prove it comes from the inbox's own pages carries the
/// session token in its cookie anyway, and the derived value, echoed into the pages' forms,
/// does not reveal the session token. Compare it in constant time.
pub fn csrf_token(session_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"tern-csrf:");
    h.update(session_token.as_bytes());
    hex::encode(h.finalize())
}

/// Hex SHA-256 of a secret, as stored.
fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// Names a reviewer cannot take: they would read as another actor in the audit trail.
const RESERVED_NAMES: [&str; 3] = ["platform", "agent", "system"];

fn valid_name(name: &str) -> bool {
    !RESERVED_NAMES.iter().any(|r| name.eq_ignore_ascii_case(r))
        && !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

impl Reviewers {
    pub fn new(store: Store) -> Self {
        Reviewers { store }
    }

    /// The active reviewer named `name`.
    pub async fn get(&self, name: &str) -> Result<Option<Reviewer>> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::active(&mut conn, name).await?)
    }

    async fn require(&self, name: &str) -> Result<Reviewer> {
        self.get(name)
            .await?
            .ok_or_else(|| ReviewerError::NotFound(name.to_owned()))
    }

    /// Adds a reviewer; the name must be new among active reviewers.
    pub async fn add(&self, name: &str, admin: bool) -> Result<Reviewer> {
        if !valid_name(name) {
            return Err(ReviewerError::InvalidName(name.to_owned()));
        }
        let reviewer = Reviewer {
            id: new_id(),
            name: name.to_owned(),
            admin,
            created_at: now_ms(),
        };
        let mut conn = store::read(&self.store).await?;
        if !store::reviewers::insert(&mut conn, &reviewer).await? {
            return Err(ReviewerError::Exists(name.to_owned()));
        }
        Ok(reviewer)
    }

    /// The reviewer named `name`, added first if there is none; `true` when it was added.
    pub async fn ensure(&self, name: &str, admin: bool) -> Result<(Reviewer, bool)> {
        match self.add(name, admin).await {
            Ok(r) => Ok((r, true)),
            // Someone else (another gateway start) may have added it in between.
            Err(ReviewerError::Exists(_)) => Ok((self.require(name).await?, false)),
            Err(e) => Err(e),
        }
    }

    /// The active reviewers, by name.
    pub async fn list(&self) -> Result<Vec<Reviewer>> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::all_active(&mut conn).await?)
    }

    /// Disables a reviewer: ends their sessions, revokes their tokens and voids their unused
    /// login links. `false` when there was no such active reviewer.
    pub async fn remove(&self, name: &str) -> Result<bool> {
        let mut tx = store::write(&self.store).await?;
        if !store::reviewers::disable(&mut tx, name, now_ms()).await? {
            return Ok(false);
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(true)
    }

    // ---- login links and sessions ---------------------------------------------------------

    /// A new one-time login token for `name` (the only time it is seen), valid for
    /// [`LOGIN_TTL_MS`]. Earlier links stay valid until used or expired.
    pub async fn login_token(&self, name: &str) -> Result<String> {
        let reviewer = self.require(name).await?;
        let token = random_hex()?;
        let now = now_ms();
        let mut conn = store::read(&self.store).await?;
        store::reviewers::insert_login_token(
            &mut conn,
            &hash(&token),
            &reviewer.id,
            now,
            now + LOGIN_TTL_MS,
        )
        .await?;
        Ok(token)
    }

    /// Whether `name` has ever logged in with a link.
    pub async fn has_logged_in(&self, name: &str) -> Result<bool> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::has_used_login_token(&mut conn, name).await?)
    }

    /// The name of the reviewer whose login token `token` is, if it is still usable (not
    /// used, not expired, its reviewer not removed) — without consuming it: opening a link
    /// only shows a "Sign in" button, since link previews in chat and mail clients open it
    /// too; [`Reviewers::login`] consumes it when the person presses the button.
    pub async fn login_token_owner(&self, token: &str) -> Result<Option<String>> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::login_token_owner(&mut conn, &hash(token), now_ms()).await?)
    }

    /// Consumes a login token and opens a session. `None` when the token is unknown, used,
    /// expired, or its reviewer was removed — deliberately one answer for all four.
    pub async fn login(&self, token: &str) -> Result<Option<NewSession>> {
        let now = now_ms();
        let mut tx = store::write(&self.store).await?;
        let Some(reviewer_id) =
            store::reviewers::consume_login_token(&mut tx, &hash(token), now).await?
        else {
            return Ok(None);
        };
        let Some(reviewer) = store::reviewers::active_name(&mut tx, &reviewer_id).await? else {
            // Dropping the transaction rolls the claim back; the token is void anyway.
            return Ok(None);
        };
        let token = random_hex()?;
        let session = NewSession {
            csrf: csrf_token(&token),
            token,
            reviewer,
            expires_at: now + SESSION_TTL_MS,
        };
        store::reviewers::insert_session(
            &mut tx,
            &hash(&session.token),
            &reviewer_id,
            now,
            session.expires_at,
        )
        .await?;
        // Upkeep while holding the write lock anyway: sessions past their end are dead rows.
        store::reviewers::delete_ended_sessions(&mut tx, now).await?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(Some(session))
    }

    /// The live session with this token, or `None` (unknown, expired, logged out, or its
    /// reviewer removed).
    pub async fn session(&self, token: &str) -> Result<Option<SessionInfo>> {
        let token_hash = hash(token);
        let mut conn = store::read(&self.store).await?;
        let Some(found) = store::reviewers::session(&mut conn, &token_hash, now_ms()).await? else {
            return Ok(None);
        };
        if !bool::from(found.token_hash.as_bytes().ct_eq(token_hash.as_bytes())) {
            return Ok(None);
        }
        Ok(Some(SessionInfo {
            reviewer: found.reviewer,
            csrf: csrf_token(token),
            expires_at: found.expires_at,
        }))
    }

    /// Ends the session with this token; `false` when there was none.
    pub async fn logout(&self, token: &str) -> Result<bool> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::delete_session(&mut conn, &hash(token)).await?)
    }

    // ---- bearer tokens --------------------------------------------------------------------

    /// A new bearer token `tern_rv_<64 hex>` for `name` (the only time it is seen).
    pub async fn bearer_token(&self, name: &str, label: &str) -> Result<String> {
        let reviewer = self.require(name).await?;
        let token = format!("{BEARER_PREFIX}{}", random_hex()?);
        let mut conn = store::read(&self.store).await?;
        store::reviewers::insert_bearer(&mut conn, &hash(&token), &reviewer.id, label, now_ms())
            .await?;
        Ok(token)
    }

    /// Revokes `name`'s active tokens labelled `label`; returns how many.
    pub async fn revoke_tokens(&self, name: &str, label: &str) -> Result<u64> {
        let mut conn = store::read(&self.store).await?;
        Ok(store::reviewers::revoke_bearers(&mut conn, name, label, now_ms()).await?)
    }

    /// The name of the active reviewer whose bearer token `token` is, or `None`.
    pub async fn check_bearer(&self, token: &str) -> Result<Option<String>> {
        if !token.starts_with(BEARER_PREFIX) {
            return Ok(None);
        }
        let candidate: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut conn = store::read(&self.store).await?;
        let tokens = store::reviewers::active_bearers(&mut conn).await?;
        let mut found = None;
        for (stored, name) in tokens {
            let Ok(bytes) = hex::decode(&stored) else {
                continue;
            };
            // Every token is compared, whatever matched before, so timing says nothing about
            // which token (or how much of one) matched.
            if bytes.len() == 32 && bool::from(bytes.ct_eq(&candidate)) && found.is_none() {
                found = Some(name);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::*;

    async fn reviewers() -> (tempfile::TempDir, Reviewers) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("t.db")).await.unwrap();
        (dir, Reviewers::new(store))
    }

    #[tokio::test]
    async fn add_list_and_names() {
        let (_d, r) = reviewers().await;
        let alice = r.add("alice", false).await.unwrap();
        assert!(!alice.admin);
        assert!(matches!(
            r.add("alice", true).await,
            Err(ReviewerError::Exists(_))
        ));
        for bad in ["", "a b", "x/y", &"a".repeat(65), "PLATFORM", "agent"] {
            assert!(matches!(
                r.add(bad, false).await,
                Err(ReviewerError::InvalidName(_))
            ));
        }
        let (admin, created) = r.ensure(ADMIN, true).await.unwrap();
        assert!(created && admin.admin);
        let (again, created) = r.ensure(ADMIN, true).await.unwrap();
        assert!(!created);
        assert_eq!(again.id, admin.id);
        let names: Vec<_> = r
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|x| x.name)
            .collect();
        assert_eq!(names, ["admin", "alice"]);
    }

    #[tokio::test]
    async fn login_token_works_once() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        assert!(!r.has_logged_in("alice").await.unwrap());
        let token = r.login_token("alice").await.unwrap();
        assert_eq!(token.len(), 64);
        // Looking at the token (a link preview) does not use it up.
        for _ in 0..2 {
            assert_eq!(
                r.login_token_owner(&token).await.unwrap().as_deref(),
                Some("alice")
            );
        }
        assert!(!r.has_logged_in("alice").await.unwrap());
        assert_eq!(r.login_token_owner("nonsense").await.unwrap(), None);
        let s = r.login(&token).await.unwrap().expect("first use logs in");
        assert_eq!(r.login_token_owner(&token).await.unwrap(), None);
        assert_eq!(s.reviewer, "alice");
        assert_ne!(s.token, s.csrf);
        assert!(
            r.login(&token).await.unwrap().is_none(),
            "second use refused"
        );
        assert!(r.login("nonsense").await.unwrap().is_none());
        assert!(r.has_logged_in("alice").await.unwrap());
        let info = r.session(&s.token).await.unwrap().expect("session live");
        assert_eq!(info.reviewer, "alice");
        assert_eq!(info.csrf, s.csrf);
        assert!(r.session(&s.csrf).await.unwrap().is_none());
        assert_eq!(s.csrf, csrf_token(&s.token));
        assert!(r.logout(&s.token).await.unwrap());
        assert!(r.session(&s.token).await.unwrap().is_none());
        assert!(matches!(
            r.login_token("bob").await,
            Err(ReviewerError::NotFound(_))
        ));
    }

    /// The database holds neither the session token nor its CSRF token, only the token's
    /// hash: a copy of the database cannot forge a form.
    #[tokio::test]
    async fn sessions_store_no_usable_secret() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        let a = r
            .login(&r.login_token("alice").await.unwrap())
            .await
            .unwrap()
            .unwrap();
        let b = r
            .login(&r.login_token("alice").await.unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_ne!(a.csrf, b.csrf, "each session has its own CSRF token");
        let rows = sqlx::query("SELECT * FROM inbox_sessions")
            .fetch_all(r.store.pool())
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
        for row in &rows {
            for i in 0..row.len() {
                let value: Option<String> = row.try_get_unchecked(i).ok().flatten();
                for secret in [&a.token, &a.csrf, &b.token, &b.csrf] {
                    assert_ne!(
                        value.as_deref(),
                        Some(secret.as_str()),
                        "column {i} is a secret"
                    );
                }
            }
        }
        // The session names its CSRF token, derived again from the cookie's token.
        let info = r.session(&b.token).await.unwrap().unwrap();
        assert_eq!(info.csrf, b.csrf);
    }

    #[tokio::test]
    async fn expired_login_token_is_refused() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        let token = r.login_token("alice").await.unwrap();
        sqlx::query("UPDATE inbox_login_tokens SET expires_at = ?")
            .bind(now_ms() - 1)
            .execute(r.store.pool())
            .await
            .unwrap();
        assert!(r.login(&token).await.unwrap().is_none());
        assert!(!r.has_logged_in("alice").await.unwrap());
    }

    #[tokio::test]
    async fn expired_session_is_refused() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        let token = r.login_token("alice").await.unwrap();
        let s = r.login(&token).await.unwrap().unwrap();
        sqlx::query("UPDATE inbox_sessions SET expires_at = ?")
            .bind(now_ms() - 1)
            .execute(r.store.pool())
            .await
            .unwrap();
        assert!(r.session(&s.token).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn bearer_tokens() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        let t = r.bearer_token("alice", "cli").await.unwrap();
        assert!(t.starts_with(BEARER_PREFIX));
        assert_eq!(t.len(), BEARER_PREFIX.len() + 64);
        assert_eq!(r.check_bearer(&t).await.unwrap().as_deref(), Some("alice"));
        assert_eq!(r.check_bearer("tern_rv_00").await.unwrap(), None);
        // The hash is not the token.
        assert_eq!(r.check_bearer(&hash(&t)).await.unwrap(), None);
        assert_eq!(r.revoke_tokens("alice", "other").await.unwrap(), 0);
        assert_eq!(r.revoke_tokens("alice", "cli").await.unwrap(), 1);
        assert_eq!(r.check_bearer(&t).await.unwrap(), None);
    }

    #[tokio::test]
    async fn removal_ends_everything_and_frees_the_name() {
        let (_d, r) = reviewers().await;
        r.add("alice", false).await.unwrap();
        let link = r.login_token("alice").await.unwrap();
        let used = r.login_token("alice").await.unwrap();
        let s = r.login(&used).await.unwrap().unwrap();
        let t = r.bearer_token("alice", "cli").await.unwrap();
        assert!(r.remove("alice").await.unwrap());
        assert!(!r.remove("alice").await.unwrap());
        assert!(r.session(&s.token).await.unwrap().is_none());
        assert_eq!(r.check_bearer(&t).await.unwrap(), None);
        assert!(r.login(&link).await.unwrap().is_none());
        assert!(r.get("alice").await.unwrap().is_none());
        // A new alice is a new reviewer; the old one's credentials stay dead.
        let again = r.add("alice", false).await.unwrap();
        assert_eq!(r.list().await.unwrap(), vec![again]);
        assert_eq!(r.check_bearer(&t).await.unwrap(), None);
        assert!(r.session(&s.token).await.unwrap().is_none());
    }
}
