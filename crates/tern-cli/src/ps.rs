//! `tern ps …`: the background processes under `$TERN_HOME/procs`, for people.
//!
//! Works with or without a running gateway: everything goes through
//! [`tern_procs::Observer`], a read-only view of the directories that talks to a process's
//! supervisor only for what was asked. It never prunes, never marks an exit reported, never
//! moves the model's poll cursor and sends no events, so it is safe beside the gateway's
//! `ProcessManager` on the same directory.
//!
//! - `tern ps`: the directories' `meta.json`/`exit.json` and the supervisors' locks → a table
//!   (running, lost and recently finished; `--all` every one kept) or JSON.
//! - `log ID [-f]`: the log segments read by absolute offset, a chunk at a time; `-f` reads on
//!   from where it stopped until the status is final and a read finds nothing more. As an
//!   offset names the same byte for ever, rotation neither loses nor repeats bytes (unless the
//!   reader falls a whole log cap behind; then it says how much it skipped).
//! - `kill ID`: the supervisor's `kill` (TERM to the group, KILL after the grace), then `wait`.
//! - `send ID TEXT` (`--raw`, `--close`, `-` for stdin): the supervisor's `submit`, `write`
//!   or `close`, as the model's `process` tool sends them (long text in 1 MiB writes).
//! - `attach ID` (PTY processes): the supervisor's `attach` stream; the log's tail up to the
//!   stream's first byte is shown first, so the context has no gap and no repeat. Raw mode
//!   (when stdin is a terminal), `resize` at start and on SIGWINCH, Ctrl-] detaches.

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use tern_config::Home;
use tern_procs::output::{complete_utf8_len, for_model};
use tern_procs::protocol::Request;
use tern_procs::{Observer, ProcError, ProcInfo, ProcStatus};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::context;
use crate::render::one_line;
use crate::timefmt::when;

/// The byte that detaches `attach`: Ctrl-].
pub const DETACH_BYTE: u8 = 0x1d;

/// Finished processes `tern ps` shows without `--all`: those that ended this recently.
const RECENT: Duration = Duration::from_secs(3600);
/// Bytes read from the log at a time.
const CHUNK: usize = 256 * 1024;
/// How often `log -f` looks for new output.
const FOLLOW_EVERY: Duration = Duration::from_millis(100);
/// Bytes of the log shown on attach before the live output.
const ATTACH_CONTEXT: u64 = 8 * 1024;
/// How long `attach` waits for the exit status after the stream ended.
const SETTLE_AFTER_STREAM: Duration = Duration::from_secs(5);

const ABOUT: &str = "\
Background processes that agents started (the terminal tool's background: true) live under
$TERN_HOME/procs, one directory each, under a supervisor of their own. These commands work
with or without a running gateway and never change what the gateway does with them.

Attach: Ctrl-] detaches (the process keeps running). Without a terminal on stdin, stdin's
bytes are forwarded as they come, a Ctrl-] byte detaches, and the end of stdin only ends
the input: the output is shown until the process exits or tern gets SIGINT/SIGTERM.";

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, after_long_help = ABOUT)]
pub struct PsArgs {
    #[command(subcommand)]
    pub command: Option<PsCommand>,

    #[command(flatten)]
    pub list: ListArgs,
}

/// `tern ps` without a subcommand: the list.
#[derive(Args, Debug, Default)]
pub struct ListArgs {
    /// Also processes that finished more than an hour ago (every one still kept)
    #[arg(long)]
    pub all: bool,
    /// Only this session's processes (its id or the start of it)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Print JSON (for scripts) instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum PsCommand {
    /// Print a process's output (raw bytes, as the terminal got them)
    Log {
        /// The process id (or the start of it)
        id: String,
        /// Follow new output until the process exits, then print its status on stderr
        #[arg(short, long)]
        follow: bool,
        /// Start with the last N lines
        #[arg(long, value_name = "N", conflicts_with = "offset")]
        tail: Option<usize>,
        /// Start at this byte offset of the output
        #[arg(long, value_name = "N")]
        offset: Option<u64>,
        /// Strip terminal control sequences and reduce \r redraws (as the model sees it)
        #[arg(long)]
        strip: bool,
    },
    /// Stop a process: TERM to its process group, KILL after the grace period
    Kill {
        /// The process id (or the start of it)
        id: String,
        /// Seconds between TERM and KILL (default: the one it was started with, 5 s)
        #[arg(long, value_name = "SECS")]
        grace: Option<f64>,
    },
    /// Send input to a process's stdin: TEXT and Enter (a line), as the model's `submit` does
    Send {
        /// The process id (or the start of it)
        id: String,
        /// What to send; `-` reads it from this command's stdin
        #[arg(required_unless_present = "close")]
        text: Option<String>,
        /// Send TEXT as it is, without Enter
        #[arg(long)]
        raw: bool,
        /// Then close the process's stdin (the end of its input); alone, only that
        #[arg(long)]
        close: bool,
    },
    /// Attach this terminal to a PTY process (Ctrl-] detaches; it keeps running)
    Attach {
        /// The process id (or the start of it)
        id: String,
    },
}

