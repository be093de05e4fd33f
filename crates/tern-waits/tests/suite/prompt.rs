//! The guide offered as a skill: a turn that enables the `inbox` toolset has
//! [`SYSTEM_PROMPT_LINE`] in its system prompt (whatever the base prompt), a turn without it
//! does not. A real agent loop, store and embedded inbox; only the model is faked, and its
//! recorded requests are what is checked.

use std::sync::Arc;

use serde_json::Value;
use tern_agent::{Agent, AgentSettings, Interrupt, TurnRequest};
use tern_fake_model::{FakeModel, Reply};
use tern_hooks::HookBus;
use tern_inbox::Inbox;
use tern_llm::{Client, ClientConfig};
use tern_store::{NewSession, Store};
use tern_tools::{DenyAll, Registry, ToolLimits};
use tern_waits::client::EmbeddedInbox;
use tern_waits::guide::SYSTEM_PROMPT_LINE;
use tern_waits::tools::{self, InboxTools, TOOLSET};

/// Runs one turn with `toolsets` (and `system_prompt` configured, if any) and returns the
/// system message the model received.
async fn system_message(toolsets: &[&str], system_prompt: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let inbox = Inbox::new(store.clone());
    inbox.ensure_default_project().await.unwrap();
    let inbox_tools = Arc::new(InboxTools::new(
        store.clone(),
        Arc::new(EmbeddedInbox::new(inbox)),
        Arc::new(HookBus::new()),
    ));
    let mut registry = Registry::builtin();
    tools::register(&mut registry, inbox_tools);

    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::text("done"));
    let agent = Agent::new(
        store.clone(),
        Ok(Client::new(ClientConfig::new(fake.base_url())).unwrap()),
        Arc::new(registry),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 4,
            stream: false,
            system_prompt: system_prompt.map(str::to_owned),
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    );
    let session = store
        .create_session(NewSession {
            source: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    agent
        .run_turn(TurnRequest {
            session_id: session,
            input: "hello".into(),
            input_appended: false,
            interrupt: Interrupt::new(),
            system_prompt: None,
            approver: Arc::new(DenyAll {
                reason: "test".into(),
            }),
            workdir: dir.path().to_owned(),
            toolsets: toolsets.iter().map(|t| (*t).to_owned()).collect(),
            events: None,
            ticket: None,
        })
        .await
        .unwrap();
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let system = &requests[0].messages()[0];
    assert_eq!(system["role"], "system");
    system["content"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| Value::to_string(&system["content"]))
}

#[tokio::test]
async fn the_guide_line_is_in_the_system_prompt_only_when_the_inbox_toolset_is_on() {
    let on = system_message(&["terminal", "file", TOOLSET], None).await;
    assert!(on.contains(SYSTEM_PROMPT_LINE), "{on}");
    assert!(
        on.starts_with("You are tern"),
        "the default prompt stays: {on}"
    );

    let off = system_message(&["terminal", "file"], None).await;
    assert!(!off.contains(SYSTEM_PROMPT_LINE), "{off}");
    assert!(!off.contains("inbox_guide"), "{off}");

    // A configured prompt replaces the default one, not the toolset's line.
    let custom = system_message(&[TOOLSET], Some("Be brief.")).await;
    assert_eq!(custom, format!("Be brief.\n\n{SYSTEM_PROMPT_LINE}"));
}
