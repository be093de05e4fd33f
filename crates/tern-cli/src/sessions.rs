//! `tern sessions …`: list, show, search, delete, export.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, anyhow};
use serde_json::json;
use tern_store::{Message, Store};

use crate::args::SessionsCommand;
use crate::context;
use crate::render::one_line;

/// A timestamp in milliseconds as `YYYY-MM-DD HH:MM` UTC.
pub fn when(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm); written by hand to
/// avoid a date-time dependency for one display format.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

async fn store(home: Option<PathBuf>) -> anyhow::Result<Store> {
    let (home, _) = context::load_config(home)?;
    context::open_store(&home).await
}

async fn resolve(store: &Store, id: &str) -> anyhow::Result<tern_store::Session> {
    store
        .resolve_session(id)
        .await
        .map_err(|e| anyhow!("{e} (see `tern sessions list`)"))
}

pub async fn run(home: Option<PathBuf>, cmd: SessionsCommand) -> anyhow::Result<ExitCode> {
    let store = store(home).await?;
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
        SessionsCommand::Show { id, json } => {
            let s = resolve(&store, &id).await?;
            let msgs = store.messages(&s.id).await?;
            // The open waits: what the session is `waiting` for.
            let waits = store.session_waits(&s.id, true).await?;
            if json {
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(
                        &json!({"session": s, "waits": waits, "messages": msgs})
                    )?
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
                    s.model.as_deref().unwrap_or("-")
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
                if !waits.is_empty() {
                    writeln!(out, "waiting for {} decision(s):", waits.len())?;
                    for w in &waits {
                        write_wait(&mut out, w)?;
                    }
                }
                for m in &msgs {
                    writeln!(out)?;
                    write_message(&mut out, m)?;
                }
            }
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
            // Its waits end with it; their requests in this home's inbox are withdrawn
            // (best effort: a request in a remote inbox is the gateway's to withdraw).
            let inbox = tern_inbox::Inbox::new(store.clone());
            for w in store.cancel_waits(&s.id).await? {
                if let Some(rid) = &w.request_id
                    && let Err(e) = inbox
                        .withdraw_request(
                            tern_waits::client::EMBEDDED_OWNER,
                            rid,
                            Some("session deleted"),
                        )
                        .await
                {
                    eprintln!("note: request {rid} was not withdrawn: {e}");
                }
            }
            store.delete_session(&s.id).await?;
            eprintln!("deleted session {}", s.id);
        }
        SessionsCommand::Export { id, output } => {
            let s = resolve(&store, &id).await?;
            let msgs = store.messages(&s.id).await?;
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

fn write_message(out: &mut impl Write, m: &Message) -> std::io::Result<()> {
    let head = match (&m.tool_name, &m.tool_call_id) {
        (Some(n), Some(id)) => format!("#{} {} ({n}, {id})", m.seq, m.role.as_str()),
        _ => format!("#{} {}", m.seq, m.role.as_str()),
    };
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

#[cfg(test)]
mod tests {
    #[test]
    fn formats_utc_times() {
        assert_eq!(super::when(0), "1970-01-01 00:00");
        assert_eq!(super::when(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(super::when(1_795_000_000_000), "2026-11-18 11:06");
    }
}