pub async fn run(home: Option<PathBuf>, args: PsArgs) -> anyhow::Result<ExitCode> {
    let home = Home::resolve(home, &context::env_var)?;
    let obs = Observer::new(home.root.join("procs"));
    match args.command {
        None => list(&obs, args.list).await,
        Some(PsCommand::Log {
            id,
            follow,
            tail,
            offset,
            strip,
        }) => {
            let id = resolve(&obs, &id).await?;
            log(&obs, &id, follow, tail, offset, strip).await
        }
        Some(PsCommand::Kill { id, grace }) => {
            let grace = grace
                .map(|g| {
                    if g.is_finite() && (0.0..=86_400.0).contains(&g) {
                        Ok(Duration::from_secs_f64(g))
                    } else {
                        Err(anyhow!("--grace is seconds from 0 to 86400, not {g}"))
                    }
                })
                .transpose()?;
            let id = resolve(&obs, &id).await?;
            kill(&obs, &id, grace).await
        }
        Some(PsCommand::Send {
            id,
            text,
            raw,
            close,
        }) => {
            let text = match text.as_deref() {
                Some("-") => Some(
                    tokio::task::spawn_blocking(|| {
                        let mut buf = String::new();
                        std::io::Read::read_to_string(&mut std::io::stdin(), &mut buf).map(|_| buf)
                    })
                    .await?
                    .context("cannot read the text from stdin (is it UTF-8?)")?,
                ),
                other => other.map(str::to_owned),
            };
            let id = resolve(&obs, &id).await?;
            send(&obs, &id, text, raw, close).await
        }
        Some(PsCommand::Attach { id }) => {
            let id = resolve(&obs, &id).await?;
            attach(&obs, &id).await
        }
    }
}

/// The full id `id` names, or an error that says why there is none.
async fn resolve(obs: &Observer, id: &str) -> anyhow::Result<String> {
    match obs.resolve(id).await {
        Ok(full) => Ok(full),
        Err(ProcError::NotFound(_)) if !obs.exists().await => bail!(
            "no process {id}: {} does not exist (no background process was ever started with this TERN_HOME)",
            obs.root().display()
        ),
        Err(ProcError::NotFound(_)) => {
            bail!("no process {id} (`tern ps --all` lists the processes kept)")
        }
        Err(e) => Err(e.into()),
    }
}

