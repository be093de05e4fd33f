//! `tern status`: whether a gateway runs on this home, and what it has on its hands.
//!
//! `tern gateway` records itself in `$TERN_HOME/gateway.json` once it listens ([`record`]:
//! pid, address, start time, written atomically, mode 0600) and removes the file when it
//! stops cleanly. A file left by a gateway that was killed names a process that is gone (or
//! a pid since reused by another process, told apart by its start time in `/proc`): that
//! reads as "not running". (`inbox-admin.json` has the address too, but it outlives the
//! gateway by design and says nothing of its process.)
//!
//! The counts come from the store opened read-only and from `$TERN_HOME/procs` through the
//! read-only process observer, so `tern status` works with the gateway down and never
//! changes anything.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tern_config::Home;

use crate::context;

/// The file a running gateway records itself in.
pub const STATE_FILE: &str = "gateway.json";

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print JSON (for scripts) instead of text
    #[arg(long)]
    pub json: bool,
}

/// What `gateway.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayRecord {
    pub pid: u32,
    /// The address it listens on, as bound (`127.0.0.1:8642`).
    pub addr: String,
    /// Where to reach it from this machine (`http://…`; loopback for a wildcard bind).
    pub url: String,
    pub started_at_ms: i64,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`), to tell it
    /// from a later process that got the same pid.
    #[serde(default)]
    pub start_ticks: Option<u64>,
    #[serde(default)]
    pub inbox_only: bool,
    pub version: String,
}

/// Removes `gateway.json` when dropped: the gateway stopped cleanly.
pub struct Recorded {
    path: PathBuf,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // Another gateway started on this home since may have replaced the file: only ours
        // goes.
        let ours = std::fs::read(&self.path)
            .ok()
            .and_then(|b| serde_json::from_slice::<GatewayRecord>(&b).ok())
            .is_some_and(|r| r.pid == std::process::id());
        if ours && let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the gateway's state file");
        }
    }
}

/// Records this process as the gateway of `home`, listening on `addr`; the file goes when the
/// returned guard is dropped. A failure only costs `tern status` its answer: logged, `None`.
pub fn record(home: &Home, addr: SocketAddr, inbox_only: bool) -> Option<Recorded> {
    let pid = std::process::id();
    let rec = GatewayRecord {
        pid,
        addr: addr.to_string(),
        url: crate::reviewers::local_url(addr),
        started_at_ms: tern_store::now_ms(),
        start_ticks: start_ticks(pid),
        inbox_only,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    let path = home.root.join(STATE_FILE);
    let written = serde_json::to_vec_pretty(&rec)
        .map_err(std::io::Error::other)
        .and_then(|bytes| tern_util::fs::write_private(&path, &bytes));
    match written {
        Ok(()) => Some(Recorded { path }),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot record the gateway's pid and address; `tern status` will not see it");
            None
        }
    }
}

/// The start time of process `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`);
/// `None` where there is no `/proc`.
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or parentheses.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process `rec` names is still that gateway.
fn alive(rec: &GatewayRecord) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::kill;
    let Ok(pid) = i32::try_from(rec.pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    match kill(nix::unistd::Pid::from_raw(pid), None) {
        // EPERM: it exists, owned by someone else.
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    match (rec.start_ticks, start_ticks(rec.pid)) {
        (Some(then), Some(now)) => then == now,
        _ => true,
    }
}

/// The gateway recorded in `home`: `Ok(None)` when none is recorded or it is gone.
pub(crate) fn running_gateway(home: &Home) -> anyhow::Result<Option<GatewayRecord>> {
    let path = home.root.join(STATE_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let rec: GatewayRecord = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        // Written atomically, so never half-written by tern: not ours to trust.
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "unreadable gateway state file");
            return Ok(None);
        }
    };
    Ok(alive(&rec).then_some(rec))
}

pub async fn run(home: Option<PathBuf>, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let home = Home::resolve(home, &context::env_var)?;
    let gateway = running_gateway(&home)?;
    let db = home.db_path();
    let counts = if db.exists() {
        let store = tern_store::Store::open_read_only(&db)
            .await
            .with_context(|| format!("opening the session store {} to read", db.display()))?;
        let c = store.counts().await?;
        store.close().await;
        c
    } else {
        tern_store::Counts::default()
    };
    let procs = tern_procs::Observer::new(home.root.join("procs"));
    let running_procs = if procs.exists().await {
        procs
            .list()
            .await?
            .iter()
            .filter(|p| p.status.is_running())
            .count()
    } else {
        0
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let v = json!({
            "home": home.root,
            "gateway": gateway.as_ref().map(|g| json!({
                "running": true,
                "pid": g.pid,
                "addr": g.addr,
                "url": g.url,
                "started_at_ms": g.started_at_ms,
                "inbox_only": g.inbox_only,
                "version": g.version,
            })).unwrap_or_else(|| json!({"running": false})),
            "sessions": {
                "total": counts.sessions,
                "running": counts.running_sessions,
                "waiting": counts.waiting_sessions,
            },
            "inbox": {"pending": counts.pending_requests},
            "processes": {"running": running_procs},
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &gateway {
        Some(g) => writeln!(
            out,
            "gateway    running at {} (pid {}, since {} UTC{})",
            g.url,
            g.pid,
            crate::timefmt::when(g.started_at_ms),
            if g.inbox_only { ", inbox only" } else { "" }
        )?,
        None => writeln!(out, "gateway    not running")?,
    }
    writeln!(
        out,
        "sessions   {} running, {} waiting ({} in all)",
        counts.running_sessions, counts.waiting_sessions, counts.sessions
    )?;
    writeln!(
        out,
        "inbox      {} pending request(s)",
        counts.pending_requests
    )?;
    writeln!(out, "processes  {running_procs} running in the background")?;
    writeln!(out, "home       {}", home.root.display())?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_read() {
        let pid = std::process::id();
        assert!(start_ticks(pid).is_some());
        assert_eq!(start_ticks(pid), start_ticks(pid));
    }

    #[test]
    fn a_reused_pid_is_not_the_gateway() {
        let mut rec = GatewayRecord {
            pid: std::process::id(),
            addr: "127.0.0.1:1".into(),
            url: "http://127.0.0.1:1".into(),
            started_at_ms: 0,
            start_ticks: start_ticks(std::process::id()),
            inbox_only: false,
            version: String::new(),
        };
        assert!(alive(&rec));
        rec.start_ticks = rec.start_ticks.map(|t| t + 1);
        assert!(!alive(&rec));
    }
}
