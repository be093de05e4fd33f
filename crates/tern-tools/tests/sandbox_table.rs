//! The 33 destructive commands of issue 12, run for real through `terminal` under the
//! default policy (`workspace-write`, network off), against a directory, a file and a git
//! repository with its origin:
//!
//! - **outside** the workspace, a human approves every dangerous command, so only the
//!   sandbox stands between the command and the data: each is stopped, offered for
//!   escalation (refused here), and the data is intact;
//! - **inside** the workspace the sandbox lets them write, so the dangerous-command check
//!   must ask: each asks, is refused, and the data is intact.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use tern_sandbox::{Mode, Policy, Sandbox, Support};
use tern_tools::danger::{DESTRUCTIVE_EXAMPLES, fill_example};
use tern_tools::escalation::PATTERN_KEY;
use tern_tools::{
    ApprovalDecision, ApprovalRequest, Approver, BoxFuture, ToolContext, ToolLimits, terminal,
};
use tokio_util::sync::CancellationToken;

/// Approves dangerous commands or refuses them; always refuses escalation; records all.
struct Human {
    approve_dangerous: bool,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Human {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let decision = if req.pattern_key != PATTERN_KEY && self.approve_dangerous {
            ApprovalDecision::Once
        } else {
            ApprovalDecision::Deny {
                reason: "refused in the test".into(),
            }
        };
        self.asked.lock().unwrap().push(req);
        Box::pin(async move { decision })
    }
}

/// What a command may destroy: `DIR` with files, `FILE`, and a git clone (the command's
/// working directory) whose origin has branches `branch` and `b`, a local change, an
/// untracked file, and a local commit the origin lacks.
struct Target {
    dir: PathBuf,
    file: PathBuf,
    repo: PathBuf,
    origin: PathBuf,
}

