//! The environment of the agent's commands: the program's own, less tern's and the model's
//! secrets.
//!
//! By default every `TERN_*` variable goes (`TERN_HOME` too: a command must not be pointed
//! at tern's home), and so does every name ending in `_KEY`, `_TOKEN`, `_SECRET` or
//! `_PASSWORD` (`OPENAI_API_KEY`, `GITHUB_TOKEN`, …). `[sandbox.env] keep` names variables
//! that stay although they match, `remove` more that go; both take `*` wildcards.

use std::ffi::{OsStr, OsString};

use serde::{Deserialize, Serialize};

/// The patterns removed whatever the configuration adds.
pub const DEFAULT_REMOVED: &[&str] = &["TERN_*", "*_KEY", "*_TOKEN", "*_SECRET", "*_PASSWORD"];

/// `[sandbox.env]`: which variables commands get.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EnvPolicy {
    /// Kept although a removal pattern matches (`TERN_HOME` and the `TERN_*` variables are
    /// never kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keep: Vec<String>,
    /// Removed besides the defaults.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Removed whatever `keep` says, like `TERN_*`: the variables tern itself reads secrets
    /// from (a chat channel's `token_env`). Not configuration: filled in by tern.
    #[serde(skip)]
    pub secrets: Vec<String>,
}

impl EnvPolicy {
    /// Whether a command gets the variable `name`.
    pub fn allows(&self, name: &OsStr) -> bool {
        // A name that is not UTF-8 is nobody's secret by convention, but it cannot be
        // matched either: it goes.
        let Some(name) = name.to_str() else {
            return false;
        };
        let upper = name.to_ascii_uppercase();
        if glob_match("TERN_*", &upper)
            || self
                .secrets
                .iter()
                .any(|p| glob_match(&p.to_ascii_uppercase(), &upper))
        {
            return false;
        }
        let removed = DEFAULT_REMOVED
            .iter()
            .copied()
            .chain(self.remove.iter().map(String::as_str))
            .any(|p| glob_match(&p.to_ascii_uppercase(), &upper));
        !removed
            || self
                .keep
                .iter()
                .any(|p| glob_match(&p.to_ascii_uppercase(), &upper))
    }
}

/// `vars` without what `policy` removes.
pub fn scrub(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
    policy: &EnvPolicy,
) -> Vec<(OsString, OsString)> {
    vars.into_iter().filter(|(k, _)| policy.allows(k)).collect()
}

/// `*` matches any run of characters (hand-written: one wildcard kind does not need a glob
/// crate).
fn glob_match(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*` at all: an exact match.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &EnvPolicy, vars: &[&str]) -> Vec<String> {
        scrub(vars.iter().map(|k| (k.into(), "v".into())), p)
            .into_iter()
            .map(|(k, _)| k.into_string().unwrap())
            .collect()
    }

    #[test]
    fn secrets_and_tern_variables_go_by_default() {
        let p = EnvPolicy::default();
        assert_eq!(
            names(
                &p,
                &[
                    "PATH",
                    "HOME",
                    "TERN_HOME",
                    "TERN_SERVER_KEY",
                    "TERN_API_KEY",
                    "OPENAI_API_KEY",
                    "GITHUB_TOKEN",
                    "AWS_SECRET",
                    "DB_PASSWORD",
                    "KEYBOARD",
                    "github_token",
                    "LANG",
                ]
            ),
            ["PATH", "HOME", "KEYBOARD", "LANG"]
        );
    }

    #[test]
    fn secrets_go_whatever_keep_says() {
        let p = EnvPolicy {
            keep: vec!["BOT_*".into()],
            remove: Vec::new(),
            secrets: vec!["BOT_TOKEN".into()],
        };
        assert!(!p.allows(OsStr::new("BOT_TOKEN")));
        assert!(p.allows(OsStr::new("BOT_NAME")));
    }

    #[test]
    fn keep_and_remove_are_configurable_but_tern_variables_always_go() {
        let p = EnvPolicy {
            keep: vec!["GITHUB_TOKEN".into(), "TERN_HOME".into()],
            remove: vec!["AWS_*".into(), "SSH_AUTH_SOCK".into()],
            secrets: Vec::new(),
        };
        assert_eq!(
            names(
                &p,
                &[
                    "GITHUB_TOKEN",
                    "TERN_HOME",
                    "AWS_REGION",
                    "SSH_AUTH_SOCK",
                    "PATH"
                ]
            ),
            ["GITHUB_TOKEN", "PATH"]
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("*_KEY", "A_KEY"));
        assert!(glob_match("*_KEY", "_KEY"));
        assert!(!glob_match("*_KEY", "A_KEYS"));
        assert!(glob_match("A*B*C", "AxxBxxC"));
        assert!(!glob_match("A*B*C", "AxxC"));
        assert!(glob_match("EXACT", "EXACT"));
        assert!(!glob_match("EXACT", "EXACTLY"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("AB*B", "AB"));
    }
}
