use super::*;
use crate::{NewMessage, NewSession};
use tern_llm::ToolCall;

async fn store_with(n_exchanges: usize) -> (tempfile::TempDir, Store, String) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let id = s
        .create_session(NewSession {
            source: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    s.append_message(
        &id,
        &NewMessage::new(Role::User, "the task: count the stars"),
    )
    .await
    .unwrap();
    for i in 0..n_exchanges {
        s.append_messages(
            &id,
            &[
                NewMessage {
                    role: Some(Role::Assistant),
                    tool_calls: vec![ToolCall::new(format!("c{i}"), "terminal", "{}")],
                    ..Default::default()
                },
                NewMessage::tool_result(&format!("c{i}"), "terminal", format!("output {i} nebula")),
                NewMessage::new(Role::Assistant, format!("answer {i}")),
            ],
        )
        .await
        .unwrap();
    }
    (dir, s, id)
}

fn summary(after: i64, before: i64) -> NewSummary {
    NewSummary {
        summary: "## Goal\ncount the stars".into(),
        content: "[summary of earlier work] count the stars".into(),
        role: Role::Assistant,
        after_seq: after,
        before_seq: before,
    }
}

#[tokio::test]
async fn a_compaction_hides_the_middle_keeps_it_stored_and_places_the_summary_after_the_head() {
    let (_d, s, id) = store_with(4).await;
    // seq 1: task; exchanges at 2..=4, 5..=7, 8..=10, 11..=13.
    let c = s
        .compact(
            &id,
            &NewCompaction {
                reason: CompactionReason::Auto,
                planned_through_seq: 13,
                planned_after: None,
                elide: vec![],
                summary: Some(summary(1, 11)),
                tokens_before: 900,
                tokens_after: 300,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (c.first_seq, c.last_seq, c.messages_compacted),
        (Some(2), Some(10), 9)
    );
    let active = s.messages(&id).await.unwrap();
    let seqs: Vec<i64> = active.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, vec![1, 1, 11, 12, 13]);
    assert_eq!(active[1].compaction_id, Some(c.id));
    assert_eq!(
        active[1].content.as_deref(),
        Some("[summary of earlier work] count the stars")
    );
    let all = s.messages_all(&id).await.unwrap();
    assert_eq!(all.len(), 13);
    assert_eq!(all.iter().filter(|m| m.compacted).count(), 9);
    assert!(!all[0].compacted && all[1].compacted && !all[10].compacted);
    // Compacted messages are still found by full-text search.
    let hits = s.search("nebula", 20).await.unwrap();
    assert_eq!(hits.len(), 4, "{hits:?}");
    assert_eq!(s.compaction(&id).await.unwrap().unwrap().id, c.id);
}

#[tokio::test]
async fn a_compaction_planned_on_another_transcript_writes_nothing() {
    let (_d, s, id) = store_with(3).await;
    let plan = NewCompaction {
        reason: CompactionReason::Manual,
        planned_through_seq: 10,
        planned_after: None,
        elide: vec![],
        summary: Some(summary(1, 8)),
        tokens_before: 1,
        tokens_after: 1,
    };
    // A message arrived while the summary was being written.
    s.append_message(&id, &NewMessage::new(Role::User, "more"))
        .await
        .unwrap();
    let err = s.compact(&id, &plan).await.unwrap_err();
    assert!(matches!(err, StoreError::TranscriptChanged(_)), "{err}");
    assert_eq!(s.messages(&id).await.unwrap().len(), 11);
    assert!(s.compaction(&id).await.unwrap().is_none());
    // Planned again on the new transcript: applied. Then a plan that missed it is refused.
    let first = s
        .compact(
            &id,
            &NewCompaction {
                planned_through_seq: 11,
                ..plan.clone()
            },
        )
        .await
        .unwrap();
    let err = s
        .compact(
            &id,
            &NewCompaction {
                planned_through_seq: 11,
                ..plan
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::TranscriptChanged(_)), "{err}");
    assert_eq!(s.compactions(&id).await.unwrap(), vec![first]);
}

#[tokio::test]
async fn the_cheap_pass_shows_a_placeholder_and_keeps_the_output_and_the_summary() {
    let (_d, s, id) = store_with(3).await;
    let first = s
        .compact(
            &id,
            &NewCompaction {
                reason: CompactionReason::Auto,
                planned_through_seq: 10,
                planned_after: None,
                elide: vec![],
                summary: Some(summary(1, 5)),
                tokens_before: 2,
                tokens_after: 1,
            },
        )
        .await
        .unwrap();
    let all = s.messages_all(&id).await.unwrap();
    let output = all.iter().find(|m| m.seq == 6).unwrap();
    let second = s
        .compact(
            &id,
            &NewCompaction {
                reason: CompactionReason::Auto,
                planned_through_seq: 10,
                planned_after: Some(first.id),
                elide: vec![Elision {
                    message_id: output.id,
                    placeholder: "[output cut]".into(),
                }],
                summary: None,
                tokens_before: 2,
                tokens_after: 1,
            },
        )
        .await
        .unwrap();
    assert_eq!(second.outputs_elided, 1);
    assert_eq!(
        second.summary, first.summary,
        "the summary is carried forward"
    );
    let active = s.messages(&id).await.unwrap();
    assert_eq!(active[1].compaction_id, Some(second.id));
    let seen = active.iter().find(|m| m.id == output.id).unwrap();
    assert_eq!(seen.content.as_deref(), Some("[output cut]"));
    let kept = s.messages_all(&id).await.unwrap();
    let kept = kept.iter().find(|m| m.id == output.id).unwrap();
    assert_eq!(kept.content.as_deref(), Some("output 1 nebula"));
    assert_eq!(kept.model_content.as_deref(), Some("[output cut]"));
}
