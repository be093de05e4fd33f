//! Tests of the `file` toolset, through the registry's typed path: the JSON arguments
//! deserialised into each tool's `Args`.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use super::list_dir::ListDir;
use super::patch_file::{PatchFile, has_line_number_prefix, line_numbers};
use super::read_file::{ReadFile, utf8_prefix};
use super::write_file::WriteFile;
use crate::file_access::floor_char_boundary;
use crate::{DenyAll, DynTool, Registry, Tool, ToolContext, ToolLimits, ToolResult, Typed};

/// Every file tool test runs under the default policy (`workspace-write`) where the
/// kernel has Landlock, so the confined threads do all the work the tests check.
pub(super) fn ctx_in(dir: &Path) -> ToolContext {
    let mut limits = ToolLimits::default();
    if landlock() {
        limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(tern_sandbox::Policy::new(
            tern_sandbox::Mode::WorkspaceWrite,
        )));
    }
    ToolContext {
        session_id: "test".into(),
        call_id: "call-1".into(),
        call_seq: 0,
        workdir: dir.to_path_buf(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "tests never approve".into(),
        }),
        limits,
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

pub(super) fn landlock() -> bool {
    matches!(
        tern_sandbox::Support::probe(),
        tern_sandbox::Support::Landlock { .. }
    )
}

/// The file tools under `workspace-write` with a protected "tern home" beside the
/// workspace: what they may reach is what a command may.
#[tokio::test]
async fn the_sandbox_confines_the_file_tools() {
    if !landlock() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let (ws, out, home) = (root.join("ws"), root.join("out"), root.join("home"));
    for p in [&ws, &out, &home] {
        fs::create_dir(p).unwrap();
    }
    fs::write(out.join("f.txt"), "outside\n").unwrap();
    fs::write(home.join("inbox-admin.json"), "TOKEN\n").unwrap();
    std::os::unix::fs::symlink(&home, ws.join("h")).unwrap();
    std::os::unix::fs::symlink(out.join("f.txt"), ws.join("f-link")).unwrap();
    let mut ctx = ctx_in(&ws);
    let mut p = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
    p.protected_paths = vec![home.clone()];
    ctx.limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(p));

    // Inside: as usual.
    write(&ctx, json!({"path": "a.txt", "content": "a\n"}))
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
    // Outside: readable, not writable, whichever way the path is spelled.
    assert!(read(&ctx, json!({"path": out.join("f.txt")})).await.is_ok());
    for path in [
        out.join("f.txt").display().to_string(),
        "../out/f.txt".to_owned(),
        "f-link".to_owned(),
        out.join("new.txt").display().to_string(),
    ] {
        let e = err_text(write(&ctx, json!({"path": path, "content": "x"})).await);
        assert!(
            e.contains("permission denied") && e.contains("sandbox"),
            "{path}: {e}"
        );
        let e = err_text(
            patch(
                &ctx,
                json!({"path": path, "old_string": "outside", "new_string": "x"}),
            )
            .await,
        );
        assert!(!e.is_empty(), "{path}");
    }
    assert_eq!(fs::read_to_string(out.join("f.txt")).unwrap(), "outside\n");
    assert!(!out.join("new.txt").exists());
    // The protected home: not read, not listed, not written, not through a symlink.
    for path in [
        home.join("inbox-admin.json").display().to_string(),
        "h/inbox-admin.json".to_owned(),
        "../home/inbox-admin.json".to_owned(),
    ] {
        let e = err_text(read(&ctx, json!({"path": path})).await);
        assert!(!e.contains("TOKEN"), "{path}: {e}");
        assert!(e.contains("permission denied"), "{path}: {e}");
        let e = err_text(
            patch(
                &ctx,
                json!({"path": path, "old_string": "TOKEN", "new_string": "x"}),
            )
            .await,
        );
        assert!(e.contains("permission denied"), "{path}: {e}");
        assert!(
            write(&ctx, json!({"path": path, "content": "x"}))
                .await
                .is_err(),
            "{path}"
        );
    }
    assert!(
        list(&ctx, json!({"path": home.display().to_string()}))
            .await
            .is_err()
    );
    assert!(list(&ctx, json!({"path": "h"})).await.is_err());
    assert_eq!(
        fs::read_to_string(home.join("inbox-admin.json")).unwrap(),
        "TOKEN\n"
    );
}

