//! Durable grants for dangerous `terminal` commands (`command_grants` table, migration 0009).
//!
//! In the gateway nobody sits at a terminal: a dangerous command becomes an approval request
//! in the inbox (a wait of kind `command`), and the reviewer's approval becomes a grant here,
//! which the gateway's approver finds when the resumed agent runs the command again.
//!
//! # Flow
//!
//! 1. The decision lands: [`Store::add_command_grant`] records one grant per wait (a second
//!    call for the same wait, e.g. a resumer retrying after a crash, changes nothing).
//! 2. The agent runs a dangerous command: [`Store::use_command_grant`] looks for a grant that
//!    covers it — an `always` grant for the exact command (any session), a `session` grant
//!    for its pattern in this session, else an unused `once` grant for the exact command and
//!    working directory in this session, consumed by the same statement that finds it, so it
//!    runs at most once whatever runs concurrently. A grant only answers the question it was
//!    given for, its pattern key: approving a command as dangerous never takes it out of the
//!    sandbox (`sandbox_escalation`), and an escalation's `once` is not used up by the
//!    dangerous-command check of the same command.
//! 3. [`Store::always_command_grants`] lists the `always` commands, which the approver also
//!    keeps in the configuration's allowlist.

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{Result, Store, StoreError, now_ms};

/// How far a grant reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantScope {
    /// This exact command, in this working directory, once, in this session.
    Once,
    /// Every command of the same pattern, for the rest of this session.
    Session,
    /// This exact command, in every session, from now on.
    Always,
}

crate::stored_as_text!(GrantScope, "command grant scope", {
    Once => "once",
    Session => "session",
    Always => "always",
});

/// A reviewer's approval of a dangerous command. Times are milliseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandGrant {
    pub id: String,
    pub wait_id: String,
    pub session_id: String,
    pub scope: GrantScope,
    pub command: String,
    pub workdir: String,
    pub pattern_key: String,
    pub decided_by: Option<String>,
    pub created_at: i64,
    /// When a `once` grant was used up.
    pub used_at: Option<i64>,
}

/// A grant to record.
#[derive(Debug, Clone)]
pub struct NewCommandGrant<'a> {
    pub wait_id: &'a str,
    pub session_id: &'a str,
    pub scope: GrantScope,
    /// The exact command; stored trimmed, as it is matched.
    pub command: &'a str,
    pub workdir: &'a str,
    pub pattern_key: &'a str,
    pub decided_by: Option<&'a str>,
}

macro_rules! grant_cols {
    () => {
        "id, wait_id, session_id, scope, command, workdir, pattern_key, decided_by, \
         created_at, used_at"
    };
}

fn grant_from_row(row: &SqliteRow) -> Result<CommandGrant> {
    Ok(CommandGrant {
        id: row.try_get("id")?,
        wait_id: row.try_get("wait_id")?,
        session_id: row.try_get("session_id")?,
        scope: GrantScope::parse(row.try_get("scope")?)?,
        command: row.try_get("command")?,
        workdir: row.try_get("workdir")?,
        pattern_key: row.try_get("pattern_key")?,
        decided_by: row.try_get("decided_by")?,
        created_at: row.try_get("created_at")?,
        used_at: row.try_get("used_at")?,
    })
}

impl Store {
    /// Records the grant a wait's decision makes, or returns the one recorded for that wait
    /// before. The flag says whether it is new.
    pub async fn add_command_grant(
        &self,
        new: &NewCommandGrant<'_>,
    ) -> Result<(CommandGrant, bool)> {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let inserted = sqlx::query(
            "INSERT INTO command_grants (id, wait_id, session_id, scope, command, workdir, \
             pattern_key, decided_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (wait_id) DO NOTHING",
        )
        .bind(&id)
        .bind(new.wait_id)
        .bind(new.session_id)
        .bind(new.scope.as_str())
        .bind(new.command.trim())
        .bind(new.workdir)
        .bind(new.pattern_key)
        .bind(new.decided_by)
        .bind(now_ms())
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        let row = sqlx::query(concat!(
            "SELECT ",
            grant_cols!(),
            " FROM command_grants WHERE wait_id = ?"
        ))
        .bind(new.wait_id)
        .fetch_one(&self.pool)
        .await?;
        Ok((grant_from_row(&row)?, inserted))
    }

