//! `tern sessions …`: list, show, search, compact, delete, export.
//!
//! Deleting goes through the gateway when one runs on this `$TERN_HOME` (its address in
//! `inbox-admin.json`, an API key in `gateway.key` or `TERN_SERVER_KEY`): only the gateway
//! knows whether a turn is running on the session, and it cancels the waits, withdraws their
//! requests (in its own inbox or a remote one) and emits `wait_resolved` and `session_end`.
//! Without a gateway to answer, the store is changed directly: the waits are cancelled, their
//! requests withdrawn through the configured inbox, and no hook event is sent (said so).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use clap::Subcommand;
use serde_json::json;
use tern_config::Home;
use tern_store::{Message, Store};
use tern_waits::client::{EmbeddedInbox, InboxClient};
use tern_waits::follow::request_kind;
use tern_waits::remote::RemoteInbox;

use crate::context;
use crate::inbox::{AdminFile, Failure, Http};
use crate::render::one_line;
use crate::timefmt::when;

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List sessions, most recently used first
    List {
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show a session, how full its context window is, and its messages
    Show {
        id: String,
        #[arg(long)]
        json: bool,
        /// Every stored message, those a compaction took out of the transcript included,
        /// and the compactions' summaries
        #[arg(long)]
        all: bool,
    },
    /// Compact a session now: summarise its older messages to free its context window
    /// (through the gateway running on this TERN_HOME, if any); they stay stored
    Compact {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Full-text search over message content
    Search {
        /// Words that must all appear
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Delete a session and its messages (through the gateway running on this TERN_HOME,
    /// if any, so that its waits end properly)
    Delete { id: String },
    /// Export a session as JSON lines (the session, then one message per line)
    Export {
        id: String,
        /// Write to this file instead of stdout
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

async fn resolve(store: &Store, id: &str) -> anyhow::Result<tern_store::Session> {
    store
        .resolve_session(id)
        .await
        .map_err(|e| anyhow!("{e} (see `tern sessions list`)"))
}

pub async fn run(home: Option<PathBuf>, cmd: SessionsCommand) -> anyhow::Result<ExitCode> {
    let (home, eff) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let mut out = std::io::stdout().lock();
    match cmd {
        SessionsCommand::List { limit, json } => {
            let list = store.list_sessions(limit.max(1), 0).await?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
            } else if list.is_empty() {
                eprintln!("no sessions yet; start one with `tern chat`");
            } else {
                writeln!(
                    out,
                    "{:<32}  {:<16}  {:<7}  {:<6}  TITLE",
                    "ID", "UPDATED (UTC)", "STATUS", "SOURCE"
                )?;
                for s in list {
                    writeln!(
                        out,
                        "{:<32}  {:<16}  {:<7}  {:<6}  {}",
                        s.id,
                        when(s.updated_at),
                        s.status.as_str(),
                        s.source,
                        s.title.as_deref().unwrap_or("(untitled)")
                    )?;
                }
            }
        }
        SessionsCommand::Show { id, json, all } => {
            show(&home, &eff, &store, &mut out, &id, json, all).await?;
        }
        SessionsCommand::Compact { id, json } => {
            compact(&home, &eff, &store, &mut out, &id, json).await?;
        }
        SessionsCommand::Search { text, limit, json } => {
            let hits = store.search(&text.join(" "), limit.max(1)).await?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&hits)?)?;
            } else if hits.is_empty() {
                eprintln!("no messages match");
            } else {
                for h in hits {
                    writeln!(
                        out,
                        "{}  #{:<4} {:<9} {}  {}",
                        h.session_id,
                        h.seq,
                        h.role.as_str(),
                        when(h.created_at),
                        one_line(&h.snippet, 160)
                    )?;
                }
            }
        }
        SessionsCommand::Delete { id } => {
            let s = resolve(&store, &id).await?;
            match delete_through_gateway(&home, &s.id).await? {
                Some(url) => eprintln!(
                    "deleted session {} (through the gateway at {url}: its waits were \
                     cancelled and their requests withdrawn)",
                    s.id
                ),
                None => {
                    delete_locally(&store, &eff, &s).await?;
                    eprintln!("deleted session {}", s.id);
                    eprintln!(
                        "note: no gateway runs on this TERN_HOME, so no hook events \
                         (wait_resolved, session_end) were sent"
                    );
                }
            }
        }
        SessionsCommand::Export { id, output } => {
            let s = resolve(&store, &id).await?;
            // Everything stored: compacted messages too (marked), then the summaries.
            let msgs = store.messages_all(&s.id).await?;
            let compactions = store.compactions(&s.id).await?;
            let mut buf = Vec::new();
            writeln!(
                buf,
                "{}",
                serde_json::to_string(&json!({"object": "session", "session": s}))?
            )?;
            for m in &msgs {
                writeln!(
                    buf,
                    "{}",
                    serde_json::to_string(&json!({"object": "message", "message": m}))?
                )?;
            }
            for c in &compactions {
                writeln!(
                    buf,
                    "{}",
                    serde_json::to_string(&json!({"object": "compaction", "compaction": c}))?
                )?;
            }
            match output {
                Some(path) => {
                    tokio::fs::write(&path, &buf)
                        .await
                        .with_context(|| format!("writing {}", path.display()))?;
                    eprintln!("exported {} messages to {}", msgs.len(), path.display());
                }
                None => out.write_all(&buf)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes the session through the gateway running on `home`, if one answers; returns its
/// address. `None`: no gateway to ask (none started here, it is not running, or it serves
/// the inbox alone), so the caller deletes locally. A gateway that answers but refuses (a
/// turn is running, the key is not accepted) is an error: deleting behind its back could
/// lose a turn's work or leave its waits alive.
async fn delete_through_gateway(home: &Home, id: &str) -> anyhow::Result<Option<String>> {
    let Some((admin, http)) =
        gateway_http(home, &format!("DELETE /api/sessions/{id}"), "delete").await?
    else {
        return Ok(None);
    };
    match http.delete(&format!("/api/sessions/{id}")).await {
        Ok(_) => Ok(Some(admin.url)),
        // The admin file outlives the gateway: nobody listens there any more.
        Err(Failure::Unreachable(_)) => Ok(None),
        // A gateway serving the inbox alone has no session routes (an empty 404); it runs
        // no turns on sessions either.
        Err(Failure::Http { status: 404, body }) if body.is_null() => Ok(None),
        Err(Failure::Http { status: 409, .. }) => bail!(
            "a turn is running on session {id}; stop it first (POST /api/sessions/{id}/stop \
             at {}) and delete it again",
            admin.url
        ),
        Err(f) => bail!(
            "the gateway at {} did not delete it: {}",
            admin.url,
            f.message()
        ),
    }
}

/// `tern sessions show`: the session, how full its window is, its links and waits, and its
/// messages (`all`: the compacted ones and the summaries too).
async fn show(
    home: &Home,
    eff: &tern_config::Effective,
    store: &Store,
    out: &mut impl Write,
    id: &str,
    json: bool,
    all: bool,
) -> anyhow::Result<()> {
    let s = resolve(store, id).await?;
    let msgs = if all {
        store.messages_all(&s.id).await?
    } else {
        store.messages(&s.id).await?
    };
    let compactions = if all {
        store.compactions(&s.id).await?
    } else {
        Vec::new()
    };
    let agent = context::build_agent(home, eff, store.clone())?;
    let status = agent
        .context_status(&s.id, &eff.config.agent.toolsets)
        .await?;
    // The open waits: what the session is `waiting` for.
    let waits = store.session_waits(&s.id, true).await?;
    // The sessions it handed tasks to (`delegate_task`), or its reset's successor.
    let children = store.children(&s.id).await?;
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "session": s,
                "waits": waits,
                "children": children.iter().map(child_json).collect::<Vec<_>>(),
                "context": status,
                "messages": msgs,
                "compactions": compactions,
            }))?
        )?;
    } else {
        writeln!(out, "session {}", s.id)?;
        writeln!(
            out,
            "title    {}",
            s.title.as_deref().unwrap_or("(untitled)")
        )?;
        writeln!(
            out,
            "status   {}   source {}   model {}",
            s.status.as_str(),
            s.source,
            models_used(&s, &msgs)
        )?;
        writeln!(
            out,
            "created  {}   updated {}",
            when(s.created_at),
            when(s.updated_at)
        )?;
        writeln!(
            out,
            "tokens   {} prompt, {} completion   messages {}",
            s.prompt_tokens,
            s.completion_tokens,
            msgs.len()
        )?;
        writeln!(
            out,
            "context  ~{} of {} tokens ({}), compacts at {}; {} compaction(s)",
            status.prompt_tokens,
            status.context_length,
            status.source.describe(),
            status.compact_at_tokens,
            status.compactions
        )?;
        write_links(out, store, &s, &children).await?;
        if !waits.is_empty() {
            writeln!(out, "waiting for {} decision(s):", waits.len())?;
            for w in &waits {
                write_wait(out, w)?;
            }
        }
        for m in &msgs {
            writeln!(out)?;
            write_message(out, m)?;
        }
        for c in &compactions {
            writeln!(out)?;
            write_compaction(out, c)?;
        }
    }
    Ok(())
}