fn git(cwd: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn target(at: &Path) -> Target {
    let dir = at.join("data");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for f in ["a.txt", "b.txt", "sub/c.txt"] {
        std::fs::write(dir.join(f), f).unwrap();
    }
    let file = at.join("file.txt");
    std::fs::write(&file, "precious\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let origin = at.join("origin.git");
    let repo = at.join("repo");
    git(at, &["init", "-q", "--bare", origin.to_str().unwrap()]);
    git(
        at,
        &[
            "clone",
            "-q",
            origin.to_str().unwrap(),
            repo.to_str().unwrap(),
        ],
    );
    std::fs::write(repo.join("tracked.txt"), "v1\n").unwrap();
    git(&repo, &["add", "tracked.txt"]);
    git(&repo, &["commit", "-qm", "one"]);
    git(
        &repo,
        &["push", "-q", "origin", "HEAD:main", "HEAD:branch", "HEAD:b"],
    );
    std::fs::write(repo.join("tracked.txt"), "v2\n").unwrap();
    git(&repo, &["commit", "-qam", "two"]);
    git(&repo, &["push", "-q", "origin", "HEAD:main"]);
    // Local history diverges from origin's (a force push would rewrite it), a local change
    // and an untracked file.
    git(&repo, &["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(repo.join("tracked.txt"), "v3\n").unwrap();
    git(&repo, &["commit", "-qam", "three"]);
    std::fs::write(repo.join("tracked.txt"), "local change\n").unwrap();
    std::fs::write(repo.join("untracked.txt"), "untracked\n").unwrap();
    Target {
        dir,
        file,
        repo,
        origin,
    }
}

/// Everything the commands could destroy, as text: compared before and after.
fn state(t: &Target) -> String {
    let mut out = String::new();
    for f in ["a.txt", "b.txt", "sub/c.txt"] {
        out += &format!("{f}={:?}\n", std::fs::read_to_string(t.dir.join(f)).ok());
    }
    let meta = std::fs::metadata(&t.file).ok();
    out += &format!(
        "file={:?} mode={:?}\n",
        std::fs::read_to_string(&t.file).ok(),
        meta.map(|m| m.permissions().mode() & 0o7777)
    );
    out += &format!(
        "tracked={:?} untracked={:?}\n",
        std::fs::read_to_string(t.repo.join("tracked.txt")).ok(),
        std::fs::read_to_string(t.repo.join("untracked.txt")).ok()
    );
    out += &git(
        &t.origin,
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    );
    out += &git(&t.repo, &["rev-parse", "HEAD"]);
    out
}

fn ctx(workspace: &Path, home: &Path, human: Arc<Human>, call: usize) -> ToolContext {
    let mut policy = Policy::new(Mode::WorkspaceWrite);
    policy.protected_paths = vec![home.to_path_buf()];
    ToolContext {
        session_id: "s".into(),
        call_id: format!("call-{call}"),
        call_seq: 0,
        workdir: workspace.to_path_buf(),
        cancel: CancellationToken::new(),
        approver: human,
        limits: ToolLimits {
            sandbox: Arc::new(Sandbox::new(policy)),
            ..ToolLimits::default()
        },
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

fn commands(t: &Target) -> Vec<String> {
    DESTRUCTIVE_EXAMPLES
        .iter()
        .map(|c| {
            fill_example(c, t.dir.to_str().unwrap(), t.file.to_str().unwrap())
                .unwrap_or_else(|| panic!("cannot fill {c}"))
        })
        .collect()
}

/// One run of example `i` against a fresh target outside the workspace or in it, with a
/// human who approves dangerous commands or not.
struct Run {
    cmd: String,
    before: String,
    after: String,
    result: tern_tools::ToolResult,
    /// The pattern keys the human was asked about, in order.
    asked: Vec<&'static str>,
}

async fn run_example(i: usize, outside: bool, approve_dangerous: bool) -> Run {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let (ws, out, home) = (root.join("ws"), root.join("out"), root.join("home"));
    for p in [&ws, &out, &home] {
        std::fs::create_dir(p).unwrap();
    }
    let t = target(if outside { &out } else { &ws });
    let cmd = commands(&t).swap_remove(i);
    let before = state(&t);
    let human = Arc::new(Human {
        approve_dangerous,
        asked: Mutex::new(Vec::new()),
    });
    let result = terminal::run(
        terminal::TerminalArgs {
            command: cmd.clone(),
            workdir: Some(t.repo.to_str().unwrap().to_owned()),
            ..Default::default()
        },
        ctx(&ws, &home, human.clone(), i),
    )
    .await;
    let asked = human
        .asked
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.pattern_key)
        .collect();
    Run {
        cmd,
        before,
        after: state(&t),
        result,
        asked,
    }
}

impl Run {
    fn report(&self) -> String {
        format!(
            "{}\n  asked: {:?}\n  result: {:?}\n  before: {}\n  after: {}",
            self.cmd, self.asked, self.result, self.before, self.after
        )
    }
}

#[tokio::test]
async fn outside_the_workspace_the_sandbox_stops_each_and_offers_escalation() {
    if !matches!(Support::probe(), Support::Landlock { .. }) {
        return;
    }
    assert_eq!(DESTRUCTIVE_EXAMPLES.len(), 33);
    let mut failures = Vec::new();
    for i in 0..DESTRUCTIVE_EXAMPLES.len() {
        let r = run_example(i, true, true).await;
        if r.before != r.after || !r.asked.contains(&PATTERN_KEY) {
            failures.push(r.report());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test]
async fn inside_the_workspace_each_asks_and_a_refusal_keeps_the_data() {
    if !matches!(Support::probe(), Support::Landlock { .. }) {
        return;
    }
    let mut failures = Vec::new();
    for i in 0..DESTRUCTIVE_EXAMPLES.len() {
        let r = run_example(i, false, false).await;
        let refused = r
            .result
            .as_ref()
            .is_err_and(|e| e.0.starts_with("denied") || e.0.starts_with("blocked"));
        if r.before != r.after || !refused || r.asked.contains(&PATTERN_KEY) {
            failures.push(r.report());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
