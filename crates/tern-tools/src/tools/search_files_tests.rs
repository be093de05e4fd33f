//! Tests of `search_files` on real temporary trees, through the typed tool path (the JSON
//! arguments deserialised into its `Args`), under the default sandbox where the kernel has
//! Landlock, as the other file tools' tests.

use std::fs;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use super::search_files::{Plan, SearchError, SearchFiles, SearchFilesArgs};
use crate::tool::parse_args;
use crate::{DynTool, ToolContext, Typed};

use super::file_tests::{ctx_in, landlock};

/// A temporary tree with `files` (path, content) written, and a context working in it.
fn tree(files: &[(&str, &str)]) -> (TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    let ctx = ctx_in(dir.path());
    (dir, ctx)
}

async fn search(ctx: &ToolContext, args: Value) -> Value {
    match Typed::new(SearchFiles)
        .call(args.clone(), ctx.clone())
        .await
    {
        Ok(v) => v,
        Err(e) => panic!("search_files {args} failed: {}", e.0),
    }
}

async fn search_err(ctx: &ToolContext, args: Value) -> String {
    match Typed::new(SearchFiles)
        .call(args.clone(), ctx.clone())
        .await
    {
        Ok(v) => panic!("search_files {args} succeeded: {v}"),
        Err(e) => e.0,
    }
}

/// An error from the registry's path: the arguments validated against the schema first.
async fn registry_err(ctx: &ToolContext, args: Value) -> String {
    let sets = vec!["file".to_owned()];
    match crate::Registry::builtin()
        .call("search_files", &args.to_string(), &sets, ctx.clone())
        .await
    {
        Ok(v) => panic!("search_files {args} succeeded: {v}"),
        Err(e) => e.0,
    }
}

fn lines(v: &Value) -> Vec<&str> {
    v["content"].as_str().unwrap().lines().collect()
}

fn files(v: &Value) -> Vec<&str> {
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect()
}

const SRC: &[(&str, &str)] = &[
    (
        "src/main.rs",
        "fn main() {\n    let total = add(1, 2);\n    println!(\"{total}\");\n}\n",
    ),
    (
        "src/lib.rs",
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    ),
    ("README.md", "# Demo\n\nCall add() to add.\n"),
    (
        "notes/todo.txt",
        "TODO: fn docs\nTodo: tests\ntodo: bench\n",
    ),
];

#[tokio::test]
async fn content_search_gives_path_line_and_text_in_path_order() {
    let (_d, ctx) = tree(SRC);
    let v = search(&ctx, json!({"pattern": r"fn \w+\("})).await;
    assert_eq!(
        lines(&v),
        [
            "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {",
            "src/main.rs:1:fn main() {",
        ]
    );
    assert_eq!(v["total_matches"], 2);
    assert_eq!(v["total_files"], 2);
    assert_eq!(v["truncated"], false);
    assert!(v.get("note").is_none(), "{v}");
    // Every line of a file that matches, each once, even with several matches on it.
    let v = search(&ctx, json!({"pattern": "add", "path": "README.md"})).await;
    assert_eq!(lines(&v), ["README.md:3:Call add() to add."]);
}

#[tokio::test]
async fn nothing_found_says_so() {
    let (_d, ctx) = tree(SRC);
    let v = search(&ctx, json!({"pattern": "no such text"})).await;
    assert_eq!(v["content"], "");
    assert_eq!(v["total_matches"], 0);
    assert_eq!(v["note"], "no matches; searched 4 files");
}

#[tokio::test]
async fn fixed_strings_take_the_pattern_literally() {
    let (_d, ctx) = tree(&[("a.txt", "call add(1)\nadd 1\n"), ("b.txt", "a.d(\n")]);
    let v = search(&ctx, json!({"pattern": "add(", "fixed_strings": true})).await;
    assert_eq!(lines(&v), ["a.txt:1:call add(1)"]);
    // As a regex the same text is an error that names the problem and the way out.
    let e = search_err(&ctx, json!({"pattern": "add("})).await;
    assert!(e.starts_with("invalid regex \"add(\": "), "{e}");
    assert!(e.contains("unclosed group"), "{e}");
    assert!(e.contains("fixed_strings"), "{e}");
    // A regex `.` matches any character; the literal one only a dot.
    let v = search(&ctx, json!({"pattern": "a.d(", "fixed_strings": true})).await;
    assert_eq!(lines(&v), ["b.txt:1:a.d("]);
    let v = search(&ctx, json!({"pattern": "a.d"})).await;
    assert_eq!(v["total_matches"], 3, "{v}");
}

