//! Files agents upload for the human to see (`POST /api/uploads`), stored content-addressed.
//!
//! # The flow at a glance
//!
//! 1. The gateway streams the file's bytes into an [`UploadWriter`] from
//!    [`UploadDir::begin`]: each chunk goes to a temporary file under `uploads/tmp/` while
//!    a SHA-256 and the size are computed; past the size limit the write stops with
//!    [`UploadError::TooLarge`] and the temporary file is removed.
//! 2. [`UploadWriter::hash`] flushes the file to disk and hashes it; [`HashedFile::keep`]
//!    renames it to `uploads/<first two hex digits>/<sha256>`. When that file exists already
//!    (the same content was uploaded before) the temporary file is dropped instead: identical
//!    content is stored once. A rename within one directory tree is atomic, so a reader never
//!    sees a half-written file under its final name. Directories are made 0700 and files
//!    0600, whatever the umask.
//! 3. [`crate::Inbox::create_upload`] records a row `inbox_uploads` (migration 0004): a new id, the
//!    owning agent key, the hash, the size, the declared content type ([`normalize_content_type`])
//!    and file name ([`sanitize_file_name`]). With an `Idempotency-Key` it claims the key in
//!    the same transaction, like every create ([`crate::service`]), before the file is kept:
//!    a repeat gets the first `{id, status}` and no new row, a repeat with another file (or
//!    type, or name) is refused, and neither leaves its bytes behind.
//! 4. Reads: [`crate::Inbox::owned_upload`] for the owning key (another key's upload is reported
//!    missing, like a missing one), [`crate::Inbox::upload`] for reviewers. Downloads serve
//!    [`Upload::served_content_type`] with [`Upload::content_disposition`]: images a browser
//!    displays safely are shown inline; everything else is a download, and types a browser
//!    would run (HTML, SVG, …) are served as `application/octet-stream`.
//! 5. Requests and actions that name uploads (`attachments`, `addAttachments`) are checked
//!    with `check_owned_uploads`: each must be an upload of the same key.
//!
//! Files are never deleted by the inbox: rows reference them by hash, and the audit trail
//! keeps pointing at them.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::outcome::Timestamp;

/// Why a file could not be stored.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The file is larger than the limit; nothing was kept.
    #[error("the file is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// The uploads directory could not be written.
    #[error("cannot store the upload: {0}")]
    Io(#[from] std::io::Error),
}

/// The uploads directory, `$TERN_HOME/uploads`.
#[derive(Debug, Clone)]
pub struct UploadDir {
    root: PathBuf,
}

impl UploadDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        UploadDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the content with this SHA-256 (lowercase hex) is stored. `None` for anything
    /// that is not 64 hex digits, so a stored value can never name a path outside the root.
    pub fn path_of(&self, sha256: &str) -> Option<PathBuf> {
        let valid = sha256.len() == 64
            && sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        valid.then(|| self.root.join(&sha256[..2]).join(sha256))
    }

    /// Starts storing a file of at most `limit` bytes.
    pub async fn begin(&self, limit: u64) -> Result<UploadWriter, UploadError> {
        let tmp_dir = self.root.join("tmp");
        create_private_dir(&tmp_dir).await?;
        let tmp_path = tmp_dir.join(format!("{}.part", uuid::Uuid::now_v7().simple()));
        // 0600 whatever the umask; the rename to the content address keeps the mode.
        let file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp_path)
            .await?;
        Ok(UploadWriter {
            dir: self.clone(),
            file: Some(file),
            tmp_path: Some(tmp_path),
            hasher: Sha256::new(),
            size: 0,
            limit,
        })
    }
}

/// A file being stored; see the module docs. Dropped before [`UploadWriter::finish`], it
/// removes its temporary file.
#[derive(Debug)]
pub struct UploadWriter {
    dir: UploadDir,
    file: Option<tokio::fs::File>,
    tmp_path: Option<PathBuf>,
    hasher: Sha256,
    size: u64,
    limit: u64,
}