fn setup() -> (TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ctx_in(dir.path());
    (dir, ctx)
}

async fn read(ctx: &ToolContext, args: Value) -> ToolResult {
    Typed::new(ReadFile).call(args, ctx.clone()).await
}

async fn write(ctx: &ToolContext, args: Value) -> ToolResult {
    Typed::new(WriteFile).call(args, ctx.clone()).await
}

async fn patch(ctx: &ToolContext, args: Value) -> ToolResult {
    Typed::new(PatchFile).call(args, ctx.clone()).await
}

async fn list(ctx: &ToolContext, args: Value) -> ToolResult {
    Typed::new(ListDir).call(args, ctx.clone()).await
}

fn numbered(range: std::ops::RangeInclusive<usize>) -> String {
    range.map(|i| format!("line {i}\n")).collect()
}

fn err_text(r: ToolResult) -> String {
    r.unwrap_err().0
}

// --- specs ---------------------------------------------------------------------------

#[test]
fn all_tools_have_valid_strict_schemas() {
    let tools: Vec<Arc<dyn DynTool>> = vec![
        Arc::new(Typed::new(ReadFile)),
        Arc::new(Typed::new(WriteFile)),
        Arc::new(Typed::new(PatchFile)),
        Arc::new(Typed::new(ListDir)),
    ];
    for t in &tools {
        let s = t.spec();
        assert_eq!(s.toolset, "file");
        assert!(!s.description.is_empty());
        assert_eq!(s.parameters["type"], "object");
        assert_eq!(s.parameters["additionalProperties"], false);
        jsonschema::validator_for(&s.parameters).unwrap();
    }
    let req = |i: usize| tools[i].spec().parameters["required"].clone();
    assert_eq!(req(0), json!(["path"]));
    assert_eq!(req(1), json!(["path", "content"]));
    assert_eq!(req(2), json!(["path", "old_string", "new_string"]));
    assert!(tools[3].spec().parameters.get("required").is_none());
}

#[tokio::test]
async fn registry_validates_arguments() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("a.txt"), "x\n").unwrap();
    let reg = Registry::builtin();
    let sets = vec!["file".to_string()];
    let e = reg
        .call(
            "read_file",
            r#"{"path":"a.txt","offset":0}"#,
            &sets,
            ctx.clone(),
        )
        .await
        .unwrap_err();
    assert!(e.0.contains("invalid arguments"), "{e}");
    let e = reg
        .call(
            "read_file",
            r#"{"path":"a.txt","bogus":1}"#,
            &sets,
            ctx.clone(),
        )
        .await
        .unwrap_err();
    assert!(e.0.contains("invalid arguments"), "{e}");
    let e = reg
        .call(
            "patch_file",
            r#"{"path":"a.txt","old_string":"","new_string":"y"}"#,
            &sets,
            ctx.clone(),
        )
        .await
        .unwrap_err();
    assert!(e.0.contains("invalid arguments"), "{e}");
    let e = reg
        .call("list_dir", r#"{"max_entries":5001}"#, &sets, ctx.clone())
        .await
        .unwrap_err();
    assert!(e.0.contains("invalid arguments"), "{e}");
    let v = reg
        .call("read_file", r#"{"path":"a.txt"}"#, &sets, ctx)
        .await
        .unwrap();
    assert_eq!(v["content"], "     1\tx\n");
}

// --- read_file -----------------------------------------------------------------------

#[tokio::test]
async fn read_whole_file_numbered() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("a.txt"), "alpha\nbeta\n\ngamma").unwrap();
    let v = read(&ctx, json!({"path": "a.txt"})).await.unwrap();
    assert_eq!(
        v["content"],
        "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma\n"
    );
    assert_eq!(v["path"], "a.txt");
    assert_eq!(v["total_lines"], 4);
    assert_eq!(v["start_line"], 1);
    assert_eq!(v["end_line"], 4);
    assert_eq!(v["truncated"], false);
    assert!(v.get("note").is_none());
}