#[tokio::test]
async fn case_sensitive_insensitive_and_smart() {
    let (_d, ctx) = tree(SRC);
    let path = "notes/todo.txt";
    let count = |v: Value| v["total_matches"].as_u64().unwrap();
    // Default: sensitive.
    assert_eq!(
        count(search(&ctx, json!({"pattern": "todo", "path": path})).await),
        1
    );
    assert_eq!(
        count(
            search(
                &ctx,
                json!({"pattern": "todo", "path": path, "case": "insensitive"})
            )
            .await
        ),
        3
    );
    // Smart: a lowercase pattern ignores case, one with an uppercase letter does not.
    assert_eq!(
        count(
            search(
                &ctx,
                json!({"pattern": "todo", "path": path, "case": "smart"})
            )
            .await
        ),
        3
    );
    assert_eq!(
        count(
            search(
                &ctx,
                json!({"pattern": "Todo", "path": path, "case": "smart"})
            )
            .await
        ),
        1
    );
    let e = registry_err(&ctx, json!({"pattern": "x", "case": "upper"})).await;
    assert!(e.starts_with("invalid arguments for `search_files`"), "{e}");
    assert!(e.contains("/case"), "{e}");
}

#[tokio::test]
async fn context_lines_before_and_after_with_group_separators() {
    let text: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let (_d, ctx) = tree(&[("f.txt", &text), ("g.txt", "line 5\n")]);
    let v = search(
        &ctx,
        json!({"pattern": "^line (5|7|15)$", "path": "f.txt", "context": 1}),
    )
    .await;
    assert_eq!(
        lines(&v),
        [
            "f.txt-4-line 4",
            "f.txt:5:line 5",
            "f.txt-6-line 6",
            "f.txt:7:line 7",
            "f.txt-8-line 8",
            "--",
            "f.txt-14-line 14",
            "f.txt:15:line 15",
            "f.txt-16-line 16",
        ]
    );
    assert_eq!(v["total_matches"], 3);
    // before_context and after_context override context, each on its side.
    let v = search(
        &ctx,
        json!({"pattern": "^line 10$", "path": "f.txt", "context": 5, "before_context": 2, "after_context": 0}),
    )
    .await;
    assert_eq!(
        lines(&v),
        ["f.txt-8-line 8", "f.txt-9-line 9", "f.txt:10:line 10"]
    );
    // Context of another file is separated too.
    let v = search(&ctx, json!({"pattern": "^line 5$", "after_context": 1})).await;
    assert_eq!(
        lines(&v),
        ["f.txt:5:line 5", "f.txt-6-line 6", "--", "g.txt:1:line 5"]
    );
}

