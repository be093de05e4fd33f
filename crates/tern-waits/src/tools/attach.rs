//! Attachments: workspace paths the model gives, checked to stay inside the workspace and
//! uploaded to the inbox.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use tern_tools::{ToolContext, ToolError};

use crate::client::InboxClient;

/// A checked attachment: the path as the model gave it, and the real file.
#[derive(Debug, Clone)]
pub(super) struct LocalFile {
    pub(super) shown: String,
    pub(super) real: PathBuf,
}

/// Checks that `shown` names a regular file inside `workdir`: relative, without `..`, and
/// still inside once every symlink is resolved.
async fn confine(workdir: &Path, shown: &str) -> Result<LocalFile, ToolError> {
    let refuse = |why: &str| {
        Err(ToolError::new(format!(
            "attachment {shown:?} refused: {why}; attachments are paths relative to the \
             workspace, inside it"
        )))
    };
    if shown.trim().is_empty() {
        return refuse("empty path");
    }
    let path = Path::new(shown);
    if path.is_absolute() || path.has_root() {
        return refuse("absolute path");
    }
    if path.components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return refuse("`..` leads out of the workspace");
    }
    let root = tokio::fs::canonicalize(workdir)
        .await
        .map_err(|e| ToolError::new(format!("cannot resolve the workspace: {e}")))?;
    let real = match tokio::fs::canonicalize(root.join(path)).await {
        Ok(p) => p,
        Err(e) => return refuse(&format!("cannot open it ({e})")),
    };
    if !real.starts_with(&root) {
        return refuse("it is a link leading out of the workspace");
    }
    match tokio::fs::metadata(&real).await {
        Ok(m) if m.is_file() => {}
        Ok(_) => return refuse("not a regular file"),
        Err(e) => return refuse(&format!("cannot open it ({e})")),
    }
    Ok(LocalFile {
        shown: shown.to_owned(),
        real,
    })
}

pub(super) async fn confine_all(
    ctx: &ToolContext,
    paths: &[String],
) -> Result<Vec<LocalFile>, ToolError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let file = confine(&ctx.workdir, p).await?;
        // The same file twice would be attached twice under two labels; once is enough.
        if seen.insert(file.real.clone()) {
            out.push(file);
        }
    }
    Ok(out)
}

/// Uploads checked files; returns `(shown path, upload id)` pairs.
pub(super) async fn upload_all(
    client: &dyn InboxClient,
    files: &[LocalFile],
) -> Result<Vec<(String, String)>, ToolError> {
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let name = f
            .real
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| f.shown.clone());
        let id = client.upload(&f.real, &name).await.map_err(|e| {
            ToolError::new(format!(
                "cannot upload {}: {e}; nothing was sent to the inbox",
                f.shown
            ))
        })?;
        out.push((f.shown.clone(), id));
    }
    Ok(out)
}