#[tokio::test]
async fn read_absolute_path_and_crlf() {
    let (dir, ctx) = setup();
    let p = dir.path().join("w.txt");
    fs::write(&p, "one\r\ntwo\r\n").unwrap();
    let shown = p.to_str().unwrap();
    let v = read(&ctx, json!({"path": shown})).await.unwrap();
    assert_eq!(v["path"], shown);
    assert_eq!(v["content"], "     1\tone\n     2\ttwo\n");
    assert_eq!(v["total_lines"], 2);
}

#[tokio::test]
async fn read_offset_limit_and_note() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("n.txt"), numbered(1..=10)).unwrap();
    let v = read(&ctx, json!({"path": "n.txt", "offset": 3, "limit": 4}))
        .await
        .unwrap();
    assert_eq!(
        v["content"],
        "     3\tline 3\n     4\tline 4\n     5\tline 5\n     6\tline 6\n"
    );
    assert_eq!(v["start_line"], 3);
    assert_eq!(v["end_line"], 6);
    assert_eq!(v["total_lines"], 10);
    assert_eq!(v["truncated"], true);
    assert_eq!(
        v["note"],
        "showing lines 3-6 of 10; call again with offset=7 to read more"
    );

    // The tail: not truncated.
    let v = read(&ctx, json!({"path": "n.txt", "offset": 7}))
        .await
        .unwrap();
    assert_eq!(v["end_line"], 10);
    assert_eq!(v["truncated"], false);
    assert!(v.get("note").is_none());

    // Exactly reaching the end is not truncated either.
    let v = read(&ctx, json!({"path": "n.txt", "offset": 8, "limit": 3}))
        .await
        .unwrap();
    assert_eq!(v["end_line"], 10);
    assert_eq!(v["truncated"], false);
}

#[tokio::test]
async fn read_default_limit_is_2000_lines() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("big.txt"), numbered(1..=2500)).unwrap();
    let v = read(&ctx, json!({"path": "big.txt"})).await.unwrap();
    assert_eq!(v["end_line"], 2000);
    assert_eq!(v["total_lines"], 2500);
    assert_eq!(v["truncated"], true);
    assert!(v["note"].as_str().unwrap().contains("offset=2001"));
    assert!(
        v["content"]
            .as_str()
            .unwrap()
            .ends_with("  2000\tline 2000\n")
    );
}

#[tokio::test]
async fn read_caps_output_bytes_at_line_boundary() {
    let (dir, mut ctx) = setup();
    ctx.limits.read_limit_bytes = 100;
    fs::write(dir.path().join("n.txt"), numbered(1..=50)).unwrap();
    let v = read(&ctx, json!({"path": "n.txt"})).await.unwrap();
    let content = v["content"].as_str().unwrap();
    assert!(content.len() <= 100, "{}", content.len());
    assert!(content.ends_with('\n'));
    // Each line is "     N\tline N\n": 14 bytes for N < 10, so 7 lines fit in 100.
    assert_eq!(v["end_line"], 7);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["total_lines"], 50);
    let note = v["note"].as_str().unwrap();
    assert!(note.contains("100-byte read limit"), "{note}");
    assert!(note.contains("offset=8"), "{note}");
}

#[tokio::test]
async fn read_cuts_a_single_overlong_line() {
    let (dir, mut ctx) = setup();
    ctx.limits.read_limit_bytes = 64;
    let long = "é".repeat(200);
    fs::write(dir.path().join("l.txt"), format!("{long}\nshort\n")).unwrap();
    let v = read(&ctx, json!({"path": "l.txt"})).await.unwrap();
    let content = v["content"].as_str().unwrap();
    assert!(content.len() <= 64);
    assert!(content.starts_with("     1\téé"));
    assert_eq!(v["end_line"], 1);
    assert_eq!(v["truncated"], true);
    let note = v["note"].as_str().unwrap();
    assert!(note.contains("line 1 is longer"), "{note}");
    assert!(note.contains("offset=2"), "{note}");
    let v = read(&ctx, json!({"path": "l.txt", "offset": 2}))
        .await
        .unwrap();
    assert_eq!(v["content"], "     2\tshort\n");
}

