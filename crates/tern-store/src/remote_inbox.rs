//! What following a remote inbox keeps (migration 0010): the decisions feed's cursor per
//! inbox, and the decisions it reported before their wait knew its request id.
//!
//! The remote follower (`tern_waits::remote`) applies a page of the feed, then saves the
//! page's cursor ([`Store::set_remote_cursor`]); a crash in between re-reads the page, which
//! is harmless (a wait becomes ready once). A decision without a wait is kept
//! ([`Store::remember_unmatched`]) and applied when a wait with that request id appears
//! ([`Store::matched_unmatched`], [`Store::forget_unmatched`]).

use sqlx::Row;

use crate::{Result, Store, now_ms};

impl Store {
    /// The feed cursor saved for `inbox` (its base URL).
    pub async fn remote_cursor(&self, inbox: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT cursor FROM remote_inbox_cursors WHERE inbox = ?")
                .bind(inbox)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    pub async fn set_remote_cursor(&self, inbox: &str, cursor: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO remote_inbox_cursors (inbox, cursor, updated_at) VALUES (?, ?, ?) \
             ON CONFLICT (inbox) DO UPDATE SET cursor = excluded.cursor, \
             updated_at = excluded.updated_at",
        )
        .bind(inbox)
        .bind(cursor)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Keeps a decision (JSON) whose request no wait knows yet; a repeat keeps the first.
    pub async fn remember_unmatched(&self, request_id: &str, decision: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO remote_inbox_unmatched (request_id, decision, seen_at) \
             VALUES (?, ?, ?) ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(request_id)
        .bind(decision)
        .bind(now_ms())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The kept decisions whose request a wait now knows: `(request id, decision JSON)`.
    pub async fn matched_unmatched(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT u.request_id, u.decision FROM remote_inbox_unmatched u \
             JOIN waits w ON w.request_id = u.request_id ORDER BY u.seen_at",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("request_id")?, r.try_get("decision")?)))
            .collect()
    }

    pub async fn forget_unmatched(&self, request_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM remote_inbox_unmatched WHERE request_id = ?")
            .bind(request_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Whether a decision was kept since `since_ms` (its wait may appear any moment).
    pub async fn has_unmatched_since(&self, since_ms: i64) -> Result<bool> {
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM remote_inbox_unmatched WHERE seen_at >= ?")
                .bind(since_ms)
                .fetch_one(&self.pool)
                .await?;
        Ok(n > 0)
    }

    /// Forgets kept decisions seen before `before_ms`; returns how many.
    pub async fn prune_unmatched(&self, before_ms: i64) -> Result<u64> {
        Ok(
            sqlx::query("DELETE FROM remote_inbox_unmatched WHERE seen_at < ?")
                .bind(before_ms)
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{NewWait, Store, WaitKind};

    #[tokio::test]
    async fn cursors_and_unmatched_decisions_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tern.db");
        let store = Store::open(&path).await.unwrap();
        assert_eq!(store.remote_cursor("http://b").await.unwrap(), None);
        store.set_remote_cursor("http://b", "e1").await.unwrap();
        store.set_remote_cursor("http://b", "e2").await.unwrap();
        store
            .remember_unmatched("req-1", "{\"a\":1}")
            .await
            .unwrap();
        store
            .remember_unmatched("req-1", "{\"a\":2}")
            .await
            .unwrap();
        store.remember_unmatched("req-2", "{}").await.unwrap();
        store.close().await;

        let store = Store::open(&path).await.unwrap();
        assert_eq!(
            store.remote_cursor("http://b").await.unwrap().as_deref(),
            Some("e2")
        );
        assert_eq!(store.remote_cursor("http://c").await.unwrap(), None);
        assert!(store.matched_unmatched().await.unwrap().is_empty());
        let (wait, _) = store
            .create_wait(&NewWait {
                session_id: "s1",
                idem_key: "tern-wait:s1:c1",
                tool_call_id: Some("c1"),
                kind: WaitKind::Approval,
                request: "{}",
            })
            .await
            .unwrap();
        store.set_wait_request(&wait.id, "req-1").await.unwrap();
        let matched = store.matched_unmatched().await.unwrap();
        assert_eq!(matched, [("req-1".to_owned(), "{\"a\":1}".to_owned())]);
        store.forget_unmatched("req-1").await.unwrap();
        assert!(store.matched_unmatched().await.unwrap().is_empty());
        assert!(store.has_unmatched_since(0).await.unwrap());
        assert_eq!(store.prune_unmatched(i64::MAX).await.unwrap(), 1);
        assert!(!store.has_unmatched_since(0).await.unwrap());
    }
}