#[tokio::test]
async fn file_globs_include_and_exclude() {
    let (_d, ctx) = tree(&[
        ("src/a.rs", "needle\n"),
        ("src/a_test.rs", "needle\n"),
        ("src/b.toml", "needle\n"),
        ("web/c.ts", "needle\n"),
        ("web/d.tsx", "needle\n"),
        ("vendor/e.rs", "needle\n"),
    ]);
    let found = |v: Value| {
        let mut f: Vec<String> = files(&v).iter().map(|s| s.to_string()).collect();
        f.sort();
        f
    };
    let q = |extra: Value| {
        let mut args = json!({"pattern": "needle", "output_mode": "files_only"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    assert_eq!(
        found(search(&ctx, q(json!({"file_glob": "*.rs"}))).await),
        ["src/a.rs", "src/a_test.rs", "vendor/e.rs"]
    );
    assert_eq!(
        found(search(&ctx, q(json!({"file_glob": "*.{ts,tsx}"}))).await),
        ["web/c.ts", "web/d.tsx"]
    );
    assert_eq!(
        found(search(&ctx, q(json!({"file_glob": "src/*.rs"}))).await),
        ["src/a.rs", "src/a_test.rs"]
    );
    assert_eq!(
        found(
            search(
                &ctx,
                q(json!({"file_glob": "*.rs", "exclude_glob": "*_test.rs"}))
            )
            .await
        ),
        ["src/a.rs", "vendor/e.rs"]
    );
    // A directory excluded by name: nothing under it.
    assert_eq!(
        found(search(&ctx, q(json!({"exclude_glob": "vendor"}))).await),
        [
            "src/a.rs",
            "src/a_test.rs",
            "src/b.toml",
            "web/c.ts",
            "web/d.tsx"
        ]
    );
    let e = search_err(&ctx, q(json!({"file_glob": "[a-"}))).await;
    assert!(e.starts_with("invalid file_glob \"[a-\""), "{e}");
}

#[tokio::test]
async fn path_narrows_the_search_and_names_the_results() {
    let (d, ctx) = tree(SRC);
    let v = search(&ctx, json!({"pattern": "add", "path": "src"})).await;
    assert_eq!(
        lines(&v),
        [
            "src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {",
            "src/main.rs:2:    let total = add(1, 2);",
        ]
    );
    let v = search(&ctx, json!({"pattern": "add", "path": "./src/"})).await;
    assert_eq!(
        lines(&v)[0],
        "./src/lib.rs:1:pub fn add(a: i32, b: i32) -> i32 {"
    );
    // An absolute path: absolute results.
    let abs = d.path().join("src/lib.rs").display().to_string();
    let v = search(&ctx, json!({"pattern": "a \\+ b", "path": abs})).await;
    assert_eq!(lines(&v), [format!("{abs}:2:    a + b")]);
    // The default is the working directory.
    let v = search(&ctx, json!({"pattern": "^# Demo"})).await;
    assert_eq!(lines(&v), ["README.md:1:# Demo"]);
}

#[tokio::test]
async fn a_missing_path_is_a_clear_error() {
    let (d, ctx) = tree(SRC);
    let e = search_err(&ctx, json!({"pattern": "x", "path": "nope"})).await;
    assert_eq!(
        e,
        format!("path not found: nope (relative to {})", d.path().display())
    );
    let e = search_err(&ctx, json!({"pattern": "x", "path": "/no/such/dir"})).await;
    assert_eq!(e, "path not found: /no/such/dir");
    let e = search_err(&ctx, json!({"pattern": "x", "path": "README.md/x"})).await;
    assert!(e.starts_with("path not found: README.md/x"), "{e}");
}

#[tokio::test]
async fn files_target_matches_names_by_glob_or_substring() {
    let (_d, ctx) = tree(&[
        ("src/config.rs", ""),
        ("src/app_config.toml", ""),
        ("src/Main.rs", ""),
        ("tests/config_test.py", ""),
        ("docs/guide.md", ""),
    ]);
    let v = search(&ctx, json!({"pattern": "*.rs", "target": "files"})).await;
    assert_eq!(files(&v), ["src/Main.rs", "src/config.rs"]);
    assert_eq!(v["total_files"], 2);
    let v = search(&ctx, json!({"pattern": "*config*", "target": "files"})).await;
    assert_eq!(
        files(&v),
        [
            "src/app_config.toml",
            "src/config.rs",
            "tests/config_test.py"
        ]
    );
    // Without glob characters: a substring of the name, case as asked.
    let v = search(&ctx, json!({"pattern": "main", "target": "files"})).await;
    assert_eq!(files(&v), Vec::<&str>::new());
    assert_eq!(v["note"], "no file names match; searched 5 files");
    let v = search(
        &ctx,
        json!({"pattern": "main", "target": "files", "case": "smart"}),
    )
    .await;
    assert_eq!(files(&v), ["src/Main.rs"]);
    // A glob with a '/' matches the path below the search path.
    let v = search(&ctx, json!({"pattern": "tests/*.py", "target": "files"})).await;
    assert_eq!(files(&v), ["tests/config_test.py"]);
    let v = search(
        &ctx,
        json!({"pattern": "*", "target": "files", "path": "docs"}),
    )
    .await;
    assert_eq!(files(&v), ["docs/guide.md"]);
    // file_glob narrows a name search too.
    let v = search(
        &ctx,
        json!({"pattern": "config", "target": "files", "exclude_glob": "*.py"}),
    )
    .await;
    assert_eq!(files(&v), ["src/app_config.toml", "src/config.rs"]);
}

#[tokio::test]
async fn gitignore_ignore_files_and_hidden_files_are_respected() {
    let (_d, ctx) = tree(&[
        (".gitignore", "target/\n*.log\n"),
        ("sub/.ignore", "generated.rs\n"),
        ("src/a.rs", "needle\n"),
        ("target/debug/out.rs", "needle\n"),
        ("run.log", "needle\n"),
        ("sub/generated.rs", "needle\n"),
        ("sub/kept.rs", "needle\n"),
        ("sub/deep.log", "needle\n"),
        (".hidden/h.rs", "needle\n"),
        (".env", "needle\n"),
        (".git/config", "needle\n"),
    ]);
    let q = |extra: Value| {
        let mut args = json!({"pattern": "needle", "output_mode": "files_only"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    // No .git needed: .gitignore counts in any directory.
    let v = search(&ctx, q(json!({}))).await;
    assert_eq!(files(&v), ["src/a.rs", "sub/kept.rs"]);
    let v = search(&ctx, q(json!({"include_hidden": true}))).await;
    assert_eq!(
        files(&v),
        [".env", ".hidden/h.rs", "src/a.rs", "sub/kept.rs"]
    );
    let v = search(&ctx, q(json!({"include_ignored": true}))).await;
    assert_eq!(
        files(&v),
        [
            "run.log",
            "src/a.rs",
            "sub/deep.log",
            "sub/generated.rs",
            "sub/kept.rs",
            "target/debug/out.rs"
        ]
    );
    let v = search(
        &ctx,
        q(json!({"include_hidden": true, "include_ignored": true})),
    )
    .await;
    assert_eq!(v["total_files"], 9, "{v}");
    // A .gitignore above the search path still applies.
    let v = search(&ctx, q(json!({"path": "sub"}))).await;
    assert_eq!(files(&v), ["sub/kept.rs"]);
    // Name search respects the same rules.
    let v = search(&ctx, json!({"pattern": "*.rs", "target": "files"})).await;
    assert_eq!(files(&v), ["src/a.rs", "sub/kept.rs"]);
}

#[tokio::test]
async fn results_are_capped_with_how_many_more_and_where_to_continue() {
    let files_in: Vec<(String, String)> = (0..30)
        .map(|i| {
            let body: String = (0..4).map(|j| format!("hit {i}.{j}\n")).collect();
            (format!("f{i:02}.txt"), body)
        })
        .collect();
    let refs: Vec<(&str, &str)> = files_in
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_str()))
        .collect();
    let (_d, ctx) = tree(&refs);
    let v = search(&ctx, json!({"pattern": "hit", "limit": 10})).await;
    let l = lines(&v);
    assert_eq!(l.len(), 10);
    assert_eq!(l[0], "f00.txt:1:hit 0.0");
    assert_eq!(l[9], "f02.txt:2:hit 2.1");
    assert_eq!(v["total_matches"], 120);
    assert_eq!(v["total_files"], 30);
    assert_eq!(v["truncated"], true);
    assert_eq!(
        v["note"],
        "showing matches 1-10 of 120; 110 more: call again with offset=10, or narrow the \
         pattern, path or file_glob"
    );
    // The next page starts where the note says.
    let v = search(&ctx, json!({"pattern": "hit", "limit": 10, "offset": 10})).await;
    assert_eq!(lines(&v)[0], "f02.txt:3:hit 2.2");
    // The last page is not truncated.
    let v = search(&ctx, json!({"pattern": "hit", "limit": 10, "offset": 115})).await;
    assert_eq!(lines(&v).len(), 5);
    assert_eq!(v["truncated"], false);
    let v = search(&ctx, json!({"pattern": "hit", "offset": 500})).await;
    assert_eq!(v["note"], "offset 500 is past the last of the 120 matches");
    // Files are capped by the same limit in the file modes.
    let v = search(
        &ctx,
        json!({"pattern": "hit", "output_mode": "files_only", "limit": 3}),
    )
    .await;
    assert_eq!(files(&v), ["f00.txt", "f01.txt", "f02.txt"]);
    assert_eq!(
        v["note"],
        "showing files 1-3 of 30; 27 more: call again with offset=3, or narrow the pattern, \
         path or file_glob"
    );
    let v = search(
        &ctx,
        json!({"pattern": "*.txt", "target": "files", "limit": 5, "offset": 28}),
    )
    .await;
    assert_eq!(files(&v), ["f28.txt", "f29.txt"]);
    assert_eq!(v["truncated"], false);
    let e = registry_err(&ctx, json!({"pattern": "hit", "limit": 0})).await;
    assert!(e.contains("/limit"), "{e}");
}

#[tokio::test]
async fn count_mode_gives_matching_lines_per_file() {
    let (_d, ctx) = tree(SRC);
    let v = search(&ctx, json!({"pattern": "add", "output_mode": "count"})).await;
    assert_eq!(
        v["counts"],
        json!([
            {"path": "README.md", "count": 1},
            {"path": "src/lib.rs", "count": 1},
            {"path": "src/main.rs", "count": 1},
        ])
    );
    assert_eq!(v["total_matches"], 3);
    assert_eq!(v["total_files"], 3);
}

#[tokio::test]
async fn long_lines_are_cut_and_the_output_is_bounded() {
    let long = format!("start {} end\n", "é".repeat(1000));
    let (_d, ctx) = tree(&[("long.txt", &long)]);
    let v = search(&ctx, json!({"pattern": "start", "max_line_length": 30})).await;
    let l = lines(&v);
    assert_eq!(
        l,
        [format!(
            "long.txt:1:start {} [… 980 more characters]",
            "é".repeat(24)
        )]
    );
    assert_eq!(v["lines_cut"], 1);
    // The whole answer stays within the output limit, saying where to continue.
    let many: String = (0..200)
        .map(|i| format!("match {i:03} {}\n", "x".repeat(80)))
        .collect();
    let (_d2, mut ctx2) = tree(&[("many.txt", &many)]);
    ctx2.limits.output_limit_chars = 2000;
    let v = search(&ctx2, json!({"pattern": "match", "limit": 200})).await;
    let content = v["content"].as_str().unwrap();
    assert!(content.len() <= 2000, "{}", content.len());
    let shown = lines(&v).len();
    assert!(shown >= 10, "{shown}");
    assert_eq!(
        v["note"],
        format!(
            "showing matches 1-{shown} of 200 (the output reached its 2000-character limit); \
             {} more: call again with offset={shown}, or narrow the pattern, path or file_glob",
            200 - shown
        )
    );
}

#[tokio::test]
async fn binary_files_are_skipped_and_counted() {
    let mut bin = b"needle in a binary\n".to_vec();
    bin.extend_from_slice(&[0, 1, 2, 3, 0]);
    bin.extend_from_slice(b"\nneedle again\n");
    let (d, ctx) = tree(&[("text.txt", "needle\n")]);
    fs::write(d.path().join("blob.bin"), &bin).unwrap();
    let v = search(&ctx, json!({"pattern": "needle"})).await;
    assert_eq!(lines(&v), ["text.txt:1:needle"]);
    assert_eq!(v["binary_files_skipped"], 1);
    assert_eq!(v["total_files"], 1);
    // Named on its own, it is still binary.
    let v = search(&ctx, json!({"pattern": "needle", "path": "blob.bin"})).await;
    assert_eq!(v["total_matches"], 0);
    assert_eq!(v["binary_files_skipped"], 1);
}

/// Under `workspace-write` with protected directories beside the workspace (a "tern home"
/// and a secrets directory, one reachable through a symlink in the workspace): nothing of
/// them is searched or listed, however the path is spelled.
#[tokio::test]
async fn the_sandbox_hides_protected_paths() {
    if !landlock() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let (ws, home, secrets, other) = (
        root.join("ws"),
        root.join("home"),
        root.join("secrets"),
        root.join("other"),
    );
    for p in [&ws, &home, &secrets, &other] {
        fs::create_dir_all(p).unwrap();
    }
    fs::write(ws.join("code.rs"), "TOKEN in code\n").unwrap();
    fs::write(home.join("gateway.key"), "TOKEN secret\n").unwrap();
    fs::write(secrets.join("TOKEN.txt"), "TOKEN secret\n").unwrap();
    fs::write(other.join("notes.txt"), "TOKEN other\n").unwrap();
    std::os::unix::fs::symlink(&home, ws.join("link")).unwrap();
    let mut ctx = ctx_in(&ws);
    let mut p = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
    p.protected_paths = vec![home.clone(), secrets.clone()];
    ctx.limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(p));

    for extra in [
        json!({}),
        json!({"include_hidden": true, "include_ignored": true}),
    ] {
        let mut args = json!({"pattern": "TOKEN"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let v = search(&ctx, args.clone()).await;
        assert_eq!(lines(&v), ["code.rs:1:TOKEN in code"], "{args}: {v}");
        let mut args = json!({"pattern": "*", "target": "files"});
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let v = search(&ctx, args.clone()).await;
        assert_eq!(files(&v), ["code.rs"], "{args}: {v}");
    }
    for path in [
        home.display().to_string(),
        home.join("gateway.key").display().to_string(),
        "link".into(),
        "link/gateway.key".into(),
        "../home".into(),
        "../secrets".into(),
    ] {
        for target in ["content", "files"] {
            let e = search_err(
                &ctx,
                json!({"pattern": "TOKEN", "path": path, "target": target}),
            )
            .await;
            assert!(
                e.starts_with(&format!(
                    "permission denied: {path} is protected by the sandbox"
                )),
                "{path}: {e}"
            );
            assert!(!e.contains("TOKEN secret"), "{e}");
        }
    }
    // A directory holding a protected one cannot be listed under the sandbox: a clear
    // error, not an empty result.
    let e = search_err(&ctx, json!({"pattern": "TOKEN", "path": ".."})).await;
    assert!(
        e.starts_with("permission denied: .. holds a path the sandbox protects"),
        "{e}"
    );
    // Outside the workspace but not protected: searched, as read_file reads it.
    let v = search(&ctx, json!({"pattern": "TOKEN", "path": "../other"})).await;
    assert_eq!(lines(&v), ["../other/notes.txt:1:TOKEN other"]);
}

#[tokio::test]
async fn an_interrupted_turn_stops_the_search() {
    let (_d, ctx) = tree(SRC);
    ctx.cancel.cancel();
    let e = search_err(&ctx, json!({"pattern": "add"})).await;
    assert_eq!(e, "cancelled: the turn was interrupted");
}

/// Cancelled after the first file of 2,000: the walker's threads stop within a few files.
#[test]
fn cancellation_is_honoured_between_files() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..2000 {
        let sub = d.path().join(format!("d{}", i % 20));
        fs::create_dir_all(&sub).unwrap();
        fs::write(sub.join(format!("f{i}.txt")), "needle\n").unwrap();
    }
    let ctx = ctx_in(d.path());
    let args: SearchFilesArgs = parse_args("search_files", json!({"pattern": "needle"})).unwrap();
    let mut plan = Plan::new(&args, &ctx).unwrap();
    let cancel = CancellationToken::new();
    let searched = Arc::new(AtomicUsize::new(0));
    let (c, n) = (cancel.clone(), searched.clone());
    plan.after_file = Some(Arc::new(move || {
        n.fetch_add(1, Ordering::SeqCst);
        c.cancel();
    }));
    plan.resolve_root().unwrap();
    let r = plan.run(&cancel);
    assert!(matches!(r, Err(SearchError::Cancelled)), "{r:?}");
    let n = searched.load(Ordering::SeqCst);
    // Each walker thread (at most 12) looks at the token every 16 entries.
    assert!((1..=12 * 16).contains(&n), "{n} files searched");
    // Uncancelled, the same plan searches them all.
    plan.after_file = None;
    let found = plan.run(&CancellationToken::new()).unwrap();
    assert_eq!(found.totals.files, 2000);
    assert_eq!(found.totals.searched, 2000);
}

#[test]
fn the_schema_offers_hermes_names_and_the_defaults_fill_in() {
    let spec = crate::tool::spec_of::<SearchFiles>();
    let props = spec.parameters["properties"].as_object().unwrap();
    for name in [
        "pattern",
        "target",
        "path",
        "file_glob",
        "limit",
        "offset",
        "output_mode",
        "context",
    ] {
        assert!(props.contains_key(name), "{name}");
    }
    assert_eq!(props["target"]["enum"], json!(["content", "files"]));
    assert_eq!(
        props["output_mode"]["enum"],
        json!(["content", "files_only", "count"])
    );
    assert_eq!(
        props["case"]["enum"],
        json!(["sensitive", "insensitive", "smart"])
    );
    assert_eq!(spec.toolset, "file");
    let a: SearchFilesArgs = parse_args("search_files", json!({"pattern": "x"})).unwrap();
    assert_eq!((a.path.as_str(), a.limit, a.offset), (".", 50, 0));
    assert_eq!(a.max_line_length, 500);
    assert!(!a.fixed_strings && !a.include_hidden && !a.include_ignored);
}