#[tokio::test]
async fn read_multibyte_across_chunk_boundaries() {
    let (dir, ctx) = setup();
    // 'a' then two-byte chars: the 64 KiB chunk boundary falls inside a char.
    let text = format!("a{}\nend\n", "é".repeat(100_000));
    fs::write(dir.path().join("m.txt"), &text).unwrap();
    let v = read(&ctx, json!({"path": "m.txt"})).await.unwrap();
    assert_eq!(v["total_lines"], 2);
    assert!(v["content"].as_str().unwrap().ends_with("     2\tend\n"));
}

#[tokio::test]
async fn read_empty_file() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("e.txt"), "").unwrap();
    let v = read(&ctx, json!({"path": "e.txt"})).await.unwrap();
    assert_eq!(v["content"], "");
    assert_eq!(v["total_lines"], 0);
    assert_eq!(v["truncated"], false);
}

#[tokio::test]
async fn read_offset_past_end() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("n.txt"), numbered(1..=3)).unwrap();
    let e = err_text(read(&ctx, json!({"path": "n.txt", "offset": 9})).await);
    assert!(e.contains("offset 9 is past the end of n.txt"), "{e}");
    assert!(e.contains("3 lines"), "{e}");
}

#[tokio::test]
async fn read_refuses_binary() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("nul.bin"), b"abc\0def").unwrap();
    let e = err_text(read(&ctx, json!({"path": "nul.bin"})).await);
    assert_eq!(e, "not valid UTF-8 text (binary file?): nul.bin");

    // Invalid UTF-8 far past the sniffed prefix is still caught.
    let mut bytes = numbered(1..=20_000).into_bytes();
    bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
    fs::write(dir.path().join("late.bin"), bytes).unwrap();
    let e = err_text(read(&ctx, json!({"path": "late.bin", "limit": 1})).await);
    assert!(e.contains("binary file?"), "{e}");

    // A truncated multi-byte sequence at the very end.
    fs::write(dir.path().join("cut.bin"), b"ok\n\xc3").unwrap();
    let e = err_text(read(&ctx, json!({"path": "cut.bin"})).await);
    assert!(e.contains("binary file?"), "{e}");
}

#[tokio::test]
async fn read_missing_and_directory() {
    let (dir, ctx) = setup();
    let e = err_text(read(&ctx, json!({"path": "src/x.rs"})).await);
    assert!(e.starts_with("file not found: src/x.rs"), "{e}");
    fs::create_dir(dir.path().join("sub")).unwrap();
    let e = err_text(read(&ctx, json!({"path": "sub"})).await);
    assert!(e.starts_with("is a directory: sub"), "{e}");
}

#[tokio::test]
async fn read_honours_cancellation() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("a.txt"), "x\n").unwrap();
    ctx.cancel.cancel();
    let e = err_text(read(&ctx, json!({"path": "a.txt"})).await);
    assert!(e.contains("cancelled"), "{e}");
}

// --- write_file ----------------------------------------------------------------------

#[tokio::test]
async fn write_creates_dirs_and_reads_back() {
    let (dir, ctx) = setup();
    let v = write(
        &ctx,
        json!({"path": "a/b/c.txt", "content": "hello\nworld\n"}),
    )
    .await
    .unwrap();
    assert_eq!(v["path"], "a/b/c.txt");
    assert_eq!(v["bytes_written"], 12);
    assert_eq!(v["created"], true);
    assert_eq!(
        fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "hello\nworld\n"
    );
    let r = read(&ctx, json!({"path": "a/b/c.txt"})).await.unwrap();
    assert_eq!(r["content"], "     1\thello\n     2\tworld\n");

    let v = write(&ctx, json!({"path": "a/b/c.txt", "content": "é"}))
        .await
        .unwrap();
    assert_eq!(v["created"], false);
    assert_eq!(v["bytes_written"], 2);
    assert_eq!(
        fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "é"
    );
    // No temporary files left behind.
    let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["c.txt"]);
}

#[tokio::test]
async fn write_empty_content() {
    let (dir, ctx) = setup();
    let v = write(&ctx, json!({"path": "empty", "content": ""}))
        .await
        .unwrap();
    assert_eq!(v["bytes_written"], 0);
    assert_eq!(fs::read(dir.path().join("empty")).unwrap(), b"");
}

#[tokio::test]
async fn write_refuses_directory() {
    let (dir, ctx) = setup();
    fs::create_dir(dir.path().join("d")).unwrap();
    let e = err_text(write(&ctx, json!({"path": "d", "content": "x"})).await);
    assert!(e.starts_with("is a directory: d"), "{e}");
}

