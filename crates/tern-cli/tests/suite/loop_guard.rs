//! The loop guard as a user meets it: `tern chat -q` against a model that repeats a failing
//! call ends with the guard's message and exit 1, after the number of calls `[agent]` sets;
//! `config show` lists its keys and a bad combination is refused. Real `tern` processes
//! against the fake model.

use tern_fake_model::Reply;

use crate::common::{Env, assert_exit, stderr, stdout};

fn same_failing_call(i: usize) -> Reply {
    Reply::tool_call(&format!("c{i}"), "read_file", r#"{"path":"missing.txt"}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tern_chat_q_stops_a_model_that_repeats_a_failing_call() {
    let e = Env::with_model().await;
    e.config("[agent]\nloop_warn_after = 1\nloop_stop_after = 2\n");
    e.fake()
        .push(same_failing_call(1))
        .push(same_failing_call(2))
        .push(Reply::text("never asked for"));
    let o = e.run(&["chat", "-q", "read missing.txt"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("error: I stopped: I called `read_file` 2 times in this turn"),
        "{err}"
    );
    assert_eq!(stdout(&o), "");
    assert_eq!(
        e.fake().remaining(),
        1,
        "no model call after the second repeat"
    );
    // Both results told the model (warn after 1).
    let requests = e.fake().requests();
    let last = requests[1].messages().last().unwrap().clone();
    assert!(
        last["content"].as_str().unwrap().contains("loop_warning"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_show_lists_the_loop_guard_and_a_bad_combination_is_refused() {
    let e = Env::new();
    e.config("[agent]\nloop_stop_after = 9\n");
    let o = e.run(&["config", "show"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    for (line, source) in [
        ("loop_guard = true", "# default"),
        ("loop_warn_after = 3", "# default"),
        ("loop_stop_after = 9", "# from config.toml"),
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(line) && l.ends_with(source)),
            "{line} … {source} not in:\n{out}"
        );
    }

    e.config("[agent]\nloop_warn_after = 5\nloop_stop_after = 5\n");
    let o = e.run(&["config", "show"]);
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(
        err.contains("agent.loop_warn_after") && err.contains("less than agent.loop_stop_after"),
        "{err}"
    );
}
