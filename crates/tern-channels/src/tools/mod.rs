//! The model's tools for chat channels (toolset `channel`): [`send_file::SendFile`].

pub mod send_file;

use std::path::Path;

use tern_store::Store;
use tern_tools::Registry;

/// The toolset of the channel tools.
pub const TOOLSET: &str = "channel";

/// Adds the channel tools to `registry`; queued files are kept under `home` until sent.
pub fn register(registry: &mut Registry, store: Store, home: &Path) {
    registry.add(send_file::SendFile::new(store, home.join("channel-outbox")));
}
