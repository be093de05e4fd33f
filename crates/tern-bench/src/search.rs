//! `tern-bench search`: `search_files` against ripgrep on the same tree (issue 14; target:
//! within 1.5× of `rg`).
//!
//! Flow: generate a tree of 100,000 files (source-like text, a `.gitignore`, ignored
//! `target/` and `node_modules/` directories) in a temporary directory → for each query, warm
//! the cache, then alternate runs of `rg` (a child process, its output read through a pipe
//! and counted) and of the `search_files` tool (in-process through its typed call, as the
//! agent calls it: the walk, the search, the sorting and capping of results, the JSON) →
//! check both found the same number of matching lines → print the medians and the ratio.
//!
//! Usage: `cargo build --release -p tern-bench && target/release/tern-bench search
//! [--rg PATH] [--files N] [--runs N]` (`rg` from `$PATH` when `--rg` is not given).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tern_sandbox::{Mode, Policy, Sandbox, Support};
use tern_tools::tools::search_files::SearchFiles;
use tern_tools::{DenyAll, DynTool, ToolContext, ToolLimits, Typed};
use tokio_util::sync::CancellationToken;

use crate::pct;

struct Opts {
    rg: PathBuf,
    files: usize,
    runs: usize,
}

fn parse(skip: usize) -> anyhow::Result<Opts> {
    let mut rg = None;
    let mut files = 100_000;
    let mut runs = 10;
    let mut it = std::env::args().skip(skip);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rg" => rg = Some(PathBuf::from(it.next().context("--rg needs a path")?)),
            "--files" => files = it.next().context("--files needs a number")?.parse()?,
            "--runs" => runs = it.next().context("--runs needs a number")?.parse()?,
            other => bail!("unknown argument {other}"),
        }
    }
    let rg = match rg {
        Some(p) => p,
        None => find_in_path("rg").context(
            "rg not found in $PATH; install it (`cargo install ripgrep --locked`) or pass --rg PATH",
        )?,
    };
    Ok(Opts {
        rg,
        files,
        runs: runs.max(1),
    })
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A small deterministic generator (xorshift), so every run builds the same tree.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "request", "config", "session", "message", "buffer", "client", "server", "token", "record",
    "handler", "stream", "window", "store", "event", "value", "index",
];

/// One source-like file (about 0.5–1 KB).
fn source_file(rng: &mut Rng, n: usize) -> String {
    let mut s = String::new();
    let w = |r: &mut Rng| WORDS[r.below(WORDS.len() as u64) as usize];
    let _ = writeln!(s, "//! Module {n}: generated for the search benchmark.\n");
    let _ = writeln!(s, "use std::collections::HashMap;\n");
    let _ = writeln!(s, "pub struct {}{n} {{", capitalise(w(rng)));
    for _ in 0..(2 + rng.below(4)) {
        let _ = writeln!(s, "    {}_{}: u64,", w(rng), rng.below(100));
    }
    let _ = writeln!(s, "}}\n");
    for _ in 0..(2 + rng.below(4)) {
        let name = w(rng);
        let version = rng.below(40);
        let _ = writeln!(
            s,
            "fn parse_{name}_v{version}(input: &str) -> Option<u64> {{\n    \
             let map: HashMap<&str, u64> = HashMap::new();\n    \
             map.get(input.trim()).copied()\n}}\n"
        );
    }
    if rng.below(20) == 0 {
        let _ = writeln!(s, "// TODO: handle the {} case", w(rng));
    }
    s
}

fn capitalise(w: &str) -> String {
    let mut c = w.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Writes the tree: a tenth of the files under ignored directories. Returns the bytes
/// written.
fn generate(root: &Path, files: usize) -> anyhow::Result<u64> {
    std::fs::write(root.join(".gitignore"), "target/\nnode_modules/\n*.log\n")?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut bytes = 0u64;
    for i in 0..files {
        let dir = match i % 10 {
            0 if i % 20 == 0 => root.join(format!("target/debug/build/b{}", i / 2000)),
            0 => root.join(format!("node_modules/pkg{}/lib", i / 2000)),
            _ => root.join(format!("src/m{}/s{}", i / 5000, (i / 100) % 50)),
        };
        if i % 100 == 0 || !dir.exists() {
            std::fs::create_dir_all(&dir)?;
        }
        let text = source_file(&mut rng, i);
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("f{i}.rs")), text)?;
    }
    Ok(bytes)
}

fn ctx(root: &Path, sandbox: Sandbox) -> ToolContext {
    ToolContext {
        session_id: "bench".into(),
        call_id: "call".into(),
        call_seq: 0,
        workdir: root.to_path_buf(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "bench".into(),
        }),
        limits: ToolLimits {
            sandbox: Arc::new(sandbox),
            ..ToolLimits::default()
        },
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

/// One `rg` run: milliseconds and matching lines printed.
fn run_rg(rg: &Path, root: &Path, args: &[&str]) -> anyhow::Result<(f64, u64)> {
    let t = Instant::now();
    let out = Command::new(rg)
        .args(["--no-config", "--no-require-git", "--line-number"])
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        bail!("rg {args:?} exited with {}", out.status);
    }
    let lines = out.stdout.iter().filter(|&&b| b == b'\n').count() as u64;
    Ok((ms, lines))
}