#[tokio::test]
async fn write_under_a_file_fails_clearly() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("f"), "x").unwrap();
    let e = err_text(write(&ctx, json!({"path": "f/g.txt", "content": "x"})).await);
    assert!(e.contains("f/g.txt"), "{e}");
}

#[cfg(unix)]
#[tokio::test]
async fn write_keeps_permissions_and_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, ctx) = setup();
    let p = dir.path().join("script.sh");
    fs::write(&p, "old").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o750)).unwrap();
    write(&ctx, json!({"path": "script.sh", "content": "new"}))
        .await
        .unwrap();
    let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o750);
    assert_eq!(fs::read_to_string(&p).unwrap(), "new");

    std::os::unix::fs::symlink("script.sh", dir.path().join("link")).unwrap();
    let v = write(&ctx, json!({"path": "link", "content": "via link"}))
        .await
        .unwrap();
    assert_eq!(v["created"], false);
    assert!(
        fs::symlink_metadata(dir.path().join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(fs::read_to_string(&p).unwrap(), "via link");
}

// --- patch_file ----------------------------------------------------------------------

#[tokio::test]
async fn patch_replaces_once() {
    let (dir, ctx) = setup();
    let p = dir.path().join("src.rs");
    fs::write(
        &p,
        "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n",
    )
    .unwrap();
    let v = patch(
        &ctx,
        json!({"path": "src.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
    )
    .await
    .unwrap();
    assert_eq!(v["path"], "src.rs");
    assert_eq!(v["replacements"], 1);
    assert_eq!(v["first_changed_line"], 2);
    assert_eq!(
        v["diff"],
        "@@ -2,1 +2,1 @@\n-    let x = 1;\n+    let x = 2;\n"
    );
    assert_eq!(
        fs::read_to_string(&p).unwrap(),
        "fn main() {\n    let x = 2;\n    println!(\"{x}\");\n}\n"
    );
}

#[tokio::test]
async fn patch_multiline_reports_first_really_changed_line() {
    let (dir, ctx) = setup();
    let p = dir.path().join("t.txt");
    fs::write(&p, "a\nb\nc\nd\n").unwrap();
    let v = patch(
        &ctx,
        json!({"path": "t.txt", "old_string": "b\nc\n", "new_string": "b\nC\nextra\n"}),
    )
    .await
    .unwrap();
    assert_eq!(v["first_changed_line"], 3);
    assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nC\nextra\nd\n");
    let diff = v["diff"].as_str().unwrap();
    assert!(diff.contains(" b\n-c\n+C\n+extra\n"), "{diff}");

    // Deleting text.
    let v = patch(
        &ctx,
        json!({"path": "t.txt", "old_string": "extra\n", "new_string": ""}),
    )
    .await
    .unwrap();
    assert_eq!(v["first_changed_line"], 4);
    assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nC\nd\n");
}

#[tokio::test]
async fn patch_absent() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("f.txt"), "hello\n").unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "bye", "new_string": "x"}),
        )
        .await,
    );
    assert_eq!(
        e,
        "old_string not found in f.txt; read the file again and copy the exact text, \
         including whitespace"
    );
    assert_eq!(
        fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn patch_absent_with_whitespace_hint() {
    let (dir, ctx) = setup();
    fs::write(
        dir.path().join("f.py"),
        "def f():\n\tif x:\n\t\treturn 1\n\treturn 2\n",
    )
    .unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({
                "path": "f.py",
                "old_string": "    if x:\n        return 1",
                "new_string": "    if y:\n        return 1",
            }),
        )
        .await,
    );
    assert!(e.starts_with("old_string not found in f.py"), "{e}");
    assert!(e.contains("whitespace"), "{e}");
    assert!(e.contains("starts at line 2"), "{e}");

    // Line breaks differ: found only by the whole-text comparison.
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "f.py", "old_string": "return 1 return 2", "new_string": "z"}),
        )
        .await,
    );
    assert!(e.contains("whitespace is ignored"), "{e}");
}

