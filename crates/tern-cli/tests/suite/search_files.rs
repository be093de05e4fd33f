//! `search_files` in a real `tern chat -q` turn (issue 14): the model's call runs in the
//! `tern` process under the configured sandbox, `.gitignore` is respected, the answer reaches
//! the model, and a bad regex comes back as an error the model can read.

use serde_json::Value;
use tern_fake_model::Reply;

use crate::common::{Env, assert_exit, stderr, stdout};

/// The tool message the model received in its `n`th request.
fn tool_result(e: &Env, n: usize) -> Value {
    let reqs = e.fake().requests();
    let last = reqs[n].messages().last().unwrap().clone();
    assert_eq!(last["role"], "tool", "{last}");
    serde_json::from_str(last["content"].as_str().unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_searches_the_working_directory() {
    let e = Env::with_model().await;
    let w = e.work();
    for dir in ["src", "target"] {
        std::fs::create_dir_all(w.join(dir)).unwrap();
    }
    std::fs::write(w.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(w.join("src/lib.rs"), "// the needle\npub fn needle() {}\n").unwrap();
    std::fs::write(w.join("target/out.rs"), "pub fn needle() {}\n").unwrap();
    e.fake()
        .push(Reply::tool_call(
            "s1",
            "search_files",
            r#"{"pattern": "fn needle", "before_context": 1}"#,
        ))
        .push(Reply::tool_call(
            "s2",
            "search_files",
            r#"{"pattern": "needle(", "output_mode": "files_only"}"#,
        ))
        .push(Reply::text("Found it in src/lib.rs."));
    let o = e.run(&["chat", "-q", "where is the needle?"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "Found it in src/lib.rs.\n");
    let err = stderr(&o);
    assert!(err.contains("search_files fn needle"), "{err}");

    let found = tool_result(&e, 1);
    assert_eq!(
        found["content"], "src/lib.rs-1-// the needle\nsrc/lib.rs:2:pub fn needle() {}\n",
        "{found}"
    );
    assert_eq!(found["total_matches"], 1);
    let refused = tool_result(&e, 2);
    let msg = refused["error"].as_str().unwrap();
    assert!(
        msg.starts_with("invalid regex \"needle(\": ") && msg.contains("fixed_strings"),
        "{msg}"
    );
}
