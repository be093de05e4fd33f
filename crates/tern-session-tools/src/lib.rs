//! The tools that keep an agent's working state across turns and sessions, after Hermes
//! Agent's tools of the same names and shapes:
//!
//! - [`todo`] (toolset `todo`): the session's task list, in the store (`todos` table); shown
//!   to the model every turn and its unfinished items carried through compactions, through
//!   the [`todo::TodoContext`] session context;
//! - [`memory`] (toolset `memory`): notes kept across sessions in two files under
//!   `$TERN_HOME/memory/` ([`memory_files`]): `USER.md` (about the user) and `MEMORY.md`
//!   (about the environment, conventions and lessons), each bounded by `[memory]`; given to
//!   the model, framed as data, by [`memory::MemoryContext`];
//! - [`session_search`] (toolset `session_search`): full-text search over the other sessions
//!   of the same owner.
//!
//! [`register`] adds the three tools and both session contexts to a registry; `tern chat`
//! and the gateway call it after `Registry::builtin`.

pub mod memory;
pub mod memory_files;
pub mod session_search;
pub mod todo;

use std::path::Path;
use std::sync::Arc;

use tern_config::MemoryConfig;
use tern_store::Store;
use tern_tools::Registry;

/// The toolset of [`todo::TodoTool`].
pub const TODO_TOOLSET: &str = "todo";
/// The toolset of [`memory::MemoryTool`].
pub const MEMORY_TOOLSET: &str = "memory";
/// The toolset of [`session_search::SessionSearch`].
pub const SESSION_SEARCH_TOOLSET: &str = "session_search";

/// Adds `todo`, `memory` and `session_search` to `registry`, with the session contexts of
/// `todo` and `memory`. `home` is `$TERN_HOME` (memory lives in `home/memory/`).
pub fn register(registry: &mut Registry, store: Store, home: &Path, config: &MemoryConfig) {
    let memory = Arc::new(memory::Memory::new(home, config, store.clone()));
    registry.add(todo::TodoTool::new(store.clone()));
    registry.add_context(
        TODO_TOOLSET,
        Arc::new(todo::TodoContext::new(store.clone())),
    );
    registry.add(memory::MemoryTool::new(memory.clone()));
    registry.add_context(MEMORY_TOOLSET, Arc::new(memory::MemoryContext::new(memory)));
    registry.add(session_search::SessionSearch::new(store));
}

/// A store error as the model reads it: what failed, without internals it cannot act on.
pub(crate) fn store_error(what: &str, e: &tern_store::StoreError) -> tern_tools::ToolError {
    tracing::warn!(error = %e, "{what}");
    tern_tools::ToolError::new(format!("{what}: {e}"))
}
