//! `todo`: the session's task list (Hermes's `todo` shape: `todos` to write, `merge` to update
//! by id instead of replacing, no arguments to read), kept in the store
//! ([`Store::write_todos`]), and [`TodoContext`], which shows the list to the model every turn
//! and hands its unfinished items to a compaction.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_store::{
    MAX_TODO_CHARS, MAX_TODO_ID_CHARS, MAX_TODOS, Store, Todo, TodoError, TodoStatus, TodoWrite,
};
use tern_tools::{BoxFuture, SessionContext, Tool, ToolContext, ToolError, ToolResult};
use tern_util::text::one_line;

use crate::TODO_TOOLSET;

/// The `todo` tool.
pub struct TodoTool {
    store: Store,
}

impl TodoTool {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// The arguments of `todo`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoArgs {
    /// Task items to write. Omit to read the current list.
    #[serde(default)]
    #[schemars(length(max = MAX_TODOS))]
    pub todos: Option<Vec<TodoItem>>,
    /// true: update the items with these ids and append new ones; false (default): replace
    /// the whole list with these items (a fresh plan).
    #[serde(default)]
    pub merge: bool,
}

/// One item to write.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    /// The item's id, unique in the list (e.g. "1", "tests"); to update an item, give its id.
    #[schemars(length(min = 1, max = MAX_TODO_ID_CHARS))]
    pub id: String,
    /// A short task description. Required for a new item; when merging into a known item,
    /// omit it to keep the text.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_TODO_CHARS))]
    pub content: Option<String>,
    /// The item's status; a new item without one is pending.
    #[serde(default)]
    pub status: Option<Status>,
}

/// The status of an item.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

impl From<Status> for TodoStatus {
    fn from(s: Status) -> Self {
        match s {
            Status::Pending => TodoStatus::Pending,
            Status::InProgress => TodoStatus::InProgress,
            Status::Completed => TodoStatus::Completed,
            Status::Cancelled => TodoStatus::Cancelled,
        }
    }
}

impl Tool for TodoTool {
    const NAME: &'static str = "todo";
    const TOOLSET: &'static str = TODO_TOOLSET;
    const DESCRIPTION: &'static str = "Keep a task list for multi-step work (3 or more \
        steps, or several tasks from the user). Call with no arguments to read the list. \
        Write with `todos`: by default the list is replaced by them (a new plan); with \
        merge: true, items whose id is known are updated (give only what changes, e.g. \
        {\"id\": \"2\", \"status\": \"completed\"}) and new ones appended. List order is \
        priority; keep one item in_progress at a time; mark an item completed only when the \
        work is verified done; if something fails, cancel it and add a revised item. The list \
        is stored with the session, shown to you every turn and kept when earlier messages are \
        summarised. Every call returns the whole list.";
    type Args = TodoArgs;

    async fn run(&self, args: TodoArgs, ctx: ToolContext) -> ToolResult {
        let list = match args.todos {
            None => self
                .store
                .todos(&ctx.session_id)
                .await
                .map_err(|e| crate::store_error("cannot read the task list", &e))?,
            Some(items) => {
                let items: Vec<TodoWrite> = items
                    .into_iter()
                    .map(|i| TodoWrite {
                        id: i.id,
                        content: i.content,
                        status: i.status.map(Into::into),
                    })
                    .collect();
                self.store
                    .write_todos(&ctx.session_id, &items, args.merge)
                    .await
                    .map_err(|e| match e {
                        TodoError::Invalid(m) => {
                            ToolError::new(format!("{m}; nothing was changed"))
                        }
                        TodoError::Store(e) => crate::store_error("cannot write the task list", &e),
                    })?
            }
        };
        Ok(list_json(&list))
    }
}

/// The list as the tool answers it: every item and the counts per status.
fn list_json(list: &[Todo]) -> Value {
    let count = |s: TodoStatus| list.iter().filter(|t| t.status == s).count();
    json!({
        "todos": list.iter().map(|t| json!({
            "id": t.id,
            "content": t.content,
            "status": t.status.as_str(),
        })).collect::<Vec<_>>(),
        "summary": {
            "total": list.len(),
            "pending": count(TodoStatus::Pending),
            "in_progress": count(TodoStatus::InProgress),
            "completed": count(TodoStatus::Completed),
            "cancelled": count(TodoStatus::Cancelled),
        },
    })
}

/// The task list in the system prompt each turn, and its unfinished items in a compaction's
/// critical context.
pub struct TodoContext {
    store: Store,
}

impl TodoContext {
    pub fn new(store: Store) -> Self {
        Self { store }
    }

    async fn list(&self, session_id: &str) -> Result<Vec<Todo>, tern_store::StoreError> {
        self.store.todos(session_id).await.inspect_err(|e| {
            tracing::warn!(session = session_id, error = %e, "cannot read the task list");
        })
    }
}

impl SessionContext for TodoContext {
    fn prompt<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Option<String>> {
        // The turn goes on without the list rather than failing on it.
        Box::pin(async move { render_prompt(&self.list(session_id).await.ok()?) })
    }

    fn critical<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            match self.list(session_id).await {
                Ok(list) => list
                    .iter()
                    .filter(|t| t.status.is_open())
                    .map(|t| {
                        format!(
                            "todo {} ({}): {}",
                            one_line(&t.id),
                            t.status.as_str(),
                            one_line(&t.content)
                        )
                    })
                    .collect(),
                // Better a summary that says so than one that silently drops the plan.
                Err(e) => vec![format!(
                    "The task list of this session could not be read ({e}); read it with the \
                     `todo` tool."
                )],
            }
        })
    }
}

/// The list for the system prompt: open items one a line, in order, finished ones by id only
/// (enough to know they are done, too little to invite redoing them). `None` when empty.
pub fn render_prompt(list: &[Todo]) -> Option<String> {
    if list.is_empty() {
        return None;
    }
    let mut out = String::from("Your task list (the `todo` tool; keep it current):\n");
    for t in list.iter().filter(|t| t.status.is_open()) {
        let mark = if t.status == TodoStatus::InProgress {
            "[>]"
        } else {
            "[ ]"
        };
        out.push_str(&format!(
            "{mark} {}. {}\n",
            one_line(&t.id),
            one_line(&t.content)
        ));
    }
    for (status, label) in [
        (TodoStatus::Completed, "completed"),
        (TodoStatus::Cancelled, "cancelled"),
    ] {
        let ids: Vec<&str> = list
            .iter()
            .filter(|t| t.status == status)
            .map(|t| t.id.as_str())
            .collect();
        if !ids.is_empty() {
            out.push_str(&format!("{label}: {}\n", ids.join(", ")));
        }
    }
    Some(out.trim_end().to_owned())
}
