//! `write_file`: creates or replaces a whole file, atomically.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::file_access::{atomic_write, check_cancel, io_error, run_blocking};
use crate::{Tool, ToolContext, ToolResult};

pub struct WriteFile;

/// The arguments of `write_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// File to write, relative to the working directory or absolute.
    #[schemars(length(min = 1))]
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

impl Tool for WriteFile {
    const NAME: &'static str = "write_file";
    const TOOLSET: &'static str = super::FILE_TOOLSET;
    const DESCRIPTION: &'static str = "Create a file, or replace an existing file's whole \
        content, with `content` (the complete text, written exactly as given). Missing parent \
        directories are created. The write is atomic and keeps an existing file's \
        permissions. To change part of an existing file, use patch_file instead: it \
        is cheaper and cannot lose the rest of the file.";
    type Args = WriteFileArgs;

    async fn run(&self, args: WriteFileArgs, ctx: ToolContext) -> ToolResult {
        check_cancel(&ctx)?;
        let WriteFileArgs {
            path: shown,
            content,
        } = args;
        let path = ctx.resolve(&shown);
        let bytes = content.len();
        let created = run_blocking(&ctx, move || atomic_write(&path, content.as_bytes()))
            .await?
            .map_err(|e| io_error("write", &shown, &ctx, &e))?;
        Ok(json!({
            "path": shown,
            "bytes_written": bytes,
            "created": created,
        }))
    }
}
