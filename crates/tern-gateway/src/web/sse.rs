//! `GET /inbox/events`: the inbox's change feed as server-sent events, for the list page's
//! live refresh.
//!
//! Each created or decided request is one `change` event whose data is
//! `{"requestId", "what": "created"|"decided"}`. A subscriber that fell behind the feed's
//! buffer gets one `reload` event (it missed changes and should reload what it shows).
//! Comments are sent as keep-alives so proxies and browsers keep the connection open.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use tern_inbox::review::Change;

/// How often a keep-alive comment is sent on an idle stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The stream ends when `closing` is cancelled (the gateway shuts down), so an open
/// browser tab does not hold the server open.
pub(super) fn stream(
    changes: tokio::sync::broadcast::Receiver<Change>,
    closing: CancellationToken,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = futures_util::stream::unfold(changes, |mut rx| async move {
        loop {
            let event = match rx.recv().await {
                Ok(change) => Event::default().event("change").json_data(&change).ok(),
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "inbox event stream fell behind");
                    Some(Event::default().event("reload").data("missed changes"))
                }
                // The inbox is gone: the gateway is shutting down.
                Err(RecvError::Closed) => return None,
            };
            if let Some(e) = event {
                return Some((Ok(e), rx));
            }
        }
    });
    let events = events.take_until(closing.cancelled_owned());
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("keep-alive"))
}