/// A file stored under its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub sha256: String,
    pub size: u64,
}

impl UploadWriter {
    /// Appends a chunk; [`UploadError::TooLarge`] once the file passes the limit.
    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), UploadError> {
        let len = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
        let size = self.size.saturating_add(len);
        if size > self.limit {
            return Err(UploadError::TooLarge { limit: self.limit });
        }
        let file = self.file.as_mut().ok_or_else(finished)?;
        file.write_all(chunk).await?;
        self.hasher.update(chunk);
        self.size = size;
        Ok(())
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Flushes the file to disk and moves it to its content address (or drops it when that
    /// content is stored already).
    pub async fn finish(self) -> Result<StoredFile, UploadError> {
        Ok(self.hash().await?.keep().await?)
    }

    /// Flushes the file to disk and hashes it; it stays a temporary file until
    /// [`HashedFile::keep`], and is removed if dropped before.
    pub async fn hash(mut self) -> Result<HashedFile, UploadError> {
        let mut file = self.file.take().ok_or_else(finished)?;
        file.flush().await?;
        file.sync_all().await?;
        drop(file);
        let sha256 = hex::encode(std::mem::take(&mut self.hasher).finalize());
        Ok(HashedFile {
            dir: self.dir.clone(),
            tmp_path: self.tmp_path.take(),
            stored: StoredFile {
                sha256,
                size: self.size,
            },
        })
    }
}

/// A file written and hashed but not yet under its content address; see
/// [`UploadWriter::hash`]. Dropped before [`HashedFile::keep`], it removes its temporary file.
#[derive(Debug)]
pub struct HashedFile {
    dir: UploadDir,
    tmp_path: Option<PathBuf>,
    stored: StoredFile,
}

impl HashedFile {
    /// Its hash and size.
    pub fn stored(&self) -> &StoredFile {
        &self.stored
    }

    /// Moves the file to its content address (or drops it when that content is stored
    /// already).
    pub async fn keep(mut self) -> std::io::Result<StoredFile> {
        let target = self
            .dir
            .path_of(&self.stored.sha256)
            .ok_or_else(|| std::io::Error::other("hex digest of unexpected shape"))?;
        let tmp_path = self.tmp_path.take().ok_or_else(finished)?;
        if tokio::fs::try_exists(&target).await? {
            tokio::fs::remove_file(&tmp_path).await?;
        } else {
            if let Some(parent) = target.parent() {
                create_private_dir(parent).await?;
            }
            // Two uploads of the same new content may race to here; both renames put the
            // same bytes in place, so whichever lands last changes nothing.
            tokio::fs::rename(&tmp_path, &target).await?;
            // The rename is durable once the directory is: a row may point at the file as
            // soon as this returns.
            if let Some(dir) = target.parent().map(Path::to_path_buf) {
                tokio::task::spawn_blocking(move || tern_util::fs::sync_dir(&dir))
                    .await
                    .map_err(std::io::Error::other)??;
            }
        }
        Ok(self.stored.clone())
    }
}

impl HashedFile {
    /// Removes the temporary file now (dropping it removes it in the background).
    pub async fn discard(mut self) {
        if let Some(path) = self.tmp_path.take()
            && let Err(e) = tokio::fs::remove_file(&path).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            // Harmless: a `*.part` file under `uploads/tmp/`, never read.
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a temporary upload");
        }
    }
}

impl Drop for HashedFile {
    fn drop(&mut self) {
        if let Some(path) = self.tmp_path.take() {
            remove_soon(path);
        }
    }
}

/// Creates `dir` and its missing parents with mode 0700: uploads are readable by tern's user
/// only, whatever the umask (an existing directory keeps its mode).
async fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = tokio::fs::DirBuilder::new();
    builder.recursive(true).mode(0o700);
    builder.create(dir).await
}

fn finished() -> std::io::Error {
    std::io::Error::other("the upload was already finished")
}

impl Drop for UploadWriter {
    fn drop(&mut self) {
        if let Some(path) = self.tmp_path.take() {
            remove_soon(path);
        }
    }
}