/// A duration in milliseconds, short: `42s`, `3m12s`, `2h05m`, `3d4h`.
fn span(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

/// The status column: `running`, `exited 3`, `killed by SIGTERM`, `lost`.
fn status_cell(s: &ProcStatus) -> String {
    match s {
        ProcStatus::Running => "running".into(),
        ProcStatus::Exited {
            signal: Some(sig), ..
        } => format!("killed by {}", signal_name(*sig)),
        ProcStatus::Exited {
            exit_code: Some(c), ..
        } => format!("exited {c}"),
        ProcStatus::Exited { .. } => "exited".into(),
        ProcStatus::Lost => "lost".into(),
    }
}

/// A sentence about a process's status, for the end of `log -f`, `kill` and `attach`.
fn status_sentence(p: &ProcInfo) -> String {
    let id = &p.id;
    match &p.status {
        ProcStatus::Running => format!("{id} is running"),
        ProcStatus::Exited {
            signal: Some(sig), ..
        } => format!("{id} was killed by {}", signal_name(*sig)),
        ProcStatus::Exited {
            exit_code: Some(c), ..
        } => format!("{id} exited with code {c}"),
        ProcStatus::Exited { .. } => format!("{id} exited"),
        ProcStatus::Lost => format!(
            "{id} is lost: its supervisor is gone without recording an exit (it was killed itself)"
        ),
    }
}

/// The time column: how long it runs, or when it ended.
fn time_cell(p: &ProcInfo, now: i64) -> String {
    match p.status {
        ProcStatus::Running => format!("up {}", span(now - p.started_at_ms)),
        ProcStatus::Exited { ended_at_ms, .. } => format!("ended {} ago", span(now - ended_at_ms)),
        ProcStatus::Lost => format!("started {}", when(p.started_at_ms)),
    }
}

async fn list(obs: &Observer, args: ListArgs) -> anyhow::Result<ExitCode> {
    let now = tern_util::now_ms();
    let recent_ms = i64::try_from(RECENT.as_millis()).unwrap_or(i64::MAX);
    let all = obs.list().await?;
    let in_session: Vec<ProcInfo> = all
        .into_iter()
        .filter(|p| match &args.session {
            None => true,
            Some(s) => p.session_id.as_deref().is_some_and(|id| id.starts_with(s)),
        })
        .collect();
    let total = in_session.len();
    let shown: Vec<ProcInfo> = in_session
        .into_iter()
        .filter(|p| {
            args.all
                || match p.status {
                    ProcStatus::Exited { ended_at_ms, .. } => now - ended_at_ms <= recent_ms,
                    ProcStatus::Running | ProcStatus::Lost => true,
                }
        })
        .collect();
    let mut shown = shown;
    // Running ones first (what needs attention), then the newest first.
    shown.sort_by_key(|p| {
        (
            !p.status.is_running(),
            std::cmp::Reverse(p.started_at_ms),
            std::cmp::Reverse(p.id.clone()),
        )
    });
    let hidden = total - shown.len();
    // Written with `?`, not `print!`: a closed pipe (`tern ps | head -1`) is an error that
    // `main` ends quietly, not a panic.
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&shown)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let hint = || {
        if hidden > 0 {
            eprintln!(
                "({hidden} that finished more than an hour ago not shown; `tern ps --all` lists them)"
            );
        }
    };
    if shown.is_empty() {
        if !obs.exists().await {
            eprintln!("no background processes: none was ever started with this TERN_HOME");
        } else if args.session.is_some() {
            eprintln!("no background processes of that session");
        } else {
            eprintln!("no background processes running or recently finished");
        }
        hint();
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    out.push_str(&format!(
        "{:<17}  {:<17}  {:>7}  {:<12}  {:<16}  {:<3}  COMMAND\n",
        "ID", "STATUS", "PID", "SESSION", "TIME", "PTY"
    ));
    for p in &shown {
        let session = p
            .session_id
            .as_deref()
            .map(|s| one_line(s, 11))
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<17}  {:<17}  {:>7}  {:<12}  {:<16}  {:<3}  {}\n",
            p.id,
            status_cell(&p.status),
            p.pid,
            session,
            time_cell(p, now),
            if p.pty { "yes" } else { "no" },
            one_line(&p.command, 60),
        ));
    }
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    hint();
    Ok(ExitCode::SUCCESS)
}

/// Where the output goes: raw, or stripped a line at a time (a control sequence cut by a
/// read is only whole at the end of its line).
struct Sink {
    out: tokio::io::Stdout,
    strip: bool,
    pending: Vec<u8>,
}

impl Sink {
    /// False when stdout is closed (a pager quit): reading on is pointless.
    async fn push(&mut self, data: &[u8]) -> anyhow::Result<bool> {
        if !self.strip {
            return self.write(data.to_vec()).await;
        }
        self.pending.extend_from_slice(data);
        let Some(nl) = self.pending.iter().rposition(|b| *b == b'\n') else {
            return Ok(true);
        };
        let rest = self.pending.split_off(nl + 1);
        let lines = std::mem::replace(&mut self.pending, rest);
        self.write(for_model(&lines).into_bytes()).await
    }

