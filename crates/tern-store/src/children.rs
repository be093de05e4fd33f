//! The links between sessions: a session's children (sessions whose `parent_id` is it: the
//! child sessions `delegate_task` runs, a reset's successor).

use crate::{Result, Session, Store, session_from_row};

impl Store {
    /// The sessions whose parent is `session_id`, oldest first.
    pub async fn children(&self, session_id: &str) -> Result<Vec<Session>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE parent_id = ? ORDER BY created_at, id"
        ))
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::{NewSession, Store};

    #[tokio::test]
    async fn children_are_the_sessions_linked_to_their_parent_and_outlive_it_unlinked() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
        let new = |parent: Option<&str>| NewSession {
            source: "delegate".into(),
            parent_id: parent.map(str::to_owned),
            ..Default::default()
        };
        let parent = s.create_session(new(None)).await.unwrap();
        let other = s.create_session(new(None)).await.unwrap();
        let a = s.create_session(new(Some(&parent.id))).await.unwrap();
        let b = s.create_session(new(Some(&parent.id))).await.unwrap();
        s.create_session(new(Some(&other.id))).await.unwrap();
        let ids: Vec<_> = s
            .children(&parent.id)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(ids, [a.id.clone(), b.id]);
        assert!(s.children(&a.id).await.unwrap().is_empty());
        // Deleting the parent keeps its children's transcripts, without the link.
        assert!(s.delete_session(&parent.id).await.unwrap());
        assert_eq!(s.session(&a.id).await.unwrap().parent_id, None);
    }
}
