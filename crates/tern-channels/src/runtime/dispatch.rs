//! Handling recorded events, in the order they came.
//!
//! - A command (`/stop`, `/new`, …) is handled at once, even while the chat's turn runs.
//! - A tap, a reaction, or a reply to a posted request decides it ([`super::posts`]).
//! - Any other message joins its chat's queue: one task per chat takes them one by one, so
//!   a message sent during a turn waits behind it. Its turn is admitted by the host like any
//!   other; once at the head of the session's queue, the message is appended to the
//!   transcript in the transaction that marks the event appended, and the turn runs.
//!
//! After a crash, a `pending` event is handled again from the start (nothing of it was
//! stored), and an `appended` one is not: its message is in the transcript and its turn was
//! cut short, which the chat is told.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tern_agent::TurnRequest;
use tern_llm::Role;
use tern_store::NewMessage;
use tern_store::channels::ChannelEvent;
use tokio::sync::mpsc;

use super::chat::{StoredFile, StoredMessage, StoredTap, chat_of, current_session, send_text};
use super::{Inner, commands, posts};
use crate::platform::{ChatRef, FileRef};

pub(super) async fn run(inner: Arc<Inner>) {
    let channel = inner.settings.name.clone();
    let mut queues: HashMap<ChatRef, mpsc::UnboundedSender<ChannelEvent>> = HashMap::new();
    let mut queued: HashSet<i64> = HashSet::new();
    let mut first = true;
    loop {
        let notified = inner.events.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match inner.store.channel_open_events(&channel).await {
            Ok(events) => {
                let open: HashSet<i64> = events.iter().map(|e| e.id).collect();
                queued.retain(|id| open.contains(id));
                for ev in events {
                    if queued.contains(&ev.id) {
                        continue;
                    }
                    if ev.status == "appended" {
                        if first {
                            cut_short(&inner, &ev).await;
                        }
                        continue;
                    }
                    if let Some(ev) = handle_now(&inner, ev).await {
                        queued.insert(ev.id);
                        let chat = chat_of(&ev);
                        let tx = queues.entry(chat.clone()).or_insert_with(|| {
                            let (tx, rx) = mpsc::unbounded_channel();
                            inner.tasks.spawn(chat_queue(inner.clone(), rx));
                            tx
                        });
                        let _ = tx.send(ev);
                    }
                }
            }
            Err(e) => tracing::error!(channel, error = %e, "cannot read the channel's events"),
        }
        first = false;
        tokio::select! {
            () = notified => {}
            () = inner.stop.cancelled() => return,
        }
    }
}

/// Handles what does not wait for the chat's queue; gives back a message for the queue.
async fn handle_now(inner: &Arc<Inner>, ev: ChannelEvent) -> Option<ChannelEvent> {
    match ev.kind.as_str() {
        "callback" | "reaction" => {
            match serde_json::from_str::<StoredTap>(&ev.payload) {
                Ok(tap) => posts::tap(inner, &ev, &tap).await,
                Err(e) => tracing::warn!(event = ev.id, error = %e, "an unreadable tap"),
            }
            done(inner, ev.id).await;
            None
        }
        "message" => {
            let msg = match serde_json::from_str::<StoredMessage>(&ev.payload) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(event = ev.id, error = %e, "an unreadable message");
                    done(inner, ev.id).await;
                    return None;
                }
            };
            if commands::handle(inner, &ev, &msg.text).await || posts::reply(inner, &ev, &msg).await
            {
                done(inner, ev.id).await;
                return None;
            }
            Some(ev)
        }
        other => {
            tracing::warn!(event = ev.id, kind = other, "an event of an unknown kind");
            done(inner, ev.id).await;
            None
        }
    }
}

async fn done(inner: &Inner, id: i64) {
    if let Err(e) = inner.store.channel_event_done(id).await {
        tracing::warn!(event = id, error = %e, "cannot mark a channel event handled");
    }
}

/// An event whose message was appended before the last stop, and whose turn therefore did
/// not finish here.
async fn cut_short(inner: &Inner, ev: &ChannelEvent) {
    // The turn may have ended just before the stop, with only the event's mark left undone:
    // then its answer is there (and delivered), and there is nothing to tell.
    if inner
        .store
        .channel_event_answered(ev.id)
        .await
        .unwrap_or(false)
    {
        done(inner, ev.id).await;
        return;
    }
    let text = "The gateway restarted while I was answering your last message, so that answer \
                was cut short. Send it again, or tell me to continue.";
    send_text(inner, &chat_of(ev), text).await;
    done(inner, ev.id).await;
}

