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
    "operation not permitted",
    "read-only file system",
    "eacces",
    "eperm",
    "erofs",
    "access is denied",
];

/// The probable denial behind a confined command's failure (`exit_code` not 0).
pub fn probable_denial(output: &str, exit_code: Option<i32>, network_off: bool) -> Option<Denial> {
    if exit_code == Some(0) {
        return None;
    }
    let lower = output.to_ascii_lowercase();
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
        assert_eq!(probable_denial("Permission denied", Some(0), true), None);
        assert_eq!(
            probable_denial("error[E0308]: mismatched types", Some(101), true),
            None
        );
    }
}
