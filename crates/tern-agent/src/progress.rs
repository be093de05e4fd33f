//! A running tool's progress, shown: each call gets a [`Progress`] whose sink (its
//! `ToolContext::report`) turns the tool's reports into `AgentEvent::ToolProgress` (the CLI,
//! the API's streams) and `tool_progress` hook events (hooks, webhooks, chat channels).
//!
//! A chatty server must not flood any of them, so reports are throttled per call: one goes
//! out at once when a second has passed since the last that went out; one that comes sooner
//! is held, until a newer report replaces it or the call ends ([`Progress::finish`]), which
//! sends it — so where the call got to is always shown.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_hooks::{HookBus, HookEvent};
use tern_tools::{ProgressSink, ToolProgress};

use crate::{AgentEvent, EventSink};

/// The shortest time between two reports of one call that go out.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The progress of one tool call.
pub(crate) struct Progress {
    events: Option<EventSink>,
    hooks: Arc<HookBus>,
    session_id: String,
    source: String,
    turn_id: String,
    call_id: String,
    tool: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    sent_at: Option<Instant>,
    held: Option<ToolProgress>,
}

impl Progress {
    pub(crate) fn new(
        events: Option<EventSink>,
        hooks: Arc<HookBus>,
        session_id: &str,
        source: &str,
        turn_id: &str,
        call_id: &str,
        tool: &str,
    ) -> Arc<Self> {
        Arc::new(Progress {
            events,
            hooks,
            session_id: session_id.to_owned(),
            source: source.to_owned(),
            turn_id: turn_id.to_owned(),
            call_id: call_id.to_owned(),
            tool: tool.to_owned(),
            state: Mutex::default(),
        })
    }

    /// The sink the tool reports to.
    pub(crate) fn sink(self: &Arc<Self>) -> ProgressSink {
        let this = Arc::clone(self);
        Arc::new(move |p| this.report(p))
    }

    fn report(&self, p: ToolProgress) {
        self.report_at(p, Instant::now());
    }

    fn report_at(&self, p: ToolProgress, now: Instant) {
        let send = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if state
                .sent_at
                .is_some_and(|at| now.duration_since(at) < PROGRESS_INTERVAL)
            {
                state.held = Some(p);
                None
            } else {
                state.sent_at = Some(now);
                state.held = None;
                Some(p)
            }
        };
        if let Some(p) = send {
            self.send(p);
        }
    }

    /// The call ended: a report still held goes out now.
    pub(crate) fn finish(&self) {
        let held = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .held
            .take();
        if let Some(p) = held {
            self.send(p);
        }
    }

    fn send(&self, p: ToolProgress) {
        self.hooks
            .emit(HookEvent::ToolProgress(tern_hooks::ToolProgress {
                session_id: self.session_id.clone(),
                source: self.source.clone(),
                turn_id: self.turn_id.clone(),
                call_id: self.call_id.clone(),
                tool: self.tool.clone(),
                progress: p.progress,
                total: p.total,
                message: p.message.clone(),
            }));
        if let Some(events) = &self.events {
            events(AgentEvent::ToolProgress {
                call_id: self.call_id.clone(),
                name: self.tool.clone(),
                progress: p.progress,
                total: p.total,
                message: p.message,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(progress: f64) -> ToolProgress {
        ToolProgress {
            progress,
            total: Some(10.0),
            message: None,
        }
    }

    /// A call's progress whose events' values are recorded.
    fn recorded() -> (Arc<Progress>, Arc<Mutex<Vec<f64>>>) {
        let seen: Arc<Mutex<Vec<f64>>> = Arc::default();
        let events: EventSink = {
            let seen = Arc::clone(&seen);
            Arc::new(move |e| {
                if let AgentEvent::ToolProgress { progress, .. } = e {
                    seen.lock().unwrap().push(progress);
                }
            })
        };
        let progress = Progress::new(
            Some(events),
            Arc::new(HookBus::new()),
            "s",
            "cli",
            "t",
            "c",
            "tool",
        );
        (progress, seen)
    }

    #[test]
    fn one_report_a_second_goes_out_and_the_last_held_at_the_end() {
        let (progress, seen) = recorded();
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        progress.report_at(p(1.0), at(0));
        progress.report_at(p(2.0), at(300));
        progress.report_at(p(3.0), at(600));
        assert_eq!(*seen.lock().unwrap(), [1.0], "held within the second");
        progress.report_at(p(4.0), at(1000));
        progress.report_at(p(5.0), at(1200));
        progress.finish();
        // 2 and 3 were replaced by newer reports; 5 was held until the end.
        assert_eq!(*seen.lock().unwrap(), [1.0, 4.0, 5.0]);
    }

    #[test]
    fn reports_within_a_second_are_held_and_the_last_goes_out_at_the_end() {
        let (progress, seen) = recorded();
        let sink = progress.sink();
        // The first goes out at once; the rest within its second are held (or, on a machine
        // slow enough, go out too): either way the last is shown, and once.
        for i in 1..=5 {
            sink(p(f64::from(i)));
        }
        progress.finish();
        progress.finish();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.first(), Some(&1.0), "{seen:?}");
        assert_eq!(seen.last(), Some(&5.0), "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    }
}
