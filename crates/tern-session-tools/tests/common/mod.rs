//! What the tests of this crate share: a real store in a temporary `$TERN_HOME`, the
//! registry with this crate's tools, and calls through `Registry::call` as the agent loop
//! makes them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tern_config::MemoryConfig;
use tern_store::{NewSession, Store};
use tern_tools::{DenyAll, Registry, SessionContext, ToolContext, ToolLimits, ToolResult};
use tokio_util::sync::CancellationToken;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub registry: Registry,
}

pub const TOOLSETS: [&str; 3] = ["todo", "memory", "session_search"];

impl Env {
    pub async fn new() -> Self {
        Self::with_memory(&MemoryConfig::default()).await
    }

    pub async fn with_memory(config: &MemoryConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let store = Store::open(&dir.path().join("home/tern.db")).await.unwrap();
        let mut registry = Registry::builtin();
        tern_session_tools::register(
            &mut registry,
            store.clone(),
            &dir.path().join("home"),
            config,
        );
        Env {
            dir,
            store,
            registry,
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Creates a session owned by `owner` (`None`: as `tern chat` does).
    pub async fn session(&self, id: &str, owner: Option<&str>) {
        self.store
            .create_session(NewSession {
                id: Some(id.into()),
                source: "test".into(),
                owner: owner.map(str::to_owned),
                ..Default::default()
            })
            .await
            .unwrap();
    }

    pub async fn call(&self, session: &str, tool: &str, args: Value) -> ToolResult {
        let toolsets: Vec<String> = TOOLSETS.iter().map(|t| t.to_string()).collect();
        self.registry
            .call(tool, &args.to_string(), &toolsets, ctx(session))
            .await
    }

    /// The session contexts of `toolset`.
    pub fn context(&self, toolset: &str) -> Arc<dyn SessionContext> {
        let sets = [toolset.to_owned()];
        let mut all: Vec<_> = self.registry.contexts(&sets).cloned().collect();
        assert_eq!(all.len(), 1, "one context for {toolset}");
        all.remove(0)
    }
}

pub fn ctx(session: &str) -> ToolContext {
    ToolContext {
        session_id: session.into(),
        call_id: "call_1".into(),
        call_seq: 0,
        workdir: std::env::temp_dir(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "test".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

/// A tool error's text (the test fails on success).
pub fn err(r: ToolResult) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v}"),
        Err(e) => e.0,
    }
}
