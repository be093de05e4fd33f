//! How a run of `tern` ends: the exit code of an interrupted run, an error's text with its
//! causes, and telling a closed stdout (`| head`) from a real failure.

/// Exit code of a run stopped by Ctrl-C or SIGTERM, as shells report for SIGINT.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Whether `e` comes from writing to a pipe whose reader has gone. (Rust ignores SIGPIPE,
/// so the write fails with EPIPE instead of killing tern; tern keeps it that way because the
/// gateway and `tern ps` write to sockets and children whose end may close.)
/// Only stdout's reader counts: a broken pipe to a process or a socket stays an error.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    }) && stdout_reader_gone()
}

/// Whether stdout is a pipe whose read end is closed: poll(2) reports POLLERR on it then.
fn stdout_reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// The error and its causes, skipping a cause whose text the message already contains
/// (several library errors repeat their source in their own message).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
