//! `tern memory show|edit` with the real binary: the stores as the agent keeps them, an
//! editor (a script given as `$EDITOR`) changing one, the limit checked after, a failing or
//! missing editor changing nothing, and an agent's write during the edit never overwritten.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Output;

use crate::common::{Env, assert_exit, assert_ok, stderr, stdout};

/// An editor that writes `$NEW_CONTENT` into the file it is given (and, with `$ALSO`, writes
/// `$ALSO_CONTENT` to that path first, as the agent would while the user edits).
fn editor(env: &Env) -> PathBuf {
    let path = env.path().join("editor.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         if [ -n \"$ALSO\" ]; then printf '%s' \"$ALSO_CONTENT\" > \"$ALSO\"; fi\n\
         if [ -n \"$FAIL\" ]; then exit 3; fi\n\
         printf '%s' \"$NEW_CONTENT\" > \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn edit(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut c = env.tern();
    c.args(["memory", "edit"]).args(args);
    c.env_remove("VISUAL").env("EDITOR", editor(env));
    for (k, v) in vars {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn store(env: &Env, name: &str) -> PathBuf {
    env.home().join("memory").join(name)
}

#[test]
fn show_prints_both_stores_and_edit_replaces_one() {
    let env = Env::new();
    let o = env.run(&["memory", "show"]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(
        out.contains("# USER.md (about the user): 0 entries, 0% — 0/1375 chars"),
        "{out}"
    );
    assert!(out.contains("# MEMORY.md"), "{out}");
    assert_eq!(out.matches("(empty)").count(), 2, "{out}");

    let o = edit(
        &env,
        &["user"],
        &[("NEW_CONTENT", "Name: Ada\n§\nPrefers short answers\n")],
    );
    assert_ok(&o);
    assert!(
        stdout(&o).contains("saved USER.md: 2 entries"),
        "{}",
        stdout(&o)
    );
    let path = store(&env, "USER.md");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "Name: Ada\n§\nPrefers short answers\n"
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // No copy left behind.
    let left: Vec<_> = std::fs::read_dir(env.home().join("memory"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".edit-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let o = env.run(&["memory", "show", "--user"]);
    assert_ok(&o);
    let out = stdout(&o);
    assert!(out.contains("Name: Ada\n§\nPrefers short answers"), "{out}");
    assert!(!out.contains("MEMORY.md"), "{out}");

    // The default store is MEMORY.md.
    let o = edit(&env, &[], &[("NEW_CONTENT", "The CI has two cores")]);
    assert_ok(&o);
    assert_eq!(
        std::fs::read_to_string(store(&env, "MEMORY.md")).unwrap(),
        "The CI has two cores"
    );
    let o = env.run(&["memory", "show", "--memory"]);
    assert!(
        stdout(&o).contains("The CI has two cores"),
        "{}",
        stdout(&o)
    );

    let o = env.run(&["memory", "show", "--user", "--memory"]);
    assert_exit(&o, 2);
}

#[test]
fn an_edit_past_the_limit_is_saved_and_said() {
    let env = Env::new();
    env.config("[memory]\nuser_char_limit = 20\n");
    let long = "x".repeat(50);
    let o = edit(&env, &["user"], &[("NEW_CONTENT", &long)]);
    assert_ok(&o);
    let err = stderr(&o);
    assert!(
        err.contains(
            "USER.md holds 50 characters, over its limit of 20 ([memory] user_char_limit)"
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(store(&env, "USER.md")).unwrap(),
        long
    );

    // Within the limit: no warning.
    let o = edit(&env, &["user"], &[("NEW_CONTENT", "short")]);
    assert_ok(&o);
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 entry, 25% — 5/20 chars"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_failing_missing_or_idle_editor_changes_nothing() {
    let env = Env::new();
    let o = edit(&env, &[], &[("NEW_CONTENT", "kept")]);
    assert_ok(&o);

    let o = edit(&env, &[], &[("NEW_CONTENT", "lost"), ("FAIL", "1")]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("failed"), "{}", stderr(&o));
    assert!(stderr(&o).contains("MEMORY.md unchanged"), "{}", stderr(&o));

    let o = env
        .tern()
        .args(["memory", "edit"])
        .env_remove("VISUAL")
        .env_remove("EDITOR")
        .output()
        .unwrap();
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("set $VISUAL or $EDITOR"),
        "{}",
        stderr(&o)
    );

    let o = edit(&env, &[], &[("NEW_CONTENT", "kept")]);
    assert_ok(&o);
    assert!(stdout(&o).contains("MEMORY.md unchanged"), "{}", stdout(&o));
    assert_eq!(
        std::fs::read_to_string(store(&env, "MEMORY.md")).unwrap(),
        "kept"
    );
}

#[test]
fn an_agent_write_during_the_edit_is_not_overwritten() {
    let env = Env::new();
    let o = edit(&env, &[], &[("NEW_CONTENT", "first")]);
    assert_ok(&o);
    let path = store(&env, "MEMORY.md");
    let o = edit(
        &env,
        &[],
        &[
            ("NEW_CONTENT", "first\n§\nthe user's line"),
            ("ALSO", path.to_str().unwrap()),
            ("ALSO_CONTENT", "first\n§\nthe agent's line"),
        ],
    );
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("MEMORY.md changed while you edited it"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "first\n§\nthe agent's line"
    );
    // The user's version is kept where the message says.
    let kept = err
        .split("your version is kept in ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(kept).unwrap(),
        "first\n§\nthe user's line"
    );
}

/// `tern chat` offers the session tools: the model's `memory` call lands in the store that
/// `tern memory show` prints, and its `todo` call in the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tern_chat_offers_the_session_tools() {
    use tern_fake_model::Reply;
    let env = Env::with_model().await;
    env.fake()
        .push(Reply::tool_calls([
            (
                "m1",
                "memory",
                r#"{"action":"add","target":"user","content":"Prefers tabs"}"#.to_owned(),
            ),
            (
                "t1",
                "todo",
                r#"{"todos":[{"id":"1","content":"reformat","status":"in_progress"}]}"#.to_owned(),
            ),
        ]))
        .push(Reply::text("Noted."));
    let o = env.run(&[
        "chat",
        "--toolsets",
        "todo,memory,session_search",
        "-q",
        "I prefer tabs; reformat the code",
    ]);
    assert_ok(&o);
    let reqs = env.fake().requests();
    let mut offered = reqs[0].tool_names();
    offered.sort();
    assert_eq!(offered, ["memory", "session_search", "todo"]);
    let results: Vec<&serde_json::Value> = reqs[1]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 2);
    for r in &results {
        let c = r["content"].as_str().unwrap();
        assert!(!c.contains("\"error\""), "{c}");
    }
    let show = stdout(&env.run(&["memory", "show", "--user"]));
    assert!(show.contains("Prefers tabs"), "{show}");
}