/// `tern sessions compact`: through the gateway running on `home`, else in this process.
async fn compact(
    home: &Home,
    eff: &tern_config::Effective,
    store: &Store,
    out: &mut impl Write,
    id: &str,
    json: bool,
) -> anyhow::Result<()> {
    let s = resolve(store, id).await?;
    let outcome = match compact_through_gateway(home, &s.id).await? {
        Some(v) => v,
        None => {
            let agent = context::build_agent(home, eff, store.clone())?;
            let outcome = agent.compact(&s.id, &eff.config.agent.toolsets).await?;
            serde_json::to_value(&outcome)?
        }
    };
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&outcome)?)?;
    }
    match outcome["status"].as_str() {
        Some("compacted") => eprintln!(
            "compacted session {}: {} message(s) summarised, {} old output(s) cut; \
             ~{} → ~{} tokens (everything stays stored: `tern sessions show --all`)",
            s.id,
            outcome["messages_compacted"],
            outcome["outputs_elided"],
            outcome["tokens_before"],
            outcome["tokens_after"]
        ),
        Some("nothing_to_compact") => eprintln!(
            "session {} has nothing to compact: it is the task and its latest \
             exchange (~{} tokens)",
            s.id, outcome["tokens"]
        ),
        _ => bail!(
            "the compaction of session {} failed and nothing changed: {}",
            s.id,
            outcome["error"].as_str().unwrap_or("no reason given")
        ),
    }
    Ok(())
}

