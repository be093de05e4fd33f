//! Foreground commands die with the program that runs them, descendants included.
//!
//! `PR_SET_PDEATHSIG` alone would kill only the shell when tern dies: a subshell, a
//! pipeline's other half or `make`'s recipe would be orphaned and could still land its side
//! effect after the transcript called the command interrupted. So each foreground command
//! gets a watchdog as its process group leader:
//!
//! 1. Before the spawn, tern makes the lifeline: a pipe whose write end only tern keeps
//!    (close-on-exec, so no program it starts inherits it).
//! 2. Between fork and exec (the group is already made), [`fork_watchdog`] forks once more.
//!    The new child goes on to exec the shell. The parent becomes the watchdog: it keeps
//!    only the lifeline's read end and waits for either the shell's exit (a pidfd) or the
//!    lifeline's end.
//! 3. The shell exits: the watchdog exits with its status (`128 + N` for signal N), so
//!    tern sees the command's own exit code.
//! 4. tern dies, even by `kill -9`: the kernel closes the write end, the watchdog sees EOF
//!    and SIGKILLs the whole process group, itself included.
//!
//! Everything here runs in a forked child of a multi-threaded program: raw syscalls only,
//! no allocation, no locks.

use std::io;
use std::os::fd::RawFd;

/// The descriptor number the watchdog keeps the lifeline on (all others are closed).
const LIFELINE_FD: RawFd = 3;

/// Forks the watchdog (see the module docs). Returns in the child that is to exec the
/// command; the watchdog never returns. `read` and `write` are the lifeline's ends.
///
/// # Safety
/// Only to be called between fork and exec (a `pre_exec` hook), after the process group
/// was made, with `read`/`write` open descriptors of the lifeline pipe.
pub unsafe fn fork_watchdog(read: RawFd, write: RawFd) -> io::Result<()> {
    // SAFETY: fork in a single-threaded child (the one std forked).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // The command: the lifeline's ends go at exec (close-on-exec).
        return Ok(());
    }
    // SAFETY: we are the watchdog; `watch` never returns.
    unsafe { watch(pid, read, write) }
}

/// The watchdog's life: only syscalls, then `_exit`.
unsafe fn watch(child: libc::pid_t, read: RawFd, write: RawFd) -> ! {
    // SAFETY (whole function): raw syscalls on descriptors and pids this process owns.
    unsafe {
        // Keep the lifeline alone: tern's write end (else EOF never comes), the output
        // pipe (else tern waits for it), std's exec-error pipe (else the spawn never
        // returns) must all be closed here.
        libc::close(write);
        if read != LIFELINE_FD && libc::dup2(read, LIFELINE_FD) < 0 {
            libc::kill(0, libc::SIGKILL);
            libc::_exit(127);
        }
        for fd in 0..LIFELINE_FD {
            libc::close(fd);
        }
        close_from(LIFELINE_FD + 1);
        let pidfd = libc::syscall(libc::SYS_pidfd_open, child, 0) as RawFd;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: LIFELINE_FD,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // Without a pidfd (Linux before 5.3) the child is looked at every 50 ms.
            let (count, timeout) = if pidfd >= 0 { (2, -1) } else { (1, 50) };
            let n = libc::poll(fds.as_mut_ptr(), count, timeout);
            if n < 0 && *libc::__errno_location() != libc::EINTR {
                libc::kill(0, libc::SIGKILL);
                libc::_exit(127);
            }
            if fds[0].revents != 0 {
                // EOF (or anything else on a pipe nobody writes to): tern is gone.
                libc::kill(0, libc::SIGKILL);
                libc::_exit(137);
            }
            let mut status = 0;
            let flags = if pidfd >= 0 && fds[1].revents == 0 {
                continue;
            } else if pidfd >= 0 {
                0
            } else {
                libc::WNOHANG
            };
            if libc::waitpid(child, &mut status, flags) == child {
                if libc::WIFEXITED(status) {
                    libc::_exit(libc::WEXITSTATUS(status));
                }
                if libc::WIFSIGNALED(status) {
                    libc::_exit(128 + libc::WTERMSIG(status));
                }
            }
        }
    }
}

/// Closes every descriptor from `first` on.
unsafe fn close_from(first: RawFd) {
    // SAFETY: close_range(2) takes integers; on kernels without it (before 5.9), a loop.
    unsafe {
        if libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) != 0 {
            let max = match libc::sysconf(libc::_SC_OPEN_MAX) {
                n if n > 0 => n as RawFd,
                _ => 1024,
            };
            for fd in first..max {
                libc::close(fd);
            }
        }
    }
}