/// One chat's messages, one turn after the other.
async fn chat_queue(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<ChannelEvent>) {
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
            () = inner.stop.cancelled() => return,
        };
        let id = ev.id;
        let chat = chat_of(&ev);
        match message_turn(&inner, ev).await {
            Ok(()) => done(&inner, id).await,
            // Left pending: handled again after the restart.
            Err(TurnError::Stopping) => return,
            Err(e) => {
                tracing::warn!(channel = %inner.settings.name, event = id, error = %e, "a chat message could not be handled");
                // Never silently: the agent's own failures were told already.
                if !matches!(e, TurnError::Agent(_)) {
                    send_text(
                        &inner,
                        &chat,
                        &format!("Your message could not be handled ({e}); send it again."),
                    )
                    .await;
                }
                done(&inner, id).await;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum TurnError {
    #[error("the channel is stopping")]
    Stopping,
    #[error(transparent)]
    Host(#[from] super::HostError),
    #[error(transparent)]
    Store(#[from] tern_store::StoreError),
    #[error(transparent)]
    Agent(#[from] tern_agent::AgentError),
}

async fn message_turn(inner: &Arc<Inner>, ev: ChannelEvent) -> Result<(), TurnError> {
    let chat = chat_of(&ev);
    let msg: StoredMessage = serde_json::from_str(&ev.payload)
        .map_err(|e| tern_store::StoreError::Corrupt(format!("channel event: {e}")))?;
    let title: String = msg.text.chars().take(60).collect();
    let session = current_session(inner, &chat, Some(title)).await?;
    let defaults = inner.host.turn_defaults();
    let mut input = msg.text.clone();
    for f in &msg.files {
        input.push_str("\n\n");
        input.push_str(&receive_file(inner, &defaults.workdir, f).await);
    }
    if input.trim().is_empty() {
        return Ok(());
    }
    let admission = tokio::select! {
        a = inner.host.admit(&session) => a?,
        () = inner.stop.cancelled() => return Err(TurnError::Stopping),
    };
    let ticket = tokio::select! {
        t = admission.ticket.ready() => t,
        () = admission.interrupt.token().cancelled() => {
            let _ = inner.store.channel_event_done(ev.id).await;
            return Ok(());
        }
    };
    let appended = inner
        .store
        .channel_append_event(ev.id, &session, &NewMessage::new(Role::User, input.clone()))
        .await?;
    if appended.is_none() {
        // Appended already (a second delivery of the same event): its turn ran then.
        return Ok(());
    }
    inner.wake_outbound();
    let req = TurnRequest {
        session_id: session.clone(),
        input,
        input_appended: true,
        interrupt: admission.interrupt.clone(),
        system_prompt: None,
        approver: defaults.approver,
        workdir: defaults.workdir,
        toolsets: defaults.toolsets,
        events: Some(admission.events.clone()),
        ticket: Some(ticket),
    };
    let agent = inner.host.agent().clone();
    let guard = admission.guard;
    // On a task of its own, so a turn is never dropped half-way when this queue stops: the
    // gateway's drain interrupts it properly.
    let turn = tokio::spawn(async move {
        let r = agent.run_turn(req).await;
        drop(guard);
        r
    });
    let outcome = turn
        .await
        .map_err(|e| tern_store::StoreError::Corrupt(format!("the turn's task failed: {e}")))?;
    inner.wake_outbound();
    match outcome {
        Ok(_) => Ok(()),
        Err(e) => {
            send_text(inner, &chat, &format!("The turn failed: {e}")).await;
            Err(e.into())
        }
    }
}

/// Saves an inbound file in the working directory; the line that tells the model about it.
async fn receive_file(inner: &Inner, workdir: &Path, f: &StoredFile) -> String {
    let file = FileRef {
        id: f.id.clone(),
        name: f.name.clone(),
        mime_type: f.mime_type.clone(),
        is_image: f.is_image,
        size: f.size,
    };
    let what = if f.is_image { "an image" } else { "a file" };
    let bytes = match inner
        .platform
        .download(&file, inner.settings.max_file_bytes)
        .await
    {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(channel = %inner.settings.name, error = %e, "cannot download a file from the chat");
            return format!("[The user sent {what} that could not be received: {e}]");
        }
    };
    let name = safe_name(f.name.as_deref(), f.is_image, f.mime_type.as_deref());
    let rel = match save_unique(workdir, &inner.settings.files_dir, &name, &bytes).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(channel = %inner.settings.name, error = %e, "cannot save a file from the chat");
            return format!("[The user sent {what} that could not be saved: {e}]");
        }
    };
    let shown = inner.settings.files_dir.join(rel);
    format!(
        "[The user sent {what}: {} ({} bytes{})]",
        shown.display(),
        bytes.len(),
        f.mime_type
            .as_deref()
            .map(|m| format!(", {m}"))
            .unwrap_or_default()
    )
}

/// A file name without directories or odd characters.
fn safe_name(name: Option<&str>, is_image: bool, mime: Option<&str>) -> String {
    let base = name
        .and_then(|n| Path::new(n).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let cleaned: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cleaned = cleaned.trim_start_matches('.').to_owned();
    if !cleaned.is_empty() {
        return cleaned;
    }
    let ext = match mime {
        Some("image/png") => "png",
        Some("image/jpeg") | None if is_image => "jpg",
        Some("application/pdf") => "pdf",
        Some("text/plain") => "txt",
        _ => "bin",
    };
    format!("{}.{ext}", if is_image { "photo" } else { "file" })
}

/// Writes `bytes` as `workdir/dir/name`, or `name-2`… when taken; the name used. The agent
/// controls the working directory, so nothing on the way is followed: `dir` (one component)
/// is opened with `O_NOFOLLOW` and the file created in it with `O_EXCL | O_NOFOLLOW` — a
/// symlink planted as `chat-files` (to `~/.ssh`, to tern's home) makes the save fail rather
/// than write there. The working directory itself is the owner's configuration.
async fn save_unique(
    workdir: &Path,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> std::io::Result<PathBuf> {
    let (workdir, dir, name, bytes) = (
        workdir.to_owned(),
        dir.to_owned(),
        name.to_owned(),
        bytes.to_vec(),
    );
    tokio::task::spawn_blocking(move || save_beneath(&workdir, &dir, &name, &bytes))
        .await
        .map_err(std::io::Error::other)?
}

fn save_beneath(workdir: &Path, dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    use std::io::Write as _;

    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::{Mode, mkdirat};

    let mut parts = dir.components();
    let (Some(std::path::Component::Normal(component)), None) = (parts.next(), parts.next()) else {
        return Err(std::io::Error::other(
            "the files directory must be one plain name",
        ));
    };
    let wd = std::fs::File::open(workdir)?;
    match mkdirat(&wd, component, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let dfd = openat(
        &wd,
        component,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        std::io::Error::other(format!("{} is not a plain directory ({e})", dir.display()))
    })?;
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_owned(), format!(".{e}")),
        _ => (name.to_owned(), String::new()),
    };
    for n in 1..1000 {
        let candidate = if n == 1 {
            name.to_owned()
        } else {
            format!("{stem}-{n}{ext}")
        };
        match openat(
            &dfd,
            candidate.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => {
                let mut f = std::fs::File::from(fd);
                f.write_all(bytes)?;
                f.sync_all()?;
                return Ok(PathBuf::from(candidate));
            }
            Err(nix::errno::Errno::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::other("too many files with that name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_lose_directories_and_odd_characters() {
        assert_eq!(safe_name(Some("../../etc/passwd"), false, None), "passwd");
        assert_eq!(safe_name(Some(".bashrc"), false, None), "bashrc");
        assert_eq!(safe_name(Some("a b;c.txt"), false, None), "a_b_c.txt");
        assert_eq!(safe_name(None, true, Some("image/png")), "photo.png");
        assert_eq!(safe_name(None, true, None), "photo.jpg");
        assert_eq!(safe_name(Some(""), false, None), "file.bin");
    }

    #[tokio::test]
    async fn saving_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let files = Path::new("chat-files");
        let a = save_unique(dir.path(), files, "x.txt", b"1").await.unwrap();
        let b = save_unique(dir.path(), files, "x.txt", b"2").await.unwrap();
        assert_eq!(a, PathBuf::from("x.txt"));
        assert_eq!(b, PathBuf::from("x-2.txt"));
        assert_eq!(
            std::fs::read(dir.path().join("chat-files/x.txt")).unwrap(),
            b"1"
        );
    }

    #[tokio::test]
    async fn a_symlink_planted_in_the_workspace_is_not_followed() {
        let work = tempfile::tempdir().unwrap();
        let secret = tempfile::tempdir().unwrap();
        // The agent points `chat-files` at a directory it must not write to.
        std::os::unix::fs::symlink(secret.path(), work.path().join("chat-files")).unwrap();
        let r = save_unique(
            work.path(),
            Path::new("chat-files"),
            "authorized_keys",
            b"x",
        )
        .await;
        assert!(r.is_err(), "{r:?}");
        assert!(!secret.path().join("authorized_keys").exists());
        // A symlink planted as the file's name is not followed either.
        std::fs::remove_file(work.path().join("chat-files")).unwrap();
        std::fs::create_dir(work.path().join("chat-files")).unwrap();
        std::os::unix::fs::symlink(
            secret.path().join("config.toml"),
            work.path().join("chat-files/config.toml"),
        )
        .unwrap();
        let name = save_unique(work.path(), Path::new("chat-files"), "config.toml", b"x")
            .await
            .unwrap();
        assert_eq!(name, PathBuf::from("config-2.toml"));
        assert!(!secret.path().join("config.toml").exists());
    }
}
