//! `tern-bench compact`: what compaction costs apart from the model (issue 14).
//!
//! 1. Per-turn overhead: an in-process agent (store on disk, the fake model answering at
//!    once over loopback, a 32,000-token window) runs one turn at turn 10 of 30 fresh
//!    sessions, and 30 turns at turn 10,000 of a session whose first 10,000 turns were
//!    written to the store and then compacted. Every turn is ~1,000 tokens, so both
//!    transcripts are about ten turns long for the model; what the figure shows is whether
//!    anything else grows with the session's age. Target: the ratio of the medians < 1.5.
//! 2. The time to compact a 10,000-message session (2,500 rounds with a tool call, as in
//!    `load`), on demand ([`Agent::compact`]): the whole call, and the part before the
//!    summary request reached the model (planning, loading, rendering). Target < 100 ms apart
//!    from the model call.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tern_agent::compact::COMPACTOR_MARKER;
use tern_agent::{Agent, AgentSettings, CompactOutcome, Interrupt, TurnRequest, TurnStatus};
use tern_fake_model::{FakeModel, Reply};
use tern_llm::{Client, ClientConfig, Role};
use tern_store::{NewMessage, NewSession, Store};
use tern_tools::{DenyAll, Registry, ToolLimits};

use crate::summary;

const WINDOW: u64 = 32_000;

fn responder(body: &Value) -> Reply {
    let first = body["messages"][0]["content"].as_str().unwrap_or_default();
    if first.starts_with(COMPACTOR_MARKER) {
        return Reply::text(
            "## Goal\nbenchmark\n## Progress\n### Done\nmany turns\n## Next steps\nmore",
        );
    }
    Reply::text(format!("answer {}", "w".repeat(1500)))
}

fn agent(store: &Store, fake: &FakeModel) -> anyhow::Result<Arc<Agent>> {
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.max_retries = 0;
    Ok(Arc::new(Agent::new(
        store.clone(),
        Ok(Client::new(cfg)?),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 4,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: Some(WINDOW),
            compaction: Default::default(),
        },
    )))
}

fn request(session: &str, workdir: &Path, n: usize) -> TurnRequest {
    TurnRequest {
        session_id: session.to_owned(),
        input: format!("turn {n}: {}", "u".repeat(1500)),
        input_appended: false,
        interrupt: Interrupt::new(),
        system_prompt: None,
        approver: Arc::new(DenyAll {
            reason: "benchmark".into(),
        }),
        workdir: workdir.to_owned(),
        toolsets: Vec::new(),
        events: None,
        ticket: None,
    }
}

async fn timed_turn(agent: &Agent, req: TurnRequest) -> anyhow::Result<f64> {
    let t = Instant::now();
    let o = agent.run_turn(req).await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(
        o.status == TurnStatus::Completed,
        "turn ended {:?}",
        o.status
    );
    Ok(ms)
}

async fn session(store: &Store) -> anyhow::Result<String> {
    Ok(store
        .create_session(NewSession {
            source: "bench".into(),
            ..Default::default()
        })
        .await?
        .id)
}

/// `turns` rounds of user → assistant (with the usage a server reports), written directly.
async fn fill_turns(store: &Store, id: &str, turns: usize) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for i in 0..turns {
        batch.push(NewMessage::new(
            Role::User,
            format!("turn {i}: {}", "u".repeat(1500)),
        ));
        batch.push(NewMessage {
            prompt_tokens: Some(9000),
            completion_tokens: Some(380),
            ..NewMessage::new(Role::Assistant, format!("answer {}", "w".repeat(1500)))
        });
        if batch.len() >= 2000 {
            store.append_messages(id, &batch).await?;
            batch.clear();
        }
    }
    store.append_messages(id, &batch).await?;
    Ok(())
}

/// 2,500 rounds with a tool call: 10,000 messages, as `tern-bench load` writes them.
async fn fill_tool_rounds(store: &Store, id: &str) -> anyhow::Result<()> {
    let batch: Vec<NewMessage> = (0..2500).flat_map(crate::tool_round).collect();
    for chunk in batch.chunks(2000) {
        store.append_messages(id, chunk).await?;
    }
    Ok(())
}

pub async fn bench_compact() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("tern.db")).await?;
    let fake = FakeModel::start().await?;
    fake.record_bodies(false);
    fake.set_context_window(Some(WINDOW));
    fake.set_responder(responder);
    let agent = agent(&store, &fake)?;
    let work = dir.path();
    let runs = 30;

    // Turn 10 of fresh sessions.
    let mut young = Vec::new();
    for _ in 0..runs {
        let id = session(&store).await?;
        fill_turns(&store, &id, 9).await?;
        young.push(timed_turn(&agent, request(&id, work, 10)).await?);
    }

    // Turn 10,000 of a compacted session.
    let old = session(&store).await?;
    fill_turns(&store, &old, 9999).await?;
    let t = Instant::now();
    let out = agent.compact(&old, &[]).await?;
    let first_compaction = t.elapsed();
    anyhow::ensure!(
        matches!(out, CompactOutcome::Compacted(_)),
        "not compacted: {out:?}"
    );
    let mut aged = Vec::new();
    for n in 0..runs {
        aged.push(timed_turn(&agent, request(&old, work, 10_000 + n)).await?);
    }
    let compactions = store.compactions(&old).await?.len();

    // Compacting a 10,000-message session on demand.
    let mut whole = Vec::new();
    let mut before_model = Vec::new();
    for _ in 0..5 {
        let id = session(&store).await?;
        fill_tool_rounds(&store, &id).await?;
        let seen = fake.requests().len();
        let t = Instant::now();
        let out = agent.compact(&id, &[]).await?;
        whole.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(
            matches!(out, CompactOutcome::Compacted(_)),
            "not compacted: {out:?}"
        );
        let reqs = fake.requests();
        anyhow::ensure!(reqs.len() == seen + 1, "one summary request");
        let arrived = reqs[seen].at;
        before_model.push(arrived.duration_since(t).as_secs_f64() * 1000.0);
    }
    anyhow::ensure!(
        fake.take_violations().is_empty(),
        "a request over the window"
    );

    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "## Compaction (32,000-token window, {runs} turns each; the fake model answers at once)\n"
    );
    println!("| figure | median | p95 | min | max |\n|---|---|---|---|---|");
    summary("a turn at turn 10", "ms", young.clone());
    summary("a turn at turn 10,000, compacted", "ms", aged.clone());
    summary("compact 10,000 messages, whole call", "ms", whole);
    summary(
        "the same, until the summary request arrives",
        "ms",
        before_model,
    );
    println!(
        "\nratio of the medians (turn 10,000 / turn 10): {:.2}; first compaction of the \
         20,000-message session: {} ms; compactions of it during the timed turns: {}",
        median(&aged) / median(&young),
        first_compaction.as_millis(),
        compactions - 1,
    );
    Ok(())
}