fn remove_soon(path: PathBuf) {
    // Removing a file may block; off the runtime's worker threads when there is one.
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn_blocking(move || remove_quietly(&path));
        }
        Err(_) => remove_quietly(&path),
    }
}

/// A temporary file that cannot be removed is harmless: it is a `*.part` file under
/// `uploads/tmp/`, never read, safe to delete by hand.
fn remove_quietly(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// One upload: `{id, contentType, size, …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Upload {
    pub id: String,
    /// The agent key that uploaded it.
    #[serde(skip)]
    pub owner_key: String,
    pub sha256: String,
    pub size: u64,
    pub content_type: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    pub created_at: Timestamp,
}

/// Images browsers display without running anything; shown inline.
const INLINE_IMAGES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Other types served as declared (as downloads); anything else is
/// `application/octet-stream`, so that no stored file is ever rendered as a page.
const SERVED_AS_IS: &[&str] = &[
    "application/pdf",
    "text/plain",
    "text/csv",
    "application/json",
    "application/zip",
    "application/gzip",
    "audio/mpeg",
    "audio/wav",
    "video/mp4",
    "video/webm",
];

impl Upload {
    /// Whether a browser may show it inline (an image type that runs no script).
    pub fn is_inline_image(&self) -> bool {
        INLINE_IMAGES.contains(&self.content_type.as_str())
    }

    /// The `Content-Type` a download is served with: the declared type when it is one that
    /// cannot carry a page or a script, else `application/octet-stream`.
    pub fn served_content_type(&self) -> &str {
        let ct = self.content_type.as_str();
        if INLINE_IMAGES.contains(&ct) || SERVED_AS_IS.contains(&ct) {
            ct
        } else {
            "application/octet-stream"
        }
    }

    /// The `Content-Disposition` a download is served with: `inline` for images,
    /// `attachment` otherwise, with the file name (ASCII fallback plus RFC 5987 UTF-8 form).
    pub fn content_disposition(&self) -> String {
        let disposition = if self.is_inline_image() {
            "inline"
        } else {
            "attachment"
        };
        let name = self.file_name.as_deref().unwrap_or(&self.id);
        let ascii: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut encoded = String::new();
        for b in name.bytes() {
            if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
                encoded.push(char::from(b));
            } else {
                encoded.push_str(&format!("%{b:02X}"));
            }
        }
        format!("{disposition}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
    }
}

