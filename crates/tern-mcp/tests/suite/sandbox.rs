//! Stdio servers in the sandbox: a server under `workspace-write` cannot write outside its
//! workspace yet starts and works; with `sandbox = "none"` it can. Really attempted, with
//! the real server-everything behind a shell that first tries the write.

use std::path::Path;
use std::sync::Arc;

use tern_mcp::{ClientOptions, McpClient, ServerSandbox};
use tern_sandbox::{Mode, Policy, Sandbox, Support};

use crate::common::{config, everything_entry};

fn options(workspace: &Path) -> ClientOptions {
    let mut options = ClientOptions::default();
    options.sandbox = Some(ServerSandbox {
        sandbox: Arc::new(Sandbox::new(Policy::new(Mode::WorkspaceWrite))),
        workspace: workspace.to_owned(),
    });
    options
}

async fn start_writing(outside: &Path, workspace: &Path, sandbox: &str) -> McpClient {
    let script = format!(
        "echo x > '{}'; exec node '{}' stdio",
        outside.join("f").display(),
        everything_entry().display()
    );
    McpClient::start_with(
        "everything",
        &config(&format!(
            "command = \"sh\"\nargs = [\"-c\", {script:?}]\n{sandbox}"
        )),
        &options(workspace),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_sandboxed_server_cannot_write_outside_its_workspace() {
    if let Support::Missing { reason } = Support::probe() {
        eprintln!("skipped: Landlock is not supported here ({reason})");
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let client = start_writing(outside.path(), workspace.path(), "").await;
    // It started and works, confined.
    let echoed = client
        .call_tool(
            "echo",
            serde_json::json!({"message": "boxed"}).as_object().cloned(),
        )
        .await
        .unwrap();
    assert_eq!(echoed, "Echo: boxed");
    assert!(!outside.path().join("f").exists());
    client.close().await;

    // `sandbox = "workspace-write"` named explicitly: the same.
    let client = start_writing(
        outside.path(),
        workspace.path(),
        "sandbox = \"workspace-write\"",
    )
    .await;
    assert!(!outside.path().join("f").exists());
    client.close().await;

    // `sandbox = "none"`: the write happens.
    let client = start_writing(outside.path(), workspace.path(), "sandbox = \"none\"").await;
    assert_eq!(
        std::fs::read_to_string(outside.path().join("f")).unwrap(),
        "x\n"
    );
    client.close().await;
}
