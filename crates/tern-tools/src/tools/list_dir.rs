//! `list_dir`: the entries of one directory, directories first.

use std::fs;
use std::io;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::file_access::{FsError, check_cancel, fs_error, io_error, run_blocking, to_usize};
use crate::tool::lenient_u64;
use crate::{Tool, ToolContext, ToolError, ToolResult};

/// Entries `list_dir` returns when the model gives no `max_entries`.
pub const DEFAULT_LIST_ENTRIES: u64 = 500;
/// Largest `max_entries` the model may ask for.
pub const MAX_LIST_ENTRIES: u64 = 5000;

pub struct ListDir;

/// The arguments of `list_dir`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory to list, relative to the working directory or absolute.
    #[serde(default = "working_directory")]
    #[schemars(length(min = 1))]
    pub path: String,
    /// Maximum number of entries to return.
    #[serde(default = "default_max_entries", deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(min = 1, max = MAX_LIST_ENTRIES))]
    pub max_entries: u64,
    /// Also list entries whose names start with '.'.
    #[serde(default)]
    pub include_hidden: bool,
}

fn working_directory() -> String {
    ".".to_owned()
}

fn default_max_entries() -> u64 {
    DEFAULT_LIST_ENTRIES
}

impl Tool for ListDir {
    const NAME: &'static str = "list_dir";
    const TOOLSET: &'static str = super::FILE_TOOLSET;
    const DESCRIPTION: &'static str = "List the entries of one directory (not recursive): \
        name, type (file, dir, symlink or other) and size in bytes for files. Directories come \
        first, then everything else, each sorted by name. Hidden entries (names \
        starting with '.') are skipped unless include_hidden is true. To find files \
        recursively, by name or content, use search_files.";
    type Args = ListDirArgs;

    async fn run(&self, args: ListDirArgs, ctx: ToolContext) -> ToolResult {
        list_dir(args, ctx).await
    }
}

async fn list_dir(args: ListDirArgs, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = args.path;
    let max = to_usize(args.max_entries.clamp(1, MAX_LIST_ENTRIES));
    let include_hidden = args.include_hidden;
    let path = ctx.resolve(&shown);

    let meta = tokio::fs::metadata(&path).await.map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            ToolError::new(format!("directory not found: {shown}"))
        } else {
            io_error("list", &shown, &ctx, &e)
        }
    })?;
    if !meta.is_dir() {
        return Err(ToolError::new(format!(
            "not a directory: {shown}; use read_file to read a file"
        )));
    }

    let cancel = ctx.cancel.clone();
    let listing = run_blocking(&ctx, move || {
        list_blocking(&path, include_hidden, max, &cancel)
    })
    .await?
    .map_err(|e| fs_error("list", &shown, &ctx, e))?;

    let truncated = listing.entries.len() < listing.total;
    let mut result = Map::new();
    result.insert("path".into(), Value::String(shown.clone()));
    result.insert("entries".into(), Value::Array(listing.entries));
    result.insert("total".into(), json!(listing.total));
    result.insert("truncated".into(), Value::Bool(truncated));
    if listing.hidden_skipped > 0 {
        result.insert("hidden_skipped".into(), json!(listing.hidden_skipped));
    }
    if truncated {
        result.insert(
            "note".into(),
            Value::String(format!(
                "showing {max} of {} entries; raise max_entries (up to {MAX_LIST_ENTRIES}) or \
                 list a subdirectory",
                listing.total
            )),
        );
    }
    Ok(Value::Object(result))
}

struct Listing {
    entries: Vec<Value>,
    /// Entries shown or not, hidden ones excluded unless asked for.
    total: usize,
    hidden_skipped: usize,
}

fn list_blocking(
    dir: &Path,
    include_hidden: bool,
    max: usize,
    cancel: &CancellationToken,
) -> Result<Listing, FsError> {
    let mut items: Vec<(bool, String, &'static str, fs::DirEntry)> = Vec::new();
    let mut hidden_skipped = 0;
    for (i, entry) in fs::read_dir(dir)?.enumerate() {
        if i % 256 == 0 && cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !include_hidden && name.starts_with('.') {
            hidden_skipped += 1;
            continue;
        }
        // An entry that vanished or cannot be inspected is still listed, as "other".
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => "dir",
            Ok(t) if t.is_file() => "file",
            Ok(t) if t.is_symlink() => "symlink",
            _ => "other",
        };
        items.push((kind != "dir", name, kind, entry));
    }
    let total = items.len();
    items.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    items.truncate(max);

    let entries = items
        .into_iter()
        .map(|(_, name, kind, entry)| {
            let mut obj = Map::new();
            obj.insert("name".into(), Value::String(name));
            obj.insert("type".into(), Value::String(kind.into()));
            match kind {
                "file" => {
                    if let Ok(m) = entry.metadata() {
                        obj.insert("size".into(), json!(m.len()));
                    }
                }
                "symlink" => {
                    if let Ok(t) = fs::read_link(entry.path()) {
                        obj.insert(
                            "target".into(),
                            Value::String(t.to_string_lossy().into_owned()),
                        );
                    }
                }
                _ => {}
            }
            Value::Object(obj)
        })
        .collect();
    Ok(Listing {
        entries,
        total,
        hidden_skipped,
    })
}
