//! Scheduled jobs against a real SQLite store: the unique claim, the claim and `next_run_at`
//! moving together, two schedulers racing, interrupted runs after a restart and their single
//! retry, the due query and its index, and the jobs' CRUD.

use super::*;

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
    (dir, s)
}

fn new_job(next_run_at: Option<i64>) -> NewCronJob {
    NewCronJob {
        name: Some("alerts".into()),
        schedule: r#"{"v":1,"spec":"every 1h","created":"2026-11-26T09:00:00Z"}"#.into(),
        prompt: "summarise the overnight alerts".into(),
        kind: CronJobKind::Agent,
        script: None,
        target: CronTarget::NewSession,
        toolsets: None,
        timeout_ms: None,
        deliver_to: DeliverTo::None,
        catch_up: CronCatchUp::One,
        grace_ms: 3_600_000,
        overlap: CronOverlap::Skip,
        retry_interrupted: false,
        enabled: true,
        next_run_at,
        owner_key: None,
        created_by: CronCreator::Cli,
        created_by_session: None,
    }
}

async fn job(s: &Store, next_run_at: i64) -> CronJob {
    s.create_cron_job(&new_job(Some(next_run_at)))
        .await
        .unwrap()
}

async fn next_run_at(s: &Store, id: &str) -> Option<i64> {
    s.cron_job(id).await.unwrap().unwrap().next_run_at
}

fn claimed(c: Claim) -> CronOccurrence {
    match c {
        Claim::Claimed(o) => *o,
        other => panic!("not claimed: {other:?}"),
    }
}

#[tokio::test]
async fn a_second_claim_of_the_same_occurrence_is_taken() {
    let (_d, s) = store().await;
    let j = job(&s, 1_000).await;
    let o = claimed(
        s.cron_claim(&j.id, 1_000, 1_005, Some(2_000))
            .await
            .unwrap(),
    );
    assert_eq!(
        (o.scheduled_at, o.state, o.attempt, o.started_at),
        (1_000, OccurrenceState::Running, 1, Some(1_005))
    );
    assert_eq!(next_run_at(&s, &j.id).await, Some(2_000));
    // The same occurrence again (a plan made again after a crash, a second scheduler):
    // refused, and next_run_at does not move.
    assert_eq!(
        s.cron_claim(&j.id, 1_000, 1_010, Some(9_000))
            .await
            .unwrap(),
        Claim::Taken
    );
    assert!(
        !s.cron_skip(&j.id, 1_000, "missed: gateway down", 1_010, Some(9_000))
            .await
            .unwrap()
    );
    assert_eq!(next_run_at(&s, &j.id).await, Some(2_000));
    let history = s.cron_history(&j.id, 100).await.unwrap();
    assert_eq!(history, vec![o]);
}

#[tokio::test]
async fn a_claim_for_a_removed_job_writes_nothing() {
    let (_d, s) = store().await;
    let j = job(&s, 1_000).await;
    assert!(s.delete_cron_job(&j.id).await.unwrap());
    assert_eq!(
        s.cron_claim(&j.id, 1_000, 1_000, Some(2_000))
            .await
            .unwrap(),
        Claim::NotDue
    );
    assert!(
        !s.cron_skip(&j.id, 1_000, "x", 1_000, Some(2_000))
            .await
            .unwrap()
    );
    // The occurrence inserted before the job's update failed was rolled back with it.
    assert!(s.cron_history(&j.id, 100).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_claim_from_a_plan_made_before_a_pause_or_resume_is_refused_and_writes_nothing() {
    let (_d, s) = store().await;
    let j = job(&s, 1_000).await;
    // Paused after the plan was made.
    assert!(s.set_cron_enabled(&j.id, false, None).await.unwrap());
    assert_eq!(
        s.cron_claim(&j.id, 1_000, 1_000, Some(2_000))
            .await
            .unwrap(),
        Claim::NotDue
    );
    // Resumed with next_run_at moved on: the old occurrence is no longer due, and the stale
    // claim must not move next_run_at back.
    assert!(s.set_cron_enabled(&j.id, true, Some(5_000)).await.unwrap());
    assert_eq!(
        s.cron_claim(&j.id, 1_000, 1_000, Some(2_000))
            .await
            .unwrap(),
        Claim::NotDue
    );
    assert!(
        !s.cron_skip(&j.id, 1_000, "x", 1_000, Some(2_000))
            .await
            .unwrap()
    );
    assert_eq!(next_run_at(&s, &j.id).await, Some(5_000));
    assert!(s.cron_history(&j.id, 10).await.unwrap().is_empty());
    claimed(
        s.cron_claim(&j.id, 5_000, 5_000, Some(6_000))
            .await
            .unwrap(),
    );
}

#[tokio::test]
async fn two_schedulers_racing_claim_each_occurrence_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let a = Store::open(&path).await.unwrap();
    let b = Store::open(&path).await.unwrap();
    let j = job(&a, 0).await;
    let race = |s: Store, id: String| {
        tokio::spawn(async move {
            let mut won = Vec::new();
            for t in 0..50_i64 {
                if let Claim::Claimed(o) = s.cron_claim(&id, t, t, Some(t + 1)).await.unwrap() {
                    won.push(o.scheduled_at);
                }
            }
            won
        })
    };
    let (wa, wb) = tokio::join!(race(a.clone(), j.id.clone()), race(b, j.id.clone()));
    let mut all: Vec<i64> = wa.unwrap().into_iter().chain(wb.unwrap()).collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..50).collect::<Vec<_>>(),
        "an occurrence claimed twice or never"
    );
    assert_eq!(a.cron_history(&j.id, 1_000).await.unwrap().len(), 50);
}

