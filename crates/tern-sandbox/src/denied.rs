//! Whether a confined command failed because the sandbox stopped it.
//!
//! Landlock and seccomp answer with plain errno values (EACCES, EPERM, EROFS…), which the
//! command turns into its own message; tern sees only the exit code and the output. So
//! this is a heuristic, as in codex: a command that failed and printed one of the usual
//! texts of those errors was probably stopped by the sandbox, and is offered to a human to
//! run outside it. A false positive costs a question the human can refuse; a false negative
//! leaves the model to ask with `sandbox_permissions`.

/// What the sandbox probably denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// A write, a delete or a read the policy does not allow.
    FileSystem,
    /// A network connection while the network is off.
    Network,
}

impl Denial {
    /// For the approval request and the model.
    pub fn describe(self) -> &'static str {
        match self {
            Denial::FileSystem => "a file access outside what the sandbox allows",
            Denial::Network => "a network connection (the sandbox's network is off)",
        }
    }
}

const NETWORK_HINTS: &[&str] = &[
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "network is unreachable",
    "failed to establish a new connection",
    "socket: operation not permitted",
    "could not create socket",
    "failed to connect",
    "connection refused: permission",
    "couldn't connect",
    "eai_again",
    "getaddrinfo",
];

const FS_HINTS: &[&str] = &[
    "permission denied",
    // git hides the errno of a push into a repository it may not write.
    "unable to create temporary object directory",
    "insufficient permission for adding an object",
    "operation not permitted",
    "read-only file system",
    "eacces",
    "eperm",
    "erofs",
    "access is denied",
];

/// The probable denial behind a confined command's failure. A command that exited 0 counts
/// only when at least half of its output lines are denials (`perl`'s `rmtree` warns about
/// every file it could not remove and succeeds): one denied file in a long successful
/// listing (`grep -r`) is not worth a human's question.
pub fn probable_denial(output: &str, exit_code: Option<i32>, network_off: bool) -> Option<Denial> {
    let lower = output.to_ascii_lowercase();
    if exit_code == Some(0) {
        let lines: Vec<&str> = lower.lines().filter(|l| !l.trim().is_empty()).collect();
        let denied = lines
            .iter()
            .filter(|l| FS_HINTS.iter().any(|h| l.contains(h)))
            .count();
        return (denied > 0 && denied * 2 >= lines.len()).then_some(Denial::FileSystem);
    }
    if network_off && NETWORK_HINTS.iter().any(|h| lower.contains(h)) {
        return Some(Denial::Network);
    }
    FS_HINTS
        .iter()
        .any(|h| lower.contains(h))
        .then_some(Denial::FileSystem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_messages() {
        assert_eq!(
            probable_denial(
                "touch: cannot touch '/etc/x': Permission denied\n",
                Some(1),
                false
            ),
            Some(Denial::FileSystem)
        );
        assert_eq!(
            probable_denial(
                "curl: (6) Could not resolve host: example.com",
                Some(6),
                true
            ),
            Some(Denial::Network)
        );
        assert_eq!(
            probable_denial("bash: socket: Operation not permitted", Some(1), true),
            Some(Denial::Network)
        );
        // Without the network off, a socket error is an ordinary permission error.
        assert_eq!(
            probable_denial("bash: socket: Operation not permitted", Some(1), false),
            Some(Denial::FileSystem)
        );
        // Exit 0: only output that is mostly denials.
        assert_eq!(
            probable_denial(
                "cannot unlink x: Permission denied\ncannot rmdir d: Permission denied\n",
                Some(0),
                true
            ),
            Some(Denial::FileSystem)
        );
        assert_eq!(
            probable_denial(
                "a.txt:1:match\nb.txt:2:match\ngrep: c: Permission denied\n",
                Some(0),
                true
            ),
            None
        );
        assert_eq!(probable_denial("all good\n", Some(0), true), None);
        assert_eq!(
            probable_denial(
                "error: remote unpack failed: unable to create temporary object directory",
                Some(1),
                true
            ),
            Some(Denial::FileSystem)
        );
        assert_eq!(
            probable_denial("error[E0308]: mismatched types", Some(101), true),
            None
        );
    }
}
