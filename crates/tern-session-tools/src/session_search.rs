//! `session_search`: full-text search over past sessions (Hermes's discovery shape: `query`,
//! `limit`, `role_filter`), answering with the matching sessions — id, title, date — and a
//! few words around each match.
//!
//! Only what the asking session may see ([`Store::search_past_sessions`]): the other sessions
//! of its own owner (the API key that created it; `tern chat`'s sessions have none and see
//! only each other), never itself.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_llm::Role;
use tern_store::{SessionSearchHit, Store};
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use crate::SESSION_SEARCH_TOOLSET;

/// Sessions answered when the model gives no `limit`.
pub const DEFAULT_SESSIONS: u64 = 3;
/// Most sessions one call answers.
pub const MAX_SESSIONS: u64 = 10;
/// Matches shown per session.
pub const MATCHES_PER_SESSION: usize = 3;
/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 300;

/// The `session_search` tool.
pub struct SessionSearch {
    store: Store,
}

impl SessionSearch {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

/// The arguments of `session_search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSearchArgs {
    /// Words to find in past sessions; a message matches when it has every word.
    #[schemars(length(min = 1, max = 500))]
    pub query: String,
    /// Most sessions to return (default 3, at most 10).
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = MAX_SESSIONS))]
    pub limit: u64,
    /// Comma-separated roles to search: default "user,assistant"; add "tool" to search tool
    /// output too.
    #[serde(default)]
    pub role_filter: Option<String>,
}

fn default_limit() -> u64 {
    DEFAULT_SESSIONS
}

impl Tool for SessionSearch {
    const NAME: &'static str = "session_search";
    const TOOLSET: &'static str = SESSION_SEARCH_TOOLSET;
    const DESCRIPTION: &'static str = "Search your past sessions (not this one) for words, to \
        recall what was done or decided before: \"what did we do about X\", \"where did we \
        leave Y\". Every word of the query must appear in a message. Answers with the \
        matching sessions, best first — id, title, date — and a few words around each match \
        (matches in [brackets]). What a past session says is a record of what was said then, \
        not the current state of things.";
    type Args = SessionSearchArgs;

    async fn run(&self, args: SessionSearchArgs, ctx: ToolContext) -> ToolResult {
        let query = args.query.trim();
        if query.is_empty() {
            return Err(ToolError::new("query is empty; give words to search for"));
        }
        let roles = roles(args.role_filter.as_deref())?;
        let limit = args.limit.clamp(1, MAX_SESSIONS);
        let session = self
            .store
            .session(&ctx.session_id)
            .await
            .map_err(|e| crate::store_error("cannot read this session", &e))?;
        // Enough hits that a few verbose sessions do not crowd out the others.
        let hits = self
            .store
            .search_past_sessions(
                query,
                &session.id,
                session.owner.as_deref(),
                &roles,
                i64::try_from(limit * 20).unwrap_or(200),
            )
            .await
            .map_err(|e| crate::store_error("cannot search past sessions", &e))?;
        Ok(answer(query, &hits, usize::try_from(limit).unwrap_or(10)))
    }
}

fn roles(filter: Option<&str>) -> Result<Vec<Role>, ToolError> {
    let Some(filter) = filter.filter(|f| !f.trim().is_empty()) else {
        return Ok(vec![Role::User, Role::Assistant]);
    };
    filter
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| match Role::parse(r) {
            Some(role @ (Role::User | Role::Assistant | Role::Tool)) => Ok(role),
            _ => Err(ToolError::new(format!(
                "role_filter: unknown role {r:?}; use user, assistant and tool, separated by \
                 commas"
            ))),
        })
        .collect()
}

/// The hits grouped by session, in the order of each session's best hit.
fn answer(query: &str, hits: &[SessionSearchHit], limit: usize) -> Value {
    let mut order: Vec<&str> = Vec::new();
    let mut by_session: BTreeMap<&str, Vec<&SessionSearchHit>> = BTreeMap::new();
    for h in hits {
        let list = by_session.entry(&h.session_id).or_default();
        if list.is_empty() {
            if order.len() == limit {
                continue;
            }
            order.push(&h.session_id);
        }
        if list.len() < MATCHES_PER_SESSION {
            list.push(h);
        }
    }
    let results: Vec<Value> = order
        .iter()
        .filter_map(|id| by_session.get(id))
        .filter_map(|hits| {
            let first = hits.first()?;
            Some(json!({
                "session_id": first.session_id,
                "title": first.session_title,
                "when": date(first.session_updated_at),
                "matches": hits.iter().map(|h| json!({
                    "role": h.role.as_str(),
                    "date": date(h.created_at),
                    "snippet": capped(&h.snippet),
                })).collect::<Vec<_>>(),
            }))
        })
        .collect();
    let mut out = json!({ "query": query, "count": results.len(), "results": results });
    if hits.is_empty() {
        out["note"] = Value::from(
            "no past session matches every word; try fewer or other words, or role_filter \
             \"user,assistant,tool\"",
        );
    }
    out
}

fn capped(s: &str) -> String {
    if s.chars().count() <= SNIPPET_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(SNIPPET_CHARS).collect();
    out.push('…');
    out
}

/// `2026-11-25 09:12 UTC`.
fn date(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}
