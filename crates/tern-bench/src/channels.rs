//! `tern-bench channels`: what a Telegram channel adds to deciding a request, and what an
//! idle channel costs.
//!
//! Flow: a gateway booted in-process (`GatewayBuilder`, as `tern gateway` boots it) with one
//! `[[channels.telegram]]` on the fake Bot API (`FakeTelegram`) and the instant fake model.
//!
//! - **Tap → resumed turn**: the owner writes `ask: …`; the model calls `request_approval`,
//!   the channel posts the request with its buttons and the turn ends. Then either the owner
//!   taps Approve (`FakeTelegram::user_taps`: the update reaches the held long poll, is
//!   recorded, verified, decided through the inbox) or, the baseline, the same decision is
//!   made through the inbox directly (`Inbox::decide_approval`). Timed from just before the
//!   tap or the call to the fake model's arrival time of the resumed turn's first request
//!   (the first request after the decision: the session is idle then, and its round is
//!   checked to make exactly one). The two alternate, round after round, each round in a
//!   chat of its own (a fresh session), so the figures do not grow with one transcript.
//! - **Idle cost**: the gateway with the channel (long-polling with `poll_timeout`), then a
//!   fresh one without a channel, each left alone for the same window; the process's CPU time
//!   (`getrusage`: the gateway, the fake model and the fake Bot API, all in this process)
//!   and the `getUpdates` calls the fake counted.
//!
//! Usage: `tern-bench channels [--rounds N] [--idle SECS] [--poll-timeout SECS]`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tern_fake_model::FakeModel;
use tern_gateway::boot::{GatewayBuilder, GatewayHandle};
use tern_inbox::review::{RequestFilter, RequestStatus};
use tern_inbox::{Inbox, Outcome, OutcomeType};
use tern_store::Store;
use tern_test_support::telegram::{FakeTelegram, Sent};

use crate::pct;

/// The chat user who asks and decides (inbox reviewer `ann`).
const OWNER: i64 = 4242;
/// How long one step of a round may take before the bench gives up.
const BOUND: Duration = Duration::from_secs(30);

struct Opts {
    rounds: usize,
    idle: Duration,
    poll_timeout: u64,
}

fn parse() -> anyhow::Result<Opts> {
    let mut o = Opts {
        rounds: 50,
        idle: Duration::from_secs(60),
        poll_timeout: 50,
    };
    let mut it = std::env::args().skip(2);
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> anyhow::Result<u64> {
            Ok(it
                .next()
                .with_context(|| format!("{what} needs a number"))?
                .parse()?)
        };
        match a.as_str() {
            "--rounds" => o.rounds = usize::try_from(num("--rounds")?)?,
            "--idle" => o.idle = Duration::from_secs(num("--idle")?),
            "--poll-timeout" => o.poll_timeout = num("--poll-timeout")?,
            other => bail!("unknown argument {other}"),
        }
    }
    if o.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    Ok(o)
}

/// A gateway on a fresh home in `dir`, with the Telegram channel when `tg` is given.
async fn boot(
    dir: &Path,
    fake: &FakeModel,
    tg: Option<&FakeTelegram>,
    poll_timeout: u64,
) -> anyhow::Result<GatewayHandle> {
    let home = dir.join("home");
    let work = dir.join("work");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&work)?;
    let mut config = format!(
        "[model]\nbase_url = \"{}\"\nname = \"fake-model\"\nstream = false\n\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\n",
        fake.base_url()
    );
    if let Some(tg) = tg {
        config.push_str(&format!(
            "\n[[channels.telegram]]\ntoken = \"{}\"\napi_url = \"{}\"\n\
             allowed_users = [{OWNER}]\nreviewers = {{ {OWNER} = \"ann\" }}\n\
             progress = \"off\"\npoll_timeout = \"{poll_timeout}s\"\n",
            tg.token(),
            tg.api_url()
        ));
    }
    std::fs::write(home.join("config.toml"), config)?;
    // The reviewer the owner decides as.
    let store = Store::open(&home.join("tern.db")).await?;
    Inbox::new(store.clone())
        .reviewers()
        .add("ann", false)
        .await?;
    store.close().await;
    let root = tern_config::Home { root: home };
    let eff = tern_config::load(&root, &|_| None)?;
    Ok(GatewayBuilder::new(root, eff)
        .workdir(work)
        .start()
        .await?
        .handle)
}

/// Polls `check` until it gives a value, at most [`BOUND`].
async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("gave up waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn text_of(s: &Sent) -> &str {
    s.text.as_deref().unwrap_or_default()
}

fn count_sent(tg: &FakeTelegram, text: &str) -> usize {
    tg.sent().iter().filter(|m| text_of(m) == text).count()
}

