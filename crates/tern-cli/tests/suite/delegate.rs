//! `delegate_task` from `tern chat` and the links `tern sessions show` prints: a real `tern`
//! process against the fake model, its child session in the same store.

use serde_json::Value;
use tern_fake_model::Reply;

use crate::common::{Env, assert_exit, stdout};

fn show(e: &Env, id: &str) -> Value {
    let o = e.run(&["sessions", "show", id, "--json"]);
    assert_exit(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_links_a_parent_and_the_child_it_delegated_to() {
    let e = Env::with_model().await;
    e.fake()
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"Find the largest file","context":"Look in the working directory"}"#,
        ))
        .push(Reply::text("The largest file is big.bin."))
        .push(Reply::text("The subagent says: big.bin."));
    let o = e.run(&[
        "chat",
        "--toolsets",
        "terminal,file,delegate",
        "-q",
        "which file is largest? ask a subagent",
    ]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "The subagent says: big.bin.\n");

    let list = e.run(&["sessions", "list", "--json"]);
    let list: Vec<Value> = serde_json::from_slice(&list.stdout).unwrap();
    let parent = list.iter().find(|s| s["source"] == "cli").unwrap();
    let parent_id = parent["id"].as_str().unwrap();
    let shown = show(&e, parent_id);
    let children = shown["children"].as_array().unwrap();
    assert_eq!(children.len(), 1, "{shown:#}");
    assert_eq!(children[0]["title"], "Find the largest file");
    assert_eq!(children[0]["status"], "idle");
    let child_id = children[0]["id"].as_str().unwrap();
    let child = show(&e, child_id);
    assert_eq!(child["session"]["parent_id"], parent_id);
    assert_eq!(child["session"]["source"], "delegate");
    let answer = child["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(answer["content"], "The largest file is big.bin.");

    // In text: the parent names its child, the child its parent.
    let o = e.run(&["sessions", "show", parent_id]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    let line = text
        .lines()
        .find(|l| l.contains(child_id))
        .unwrap_or_else(|| panic!("no line for the child in:\n{text}"));
    assert!(text.contains("children 1:"), "{text}");
    assert!(
        line.contains("idle")
            && line.contains("delegate")
            && line.contains("Find the largest file"),
        "{line}"
    );
    let o = e.run(&["sessions", "show", child_id]);
    let text = stdout(&o);
    assert!(
        text.contains(&format!(
            "parent   {parent_id}  which file is largest? ask a subagent"
        )),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_delegate_limit_is_refused_with_its_key() {
    let e = Env::with_model().await;
    e.config("[delegate]\nmax_concurrent = 0\n");
    let o = e.run(&["chat", "--toolsets", "delegate", "-q", "hi"]);
    assert_exit(&o, 1);
    assert!(e.fake().requests().is_empty());
    let err = crate::common::stderr(&o);
    assert!(err.contains("delegate.max_concurrent"), "{err}");
}