#[tokio::test]
async fn patch_absent_with_line_number_prefix_hint() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("f.txt"), "alpha\nbeta\n").unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "     1\talpha\n     2\tbeta", "new_string": "x"}),
        )
        .await,
    );
    assert!(e.contains("line-number prefixes"), "{e}");
}

#[tokio::test]
async fn patch_ambiguous_lists_count_and_lines() {
    let (dir, ctx) = setup();
    let p = dir.path().join("f.txt");
    fs::write(&p, "foo\nbar\nfoo\nbaz\nfoo\n").unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "foo", "new_string": "qux"}),
        )
        .await,
    );
    assert!(
        e.starts_with("old_string occurs 3 times in f.txt (lines 1, 3, 5)"),
        "{e}"
    );
    assert!(e.contains("replace_all"), "{e}");
    assert_eq!(fs::read_to_string(&p).unwrap(), "foo\nbar\nfoo\nbaz\nfoo\n");
}

#[tokio::test]
async fn patch_replace_all() {
    let (dir, ctx) = setup();
    let p = dir.path().join("f.txt");
    fs::write(&p, "foo\nbar\nfoo\nbaz\nfoo\n").unwrap();
    let v = patch(
        &ctx,
        json!({"path": "f.txt", "old_string": "foo", "new_string": "qux", "replace_all": true}),
    )
    .await
    .unwrap();
    assert_eq!(v["replacements"], 3);
    assert_eq!(v["first_changed_line"], 1);
    assert!(v["note"].as_str().unwrap().contains("lines 1, 3, 5"));
    assert_eq!(fs::read_to_string(&p).unwrap(), "qux\nbar\nqux\nbaz\nqux\n");
    // replace_all with a single occurrence is fine too.
    let v = patch(
        &ctx,
        json!({"path": "f.txt", "old_string": "bar", "new_string": "BAR", "replace_all": true}),
    )
    .await
    .unwrap();
    assert_eq!(v["replacements"], 1);
    assert!(v.get("note").is_none());
}

#[tokio::test]
async fn patch_identical_strings_refused() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("f.txt"), "foo\n").unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "foo", "new_string": "foo"}),
        )
        .await,
    );
    assert!(e.contains("identical"), "{e}");
}

#[tokio::test]
async fn patch_missing_and_binary_files() {
    let (dir, ctx) = setup();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
        )
        .await,
    );
    assert!(e.starts_with("file not found: nope.txt"), "{e}");
    assert!(e.contains("write_file"), "{e}");

    fs::write(dir.path().join("b.bin"), b"a\0b").unwrap();
    let e = err_text(
        patch(
            &ctx,
            json!({"path": "b.bin", "old_string": "a", "new_string": "b"}),
        )
        .await,
    );
    assert_eq!(e, "not valid UTF-8 text (binary file?): b.bin");
}

#[tokio::test]
async fn patch_adapts_to_crlf() {
    let (dir, ctx) = setup();
    let p = dir.path().join("w.txt");
    fs::write(&p, "one\r\ntwo\r\nthree\r\n").unwrap();
    let v = patch(
        &ctx,
        json!({"path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}),
    )
    .await
    .unwrap();
    assert_eq!(v["replacements"], 1);
    assert_eq!(fs::read_to_string(&p).unwrap(), "1\r\n2\r\nthree\r\n");
}

#[cfg(unix)]
#[tokio::test]
async fn patch_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, ctx) = setup();
    let p = dir.path().join("run.sh");
    fs::write(&p, "echo hi\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    patch(
        &ctx,
        json!({"path": "run.sh", "old_string": "hi", "new_string": "there"}),
    )
    .await
    .unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "echo there\n");
    assert_eq!(
        fs::metadata(&p).unwrap().permissions().mode() & 0o777,
        0o755
    );
}

// --- list_dir ------------------------------------------------------------------------

fn make_tree(dir: &Path) {
    fs::create_dir(dir.join("zdir")).unwrap();
    fs::create_dir(dir.join("adir")).unwrap();
    fs::create_dir(dir.join(".hdir")).unwrap();
    fs::write(dir.join("b.txt"), "12345").unwrap();
    fs::write(dir.join("a.txt"), "").unwrap();
    fs::write(dir.join(".hidden"), "x").unwrap();
}