#[tokio::test]
async fn a_skip_records_its_reason_and_moves_next_run_at() {
    let (_d, s) = store().await;
    let j = job(&s, 1_000).await;
    assert!(
        s.cron_skip(
            &j.id,
            1_000,
            "overlap: previous run still going",
            1_200,
            Some(2_000)
        )
        .await
        .unwrap()
    );
    assert_eq!(next_run_at(&s, &j.id).await, Some(2_000));
    let h = s.cron_history(&j.id, 10).await.unwrap();
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].state, OccurrenceState::Skipped);
    assert_eq!(
        h[0].reason.as_deref(),
        Some("overlap: previous run still going")
    );
    // A skipped occurrence cannot be claimed afterwards.
    assert_eq!(
        s.cron_claim(&j.id, 1_000, 1_300, Some(2_000))
            .await
            .unwrap(),
        Claim::Taken
    );
}

#[tokio::test]
async fn a_one_shot_claimed_is_retired_and_no_longer_due() {
    let (_d, s) = store().await;
    let j = job(&s, 1_000).await;
    claimed(s.cron_claim(&j.id, 1_000, 1_000, None).await.unwrap());
    let after = s.cron_job(&j.id).await.unwrap().unwrap();
    assert_eq!((after.next_run_at, after.retired_at), (None, Some(1_000)));
    assert!(s.cron_due(i64::MAX, 10).await.unwrap().is_empty());
    assert_eq!(s.cron_next_wake().await.unwrap(), None);
}

#[tokio::test]
async fn running_occurrences_left_by_a_crash_are_interrupted_on_start_and_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let s = Store::open(&path).await.unwrap();
    let j = job(&s, 1_000).await;
    let done = claimed(
        s.cron_claim(&j.id, 1_000, 1_000, Some(2_000))
            .await
            .unwrap(),
    );
    assert!(
        s.cron_finish(done.id, "completed", Some("done"))
            .await
            .unwrap()
    );
    let cut = claimed(
        s.cron_claim(&j.id, 2_000, 2_000, Some(3_000))
            .await
            .unwrap(),
    );
    s.cron_set_session(cut.id, "sess_1").await.unwrap();
    assert!(s.cron_in_flight(&j.id).await.unwrap());
    s.close().await;

    // The restart: a new process opens the same store.
    let s = Store::open(&path).await.unwrap();
    let interrupted = s.cron_interrupted_on_start().await.unwrap();
    assert_eq!(interrupted.len(), 1);
    let o = &interrupted[0];
    assert_eq!(
        (o.id, o.state, o.session_id.as_deref()),
        (cut.id, OccurrenceState::Interrupted, Some("sess_1"))
    );
    assert!(!s.cron_in_flight(&j.id).await.unwrap());
    assert!(s.cron_interrupted_on_start().await.unwrap().is_empty());
    // The run that ended before the crash is untouched; the interrupted one cannot be
    // finished by a late report from the old run.
    let h = s.cron_history(&j.id, 10).await.unwrap();
    assert_eq!(h[1].state, OccurrenceState::Ran);
    assert_eq!(h[1].outcome.as_deref(), Some("completed"));
    assert!(!s.cron_finish(cut.id, "completed", None).await.unwrap());
    // It is not due again: next_run_at moved past it with the claim.
    assert_eq!(next_run_at(&s, &j.id).await, Some(3_000));

    // Retried once...
    let retry = s.cron_retry(cut.id, 5_000).await.unwrap().unwrap();
    assert_eq!(
        (retry.state, retry.attempt, retry.started_at),
        (OccurrenceState::Running, 2, Some(5_000))
    );
    assert!(s.cron_retry(cut.id, 5_001).await.unwrap().is_none());
    // ...and a retry cut short by another crash is not retried again.
    let again = s.cron_interrupted_on_start().await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    assert!(s.cron_retry(cut.id, 6_000).await.unwrap().is_none());
}