/// A declared content type reduced to `type/subtype` in lowercase, without parameters;
/// `application/octet-stream` when missing or malformed.
pub fn normalize_content_type(declared: Option<&str>) -> String {
    let essence = declared
        .and_then(|ct| ct.split(';').next())
        .map(|ct| ct.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    match essence.split_once('/') {
        Some((t, s)) if essence.len() <= 100 && token(t) && token(s) => essence,
        _ => "application/octet-stream".to_owned(),
    }
}

/// A client's file name reduced to its last path component, without control characters, at
/// most 255 characters; `None` when nothing is left.
pub fn sanitize_file_name(declared: Option<&str>) -> Option<String> {
    let name = declared?.rsplit(['/', '\\']).next()?;
    let clean: String = name.chars().filter(|c| !c.is_control()).take(255).collect();
    let clean = clean.trim();
    (!clean.is_empty() && clean != "." && clean != "..").then(|| clean.to_owned())
}

/// What `POST /api/uploads` answers: `{"id", "status": "READY"}`; also what a repeat with
/// the same `Idempotency-Key` gets again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct UploadReceipt {
    pub id: String,
    /// Always `READY`: the file is stored by the time the row is.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Inbox, InboxError};

    async fn store_bytes(dir: &UploadDir, bytes: &[u8]) -> StoredFile {
        let mut w = dir.begin(1 << 20).await.unwrap();
        for chunk in bytes.chunks(7) {
            w.write(chunk).await.unwrap();
        }
        w.finish().await.unwrap()
    }

    fn files_under(root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    }

    #[tokio::test]
    async fn identical_content_is_stored_once_under_its_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = UploadDir::new(tmp.path().join("uploads"));
        let a = store_bytes(&dir, b"hello world").await;
        let b = store_bytes(&dir, b"hello world").await;
        let c = store_bytes(&dir, b"other").await;
        assert_eq!(a, b);
        assert_eq!(
            a.sha256,
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert_eq!(a.size, 11);
        let path = dir.path_of(&a.sha256).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
        assert!(path.starts_with(tmp.path().join("uploads").join("b9")));
        assert_ne!(a.sha256, c.sha256);
        // Two stored files, no temporaries left.
        assert_eq!(
            files_under(dir.root()).len(),
            2,
            "{:?}",
            files_under(dir.root())
        );
    }

    #[tokio::test]
    async fn too_large_stops_and_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = UploadDir::new(tmp.path());
        let mut w = dir.begin(10).await.unwrap();
        w.write(b"0123456789").await.unwrap();
        let err = w.write(b"x").await.unwrap_err();
        assert!(matches!(err, UploadError::TooLarge { limit: 10 }), "{err}");
        assert_eq!(w.size(), 10);
        drop(w);
        // The removal runs on the blocking pool; wait for it without a timed assertion.
        for _ in 0..500 {
            if files_under(dir.root()).is_empty() {
                break;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        assert!(files_under(dir.root()).is_empty());
    }

    async fn hashed(dir: &UploadDir, bytes: &[u8]) -> HashedFile {
        let mut w = dir.begin(1 << 20).await.unwrap();
        w.write(bytes).await.unwrap();
        w.hash().await.unwrap()
    }

    #[tokio::test]
    async fn an_upload_repeated_with_its_key_is_recorded_once() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tern_store::Store::open(&tmp.path().join("tern.db"))
            .await
            .unwrap();
        let inbox = Inbox::new(store);
        let dir = UploadDir::new(tmp.path().join("uploads"));
        let rows = || async {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM inbox_uploads")
                .fetch_one(inbox.store().pool())
                .await
                .unwrap()
        };
        let first = inbox
            .create_upload(
                "a",
                hashed(&dir, b"hello").await,
                "text/plain",
                None,
                Some("k1"),
            )
            .await
            .unwrap();
        assert_eq!(first.status, "READY");
        let repeat = inbox
            .create_upload(
                "a",
                hashed(&dir, b"hello").await,
                "text/plain",
                None,
                Some("k1"),
            )
            .await
            .unwrap();
        assert_eq!(repeat, first);
        assert_eq!(rows().await, 1);
        // The same key of another agent key, or no key, records a new upload.
        let theirs = inbox
            .create_upload(
                "b",
                hashed(&dir, b"hello").await,
                "text/plain",
                None,
                Some("k1"),
            )
            .await
            .unwrap();
        assert_ne!(theirs.id, first.id);
        for _ in 0..2 {
            inbox
                .create_upload("a", hashed(&dir, b"hello").await, "text/plain", None, None)
                .await
                .unwrap();
        }
        assert_eq!(rows().await, 4);
        assert_eq!(inbox.owned_upload("a", &first.id).await.unwrap().size, 5);
        // One stored file for all of them, and no temporary one left.
        assert_eq!(files_under(dir.root()).len(), 1);
    }

    #[tokio::test]
    async fn a_key_reused_with_another_file_is_refused_and_keeps_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tern_store::Store::open(&tmp.path().join("tern.db"))
            .await
            .unwrap();
        let inbox = Inbox::new(store);
        let dir = UploadDir::new(tmp.path().join("uploads"));
        let first = inbox
            .create_upload(
                "a",
                hashed(&dir, b"first").await,
                "text/plain",
                Some("a.txt"),
                Some("k"),
            )
            .await
            .unwrap();
        let kept = files_under(dir.root());
        assert_eq!(kept.len(), 1);
        // Other bytes, another type, another name: each is another request.
        let others: [(&[u8], &str, Option<&str>); 3] = [
            (b"second", "text/plain", Some("a.txt")),
            (b"first", "application/json", Some("a.txt")),
            (b"first", "text/plain", Some("b.txt")),
        ];
        for (bytes, ct, name) in others {
            let err = inbox
                .create_upload("a", hashed(&dir, bytes).await, ct, name, Some("k"))
                .await
                .unwrap_err();
            assert!(matches!(err, InboxError::IdempotencyKeyReused), "{err:?}");
            assert_eq!(err.http_status(), 422);
            assert_eq!(err.body()["code"], "idempotency_key_reused");
        }
        // Nothing recorded, and the refused bytes are not on disk.
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inbox_uploads")
            .fetch_one(inbox.store().pool())
            .await
            .unwrap();
        assert_eq!(count, 1);
        assert_eq!(files_under(dir.root()), kept);
        let second = hex::encode(Sha256::digest(b"second"));
        assert!(!dir.path_of(&second).unwrap().exists());
        // The same request again still gets the first receipt.
        let again = inbox
            .create_upload(
                "a",
                hashed(&dir, b"first").await,
                "text/plain",
                Some("a.txt"),
                Some("k"),
            )
            .await
            .unwrap();
        assert_eq!(again, first);

        // A key claimed before fingerprints were recorded answers its first receipt, as
        // before.
        sqlx::query("UPDATE inbox_idempotency SET fingerprint = NULL")
            .execute(inbox.store().pool())
            .await
            .unwrap();
        let legacy = inbox
            .create_upload(
                "a",
                hashed(&dir, b"second").await,
                "text/plain",
                None,
                Some("k"),
            )
            .await
            .unwrap();
        assert_eq!(legacy, first);
        assert_eq!(files_under(dir.root()), kept);
    }

    #[tokio::test]
    async fn stored_files_and_their_directories_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = UploadDir::new(tmp.path().join("uploads"));
        let stored = store_bytes(&dir, b"private").await;
        let file = dir.path_of(&stored.sha256).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600, "{}", file.display());
        for d in [dir.root(), &dir.root().join("tmp"), file.parent().unwrap()] {
            assert_eq!(mode(d), 0o700, "{}", d.display());
        }
    }

    #[tokio::test]
    async fn attachments_must_be_uploads_of_the_same_key() {
        use crate::model::{Attachment, CreateApproval, CreateTask, RecordAction};
        use crate::service::DEFAULT_PROJECT;

        let tmp = tempfile::tempdir().unwrap();
        let store = tern_store::Store::open(&tmp.path().join("tern.db"))
            .await
            .unwrap();
        let inbox = Inbox::new(store);
        inbox.ensure_default_project().await.unwrap();
        let task = inbox
            .create_task(
                "a",
                serde_json::from_value::<CreateTask>(
                    serde_json::json!({"name": "t", "projectName": DEFAULT_PROJECT}),
                )
                .unwrap(),
                None,
            )
            .await
            .unwrap();
        let stored = StoredFile {
            sha256: "1".repeat(64),
            size: 3,
        };
        let mine = inbox
            .add_upload("a", &stored, "text/plain", Some("a.txt"))
            .await
            .unwrap();
        let theirs = inbox
            .add_upload("b", &stored, "text/plain", None)
            .await
            .unwrap();
        assert_eq!(inbox.owned_upload("a", &mine.id).await.unwrap(), mine);
        assert!(matches!(
            inbox.owned_upload("a", &theirs.id).await,
            Err(InboxError::NotFound(_))
        ));
        assert_eq!(inbox.upload(&theirs.id).await.unwrap(), theirs);

        let action = |upload_id: &str| RecordAction {
            project_name: DEFAULT_PROJECT.into(),
            task_id: task.id.clone(),
            description: "attach".into(),
            detail: None,
            transitions_to: None,
            metadata_patch: None,
            add_attachments: Some(vec![Attachment {
                upload_id: upload_id.into(),
                label: "file".into(),
            }]),
            external_trace_id: None,
        };
        for bad in [theirs.id.as_str(), "no-such-upload"] {
            let err = inbox
                .record_action("a", action(bad), None)
                .await
                .unwrap_err();
            assert_unknown_upload(&err);
        }
        inbox
            .record_action("a", action(&mine.id), None)
            .await
            .unwrap();

        let approval = |ids: Vec<String>| -> CreateApproval {
            serde_json::from_value(serde_json::json!({
                "projectName": DEFAULT_PROJECT, "taskId": task.id,
                "summary": "s", "attachments": ids,
            }))
            .unwrap()
        };
        let err = inbox
            .create_approval("a", approval(vec![theirs.id.clone()]), None)
            .await
            .unwrap_err();
        assert_unknown_upload(&err);
        inbox
            .create_approval("a", approval(vec![mine.id.clone()]), None)
            .await
            .unwrap();
    }

    fn assert_unknown_upload(err: &InboxError) {
        assert!(
            matches!(
                err,
                InboxError::Invalid {
                    code: "unknown_upload",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn path_of_refuses_anything_but_a_digest() {
        let dir = UploadDir::new("/u");
        assert!(dir.path_of("../etc/passwd").is_none());
        assert!(dir.path_of(&"A".repeat(64)).is_none());
        assert!(dir.path_of(&"a".repeat(63)).is_none());
        assert_eq!(
            dir.path_of(&"ab".repeat(32)).unwrap(),
            PathBuf::from("/u/ab").join("ab".repeat(32))
        );
    }

    fn upload(ct: &str, name: Option<&str>) -> Upload {
        Upload {
            id: "u1".into(),
            owner_key: "k".into(),
            sha256: "0".repeat(64),
            size: 1,
            content_type: ct.into(),
            file_name: name.map(str::to_owned),
            created_at: Timestamp::from_unix_millis(0),
        }
    }

    #[test]
    fn downloads_are_safe() {
        let png = upload("image/png", Some("shot.png"));
        assert!(png.is_inline_image());
        assert_eq!(png.served_content_type(), "image/png");
        assert_eq!(
            png.content_disposition(),
            "inline; filename=\"shot.png\"; filename*=UTF-8''shot.png"
        );
        for risky in [
            "text/html",
            "image/svg+xml",
            "application/xhtml+xml",
            "text/javascript",
        ] {
            let u = upload(risky, None);
            assert_eq!(
                u.served_content_type(),
                "application/octet-stream",
                "{risky}"
            );
            assert!(
                u.content_disposition()
                    .starts_with("attachment; filename=\"u1\"")
            );
        }
        let pdf = upload("application/pdf", Some("Réçu \"final\".pdf"));
        assert_eq!(pdf.served_content_type(), "application/pdf");
        assert_eq!(
            pdf.content_disposition(),
            "attachment; filename=\"R__u _final_.pdf\"; \
             filename*=UTF-8''R%C3%A9%C3%A7u%20%22final%22.pdf"
        );
    }

    #[test]
    fn declared_types_and_names_are_normalized() {
        assert_eq!(
            normalize_content_type(Some("Image/PNG; charset=x")),
            "image/png"
        );
        assert_eq!(normalize_content_type(None), "application/octet-stream");
        assert_eq!(
            normalize_content_type(Some("nonsense")),
            "application/octet-stream"
        );
        assert_eq!(
            normalize_content_type(Some("text/html\r\nX: y")),
            "application/octet-stream"
        );
        assert_eq!(
            sanitize_file_name(Some("../../etc/pass\nwd")).as_deref(),
            Some("passwd")
        );
        assert_eq!(
            sanitize_file_name(Some("C:\\tmp\\a.txt")).as_deref(),
            Some("a.txt")
        );
        assert_eq!(sanitize_file_name(Some("dir/")), None);
        assert_eq!(sanitize_file_name(Some("..")), None);
        assert_eq!(sanitize_file_name(None), None);
    }
}