/// Compacts the session through the gateway running on `home`, if one answers: it knows
/// whether a turn is running. Returns its answer; `None` when there is no gateway to ask.
async fn compact_through_gateway(
    home: &Home,
    id: &str,
) -> anyhow::Result<Option<serde_json::Value>> {
    let route = format!("/api/sessions/{id}/compact");
    let Some((admin, http)) = gateway_http(home, &format!("POST {route}"), "compact").await? else {
        return Ok(None);
    };
    // The summary is one model call over much of the window: slow on a small machine.
    let wait = std::time::Duration::from_secs(30 * 60);
    match http.post_waiting(&route, &json!({}), wait).await {
        Ok(answer) => Ok(Some(answer.body.unwrap_or_default())),
        Err(Failure::Unreachable(_)) => Ok(None),
        Err(Failure::Http { status: 404, body }) if body.is_null() => Ok(None),
        Err(Failure::Http { status: 409, .. }) => bail!(
            "a turn is running on session {id}; it compacts by itself when its prompt nears the \
             window, or compact it again once the turn has ended"
        ),
        Err(f) => bail!(
            "the gateway at {} did not compact it: {}",
            admin.url,
            f.message()
        ),
    }
}

/// The gateway that may run on `home` (its address from `inbox-admin.json`) and a client
/// with its API key (`gateway.key`, else `TERN_SERVER_KEY`); `None` when no gateway was
/// started here. `route` and `verb` say, in the error, what to do without a key.
async fn gateway_http(
    home: &Home,
    route: &str,
    verb: &str,
) -> anyhow::Result<Option<(AdminFile, Http)>> {
    let Some(admin) = AdminFile::read(&AdminFile::path(home))
        .await
        .map_err(|f| anyhow!(f.message()))?
    else {
        return Ok(None);
    };
    let key = match tokio::fs::read_to_string(home.root.join("gateway.key")).await {
        Ok(k) if !k.trim().is_empty() => Some(k.trim().to_owned()),
        _ => context::env_var("TERN_SERVER_KEY").filter(|k| !k.trim().is_empty()),
    };
    let Some(key) = key else {
        bail!(
            "a gateway may be running at {} on this TERN_HOME, but there is no API key to ask \
             it with (no {} and no TERN_SERVER_KEY); {verb} the session through its API \
             ({route}) or stop it first",
            admin.url,
            home.root.join("gateway.key").display()
        );
    };
    let http = Http::new(&admin.url, key).map_err(|f| anyhow!(f.message()))?;
    Ok(Some((admin, http)))
}

/// Deletes the session in the store directly: its waits are cancelled and their requests
/// withdrawn through the configured inbox (this home's, or `[inbox] url`), best effort.
async fn delete_locally(
    store: &Store,
    eff: &tern_config::Effective,
    s: &tern_store::Session,
) -> anyhow::Result<()> {
    let remote = eff
        .config
        .inbox
        .remote()
        .map_err(|e| anyhow!("in the [inbox] configuration: {e}"))?;
    let client: Arc<dyn InboxClient> = match remote {
        Some(r) => Arc::new(RemoteInbox::new(&r.url, &r.key).map_err(|e| anyhow!("{e}"))?),
        None => Arc::new(EmbeddedInbox::new(tern_inbox::Inbox::new(store.clone()))),
    };
    for w in store.cancel_waits(&s.id).await? {
        if let Some(rid) = &w.request_id
            && let Err(e) = client
                .withdraw(request_kind(w.kind), rid, "session deleted")
                .await
        {
            eprintln!("note: request {rid} was not withdrawn: {e}");
        }
    }
    store.delete_session(&s.id).await?;
    Ok(())
}

