//! [`McpManager`] with the real server-everything: restart after a crash, a broken server
//! beside a working one, lazy start, shutdown.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tern_config::McpServerConfig;
use tern_mcp::{ClientOptions, McpManager, ServerState};
use tern_test_support::wait::eventually;
use tern_tools::{DenyAll, Registry, ToolContext, ToolLimits};
use tokio_util::sync::CancellationToken;

use crate::common::{config, everything_config};

fn ctx() -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        call_id: "call-1".into(),
        call_seq: 0,
        workdir: std::env::temp_dir(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "tests never approve".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

async fn manager(servers: &[(&str, McpServerConfig)]) -> (McpManager, Registry) {
    let servers: BTreeMap<String, McpServerConfig> = servers
        .iter()
        .map(|(n, c)| ((*n).to_owned(), c.clone()))
        .collect();
    let manager = McpManager::start(&servers, ClientOptions::default()).await;
    let mut registry = Registry::new();
    manager.register(&mut registry);
    (manager, registry)
}

async fn echo(registry: &Registry, manager: &McpManager, text: &str) -> Result<String, String> {
    let toolsets = manager.expand_toolsets(&["mcp".to_owned()]);
    registry
        .call(
            "mcp__everything__echo",
            &serde_json::json!({ "message": text }).to_string(),
            &toolsets,
            ctx(),
        )
        .await
        .map(|v| v.as_str().unwrap_or_default().to_owned())
        .map_err(|e| e.to_string())
}

fn state(manager: &McpManager, name: &str) -> ServerState {
    manager
        .status()
        .into_iter()
        .find(|s| s.name == name)
        .unwrap()
        .state
}

fn pid_of(manager: &McpManager) -> u32 {
    match state(manager, "everything") {
        ServerState::Running { pid: Some(pid) } => pid,
        other => panic!("not running: {other:?}"),
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn a_killed_server_is_restarted_and_serves_the_same_tool() {
    let (manager, registry) = manager(&[("everything", everything_config(""))]).await;
    assert_eq!(echo(&registry, &manager, "one").await.unwrap(), "Echo: one");
    let pid = pid_of(&manager);
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGKILL).unwrap();
    // Once the manager has seen the crash, the next call waits for the restart (backoff
    // about 1 s, within startup_timeout). (A call already on its way when the server died
    // fails: it may have had effects, so it is not sent again.)
    eventually("the crash to be noticed", async || {
        (state(&manager, "everything") != ServerState::Running { pid: Some(pid) }).then_some(())
    })
    .await;
    assert_eq!(echo(&registry, &manager, "two").await.unwrap(), "Echo: two");
    let new_pid = pid_of(&manager);
    assert_ne!(new_pid, pid);
    manager.shutdown().await;
    assert_eq!(state(&manager, "everything"), ServerState::Stopped);
}

#[tokio::test]
async fn a_server_that_cannot_start_is_reported_while_the_others_work() {
    let (manager, registry) = manager(&[
        ("everything", everything_config("")),
        ("ghost", config("command = \"tern-no-such-program\"\n")),
        (
            "off",
            config("command = \"tern-no-such-program\"\nenabled = false\n"),
        ),
    ])
    .await;
    match state(&manager, "ghost") {
        ServerState::Failed { error } => assert!(
            error.starts_with("cannot start MCP server `ghost` (`tern-no-such-program`): "),
            "{error}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(state(&manager, "off"), ServerState::Disabled);
    assert_eq!(echo(&registry, &manager, "hi").await.unwrap(), "Echo: hi");
    // Its toolset is left out rather than failing every turn.
    assert_eq!(
        manager.expand_toolsets(&["file".into(), "mcp".into(), "mcp:ghost".into()]),
        ["file", "mcp:everything"]
    );
    let ghost = manager.server("ghost").unwrap().client().await.unwrap_err();
    assert!(
        ghost
            .to_string()
            .starts_with("MCP server `ghost` is not available: it failed to start: "),
        "{ghost}"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn a_lazy_server_starts_at_its_first_call() {
    let (manager, registry) =
        manager(&[("everything", everything_config("startup = \"lazy\""))]).await;
    // Its tools were listed at boot, then it was stopped.
    assert!(registry.toolsets().contains(&"mcp:everything"));
    assert_eq!(state(&manager, "everything"), ServerState::Idle);
    assert_eq!(
        echo(&registry, &manager, "wake").await.unwrap(),
        "Echo: wake"
    );
    assert!(matches!(
        state(&manager, "everything"),
        ServerState::Running { pid: Some(_) }
    ));
    manager.shutdown().await;
}

#[tokio::test]
async fn shutdown_leaves_no_server_process() {
    let (manager, _registry) = manager(&[("everything", everything_config(""))]).await;
    let pid = pid_of(&manager);
    assert!(alive(pid));
    manager.shutdown().await;
    eventually("the server's process to be gone", async || {
        (!alive(pid)).then_some(())
    })
    .await;
}