/// One `search_files` call: milliseconds and its `total` (`total_matches`, `total_files`).
async fn run_tool(
    tool: &Typed<SearchFiles>,
    ctx: &ToolContext,
    args: &Value,
    total: &str,
) -> anyhow::Result<(f64, u64)> {
    let t = Instant::now();
    let v = tool
        .call(args.clone(), ctx.clone())
        .await
        .map_err(|e| anyhow::anyhow!("search_files {args}: {}", e.0))?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let n = v[total]
        .as_u64()
        .with_context(|| format!("no {total} in the answer {v}"))?;
    Ok((ms, n))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    pct(&v, 0.5)
}

pub async fn bench_search() -> anyhow::Result<()> {
    let o = parse(2)?;
    let version = Command::new(&o.rg).arg("--version").output()?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("rg")
        .to_owned();
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    let t = Instant::now();
    let bytes = generate(&root, o.files)?;
    println!(
        "## `search_files` against ripgrep ({} files, {:.1} MB of text, a tenth under ignored \
         directories; generated in {:.1} s)\n",
        o.files,
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    println!(
        "{version}; {} CPUs; {} runs each, warm cache, alternating; `search_files` returns its \
         first 50 results and counts all.\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        o.runs
    );
    // (label, rg arguments, search_files arguments, the total that equals rg's output lines)
    let queries: Vec<(&str, Vec<&str>, Value, &str)> = vec![
        (
            // `\\|`: the label is in a Markdown table.
            "regex `parse_(config\\|token)_v1[0-9]\\(`",
            vec!["-e", r"parse_(config|token)_v1[0-9]\("],
            json!({"pattern": r"parse_(config|token)_v1[0-9]\(" }),
            "total_matches",
        ),
        (
            "literal `TODO`, case-insensitive",
            vec!["-i", "-F", "-e", "TODO"],
            json!({"pattern": "TODO", "fixed_strings": true, "case": "insensitive"}),
            "total_matches",
        ),
        (
            "literal `HashMap::new` (every file)",
            vec!["-F", "-e", "HashMap::new"],
            json!({"pattern": "HashMap::new", "fixed_strings": true}),
            "total_matches",
        ),
        (
            "`HashMap::new`, counts per file (`rg -c`, `output_mode: count`)",
            vec!["-c", "-F", "-e", "HashMap::new"],
            json!({"pattern": "HashMap::new", "fixed_strings": true, "output_mode": "count"}),
            "total_files",
        ),
        (
            "file names `f1234*` (`rg --files -g`, `target: files`)",
            vec!["--files", "-g", "f1234*"],
            json!({"pattern": "f1234*", "target": "files"}),
            "total_files",
        ),
    ];
    let tool = Typed::new(SearchFiles);
    let mut setups = vec![("full-access", ctx(&root, Sandbox::full_access()))];
    if matches!(Support::probe(), Support::Landlock { .. }) {
        setups.push((
            "workspace-write",
            ctx(&root, Sandbox::new(Policy::new(Mode::WorkspaceWrite))),
        ));
    }
    println!(
        "| query | sandbox | results | `rg` median | `search_files` median | ratio |\n\
         |---|---|---|---|---|---|"
    );
    for (label, rg_args, tool_args, total) in &queries {
        for (setup, ctx) in &setups {
            // Warm the page cache and the directory entries.
            let (_, rg_lines) = run_rg(&o.rg, &root, rg_args)?;
            let (_, tool_total) = run_tool(&tool, ctx, tool_args, total).await?;
            if rg_lines != tool_total {
                bail!(
                    "{label}: rg printed {rg_lines} lines, search_files' {total} is {tool_total}"
                );
            }
            let (mut rg_ms, mut tool_ms) = (Vec::new(), Vec::new());
            for run in 0..o.runs {
                // Which goes first flips run by run.
                if run % 2 == 0 {
                    rg_ms.push(run_rg(&o.rg, &root, rg_args)?.0);
                    tool_ms.push(run_tool(&tool, ctx, tool_args, total).await?.0);
                } else {
                    tool_ms.push(run_tool(&tool, ctx, tool_args, total).await?.0);
                    rg_ms.push(run_rg(&o.rg, &root, rg_args)?.0);
                }
            }
            let (r, s) = (median(rg_ms), median(tool_ms));
            println!(
                "| {label} | {setup} | {rg_lines} | {r:.1} ms | {s:.1} ms | {:.2} |",
                s / r
            );
        }
    }
    // What starting `rg` costs, included in its column (the tool runs in-process).
    let mut start = Vec::new();
    for _ in 0..o.runs {
        let t = Instant::now();
        Command::new(&o.rg)
            .arg("--version")
            .stdout(Stdio::null())
            .status()?;
        start.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "\n`rg --version` (process start and exit): {:.1} ms median.",
        median(start)
    );
    Ok(())
}
