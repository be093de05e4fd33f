//! Uploads as the inbox records them: an upload of an agent key, under its idempotency key,
//! and the check that what a request or an action attaches is the same key's (the files
//! themselves: [`crate::uploads`]).

use serde::Serialize;
use tern_store::now_ms;

use super::{Inbox, Result};
use crate::error::InboxError;
use crate::idempotency::{IdemKey, claim_key, remember_response};
use crate::outcome::Timestamp;
use crate::store::{self, Conn};
use crate::uploads::{HashedFile, StoredFile, Upload, UploadReceipt};

/// The method and path an upload's idempotency key is recorded with.
const POST_UPLOADS: &str = "POST api/uploads";

/// What an upload's idempotency fingerprint covers: the content and how it was declared.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UploadRequest<'a> {
    sha256: &'a str,
    size: u64,
    content_type: &'a str,
    file_name: Option<&'a str>,
}

impl Inbox {
    /// Records an upload of `owner` whose bytes [`UploadWriter::hash`] wrote, under an
    /// optional `Idempotency-Key`. The file is kept only when the key is new (or there is
    /// none): a repeat of the key with the same file, type and name answers the first receipt
    /// and records nothing; with anything else it is [`InboxError::IdempotencyKeyReused`].
    /// Either way the repeat's temporary file is removed, so a refused upload leaves no bytes
    /// behind (content stored before by another upload stays, of course).
    pub async fn create_upload(
        &self,
        owner: &str,
        file: HashedFile,
        content_type: &str,
        file_name: Option<&str>,
        idem: Option<&str>,
    ) -> Result<UploadReceipt> {
        let request = UploadRequest {
            sha256: &file.stored().sha256,
            size: file.stored().size,
            content_type,
            file_name,
        };
        let idem = IdemKey::of(idem, &request)?;
        let mut tx = self.begin().await?;
        match claim_key(&mut tx, owner, idem.as_ref(), POST_UPLOADS).await {
            Ok(None) => {}
            // Removed before answering, so that a refused or repeated upload is gone from the
            // disk by the time its client hears back.
            Ok(Some(original)) => {
                file.discard().await;
                return Ok(original);
            }
            Err(e) => {
                file.discard().await;
                return Err(e);
            }
        }
        // Kept inside the transaction, so that the key's claim decides whether the bytes stay.
        let stored = file.keep().await.map_err(InboxError::Files)?;
        let upload = insert_upload(&mut tx, owner, &stored, content_type, file_name).await?;
        let receipt = UploadReceipt {
            id: upload.id,
            status: "READY".into(),
        };
        remember_response(&mut tx, owner, idem.as_ref(), &receipt).await?;
        tx.commit().await?;
        Ok(receipt)
    }

    /// Records an upload of `owner` whose bytes [`UploadWriter::finish`] stored.
    pub async fn add_upload(
        &self,
        owner: &str,
        stored: &StoredFile,
        content_type: &str,
        file_name: Option<&str>,
    ) -> Result<Upload> {
        let mut conn = store::read(self.store()).await?;
        insert_upload(&mut conn, owner, stored, content_type, file_name).await
    }

    /// Any upload, for reviewers.
    pub async fn upload(&self, id: &str) -> Result<Upload> {
        let mut conn = store::read(self.store()).await?;
        store::uploads::by_id(&mut conn, id).await
    }

    /// One of `owner`'s uploads; another key's is reported missing, like a missing one.
    pub async fn owned_upload(&self, owner: &str, id: &str) -> Result<Upload> {
        let upload = self.upload(id).await?;
        if upload.owner_key != owner {
            return Err(InboxError::NotFound(format!("upload {id}")));
        }
        Ok(upload)
    }
}

async fn insert_upload(
    conn: &mut Conn,
    owner: &str,
    stored: &StoredFile,
    content_type: &str,
    file_name: Option<&str>,
) -> Result<Upload> {
    let upload = Upload {
        id: store::new_id(),
        owner_key: owner.to_owned(),
        sha256: stored.sha256.clone(),
        size: stored.size,
        content_type: content_type.to_owned(),
        file_name: file_name.map(str::to_owned),
        created_at: Timestamp::from_unix_millis(now_ms()),
    };
    store::uploads::insert(conn, &upload).await?;
    Ok(upload)
}

/// Each id must be an upload of `owner`: 400 `unknown_upload` otherwise (another key's
/// upload is as unknown as a missing one).
pub(crate) async fn check_owned_uploads(conn: &mut Conn, owner: &str, ids: &[&str]) -> Result<()> {
    for id in ids {
        if !store::uploads::is_owned(&mut *conn, owner, id).await? {
            return Err(InboxError::Invalid {
                code: "unknown_upload",
                message: format!("{id:?} is not an upload of this key (POST /api/uploads first)"),
            });
        }
    }
    Ok(())
}