/// One round: ask, wait for the post and the end of the turn, decide (by a tap or through
/// the inbox), and give the time to the resumed turn's first model request.
async fn round(
    i: usize,
    tap: bool,
    tg: &FakeTelegram,
    fake: &FakeModel,
    inbox: &Inbox,
) -> anyhow::Result<Duration> {
    let posts = tg
        .sent()
        .iter()
        .filter(|m| !m.button_data().is_empty())
        .count();
    let waiting = count_sent(tg, "waiting for the decision");
    let resumed = count_sent(tg, "resumed");
    // A group chat of its own: a fresh session, the same work every round.
    let chat = -1_000_000 - i64::try_from(i)?;
    tg.user_sends(chat, OWNER, &format!("ask: deploy build {i}?"));
    let post = until("the request posted with buttons", async || {
        tg.sent()
            .into_iter()
            .filter(|m| !m.button_data().is_empty())
            .nth(posts)
    })
    .await?;
    // The asking turn has ended: the decision resumes an idle session.
    until("the asking turn's answer", async || {
        (count_sent(tg, "waiting for the decision") > waiting).then_some(())
    })
    .await?;
    // The session is idle: the next model request is the resumed turn's first.
    let before = fake.requests().len();
    let t0 = if tap {
        let approve = post.button_data().into_iter().next().context("no button")?;
        let t0 = Instant::now();
        tg.user_taps(chat, OWNER, post.message_id, &approve);
        t0
    } else {
        let list = inbox
            .list_requests(&RequestFilter {
                status: Some(RequestStatus::Pending),
                ..RequestFilter::default()
            })
            .await?;
        let [request] = list.items.as_slice() else {
            bail!("expected one pending request, found {}", list.items.len());
        };
        let t0 = Instant::now();
        inbox
            .decide_approval(&request.id, Outcome::new(OutcomeType::Approve), "ann")
            .await?;
        t0
    };
    // Woken by the arrival itself, not by polling: nothing else runs in the timed window.
    let at = fake
        .wait_requests(before + 1, BOUND)
        .await
        .and_then(|r| r.get(before).map(|r| r.at))
        .context("the resumed turn's model request did not come")?;
    until("the resumed turn's answer", async || {
        (count_sent(tg, "resumed") > resumed).then_some(())
    })
    .await?;
    let after = fake.requests().len();
    if after != before + 1 {
        bail!(
            "the resumed turn made {} model requests, not 1",
            after - before
        );
    }
    Ok(at.saturating_duration_since(t0))
}

/// User plus system CPU time of this process.
pub(crate) fn cpu_time() -> anyhow::Result<Duration> {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is to a live local.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        bail!("getrusage: {}", std::io::Error::last_os_error());
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(tv(u.ru_utime) + tv(u.ru_stime))
}

/// CPU seconds per hour and `getUpdates` calls per minute over an idle window.
async fn idle(
    with_channel: bool,
    fake: &FakeModel,
    o: &Opts,
) -> anyhow::Result<(f64, Option<f64>)> {
    let dir = tempfile::tempdir()?;
    let tg = FakeTelegram::start().await;
    let handle = boot(
        dir.path(),
        fake,
        with_channel.then_some(&tg),
        o.poll_timeout,
    )
    .await?;
    if with_channel {
        until("the channel's first long poll", async || {
            (tg.held_polls() > 0).then_some(())
        })
        .await?;
    }
    // The window starts half a long poll after one began, so no poll starts at its edges
    // (a whole number of polls falls in a window that is a multiple of `poll_timeout`).
    tokio::time::sleep(Duration::from_secs(o.poll_timeout) / 2).await;
    let (cpu0, calls0, t0) = (cpu_time()?, tg.get_updates_calls(), Instant::now());
    tokio::time::sleep(o.idle).await;
    let (cpu1, calls1, wall) = (cpu_time()?, tg.get_updates_calls(), t0.elapsed());
    handle.shutdown().await?;
    let hours = wall.as_secs_f64() / 3600.0;
    let cpu = (cpu1 - cpu0).as_secs_f64() / hours;
    let polls = with_channel.then(|| (calls1 - calls0) as f64 / (wall.as_secs_f64() / 60.0));
    Ok((cpu, polls))
}

pub(crate) async fn bench_channels() -> anyhow::Result<()> {
    let o = parse()?;
    let fake = FakeModel::start().await?;
    fake.set_responder(crate::waits::responder);
    // Arrival times only: cloning every growing transcript to look for the decision would
    // cost more than what is measured (and slow the fake down while it is measured).
    fake.record_bodies(false);

    let dir = tempfile::tempdir()?;
    let tg = FakeTelegram::start().await;
    let handle = boot(dir.path(), &fake, Some(&tg), o.poll_timeout).await?;
    let inbox = handle.gateway().inbox.clone();
    // A warm-up round of each.
    round(0, true, &tg, &fake, &inbox).await?;
    round(1, false, &tg, &fake, &inbox).await?;
    let (mut taps, mut direct) = (Vec::new(), Vec::new());
    for i in 0..o.rounds {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        taps.push(ms(round(2 + 2 * i, true, &tg, &fake, &inbox).await?));
        direct.push(ms(round(3 + 2 * i, false, &tg, &fake, &inbox).await?));
    }
    handle.shutdown().await?;

    let (cpu_ch, polls) = idle(true, &fake, &o).await?;
    let (cpu_none, _) = idle(false, &fake, &o).await?;

    println!(
        "## A Telegram channel (in-process gateway, fake Bot API, instant fake model)\n\n\
         Decision → the resumed turn's first model request, {} rounds each, alternating:\n",
        o.rounds
    );
    println!("| path | median | p99 | min | max |\n|---|---|---|---|---|");
    for (name, mut v) in [
        (
            "tap Approve in the chat (poll → record → verify → decide)",
            taps,
        ),
        ("baseline: `Inbox::decide_approval` directly", direct),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms |",
            pct(&v, 0.5),
            pct(&v, 0.99),
            v[0],
            v[v.len() - 1]
        );
    }
    println!(
        "\nIdle for {} s each (`poll_timeout` = {} s; CPU of the whole process: gateway, fake \
         model, fake Bot API):\n",
        o.idle.as_secs(),
        o.poll_timeout
    );
    println!("| gateway | CPU | `getUpdates` |\n|---|---|---|");
    println!(
        "| one Telegram channel | {cpu_ch:.2} s/hour | {:.2} /min |",
        polls.unwrap_or(0.0)
    );
    println!("| baseline: no channel | {cpu_none:.2} s/hour | — |");
    Ok(())
}