fn names(v: &Value) -> Vec<String> {
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn list_sorts_dirs_first_and_skips_hidden() {
    let (dir, ctx) = setup();
    make_tree(dir.path());
    let v = list(&ctx, json!({})).await.unwrap();
    assert_eq!(v["path"], ".");
    assert_eq!(names(&v), ["adir", "zdir", "a.txt", "b.txt"]);
    assert_eq!(v["total"], 4);
    assert_eq!(v["truncated"], false);
    assert_eq!(v["hidden_skipped"], 2);
    let e = &v["entries"];
    assert_eq!(e[0]["type"], "dir");
    assert!(e[0].get("size").is_none());
    assert_eq!(e[2]["type"], "file");
    assert_eq!(e[2]["size"], 0);
    assert_eq!(e[3]["size"], 5);

    let v = list(&ctx, json!({"path": ".", "include_hidden": true}))
        .await
        .unwrap();
    assert_eq!(
        names(&v),
        [".hdir", "adir", "zdir", ".hidden", "a.txt", "b.txt"]
    );
    assert_eq!(v["total"], 6);
    assert!(v.get("hidden_skipped").is_none());
}

#[tokio::test]
async fn list_truncates() {
    let (dir, ctx) = setup();
    make_tree(dir.path());
    let v = list(&ctx, json!({"max_entries": 3})).await.unwrap();
    assert_eq!(names(&v), ["adir", "zdir", "a.txt"]);
    assert_eq!(v["total"], 4);
    assert_eq!(v["truncated"], true);
    assert!(v["note"].as_str().unwrap().contains("showing 3 of 4"));
}

#[tokio::test]
async fn list_subdir_and_symlink() {
    let (dir, ctx) = setup();
    fs::create_dir_all(dir.path().join("sub/inner")).unwrap();
    fs::write(dir.path().join("sub/f.rs"), "fn x() {}").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("f.rs", dir.path().join("sub/link")).unwrap();
    let v = list(&ctx, json!({"path": "sub"})).await.unwrap();
    assert_eq!(v["path"], "sub");
    let e = v["entries"].as_array().unwrap();
    assert_eq!(e[0]["name"], "inner");
    assert_eq!(e[1]["name"], "f.rs");
    assert_eq!(e[1]["size"], 9);
    #[cfg(unix)]
    {
        assert_eq!(e[2]["name"], "link");
        assert_eq!(e[2]["type"], "symlink");
        assert_eq!(e[2]["target"], "f.rs");
        assert!(e[2].get("size").is_none());
    }
}

#[tokio::test]
async fn list_errors() {
    let (dir, ctx) = setup();
    fs::write(dir.path().join("f.txt"), "x").unwrap();
    let e = err_text(list(&ctx, json!({"path": "f.txt"})).await);
    assert!(e.starts_with("not a directory: f.txt"), "{e}");
    let e = err_text(list(&ctx, json!({"path": "missing"})).await);
    assert_eq!(e, "directory not found: missing");
}

#[tokio::test]
async fn list_empty_dir() {
    let (_dir, ctx) = setup();
    let v = list(&ctx, json!({})).await.unwrap();
    assert_eq!(v["entries"], json!([]));
    assert_eq!(v["total"], 0);
    assert_eq!(v["truncated"], false);
}

// --- helpers -------------------------------------------------------------------------

#[test]
fn helper_functions() {
    assert_eq!(line_numbers("a\nb\nc", &[0, 2, 4]), [1, 2, 3]);
    assert!(has_line_number_prefix("    12\tfoo"));
    assert!(!has_line_number_prefix("\tfoo"));
    assert!(!has_line_number_prefix("x\tfoo"));
    assert_eq!(floor_char_boundary("aé", 2), 1);
    assert_eq!(floor_char_boundary("aé", 10), 3);
    let args = |v: Value| crate::tool::parse_args::<<ReadFile as Tool>::Args>("read_file", v);
    let a = args(json!({"path": "a", "offset": 5.0})).unwrap();
    assert_eq!((a.offset, a.limit), (5, 2000));
    assert!(args(json!({"path": "a", "offset": -1})).is_err());
    assert!(args(json!({"path": "a", "offset": 1.5})).is_err());
    assert_eq!(utf8_prefix(&[b'a', 0xc3]), "a");
}
