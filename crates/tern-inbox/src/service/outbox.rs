//! The notification outbox as the delivery worker uses it (see [`crate::notify`] for the
//! flow): due rows, and the outcome of each attempt.

use tern_store::now_ms;

use super::{Inbox, Result};
use crate::notify::{Delivery, NotificationRow};
use crate::store;

impl Inbox {
    /// Pending notifications whose next attempt is due at `now` (ms), oldest first.
    pub async fn due_notifications(&self, now: i64, limit: u32) -> Result<Vec<Delivery>> {
        let mut conn = store::read(self.store()).await?;
        store::notifications::due(&mut conn, now, limit).await
    }

    /// When the next pending notification is due (ms), if any.
    pub async fn next_notification_due(&self) -> Result<Option<i64>> {
        let mut conn = store::read(self.store()).await?;
        store::notifications::next_due(&mut conn).await
    }

    /// Records a successful attempt.
    pub async fn notification_delivered(&self, id: &str) -> Result<()> {
        let mut conn = store::read(self.store()).await?;
        store::notifications::delivered(&mut conn, id, now_ms()).await
    }

    /// Records a failed attempt: retried at `retry_at` (ms), or given up (`failed`) with
    /// `None`.
    pub async fn notification_failed(
        &self,
        id: &str,
        error: &str,
        retry_at: Option<i64>,
    ) -> Result<()> {
        let (status, next) = match retry_at {
            Some(at) => ("pending", at),
            None => ("failed", now_ms()),
        };
        // Errors can be long (a chain of causes); the row keeps the first 1000 characters.
        let error: String = error.chars().take(1000).collect();
        let mut conn = store::read(self.store()).await?;
        store::notifications::failed(&mut conn, id, status, next, &error).await
    }

    /// The notifications of a request, oldest first.
    pub async fn notifications_of(&self, request_id: &str) -> Result<Vec<NotificationRow>> {
        let mut conn = store::read(self.store()).await?;
        store::notifications::of_request(&mut conn, request_id).await
    }
}