    /// Writes out what is held back (a line not finished yet) and flushes.
    async fn flush(&mut self) -> anyhow::Result<bool> {
        if self.strip && !self.pending.is_empty() {
            let n = complete_utf8_len(&self.pending);
            let part: Vec<u8> = self.pending.drain(..n).collect();
            if !self.write(for_model(&part).into_bytes()).await? {
                return Ok(false);
            }
        }
        match self.out.flush().await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    async fn write(&mut self, bytes: Vec<u8>) -> anyhow::Result<bool> {
        match self.out.write_all(&bytes).await {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// The offset where the last `lines` lines begin (a final newline ends the last line, it does
/// not start another).
async fn tail_start(obs: &Observer, id: &str, lines: usize) -> anyhow::Result<u64> {
    let total = obs.read_log(id, u64::MAX, 0).await?.total;
    if lines == 0 {
        return Ok(total);
    }
    let mut end = total;
    let mut seen = 0;
    loop {
        let from = end.saturating_sub(CHUNK as u64);
        let slice = obs.read_log(id, from, (end - from) as usize).await?;
        for (i, b) in slice.data.iter().enumerate().rev() {
            let pos = slice.start + i as u64;
            if *b == b'\n' && pos + 1 < total {
                seen += 1;
                if seen == lines {
                    return Ok(pos + 1);
                }
            }
        }
        // The oldest byte kept was reached.
        if slice.start > from || from == 0 || slice.data.is_empty() {
            return Ok(slice.start);
        }
        end = slice.start;
    }
}

async fn log(
    obs: &Observer,
    id: &str,
    follow: bool,
    tail: Option<usize>,
    offset: Option<u64>,
    strip: bool,
) -> anyhow::Result<ExitCode> {
    // Fails clearly for a directory that is still starting.
    obs.get(id).await?;
    let mut pos = match (tail, offset) {
        (Some(n), _) => tail_start(obs, id, n).await?,
        (None, Some(o)) => o,
        (None, None) => 0,
    };
    let mut sink = Sink {
        out: tokio::io::stdout(),
        strip,
        pending: Vec::new(),
    };
    let mut ended: Option<ProcInfo> = None;
    loop {
        let slice = obs.read_log(id, pos, CHUNK).await?;
        // Before the oldest segment kept: said only when asked for, or lost while following.
        if slice.start > pos && (offset.is_some() || pos > 0) {
            eprintln!(
                "tern: bytes {pos}..{} of {id}'s output were rotated out of the log",
                slice.start
            );
        }
        if !slice.data.is_empty() {
            pos = slice.end();
            if !sink.push(&slice.data).await? {
                return Ok(ExitCode::SUCCESS);
            }
            continue;
        }
        pos = pos.max(slice.start);
        if !sink.flush().await? {
            return Ok(ExitCode::SUCCESS);
        }
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        if let Some(p) = ended {
            // The status was final before this read found nothing: the log is complete.
            eprintln!("tern: {}", status_sentence(&p));
            return Ok(if matches!(p.status, ProcStatus::Lost) {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            });
        }
        let p = obs.get(id).await?;
        if p.status.is_running() {
            tokio::time::sleep(FOLLOW_EVERY).await;
        } else {
            // One more read: output written before the status became final.
            ended = Some(p);
        }
    }
}

async fn kill(obs: &Observer, id: &str, grace: Option<Duration>) -> anyhow::Result<ExitCode> {
    let p = obs.get(id).await?;
    match p.status {
        ProcStatus::Running => {}
        ProcStatus::Lost => bail!("{}", status_sentence(&p)),
        ProcStatus::Exited { .. } => {
            println!("{} (it had already ended)", status_sentence(&p));
            return Ok(ExitCode::SUCCESS);
        }
    }
    let k = obs.kill(id, grace).await?;
    match k.info.status {
        ProcStatus::Running => bail!(
            "{id} still runs after TERM and, once the grace period was over, KILL (is it stuck in the kernel?)"
        ),
        ProcStatus::Lost => bail!("{}", status_sentence(&k.info)),
        ProcStatus::Exited { .. } if !k.signalled => {
            println!("{} (it had already ended)", status_sentence(&k.info));
        }
        ProcStatus::Exited { .. } => println!("{}", status_sentence(&k.info)),
    }
    Ok(ExitCode::SUCCESS)
}

/// Most text one request carries (the supervisor takes lines of up to 4 MiB, escapes
/// included); longer text goes in several writes.
const SEND_CHUNK: usize = 1 << 20;

async fn send(
    obs: &Observer,
    id: &str,
    text: Option<String>,
    raw: bool,
    close: bool,
) -> anyhow::Result<ExitCode> {
    let p = obs.get(id).await?;
    if !p.status.is_running() {
        bail!("{}: its input is gone", status_sentence(&p));
    }
    let not_running = |e: ProcError| match e {
        ProcError::NotRunning(_) => anyhow!("{id} ended before it took the input"),
        e => e.into(),
    };
    if let Some(text) = text {
        let mut chunks = chunks(&text, SEND_CHUNK).peekable();
        while let Some(chunk) = chunks.next() {
            let data = chunk.to_owned();
            let req = if chunks.peek().is_none() && !raw {
                Request::Submit { data }
            } else {
                Request::Write { data }
            };
            obs.input(id, req).await.map_err(not_running)?;
        }
    }
    if close {
        obs.input(id, Request::Close).await.map_err(not_running)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `text` in pieces of at most `max` bytes, cut at character boundaries; one empty piece
/// for empty text (a bare Enter).
fn chunks(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let r = rest?;
        if r.len() <= max {
            rest = None;
            return Some(r);
        }
        let mut cut = max;
        while !r.is_char_boundary(cut) {
            cut -= 1;
        }
        rest = Some(&r[cut..]);
        Some(&r[..cut])
    })
}

/// The terminal's settings, put back when dropped (on every way out of `attach`).
struct RawMode {
    saved: nix::sys::termios::Termios,
}

impl RawMode {
    fn enter() -> anyhow::Result<Self> {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved =
            tcgetattr(&stdin).map_err(|e| anyhow!("cannot read the terminal's mode: {e}"))?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(&stdin, SetArg::TCSANOW, &raw)
            .map_err(|e| anyhow!("cannot put the terminal in raw mode: {e}"))?;
        Ok(Self { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        use nix::sys::termios::{SetArg, tcsetattr};
        if let Err(e) = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved) {
            eprintln!("tern: cannot restore the terminal ({e}); `reset` will");
        }
    }
}

/// The size (columns, rows) of the terminal on stdin.
fn terminal_size() -> Option<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which points to `ws`, alive
    // for the whole call; stdin's descriptor is open for the life of the process.
    let r = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

/// Why an attachment ended.
enum AttachEnd {
    /// Ctrl-], or a signal to tern.
    Detached,
    /// The supervisor ended the stream (the output ended, or this client fell behind).
    StreamEnded,
}

/// Reads stdin on a thread of its own, a chunk at a time, into a channel. A plain thread
/// (not tokio's stdin, whose blocking pool read would keep the runtime from shutting down
/// until the next key press): at exit it simply ends with the process.
fn stdin_chunks() -> anyhow::Result<tokio::sync::mpsc::Receiver<Vec<u8>>> {
    use std::io::Read;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; 4096];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| anyhow!("cannot start reading stdin: {e}"))?;
    Ok(rx)
}

async fn attach(obs: &Observer, id: &str) -> anyhow::Result<ExitCode> {
    let p = obs.get(id).await?;
    if !p.pty {
        bail!(
            "{id} is not a terminal program (it runs with pipes, not a PTY), so there is nothing to attach to; follow its output with `tern ps log -f {id}`"
        );
    }
    if !p.status.is_running() {
        bail!(
            "{id} is not running ({}); its output: `tern ps log {id}`",
            status_cell(&p.status)
        );
    }
    let attached = match obs.attach(id).await {
        Ok(a) => a,
        Err(ProcError::NotRunning(_)) => {
            let p = obs.get(id).await?;
            bail!("cannot attach: {}", status_sentence(&p))
        }
        Err(e) => bail!("cannot attach to {id}: {e}"),
    };
    let tty = std::io::stdin().is_terminal();

    // Context: the log up to the stream's first byte, from a line start when there is one.
    let from = attached.offset.saturating_sub(ATTACH_CONTEXT);
    let ctx = obs
        .read_log(id, from, (attached.offset - from) as usize)
        .await?;
    let mut context = &ctx.data[..];
    if ctx.start > 0
        && let Some(nl) = context.iter().position(|b| *b == b'\n')
    {
        context = &context[nl + 1..];
    }
    let mut stdout = tokio::io::stdout();
    stdout.write_all(context).await?;
    stdout.flush().await?;
    eprintln!(
        "tern: attached to {id} ({}); Ctrl-] detaches, the process keeps running",
        one_line(&p.command, 60)
    );

    // The program redraws for the new size, and that reaches us through the stream.
    if tty
        && let Some((cols, rows)) = terminal_size()
        && let Err(e) = obs.resize(id, cols, rows).await
    {
        tracing::debug!("resize: {e}");
    }
    let raw = if tty { Some(RawMode::enter()?) } else { None };
    let end = relay(obs, id, attached.stream, tty).await;
    drop(raw);
    let end = end?;

    match end {
        AttachEnd::Detached => {
            if tty {
                eprintln!();
            }
            eprintln!(
                "tern: detached from {id}; it keeps running (`tern ps attach {id}` to come back)"
            );
            Ok(ExitCode::SUCCESS)
        }
        AttachEnd::StreamEnded => {
            let p = match tokio::time::timeout(SETTLE_AFTER_STREAM, obs.wait(id)).await {
                Ok(p) => p?,
                Err(_) => obs.get(id).await?,
            };
            if tty {
                eprintln!();
            }
            match p.status {
                ProcStatus::Exited { .. } => {
                    eprintln!("tern: {}", status_sentence(&p));
                    Ok(ExitCode::SUCCESS)
                }
                ProcStatus::Lost => bail!("{}", status_sentence(&p)),
                ProcStatus::Running => bail!(
                    "the supervisor ended the connection while {id} still runs (this terminal fell too far behind its output?); `tern ps attach {id}` attaches again"
                ),
            }
        }
    }
}

/// Copies the stream to stdout and stdin to the stream until a detach or the stream's end.
async fn relay(
    obs: &Observer,
    id: &str,
    stream: tokio::net::UnixStream,
    tty: bool,
) -> anyhow::Result<AttachEnd> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut winch = signal(SignalKind::window_change())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let (mut from_proc, mut to_proc) = stream.into_split();
    let mut input = stdin_chunks()?;
    let detach = tokio_util::sync::CancellationToken::new();
    // Input on a task of its own: a program that does not read its terminal must not stop
    // its output from reaching us.
    let writer = {
        let detach = detach.clone();
        tokio::spawn(async move {
            while let Some(bytes) = input.recv().await {
                let (send, detached) = match bytes.iter().position(|b| *b == DETACH_BYTE) {
                    Some(i) => (&bytes[..i], true),
                    None => (&bytes[..], false),
                };
                if !send.is_empty() && to_proc.write_all(send).await.is_err() {
                    break;
                }
                if detached {
                    detach.cancel();
                    break;
                }
            }
            // The end of stdin ends the input, not the attachment: the write half stays open
            // (dropping it would tell the supervisor the client left) until the relay ends.
            std::future::pending::<()>().await;
            drop(to_proc);
        })
    };
    let mut stdout = tokio::io::stdout();
    let mut buf = vec![0u8; 32 * 1024];
    let end = loop {
        tokio::select! {
            () = detach.cancelled() => break AttachEnd::Detached,
            r = from_proc.read(&mut buf) => match r {
                Ok(0) | Err(_) => break AttachEnd::StreamEnded,
                Ok(n) => {
                    let wrote = match stdout.write_all(&buf[..n]).await {
                        Ok(()) => stdout.flush().await,
                        Err(e) => Err(e),
                    };
                    match wrote {
                        Ok(()) => {}
                        // Nobody reads our output any more: leave, the process runs on.
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break AttachEnd::Detached,
                        Err(e) => {
                            writer.abort();
                            return Err(e.into());
                        }
                    }
                }
            },
            _ = winch.recv(), if tty => {
                if let Some((cols, rows)) = terminal_size()
                    && let Err(e) = obs.resize(id, cols, rows).await
                {
                    tracing::debug!("resize: {e}");
                }
            }
            _ = term.recv() => break AttachEnd::Detached,
            _ = int.recv() => break AttachEnd::Detached,
            _ = hup.recv() => break AttachEnd::Detached,
        }
    };
    writer.abort();
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_sent_in_pieces_cut_between_characters() {
        assert_eq!(chunks("", 4).collect::<Vec<_>>(), [""]);
        assert_eq!(chunks("abcd", 4).collect::<Vec<_>>(), ["abcd"]);
        assert_eq!(
            chunks("abcdefghij", 4).collect::<Vec<_>>(),
            ["abcd", "efgh", "ij"]
        );
        // "é" is two bytes: never split.
        let pieces: Vec<_> = chunks("aéééb", 4).collect();
        assert_eq!(pieces, ["aé", "éé", "b"]);
        assert_eq!(pieces.concat(), "aéééb");
    }

    #[test]
    fn spans_are_short() {
        assert_eq!(span(42_000), "42s");
        assert_eq!(span(192_000), "3m12s");
        assert_eq!(span(7_500_000), "2h05m");
        assert_eq!(span(4 * 86_400_000 + 3_600_000), "4d1h");
        assert_eq!(span(-5), "0s");
    }

    #[test]
    fn statuses_read_well() {
        let killed = ProcStatus::Exited {
            exit_code: Some(143),
            signal: Some(15),
            ended_at_ms: 0,
        };
        assert_eq!(status_cell(&killed), "killed by SIGTERM");
        let done = ProcStatus::Exited {
            exit_code: Some(3),
            signal: None,
            ended_at_ms: 0,
        };
        assert_eq!(status_cell(&done), "exited 3");
        assert_eq!(status_cell(&ProcStatus::Lost), "lost");
    }
}