    /// Finds the grant that lets `session_id` run `command` (matched trimmed) in `workdir`,
    /// for the question `pattern_key` (its dangerous pattern, or `sandbox_escalation`);
    /// `None` when a human must be asked. Only grants given for that same question count.
    ///
    /// Grants that stay are preferred to a `once` grant, which is only consumed when nothing
    /// else covers the command: an `always` grant for the command, then a `session` grant
    /// for the pattern, then the oldest unused `once` grant for the command and directory,
    /// marked used by the very statement that selects it.
    pub async fn use_command_grant(
        &self,
        session_id: &str,
        command: &str,
        workdir: &str,
        pattern_key: &str,
    ) -> Result<Option<CommandGrant>> {
        let command = command.trim();
        let row = sqlx::query(concat!(
            "SELECT ",
            grant_cols!(),
            " FROM command_grants WHERE scope = 'always' AND command = ? \
             AND pattern_key = ? ORDER BY created_at, id LIMIT 1"
        ))
        .bind(command)
        .bind(pattern_key)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = row {
            return grant_from_row(&row).map(Some);
        }
        let row = sqlx::query(concat!(
            "SELECT ",
            grant_cols!(),
            " FROM command_grants WHERE scope = 'session' AND session_id = ? \
             AND pattern_key = ? ORDER BY created_at, id LIMIT 1"
        ))
        .bind(session_id)
        .bind(pattern_key)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(row) = row {
            return grant_from_row(&row).map(Some);
        }
        // One statement finds and consumes: SQLite runs it under its write lock, so two
        // concurrent runs of the command cannot both use the same grant.
        let row = sqlx::query(concat!(
            "UPDATE command_grants SET used_at = ? WHERE id = (SELECT id FROM command_grants \
             WHERE scope = 'once' AND session_id = ? AND command = ? AND workdir = ? \
             AND pattern_key = ? AND used_at IS NULL ORDER BY created_at, id LIMIT 1) \
             AND used_at IS NULL RETURNING ",
            grant_cols!()
        ))
        .bind(now_ms())
        .bind(session_id)
        .bind(command)
        .bind(workdir)
        .bind(pattern_key)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(grant_from_row).transpose()
    }

