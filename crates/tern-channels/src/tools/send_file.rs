//! `send_file`: sends a file from the workspace to the chat the session talks to.
//!
//! The file is read now, under the session's sandbox like the file tools read (so nothing
//! outside the policy — tern's home included — can be sent, whatever a symlink points to),
//! and copied to tern's outbox; the channel's delivery task sends it after the messages
//! before it and removes the copy. A session that is not a chat's gets a clear error.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tern_store::Store;
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use super::TOOLSET;

/// The largest file sent (Telegram's bots may send up to 50 MB).
pub const MAX_SEND_BYTES: u64 = 50 * 1024 * 1024;
/// Files one session may have queued and not yet sent (each a copy in tern's home).
pub const MAX_QUEUED_PER_SESSION: i64 = 10;

/// The `send_file` tool.
pub struct SendFile {
    store: Store,
    outbox: PathBuf,
}

impl SendFile {
    pub fn new(store: Store, outbox: PathBuf) -> Self {
        Self { store, outbox }
    }
}

/// The arguments of `send_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendFileArgs {
    /// The file to send, relative to the working directory or absolute.
    #[schemars(length(min = 1, max = 4096))]
    pub path: String,
    /// A short text shown with the file.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub caption: Option<String>,
}

fn is_image(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp"]
        .iter()
        .any(|e| lower.ends_with(e))
}

impl Tool for SendFile {
    const NAME: &'static str = "send_file";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Send a file from the workspace to the chat the user \
        talks to you from (Telegram, Matrix): a report, an image, a log. Images are shown \
        inline. Works only in a session started from a chat.";
    type Args = SendFileArgs;

    async fn run(&self, args: SendFileArgs, ctx: ToolContext) -> ToolResult {
        let route = self
            .store
            .channel_route(&ctx.session_id)
            .await
            .map_err(|e| ToolError::new(format!("cannot look up the session's chat: {e}")))?;
        if route.is_none() {
            return Err(ToolError::new(
                "this session is not connected to a chat: send_file works only in sessions \
                 started from a chat channel (Telegram, Matrix)",
            ));
        }
        let queued = self
            .store
            .channel_files_queued(&ctx.session_id)
            .await
            .map_err(|e| ToolError::new(format!("cannot look up the queued files: {e}")))?;
        if queued >= MAX_QUEUED_PER_SESSION {
            return Err(ToolError::new(format!(
                "{queued} files are already waiting to be sent to the chat; wait until they \
                 have gone out"
            )));
        }
        let (path, bytes) =
            tern_tools::file_access::read_bytes(&ctx, &args.path, MAX_SEND_BYTES).await?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file")
            .to_owned();
        let copy = self.outbox.join(format!(
            "{}-{}",
            uuid_like(&ctx.session_id, &ctx.call_id, ctx.call_seq),
            name
        ));
        write_copy(&self.outbox, &copy, &bytes)
            .await
            .map_err(|e| ToolError::new(format!("cannot queue the file: {e}")))?;
        let id = self
            .store
            .channel_file_queue(
                &ctx.session_id,
                &copy.to_string_lossy(),
                &name,
                args.caption.as_deref(),
                is_image(&name),
            )
            .await
            .map_err(|e| ToolError::new(format!("cannot queue the file: {e}")))?;
        tracing::info!(session = %ctx.session_id, file = id, bytes = bytes.len(), "a file is queued for the chat");
        Ok(json!({
            "queued": name,
            "bytes": bytes.len(),
            "note": "it is sent to the chat after your messages before it",
        }))
    }
}

/// A name for the copy that a retried call reuses.
fn uuid_like(session: &str, call: &str, seq: i64) -> String {
    use sha2::{Digest as _, Sha256};
    let h = Sha256::digest(format!("{session}\0{call}\0{seq}").as_bytes());
    hex::encode(&h[..8])
}

async fn write_copy(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = dir.to_owned();
    let path = path.to_owned();
    let bytes = bytes.to_vec();
    tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir)?;
        tern_util::fs::write_private(&path, &bytes)
    })
    .await
    .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_known_by_their_extension() {
        assert!(is_image("a.PNG"));
        assert!(is_image("b.jpeg"));
        assert!(!is_image("c.pdf"));
    }

    #[test]
    fn the_schema_fits_function_calling() {
        let problems = tern_tools::tool::schema_problems(&tern_tools::tool::parameters_schema::<
            SendFileArgs,
        >());
        assert!(problems.is_empty(), "{problems:?}");
    }
}