/// The session's parent (the session that delegated to it, or the one a reset replaced)
/// and its children, each with its status and title.
async fn write_links(
    out: &mut impl Write,
    store: &Store,
    s: &tern_store::Session,
    children: &[tern_store::Session],
) -> anyhow::Result<()> {
    if let Some(parent) = &s.parent_id {
        // A parent deleted since is unlinked by the store; one missing here is shown bare.
        let title = match store.get_session(parent).await? {
            Some(p) => p.title.unwrap_or_else(|| "(untitled)".into()),
            None => "(gone)".into(),
        };
        writeln!(out, "parent   {parent}  {title}")?;
    }
    if !children.is_empty() {
        writeln!(out, "children {}:", children.len())?;
        for c in children {
            writeln!(
                out,
                "  {}  {:<7}  {:<8}  {}",
                c.id,
                c.status.as_str(),
                c.source,
                c.title.as_deref().unwrap_or("(untitled)")
            )?;
        }
    }
    Ok(())
}

fn child_json(c: &tern_store::Session) -> serde_json::Value {
    json!({"id": c.id, "title": c.title, "status": c.status, "source": c.source,
           "created_at": c.created_at})
}

fn write_wait(out: &mut impl Write, w: &tern_store::Wait) -> std::io::Result<()> {
    let request: serde_json::Value = serde_json::from_str(&w.request).unwrap_or_default();
    let summary = request
        .get("summary")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("");
    writeln!(
        out,
        "  {:<11}  {:<7}  request {}  since {}  {}",
        w.kind.as_str(),
        w.status.as_str(),
        w.request_id.as_deref().unwrap_or("(not sent yet)"),
        when(w.created_at),
        one_line(summary, 120)
    )
}

/// The models that answered in the session, the latest first (`m2 (before: m1)`); the one
/// it was created with when no answer recorded one (older sessions, or none yet).
fn models_used(s: &tern_store::Session, msgs: &[Message]) -> String {
    let mut used: Vec<&str> = Vec::new();
    for m in msgs.iter().rev() {
        if let Some(name) = m.model.as_deref()
            && !used.contains(&name)
        {
            used.push(name);
        }
    }
    match used.split_first() {
        None => s.model.clone().unwrap_or_else(|| "-".into()),
        Some((last, [])) => (*last).to_owned(),
        Some((last, before)) => format!("{last} (before: {})", before.join(", ")),
    }
}

fn write_compaction(out: &mut impl Write, c: &tern_store::Compaction) -> std::io::Result<()> {
    writeln!(
        out,
        "compaction {} ({}, {}): messages #{}–#{} ({}), {} output(s) cut, ~{} → ~{} tokens",
        c.id,
        c.reason.as_str(),
        when(c.created_at),
        c.first_seq.map_or("-".into(), |n| n.to_string()),
        c.last_seq.map_or("-".into(), |n| n.to_string()),
        c.messages_compacted,
        c.outputs_elided,
        c.tokens_before,
        c.tokens_after
    )?;
    if let Some(text) = &c.summary {
        for line in text.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(())
}

fn write_message(out: &mut impl Write, m: &Message) -> std::io::Result<()> {
    let mut head = match (&m.tool_name, &m.tool_call_id) {
        (Some(n), Some(id)) => format!("#{} {} ({n}, {id})", m.seq, m.role.as_str()),
        _ => format!("#{} {}", m.seq, m.role.as_str()),
    };
    if let Some(model) = &m.model {
        head.push_str(&format!(" [{model}]"));
    }
    // The content below describes each image; the pixels themselves are only for the model.
    match m.images() {
        0 => {}
        1 => head.push_str(" [image]"),
        n => head.push_str(&format!(" [{n} images]")),
    }
    if m.compaction_id.is_some() {
        // The summary has no seq of its own: it stands after the kept head.
        head = "summary of earlier work (compaction)".to_owned();
    } else if m.compacted {
        head.push_str(" [compacted]");
    } else if m.model_content.is_some() {
        head.push_str(" [the model sees a placeholder]");
    }
    writeln!(out, "{head}  {}", when(m.created_at))?;
    if let Some(r) = &m.reasoning {
        writeln!(out, "  [reasoning] {}", one_line(r, 300))?;
    }
    if let Some(c) = &m.content {
        for line in c.lines() {
            writeln!(out, "  {line}")?;
        }
    }
    for c in &m.tool_calls {
        writeln!(
            out,
            "  → {}({}) [{}]",
            c.function.name,
            one_line(&c.function.arguments, 300),
            c.id
        )?;
    }
    Ok(())
}
