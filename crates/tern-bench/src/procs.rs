//! `tern-bench procs`: what capturing a background process's output costs (issue 6).
//!
//! Flow: write a source file once (`--size` bytes of pseudo-random text lines, 20 to 160
//! bytes each, so nothing is all zeros) and read it once so it is in the page cache → then,
//! `--runs` times, each mode in turn (every other run in reverse order), all with the same
//! generator `dd if=SRC bs=128K count=N iflag=count_bytes status=none` (plain read/write of
//! 128 KiB, cat's buffer size):
//!
//! - **plain**: `bash -c 'GEN > FILE'` as our child, wall time from spawn to exit, CPU from
//!   `wait4`'s rusage; the file's size is checked. For reference also `cat SRC > FILE`,
//!   which coreutils turns into `copy_file_range` (no copy through user space), `GEN | cat >
//!   FILE`, the same output relayed through a pipe as the supervisor relays it, and
//!   `script -q -c GEN /dev/null > FILE`: util-linux's `script` relaying a PTY to the file,
//!   the baseline for PTY mode (the file gets ONLCR's `\r` before each newline too).
//! - **drain**, **relay-1**, **relay-2**: where a pipe's limits are, without tern: the bench
//!   itself takes the generator's stdout (a 256 KiB pipe, as the supervisor's) and reads it
//!   256 KiB at a time, dropping it, or writing it to a file from the same thread (the
//!   supervisor's pump before 2ed90b1), or handing it to a writing thread (the pump now);
//!   capture CPU from `RUSAGE_THREAD`.
//! - **pipe** / **pty**: a process directory with `spec.json` (the default 64 MiB log cap)
//!   and the release `tern supervise DIR` as our child, as the manager starts it. Wall time
//!   from spawning the supervisor to its exit, which comes after `exit.json`. `wait4` reaps
//!   it and gives its CPU time (all its threads: the capture) plus that of the children it
//!   reaped (the generator's shell). `exit.json` must say code 0 and `output_bytes` = the bytes written
//!   (in a PTY, plus one `\r` per newline: the terminal's ONLCR), and the log's last 4 KiB
//!   must be the source's.
//! - **concurrent**: `--concurrency` processes of each kind at once, each writing
//!   `size / concurrency` bytes; wall time from the first spawn to the last exit.
//!
//! Prints a Markdown table of medians (MB = 10^6 bytes) with the ratio to the plain redirect,
//! and for pipe mode the ratio run by run (each pair ran back to back) and its median.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use tern_procs::layout::{ExitRecord, new_id, read_json};

const GIB: f64 = (1u64 << 30) as f64;
/// The generator's buffer: what `cat` uses for pipes (coreutils' `io_blksize`).
const BLOCK: &str = "128K";
/// The manager's default log cap (`[processes] log_max_bytes`).
const LOG_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// The modes, in the order they run and are printed.
const MODES: [&str; 13] = [
    "plain",
    "cat",
    "relay",
    "script",
    "drain",
    "relay-1",
    "relay-2",
    "pipe",
    "pipe-kept",
    "pty",
    "plain-n",
    "pipe-n",
    "pty-n",
];

/// The position of `mode` in [`MODES`] (and so in the rows and samples).
fn idx(mode: &str) -> usize {
    MODES.iter().position(|m| *m == mode).unwrap_or(usize::MAX)
}

struct Opts {
    size: u64,
    concurrency: usize,
    runs: usize,
    tern: PathBuf,
    dir: Option<PathBuf>,
    /// Only these modes (row keys), for profiling one of them.
    modes: Option<Vec<String>>,
}

fn parse_size(s: &str) -> anyhow::Result<u64> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("not a size: {s} (bytes, or with K, M or G)"))?;
    n.checked_mul(mult).context("size too large")
}

