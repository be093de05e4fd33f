//! `[sandbox]`: what the agent's commands and file tools may do (see `docs/security.md`).
//!
//! ```toml
//! [sandbox]
//! mode = "workspace-write"        # or "read-only", or "full-access" (no sandbox at all)
//! network = false                 # default false; "full-access" always has the network
//! writable_roots = ["~/.cache/pip"]   # writable besides the session's workspace
//! protected_paths = ["~/.ssh"]    # never readable nor writable (besides $TERN_HOME)
//!
//! [sandbox.env]
//! keep = ["GITHUB_TOKEN"]         # kept although it looks like a secret
//! remove = ["AWS_*"]              # removed besides TERN_*, *_KEY, *_TOKEN, *_SECRET, *_PASSWORD
//! ```
//!
//! Paths may start with `~/`. Checked when the file is loaded; [`SandboxConfig::policy`]
//! turns the section into the policy `tern-sandbox` enforces, with `$TERN_HOME` always
//! protected.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tern_sandbox::{EnvPolicy, Mode, Policy};

use crate::{ConfigError, Home};

/// `[sandbox]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: Mode,
    /// Unset: off, except in `full-access`.
    pub network: Option<bool>,
    pub writable_roots: Vec<String>,
    pub protected_paths: Vec<String>,
    #[serde(serialize_with = "env_in_full")]
    pub env: EnvPolicy,
}

/// `[sandbox.env]` with every key, empty lists included, which `EnvPolicy`'s own `Serialize`
/// leaves out: `tern config show` lists every key (see [`crate::tree`]).
fn env_in_full<S: serde::Serializer>(env: &EnvPolicy, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Full<'a> {
        keep: &'a [String],
        remove: &'a [String],
    }
    // No `..`: a key added to `EnvPolicy` stops this compiling until it is listed here.
    // `secrets` is tern's, not configuration.
    let EnvPolicy {
        keep,
        remove,
        secrets: _,
    } = env;
    Full { keep, remove }.serialize(s)
}

impl SandboxConfig {
    /// Whether commands get the network.
    pub fn network(&self) -> bool {
        self.mode == Mode::FullAccess || self.network.unwrap_or(false)
    }

    /// The policy to enforce: this section, `~` expanded against `user_home`, and the tern
    /// home protected whatever the file says.
    pub fn policy(&self, home: &Home, user_home: Option<&Path>) -> Policy {
        let expand = |p: &String| expand_tilde(p, user_home);
        let mut protected: Vec<PathBuf> = vec![home.root.clone()];
        protected.extend(self.protected_paths.iter().map(expand));
        Policy {
            mode: self.mode,
            network: self.network(),
            writable_roots: self.writable_roots.iter().map(expand).collect(),
            protected_paths: protected,
            env: self.env.clone(),
        }
    }
}

fn expand_tilde(p: &str, user_home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~/"), user_home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ if p == "~" => user_home.map_or_else(|| PathBuf::from(p), Path::to_path_buf),
        _ => PathBuf::from(p),
    }
}

/// Paths must be absolute (or start with `~/`): a relative one would depend on where the
/// gateway was started.
pub(crate) fn validate_sandbox(c: &SandboxConfig, config_path: &Path) -> Result<(), ConfigError> {
    for (key, paths) in [
        ("writable_roots", &c.writable_roots),
        ("protected_paths", &c.protected_paths),
    ] {
        if let Some(bad) = paths
            .iter()
            .find(|p| !(p.starts_with('/') || p.starts_with("~/") || p.as_str() == "~"))
        {
            return Err(ConfigError::Invalid(format!(
                "sandbox.{key} in {}: {bad:?} is not an absolute path (start it with / or ~/)",
                config_path.display()
            )));
        }
    }
    if c.mode == Mode::FullAccess && c.network == Some(false) {
        return Err(ConfigError::Invalid(format!(
            "sandbox.network = false in {} has no effect with mode = \"full-access\" (there is \
             no sandbox to turn the network off); remove it or choose another mode",
            config_path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{SandboxMode, load, render_masked};

    #[test]
    fn sandbox_defaults_parse_render_and_check() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        let c = &eff.config.sandbox;
        assert_eq!(c.mode, SandboxMode::WorkspaceWrite);
        assert!(!c.network());
        let p = c.policy(&home, Some(Path::new("/home/u")));
        assert_eq!(p.protected_paths, vec![home.root.clone()]);

        write_config(
            &home,
            "[sandbox]\nmode = \"read-only\"\nnetwork = true\nwritable_roots = [\"~/cache\"]\n\
             protected_paths = [\"/srv/keys\"]\n\n[sandbox.env]\nkeep = [\"GITHUB_TOKEN\"]\n",
        );
        let eff = load(&home, &no_env).unwrap();
        let p = eff.config.sandbox.policy(&home, Some(Path::new("/home/u")));
        assert_eq!(p.mode, SandboxMode::ReadOnly);
        assert!(p.network);
        assert_eq!(p.writable_roots, vec![PathBuf::from("/home/u/cache")]);
        assert_eq!(
            p.protected_paths,
            vec![home.root.clone(), PathBuf::from("/srv/keys")]
        );
        assert_eq!(p.env.keep, vec!["GITHUB_TOKEN".to_owned()]);
        let shown = render_masked(&eff);
        assert!(shown.contains("mode = \"read-only\""), "{shown}");
        assert!(shown.contains("\n[sandbox.env]\nkeep = "), "{shown}");
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("keep = [\"GITHUB_TOKEN\"]")
                    && l.ends_with("from config.toml")),
            "{shown}"
        );
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("remove = []") && l.ends_with("# default")),
            "{shown}"
        );

        for (bad, says) in [
            (
                "[sandbox]\nmode = \"yolo\"\n",
                "expected one of `read-only`",
            ),
            (
                "[sandbox]\nwritable_roots = [\"cache\"]\n",
                "not an absolute path",
            ),
            (
                "[sandbox]\nmode = \"full-access\"\nnetwork = false\n",
                "no effect",
            ),
            ("[sandbox.env]\nkeepp = []\n", "keepp"),
        ] {
            write_config(&home, bad);
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
