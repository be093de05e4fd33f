//! The session's running background processes as facts a compaction must keep: a summary
//! written by the model could forget that a build is still running, or its id; these lines
//! come from the supervisors' directories (the manager), never from the transcript.

use std::sync::Arc;

use tern_tools::{BoxFuture, SessionContext};

use crate::manager::ProcessManager;
use crate::status::ProcInfo;

/// Registered for the `terminal` toolset by [`crate::tools::register_with`].
pub struct ProcessContext {
    pub(crate) mgr: Arc<ProcessManager>,
}

impl SessionContext for ProcessContext {
    fn critical<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        Box::pin(async move {
            let all = match self.mgr.list().await {
                Ok(all) => all,
                Err(e) => {
                    tracing::warn!(session = session_id, error = %e, "cannot list background processes for a compaction");
                    return vec![format!(
                        "The background processes of this session could not be listed ({e}); \
                         check them with the `process` tool (action `list`)."
                    )];
                }
            };
            all.iter()
                .filter(|p| p.session_id.as_deref() == Some(session_id) && p.status.is_running())
                .map(describe)
                .collect()
        })
    }
}

fn describe(p: &ProcInfo) -> String {
    let mut line = format!(
        "Background process {} is still running: `{}` in {}",
        p.id,
        p.command,
        p.workdir.display()
    );
    if let Some(host) = &p.host {
        line.push_str(&format!(" on {host}"));
    }
    if let Ok(started) = jiff::Timestamp::from_millisecond(p.started_at_ms) {
        line.push_str(&format!(
            ", started {}",
            started.round(jiff::Unit::Second).unwrap_or(started)
        ));
    }
    if p.notify_on_complete {
        line.push_str("; you will be told when it exits");
    }
    if !p.watch_patterns.is_empty() {
        line.push_str(&format!("; watching its output for {:?}", p.watch_patterns));
    }
    line.push_str(" (poll, read its log, write to it or kill it with the `process` tool).");
    line
}