fn parse_opts(skip: usize) -> anyhow::Result<Opts> {
    let mut o = Opts {
        size: 1 << 30,
        concurrency: 64,
        runs: 3,
        tern: std::env::current_exe()?
            .parent()
            .context("the bench binary has no directory")?
            .join("tern"),
        dir: None,
        modes: None,
    };
    let mut it = std::env::args().skip(skip);
    while let Some(a) = it.next() {
        let mut val = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--size" => o.size = parse_size(&val()?)?,
            "--concurrency" => o.concurrency = val()?.parse()?,
            "--runs" => o.runs = val()?.parse()?,
            "--tern" => o.tern = val()?.into(),
            "--dir" => o.dir = Some(val()?.into()),
            "--modes" => {
                let modes: Vec<String> = val()?.split(',').map(str::to_owned).collect();
                if let Some(m) = modes
                    .iter()
                    .find(|m| *m != "memory" && idx(m) == usize::MAX)
                {
                    bail!("unknown mode {m}: the modes are {},memory", MODES.join(","));
                }
                o.modes = Some(modes);
            }
            "-h" | "--help" => {
                println!(
                    "tern-bench procs [--size BYTES|NK|NM|NG] [--concurrency N] [--runs N] \
                     [--tern PATH] [--dir DIR] [--modes {},memory]",
                    MODES.join(",")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if let Some(m) = o
        .modes
        .iter()
        .flatten()
        .find(|m| !MODES.contains(&m.as_str()) && *m != "memory")
    {
        bail!(
            "unknown mode {m}; the modes are {} and memory",
            MODES.join(", ")
        );
    }
    if o.size == 0 || o.concurrency == 0 || o.runs == 0 {
        bail!("--size, --concurrency and --runs must be positive");
    }
    if !o.tern.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p tern-cli`",
            o.tern.display()
        );
    }
    Ok(o)
}

/// Bytes, wall time and CPU of one measured run (of one process or of a concurrent batch).
#[derive(Clone, Copy, Default)]
struct Sample {
    bytes: u64,
    wall: Duration,
    /// Everything: the supervisor(s) and the generator(s), or the shell(s) of the plain run.
    cpu_total: f64,
    /// The supervisor(s) only (zero for plain runs).
    cpu_capture: f64,
}

impl Sample {
    fn mbps(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64() / 1e6
    }
    fn per_gib(&self, cpu: f64) -> f64 {
        cpu * GIB / self.bytes as f64
    }
}

/// The source: pseudo-random lowercase text in lines of 20 to 160 bytes.
fn write_source(path: &Path, size: u64) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64*: fast and good enough for filler text.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut line = Vec::with_capacity(161);
    let mut left = size;
    while left > 0 {
        let len = 20 + (next() % 141) as usize;
        line.clear();
        for _ in 0..len - 1 {
            line.push(b'a' + (next() % 26) as u8);
        }
        line.push(b'\n');
        let take = line.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        f.write_all(&line[..take])?;
        left -= take as u64;
    }
    f.flush()?;
    Ok(())
}

/// Newlines in the first `n` bytes of `path` (reads it, which also warms the page cache).
fn newlines(path: &Path, n: u64) -> anyhow::Result<u64> {
    let mut f = std::fs::File::open(path)?.take(n);
    let mut buf = vec![0u8; 1 << 20];
    let mut count = 0u64;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(count);
        }
        count += buf[..got].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// Reads `len` bytes of `path` at `offset`.
fn read_at(path: &Path, offset: u64, len: usize) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; len];
    std::fs::File::open(path)?.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

fn generator(src: &Path, bytes: u64) -> String {
    format!(
        "dd if={} bs={BLOCK} count={bytes} iflag=count_bytes status=none",
        sh_quote(src)
    )
}

/// The script a process runs: the generator (its output redirected to `out` for the plain
/// runs), then bash's `times` into `cpu` — the generator's CPU, to tell it from the
/// supervisor's in the total `wait4` gives — and the generator's status.
fn script(src: &Path, bytes: u64, out: Option<&Path>, cpu: &Path) -> String {
    let redirect = out
        .map(|o| format!(" > {}", sh_quote(o)))
        .unwrap_or_default();
    format!(
        "{}{redirect}; s=$?; times > {}; exit $s",
        generator(src, bytes),
        sh_quote(cpu)
    )
}

fn rusage_cpu(u: &libc::rusage) -> f64 {
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Reaps `pid` (our child; any child with -1) with `wait4`: its pid, exit status and CPU
/// seconds, its reaped descendants included.
fn reap(pid: libc::pid_t) -> anyhow::Result<(libc::pid_t, libc::c_int, f64)> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: our children are not reaped elsewhere (std's Child never waits on them, and
        // the Child values are forgotten); the pointers are to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r > 0 {
            return Ok((r, status, rusage_cpu(&usage)));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            bail!("wait4 {pid}: {e}");
        }
    }
}

/// The CPU seconds bash's `times` wrote (the shell's own and its children's, each user and
/// system, to the millisecond).
fn times_cpu(path: &Path) -> anyhow::Result<f64> {
    let text = std::fs::read_to_string(path)?;
    let mut total = 0.0;
    for t in text.split_whitespace() {
        // `1m2.345s`
        let (m, s) = t
            .strip_suffix('s')
            .and_then(|t| t.split_once('m'))
            .with_context(|| format!("unexpected `times` output: {text}"))?;
        total += m.parse::<f64>()? * 60.0 + s.parse::<f64>()?;
    }
    Ok(total)
}

/// What a plain run writes to its file.
#[derive(Clone, Copy, PartialEq)]
enum Plain {
    /// `GEN > FILE`.
    Gen,
    /// `cat SRC > FILE` (only with the whole source).
    Cat,
    /// `GEN | cat > FILE`: the generator's output through a pipe, relayed by `cat`.
    Relay,
    /// `script -q -c GEN /dev/null > FILE`: the generator in a PTY, relayed by `script`.
    Script,
}

/// Runs `n` copies of a plain run at once; each file must hold `each` bytes (plus
/// `newlines` `\r`s through `script`'s PTY).
fn plain(
    dir: &Path,
    n: usize,
    src: &Path,
    (each, newlines): (u64, u64),
    kind: Plain,
) -> anyhow::Result<Sample> {
    let outs: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("plain-{i}.out"))).collect();
    let cpu_file = dir.join("plain.cpu");
    let t0 = Instant::now();
    let mut pids = Vec::new();
    for out in &outs {
        let cmd = match kind {
            Plain::Gen => script(src, each, Some(out), &cpu_file),
            Plain::Cat => format!("cat {} > {}", sh_quote(src), sh_quote(out)),
            Plain::Relay => format!("{} | cat > {}", generator(src, each), sh_quote(out)),
            Plain::Script => format!(
                "script -q -e -c {} /dev/null > {}",
                sh_quote(Path::new(&generator(src, each))),
                sh_quote(out)
            ),
        };
        let child = Command::new("bash")
            .arg("-c")
            .arg(cmd)
            .stdin(Stdio::null())
            .spawn()?;
        pids.push(child.id() as libc::pid_t);
        std::mem::forget(child);
    }
    let mut cpu = 0.0;
    let mut wall = Duration::ZERO;
    for pid in pids {
        let (_, status, c) = reap(pid)?;
        wall = t0.elapsed();
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!("the plain redirect ended with status {status}");
        }
        cpu += c;
    }
    let want = each + if kind == Plain::Script { newlines } else { 0 };
    for out in &outs {
        let len = std::fs::metadata(out)?.len();
        if len != want {
            bail!("{} has {len} bytes, not {want}", out.display());
        }
        std::fs::remove_file(out)?;
    }
    let _ = std::fs::remove_file(&cpu_file);
    Ok(Sample {
        bytes: each * n as u64,
        wall,
        cpu_total: cpu,
        cpu_capture: 0.0,
    })
}

/// How the bench itself takes a generator's pipe, in the reference modes.
#[derive(Clone, Copy, PartialEq)]
enum InProcess {
    /// Read and drop.
    Drain,
    /// Read, then write to a file, in one thread.
    OneThread,
    /// Read in this thread, write in another, four buffers between them.
    TwoThreads,
}

/// The CPU time of the calling thread so far.
fn thread_cpu() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct, and the pointer is
    // to a live local.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD asks about the calling thread only.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    rusage_cpu(&usage)
}

/// Runs the generator with its stdout in a pipe that the bench reads as `how` says; the file
/// (unless drained) must hold `bytes`.
fn in_process(dir: &Path, src: &Path, bytes: u64, how: InProcess) -> anyhow::Result<Sample> {
    use std::os::fd::AsRawFd;
    const BUF: usize = 256 * 1024;
    let out = dir.join("relay.out");
    let cpu_file = dir.join("relay.cpu");
    let t0 = Instant::now();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script(src, bytes, None, &cpu_file))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut pipe = child.stdout.take().context("no stdout")?;
    // Reaped by `reap`, not by std.
    std::mem::forget(child);
    // SAFETY: fcntl on a pipe this function owns; a refusal leaves the default size.
    unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, BUF as libc::c_int) };
    let mut file = match how {
        InProcess::Drain => None,
        _ => Some(std::fs::File::create(&out)?),
    };
    let cpu0 = thread_cpu();
    let mut got = 0u64;
    let mut writer_cpu = 0.0;
    if how == InProcess::TwoThreads {
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize)>(4);
        let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        for _ in 0..4 {
            free_tx.send(vec![0u8; BUF])?;
        }
        let mut f = file.take().context("no file")?;
        let writer = std::thread::spawn(move || -> std::io::Result<f64> {
            let cpu0 = thread_cpu();
            for (buf, n) in full_rx {
                f.write_all(&buf[..n])?;
                let _ = free_tx.send(buf);
            }
            Ok(thread_cpu() - cpu0)
        });
        while let Ok(mut buf) = free_rx.recv() {
            let n = pipe.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
            full_tx.send((buf, n))?;
        }
        drop(full_tx);
        writer_cpu = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the writing thread panicked"))??;
    } else {
        let mut buf = vec![0u8; BUF];
        loop {
            let n = pipe.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got += n as u64;
            if let Some(f) = &mut file {
                f.write_all(&buf[..n])?;
            }
        }
    }
    let cpu_capture = thread_cpu() - cpu0 + writer_cpu;
    let (_, status, cpu) = reap(pid)?;
    let wall = t0.elapsed();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("the generator ended with status {status}");
    }
    if got != bytes {
        bail!("read {got} bytes from the pipe, not {bytes}");
    }
    if how != InProcess::Drain {
        let len = std::fs::metadata(&out)?.len();
        if len != bytes {
            bail!("{} has {len} bytes, not {bytes}", out.display());
        }
        std::fs::remove_file(&out)?;
    }
    let _ = std::fs::remove_file(&cpu_file);
    Ok(Sample {
        bytes,
        wall,
        cpu_total: cpu + cpu_capture,
        cpu_capture,
    })
}

/// One supervised process being started.
struct Sup {
    dir: PathBuf,
    pid: libc::pid_t,
    stdout: std::process::ChildStdout,
}

fn write_spec(dir: &Path, command: &str, pty: bool, log_max: u64) -> anyhow::Result<()> {
    let id = new_id()?;
    std::fs::create_dir_all(dir)?;
    // Written as JSON rather than through `Spec`, so fields added later with defaults do not
    // break the bench; these are the fields the manager writes.
    let spec = json!({
        "id": id,
        "command": command,
        "workdir": dir,
        "pty": pty,
        "session_id": null,
        "cols": 120,
        "rows": 40,
        "log_max_bytes": log_max,
        "kill_grace_ms": 5000,
    });
    std::fs::write(dir.join("spec.json"), serde_json::to_vec_pretty(&spec)?)?;
    Ok(())
}

fn start_supervisor(tern: &Path, dir: &Path) -> anyhow::Result<Sup> {
    let stderr = std::fs::File::create(dir.join("supervisor.log"))?;
    let mut child = Command::new(tern)
        .arg("supervise")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("cannot start {}", tern.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let pid = child.id() as libc::pid_t;
    // Reaped by `reap`, not by std.
    std::mem::forget(child);
    Ok(Sup {
        dir: dir.to_path_buf(),
        pid,
        stdout,
    })
}

fn check_ready(sup: Sup) -> anyhow::Result<()> {
    let mut line = String::new();
    BufReader::new(sup.stdout).read_line(&mut line)?;
    let v: serde_json::Value = serde_json::from_str(&line).with_context(|| {
        let log = std::fs::read_to_string(sup.dir.join("supervisor.log")).unwrap_or_default();
        format!("no readiness line from the supervisor: {}", log.trim())
    })?;
    if v["ok"] != true {
        bail!("the supervisor failed to start: {v}");
    }
    Ok(())
}

/// What a supervised process must have captured: `bytes` of the source, in a PTY with a
/// `\r` before each of its `newlines`.
struct Expect<'a> {
    src: &'a Path,
    bytes: u64,
    newlines: u64,
    pty: bool,
    /// The log cap.
    log_max: u64,
}

fn check_exit(dir: &Path, e: &Expect) -> anyhow::Result<()> {
    let rec: ExitRecord = read_json(&dir.join("exit.json"))?
        .with_context(|| format!("{} has no exit.json", dir.display()))?;
    if rec.code != Some(0) {
        bail!("{} exited with {rec:?}", dir.display());
    }
    let want = e.bytes + if e.pty { e.newlines } else { 0 };
    if rec.output_bytes != want {
        bail!(
            "{}: output_bytes {} but {want} were written",
            dir.display(),
            rec.output_bytes
        );
    }
    // The end of the log must be the end of the source (ONLCR applied in a PTY).
    let tail_len = e.bytes.min(4096);
    let mut expected = read_at(e.src, e.bytes - tail_len, tail_len as usize)?;
    if e.pty {
        expected = expected
            .iter()
            .flat_map(|&b| {
                if b == b'\n' {
                    vec![b'\r', b'\n']
                } else {
                    vec![b]
                }
            })
            .collect();
    }
    let got = tern_procs::log::read_range(&dir.join("log"), want - tail_len, tail_len as usize)?;
    if got.total != want || !expected.ends_with(&got.data) || got.data.len() != tail_len as usize {
        bail!("{}: the log's end is not the source's", dir.display());
    }
    Ok(())
}

/// Runs `n` supervised processes at once, each writing `e.bytes`.
fn supervised(tern: &Path, dir: &Path, n: usize, e: &Expect) -> anyhow::Result<Sample> {
    let dirs: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("p{i}"))).collect();
    for d in &dirs {
        write_spec(
            d,
            &script(e.src, e.bytes, None, &d.join("generator.cpu")),
            e.pty,
            e.log_max,
        )?;
    }
    let t0 = Instant::now();
    let mut sups = Vec::new();
    for d in &dirs {
        sups.push(start_supervisor(tern, d)?);
    }
    let mut pids: Vec<libc::pid_t> = sups.iter().map(|s| s.pid).collect();
    for s in sups {
        check_ready(s)?;
    }
    let mut cpu_total = 0.0;
    let mut wall = Duration::ZERO;
    while !pids.is_empty() {
        let (pid, status, cpu) = reap(if n == 1 { pids[0] } else { -1 })?;
        wall = t0.elapsed();
        let Some(i) = pids.iter().position(|&p| p == pid) else {
            bail!("an unexpected child {pid} exited");
        };
        pids.swap_remove(i);
        if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
            bail!(
                "the supervisor ended with {:?}",
                std::process::ExitStatus::from_raw(status)
            );
        }
        cpu_total += cpu;
    }
    let mut cpu_gen = 0.0;
    for d in &dirs {
        check_exit(d, e)?;
        cpu_gen += times_cpu(&d.join("generator.cpu"))?;
        std::fs::remove_dir_all(d)?;
    }
    Ok(Sample {
        bytes: e.bytes * n as u64,
        wall,
        cpu_total,
        cpu_capture: cpu_total - cpu_gen,
    })
}

/// Lets the written files reach the disk between runs (not timed), so one run's writeback
/// does not land in the next.
fn settle() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::thread::sleep(Duration::from_millis(500));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::pct(&v, 0.5)
}

fn fmt_bytes(b: u64) -> String {
    if b.is_multiple_of(1 << 30) {
        format!("{} GiB", b >> 30)
    } else if b.is_multiple_of(1 << 20) {
        format!("{} MiB", b >> 20)
    } else {
        format!("{b} bytes")
    }
}

pub fn bench_procs(skip: usize) -> anyhow::Result<()> {
    let o = parse_opts(skip)?;
    let tmp = match &o.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let dir = tmp.path();
    let src = dir.join("source.txt");
    let part = o.size / o.concurrency as u64;
    if part == 0 {
        bail!("--size must be at least --concurrency bytes");
    }
    eprintln!("procs: writing a {} source file", fmt_bytes(o.size));
    write_source(&src, o.size)?;
    let (nl_all, nl_part) = (newlines(&src, o.size)?, newlines(&src, part)?);
    settle();

    // A log cap above the output: nothing is rotated out, the disk keeps as much as the file.
    let keep_all = (2 * o.size).max(LOG_MAX_BYTES);
    let keep_all_label = format!(
        "pipe mode, log cap {}: the whole output kept, as in the file",
        fmt_bytes(keep_all)
    );
    let labels: [&str; MODES.len()] = [
        "plain redirect: `GEN > file`",
        "`cat SRC > file` (copy_file_range, for reference)",
        // `\|`: a bare `|` would end the Markdown table's cell.
        "pipe baseline: `GEN \\| cat > file`",
        "PTY baseline: `script -q -c GEN /dev/null > file` (util-linux)",
        "the pipe alone: read by the bench and dropped",
        "the pipe → file by the bench, one thread reading and writing in turn",
        "the pipe → file by the bench, a reading and a writing thread",
        "pipe mode (`tern supervise`, default log cap)",
        &keep_all_label,
        "PTY mode (`tern supervise`, `pty: true`)",
        "plain redirect",
        "pipe mode",
        "PTY mode",
    ];
    let rows: Vec<(&str, &str)> = MODES.into_iter().zip(labels).collect();
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); rows.len()];
    let one = |pty, log_max| Expect {
        src: &src,
        bytes: o.size,
        newlines: nl_all,
        pty,
        log_max,
    };
    let many = |pty| Expect {
        src: &src,
        bytes: part,
        newlines: nl_part,
        pty,
        log_max: LOG_MAX_BYTES,
    };
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    for run in 1..=o.runs {
        // Every other run goes through the modes backwards, so no mode always runs right
        // after the same other one (on a VM, what the previous run freed or left dirty
        // changes how fast the next one gets memory).
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if run % 2 == 0 {
            order.reverse();
        }
        for k in order {
            let key = rows[k].0;
            if o.modes
                .as_ref()
                .is_some_and(|m| !m.iter().any(|m| m == key))
            {
                continue;
            }
            let s = match key {
                "plain" => plain(&work, 1, &src, (o.size, nl_all), Plain::Gen)?,
                "cat" => plain(&work, 1, &src, (o.size, nl_all), Plain::Cat)?,
                "relay" => plain(&work, 1, &src, (o.size, nl_all), Plain::Relay)?,
                "script" => plain(&work, 1, &src, (o.size, nl_all), Plain::Script)?,
                "drain" => in_process(&work, &src, o.size, InProcess::Drain)?,
                "relay-1" => in_process(&work, &src, o.size, InProcess::OneThread)?,
                "relay-2" => in_process(&work, &src, o.size, InProcess::TwoThreads)?,
                "pipe" => supervised(&o.tern, &work, 1, &one(false, LOG_MAX_BYTES))?,
                "pipe-kept" => supervised(&o.tern, &work, 1, &one(false, keep_all))?,
                "pty" => supervised(&o.tern, &work, 1, &one(true, LOG_MAX_BYTES))?,
                "plain-n" => plain(&work, o.concurrency, &src, (part, nl_part), Plain::Gen)?,
                "pipe-n" => supervised(&o.tern, &work, o.concurrency, &many(false))?,
                _ => supervised(&o.tern, &work, o.concurrency, &many(true))?,
            };
            eprintln!(
                "procs: run {run}, {key}: {:.0} MB/s, {:.2} s, CPU {:.2} s ({:.2} s capture)",
                s.mbps(),
                s.wall.as_secs_f64(),
                s.cpu_total,
                s.cpu_capture
            );
            samples[k].push(s);
            settle();
        }
    }

    let med = |k: usize, f: &dyn Fn(&Sample) -> f64| median(samples[k].iter().map(f).collect());
    let range = |k: usize| {
        let v: Vec<f64> = samples[k].iter().map(Sample::mbps).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    println!(
        "## Output capture: {} through one process, {} × {} at once ({} runs, median)\n",
        fmt_bytes(o.size),
        o.concurrency,
        fmt_bytes(part),
        o.runs
    );
    println!(
        "Each process: `bash -c 'dd if=SRC bs={BLOCK} count=N iflag=count_bytes status=none \
         [> FILE]; s=$?; times > CPU; exit $s'` (N = {} or {}; `> FILE` in the plain runs only)\n",
        o.size, part
    );
    println!(
        "| mode | throughput | (min–max) | CPU s/GiB, all | CPU s/GiB, capture | vs plain |\n|---|---|---|---|---|---|"
    );
    // Rows from here on are the concurrent ones, compared with the concurrent plain row.
    let single = idx("plain-n");
    let plain_of = |k: usize| if k >= single { single } else { idx("plain") };
    for (k, (key, label)) in rows.iter().enumerate() {
        if samples[k].is_empty() {
            continue;
        }
        if k == single {
            println!(
                "| **{} processes at once, {} each** | | | | | |",
                o.concurrency,
                fmt_bytes(part)
            );
        }
        let mbps = med(k, &Sample::mbps);
        let (lo, hi) = range(k);
        let all = med(k, &|s| s.per_gib(s.cpu_total));
        let capture = if ["pipe", "pty", "relay-", "drain"]
            .iter()
            .any(|p| key.starts_with(p))
        {
            format!("{:.2}", med(k, &|s| s.per_gib(s.cpu_capture)))
        } else {
            "—".into()
        };
        let mut ratio = if samples[plain_of(k)].is_empty() {
            "—".to_owned()
        } else {
            format!("{:.0} %", 100.0 * mbps / med(plain_of(k), &Sample::mbps))
        };
        // The single-process modes are also set beside the relay through the same kind of
        // channel: a pipe to `cat`, a PTY to `script`.
        let base = match *key {
            "pipe" | "pipe-kept" => Some((idx("relay"), "`GEN \\| cat`")),
            "pty" => Some((idx("script"), "`script`")),
            _ => None,
        };
        if let Some((b, name)) = base
            && !samples[b].is_empty()
        {
            ratio += &format!(" ({:.0} % of {name})", 100.0 * mbps / med(b, &Sample::mbps));
        }
        println!(
            "| {label} | **{mbps:.0} MB/s** | {lo:.0}–{hi:.0} | {all:.2} | {capture} | {ratio} |"
        );
    }
    // The target's ratio run by run: each pair ran back to back, under the same conditions,
    // so the median of the ratios is the figure that stands up to a noisy machine.
    let plain_k = idx("plain");
    for (mode, what) in [
        ("pipe-kept", "Pipe mode with the whole output kept"),
        ("pipe", "Pipe mode with the default log cap"),
    ] {
        let k = idx(mode);
        if samples[plain_k].len() != samples[k].len() || samples[k].is_empty() {
            continue;
        }
        let ratios: Vec<f64> = samples[plain_k]
            .iter()
            .zip(&samples[k])
            .map(|(p, s)| 100.0 * s.mbps() / p.mbps())
            .collect();
        let each: Vec<String> = ratios.iter().map(|r| format!("{r:.0} %")).collect();
        println!(
            "\n{what}, as a share of the plain redirect, run by run: {}; median **{:.0} %**.",
            each.join(", "),
            median(ratios.clone())
        );
    }
    println!(
        "\nEvery supervised process exited with code 0 and captured every byte \
         (pipe: {} per process of the single run; PTY: {} with ONLCR's `\\r`s); log cap {} \
         (segments of {}, the oldest reused at each rotation).",
        o.size,
        o.size + nl_all,
        fmt_bytes(LOG_MAX_BYTES),
        fmt_bytes(LOG_MAX_BYTES / 4)
    );
    if o.modes
        .as_ref()
        .is_none_or(|m| m.iter().any(|m| m == "memory"))
    {
        idle_memory(&o.tern, &work, o.concurrency)?;
    }
    Ok(())
}

/// `Rss`, `Pss` and `Anonymous` of `pid` in KiB (`/proc/PID/smaps_rollup`).
fn memory_kib(pid: libc::pid_t) -> anyhow::Result<[u64; 3]> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .with_context(|| format!("no {name} in smaps_rollup"))?;
        Ok(line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?)
    };
    Ok([field("Rss:")?, field("Pss:")?, field("Anonymous:")?])
}

/// What `n` supervisors cost at rest: each runs `sleep 600` (half of them in a PTY); their
/// memory is read once they are ready, then they are stopped with SIGTERM (which kills
/// their children) and reaped.
fn idle_memory(tern: &Path, dir: &Path, n: usize) -> anyhow::Result<()> {
    let mut sups = Vec::new();
    for i in 0..n {
        let d = dir.join(format!("idle{i}"));
        write_spec(&d, "sleep 600", i % 2 == 1, LOG_MAX_BYTES)?;
        sups.push(start_supervisor(tern, &d)?);
    }
    let pids: Vec<libc::pid_t> = sups.iter().map(|s| s.pid).collect();
    let dirs: Vec<PathBuf> = sups.iter().map(|s| s.dir.clone()).collect();
    for s in sups {
        check_ready(s)?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut mem = Vec::new();
    for &pid in &pids {
        mem.push(memory_kib(pid)?);
    }
    for &pid in &pids {
        // SAFETY: kill has no memory preconditions; the pid is our unreaped child.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    for &pid in &pids {
        reap(pid)?;
    }
    for d in &dirs {
        std::fs::remove_dir_all(d)?;
    }
    let col = |k: usize| median(mem.iter().map(|m| m[k] as f64).collect()) / 1024.0;
    let pss_total: u64 = mem.iter().map(|m| m[1]).sum();
    println!(
        "
{n} idle supervisors (`sleep 600`, half in a PTY), each: RSS {:.1} MiB median, of which \
         {:.1} MiB anonymous (the rest are the `tern` binary's pages, shared by all of them); \
         PSS of all {n} together: **{:.1} MiB**.",
        col(0),
        col(2),
        pss_total as f64 / 1024.0
    );
    Ok(())
}