#[tokio::test]
async fn due_lists_the_enabled_jobs_whose_time_has_come_through_the_index() {
    let (_d, s) = store().await;
    let late = job(&s, 500).await;
    let now = job(&s, 1_000).await;
    let _future = job(&s, 1_001).await;
    let paused = job(&s, 100).await;
    assert!(s.set_cron_enabled(&paused.id, false, None).await.unwrap());
    let due: Vec<String> = s
        .cron_due(1_000, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(due, [late.id.clone(), now.id.clone()]);
    assert_eq!(s.cron_due(1_000, 1).await.unwrap()[0].id, late.id);
    assert_eq!(s.cron_next_wake().await.unwrap(), Some(500));
    // Resumed with a new next_run_at: the paused time is not caught up.
    assert!(
        s.set_cron_enabled(&paused.id, true, Some(5_000))
            .await
            .unwrap()
    );
    assert_eq!(next_run_at(&s, &paused.id).await, Some(5_000));

    // The same WHERE as `cron_due`: answered from the partial index, not a scan.
    let detail: Vec<String> = sqlx::query(
        "EXPLAIN QUERY PLAN SELECT id FROM cron_jobs WHERE enabled AND next_run_at IS NOT NULL \
         AND next_run_at <= 1000 ORDER BY next_run_at LIMIT 10",
    )
    .fetch_all(s.pool())
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<String, _>("detail"))
    .collect();
    assert!(
        detail.iter().any(|d| d.contains("cron_jobs_due")),
        "the due query scans: {detail:?}"
    );
}

#[tokio::test]
async fn jobs_round_trip_list_by_owner_update_and_remove_keeping_history() {
    let (_d, s) = store().await;
    let mut new = new_job(Some(1_000));
    new.kind = CronJobKind::Script;
    new.script = Some("df -h".into());
    new.target = CronTarget::Session("sess_42".into());
    new.toolsets = Some(vec!["web".into(), "terminal".into()]);
    new.timeout_ms = Some(60_000);
    new.deliver_to = DeliverTo::Webhook("https://example.test/hook".into());
    new.catch_up = CronCatchUp::All;
    new.overlap = CronOverlap::Queue;
    new.retry_interrupted = true;
    new.owner_key = Some("key_a".into());
    new.created_by = CronCreator::Agent;
    new.created_by_session = Some("sess_7".into());
    let j = s.create_cron_job(&new).await.unwrap();
    let back = s.cron_job(&j.id).await.unwrap().unwrap();
    assert_eq!(back, j);
    assert_eq!(back.target, CronTarget::Session("sess_42".into()));
    assert_eq!(
        back.deliver_to,
        DeliverTo::Webhook("https://example.test/hook".into())
    );
    assert_eq!(
        back.toolsets,
        Some(vec!["web".to_owned(), "terminal".to_owned()])
    );
    assert_eq!(
        (back.catch_up, back.overlap, back.retry_interrupted),
        (CronCatchUp::All, CronOverlap::Queue, true)
    );
    assert_eq!(
        (back.created_by, back.created_by_session.as_deref()),
        (CronCreator::Agent, Some("sess_7"))
    );
    let other = s.create_cron_job(&new_job(Some(2_000))).await.unwrap();

    let mine: Vec<String> = s
        .list_cron_jobs(Some("key_a"))
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(mine, std::slice::from_ref(&j.id));
    assert_eq!(s.list_cron_jobs(None).await.unwrap().len(), 2);
    assert!(s.list_cron_jobs(Some("key_b")).await.unwrap().is_empty());

    let mut edit = new_job(Some(7_000));
    edit.prompt = "check the deploy".into();
    edit.deliver_to = DeliverTo::Chat {
        channel: "tg".into(),
        chat_id: "42".into(),
        thread_id: String::new(),
    };
    let updated = s.update_cron_job(&other.id, &edit).await.unwrap().unwrap();
    assert_eq!(updated.prompt, "check the deploy");
    assert!(matches!(updated.deliver_to, DeliverTo::Chat { .. }));
    assert_eq!(updated.next_run_at, Some(7_000));
    assert_eq!(updated.created_at, other.created_at);
    assert!(s.update_cron_job("nope", &edit).await.unwrap().is_none());

    claimed(
        s.cron_claim(&j.id, 1_000, 1_000, Some(3_000))
            .await
            .unwrap(),
    );
    assert!(s.delete_cron_job(&j.id).await.unwrap());
    assert!(!s.delete_cron_job(&j.id).await.unwrap());
    assert!(s.cron_job(&j.id).await.unwrap().is_none());
    assert_eq!(s.cron_history(&j.id, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_inconsistent_job_is_refused_with_a_clear_error() {
    let (_d, s) = store().await;
    let mut script_without_command = new_job(Some(1));
    script_without_command.kind = CronJobKind::Script;
    let mut agent_with_command = new_job(Some(1));
    agent_with_command.script = Some("ls".into());
    let mut negative_grace = new_job(Some(1));
    negative_grace.grace_ms = -1;
    for (new, says) in [
        (script_without_command, "a script job needs a command"),
        (agent_with_command, "only a script job has a command"),
        (negative_grace, "the grace window is negative"),
    ] {
        let e = s.create_cron_job(&new).await.unwrap_err();
        assert!(matches!(e, StoreError::InvalidCronJob(_)), "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert!(s.list_cron_jobs(None).await.unwrap().is_empty());
}
