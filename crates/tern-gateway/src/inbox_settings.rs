//! The human inbox's settings in a gateway, from `[inbox]` in `config.toml`.
//!
//! The inbox's policy and notification targets travel inside [`tern_inbox::Inbox`] itself
//! (they act in the transaction that creates a request); what is here is what only the HTTP
//! layer needs: where uploads live, how large they may be, and the base of links.

use std::path::PathBuf;

/// See the module docs.
#[derive(Clone, Debug)]
pub struct InboxSettings {
    /// Where uploads are stored, `$TERN_HOME/uploads`; `None`: uploads are refused with 503.
    pub uploads_dir: Option<PathBuf>,
    /// Largest file `POST /api/uploads` accepts (413 past it).
    pub max_upload_bytes: u64,
    /// The base of links (upload URLs, request pages), without a trailing slash; `None`:
    /// the address the gateway is bound to ([`crate::GatewayParts::local_addr`]), never the
    /// `Host` the client sent.
    pub public_url: Option<String>,
}

impl Default for InboxSettings {
    fn default() -> Self {
        InboxSettings {
            uploads_dir: None,
            max_upload_bytes: 25 * 1024 * 1024,
            public_url: None,
        }
    }
}