    /// The commands of every `always` grant, oldest first, each once.
    pub async fn always_command_grants(&self) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT command FROM command_grants WHERE scope = 'always' \
             GROUP BY command ORDER BY MIN(created_at), command",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| r.try_get("command").map_err(StoreError::from))
            .collect()
    }

    /// A session's grants, oldest first (used ones included).
    pub async fn session_command_grants(&self, session_id: &str) -> Result<Vec<CommandGrant>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            grant_cols!(),
            " FROM command_grants WHERE session_id = ? ORDER BY created_at, id"
        ))
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(grant_from_row).collect()
    }

    /// Removes a wait that is still pending and never got an inbox request, because the
    /// inbox refused or could not be reached: the agent was told that nobody was asked, and
    /// a wait left behind would keep its session `waiting` for a decision that cannot come.
    /// Returns whether it was removed (not when it has a request or moved on meanwhile).
    pub async fn forget_unrequested_wait(&self, wait_id: &str) -> Result<bool> {
        let n = sqlx::query(
            "DELETE FROM waits WHERE id = ? AND status = 'pending' AND request_id IS NULL",
        )
        .bind(wait_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NewWait, WaitKind};

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
        (dir, s)
    }

    fn grant<'a>(wait: &'a str, session: &'a str, scope: GrantScope) -> NewCommandGrant<'a> {
        NewCommandGrant {
            wait_id: wait,
            session_id: session,
            scope,
            command: " rm -r build ",
            workdir: "/w",
            pattern_key: "recursive_delete",
            decided_by: Some("ana"),
        }
    }

    #[tokio::test]
    async fn once_is_used_exactly_once_even_concurrently() {
        let (_d, s) = store().await;
        let (g, fresh) = s
            .add_command_grant(&grant("w1", "a", GrantScope::Once))
            .await
            .unwrap();
        assert!(fresh);
        assert_eq!(g.command, "rm -r build");
        let (again, fresh) = s
            .add_command_grant(&grant("w1", "a", GrantScope::Session))
            .await
            .unwrap();
        assert!(!fresh, "one grant per wait");
        assert_eq!(again.id, g.id);
        assert_eq!(again.scope, GrantScope::Once);

        // Another session, another directory, another command: not covered.
        for (session, cmd, dir) in [
            ("b", "rm -r build", "/w"),
            ("a", "rm -r build", "/elsewhere"),
            ("a", "rm -r dist", "/w"),
        ] {
            assert!(
                s.use_command_grant(session, cmd, dir, "recursive_delete")
                    .await
                    .unwrap()
                    .is_none()
            );
        }
        let tries = (0..8).map(|_| {
            let s = s.clone();
            tokio::spawn(async move {
                s.use_command_grant("a", "rm -r build", "/w", "recursive_delete")
                    .await
                    .unwrap()
            })
        });
        let mut used = 0;
        for t in tries {
            if let Some(g) = t.await.unwrap() {
                assert_eq!(g.scope, GrantScope::Once);
                assert!(g.used_at.is_some());
                used += 1;
            }
        }
        assert_eq!(used, 1);
    }

    #[tokio::test]
    async fn session_grants_cover_the_pattern_and_always_every_session() {
        let (_d, s) = store().await;
        s.add_command_grant(&grant("w1", "a", GrantScope::Session))
            .await
            .unwrap();
        for _ in 0..2 {
            let g = s
                .use_command_grant("a", "rm -rf other", "/x", "recursive_delete")
                .await
                .unwrap()
                .unwrap();
            assert_eq!(g.scope, GrantScope::Session);
        }
        assert!(
            s.use_command_grant("b", "rm -rf other", "/x", "recursive_delete")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            s.use_command_grant("a", "chmod 777 x", "/x", "chmod_world_writable")
                .await
                .unwrap()
                .is_none()
        );

        s.add_command_grant(&grant("w2", "a", GrantScope::Always))
            .await
            .unwrap();
        let g = s
            .use_command_grant("b", "rm -r build", "/anywhere", "recursive_delete")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(g.scope, GrantScope::Always);
        assert_eq!(s.always_command_grants().await.unwrap(), ["rm -r build"]);
        assert_eq!(s.session_command_grants("a").await.unwrap().len(), 2);
    }

    /// A command both dangerous and stopped by the sandbox is asked about twice, each answer
    /// a grant of its own: neither may answer the other question.
    #[tokio::test]
    async fn a_grant_answers_only_the_question_it_was_given_for() {
        let (_d, s) = store().await;
        let escalation = NewCommandGrant {
            pattern_key: "sandbox_escalation",
            ..grant("w1", "a", GrantScope::Once)
        };
        s.add_command_grant(&escalation).await.unwrap();
        assert!(
            s.use_command_grant("a", "rm -r build", "/w", "recursive_delete")
                .await
                .unwrap()
                .is_none(),
            "the dangerous-command check does not use up the escalation's once"
        );
        let g = s
            .use_command_grant("a", "rm -r build", "/w", "sandbox_escalation")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(g.scope, GrantScope::Once);

        s.add_command_grant(&grant("w2", "a", GrantScope::Always))
            .await
            .unwrap();
        assert!(
            s.use_command_grant("b", "rm -r build", "/w", "sandbox_escalation")
                .await
                .unwrap()
                .is_none(),
            "always for the dangerous command does not take it out of the sandbox"
        );
        assert_eq!(
            s.use_command_grant("b", "rm -r build", "/w", "recursive_delete")
                .await
                .unwrap()
                .map(|g| g.scope),
            Some(GrantScope::Always)
        );
    }

    #[tokio::test]
    async fn only_a_wait_without_a_request_is_forgotten() {
        let (_d, s) = store().await;
        let new = |key| NewWait {
            session_id: "a",
            idem_key: key,
            tool_call_id: Some("c"),
            kind: WaitKind::Command,
            request: "{}",
        };
        let (w1, _) = s.create_wait(&new("k1")).await.unwrap();
        let (w2, _) = s.create_wait(&new("k2")).await.unwrap();
        s.set_wait_request(&w2.id, "r2").await.unwrap();
        assert!(s.forget_unrequested_wait(&w1.id).await.unwrap());
        assert!(s.wait(&w1.id).await.unwrap().is_none());
        assert!(!s.forget_unrequested_wait(&w2.id).await.unwrap());
        assert!(s.wait(&w2.id).await.unwrap().is_some());
    }
}
