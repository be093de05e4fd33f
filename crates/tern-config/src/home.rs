//! [`Home`]: the tern home directory, `$TERN_HOME` (default `~/.tern`), and the files in it.

use std::fs;
use std::io;
use std::path::PathBuf;

use crate::env::{ENV_TERN_HOME, env_value};
use crate::error::ConfigError;

/// The name of the configuration file in the home directory.
pub(crate) const CONFIG_FILE: &str = "config.toml";

/// The tern home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    /// From an explicit path, else `$TERN_HOME`, else `$HOME/.tern`. Error if
    /// none can be found. Empty variables count as unset.
    pub fn resolve(
        explicit: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Home, ConfigError> {
        if let Some(root) = explicit.filter(|p| !p.as_os_str().is_empty()) {
            return Ok(Home { root });
        }
        if let Some(root) = env_value(env, ENV_TERN_HOME) {
            return Ok(Home {
                root: PathBuf::from(root),
            });
        }
        if let Some(home) = env_value(env, "HOME") {
            return Ok(Home {
                root: PathBuf::from(home).join(".tern"),
            });
        }
        Err(ConfigError::NoHome)
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    pub fn db_path(&self) -> PathBuf {
        self.root.join("tern.db")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn history_path(&self) -> PathBuf {
        self.root.join("history")
    }

    /// Creates the directory (mode 0700 on unix) if missing.
    ///
    /// The mode is restrictive because the directory holds the API key,
    /// conversation history and tool output. An existing directory's mode is
    /// left alone: the user may have chosen it deliberately.
    pub fn ensure(&self) -> Result<(), ConfigError> {
        match fs::metadata(&self.root) {
            Ok(meta) if meta.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(ConfigError::Io {
                    action: "use as the tern home directory",
                    path: self.root.clone(),
                    source: io::Error::new(io::ErrorKind::AlreadyExists, "not a directory"),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfigError::Io {
                    action: "access",
                    path: self.root.clone(),
                    source,
                });
            }
        }
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(&self.root)
            .map_err(|source| ConfigError::Io {
                action: "create directory",
                path: self.root.clone(),
                source,
            })?;
        tracing::debug!(path = %self.root.display(), "created tern home directory");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use std::fs;

    #[test]
    fn home_explicit_beats_env() {
        let env = env_of(&[("TERN_HOME", "/from/env"), ("HOME", "/users/me")]);
        let home = Home::resolve(Some(PathBuf::from("/explicit")), &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/explicit"));
    }

    #[test]
    fn home_tern_home_beats_home() {
        let env = env_of(&[("TERN_HOME", "/from/env"), ("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/from/env"));
    }

    #[test]
    fn home_falls_back_to_dot_tern() {
        let env = env_of(&[("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/users/me/.tern"));

        let env = env_of(&[("TERN_HOME", ""), ("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/users/me/.tern"));
    }

    #[test]
    fn home_error_when_nothing_set() {
        let err = Home::resolve(None, &no_env).unwrap_err();
        assert!(matches!(err, ConfigError::NoHome));
        assert!(err.to_string().contains("TERN_HOME"));
        let err = Home::resolve(None, &env_of(&[("HOME", "")])).unwrap_err();
        assert!(matches!(err, ConfigError::NoHome));
    }

    #[test]
    fn home_paths() {
        let home = Home {
            root: PathBuf::from("/h"),
        };
        assert_eq!(home.config_path(), PathBuf::from("/h/config.toml"));
        assert_eq!(home.db_path(), PathBuf::from("/h/tern.db"));
        assert_eq!(home.logs_dir(), PathBuf::from("/h/logs"));
        assert_eq!(home.history_path(), PathBuf::from("/h/history"));
    }

    #[test]
    fn ensure_creates_private_dir_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("a/b/.tern"),
        };
        home.ensure().unwrap();
        assert!(home.root.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&home.root).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        home.ensure().unwrap();
    }

    #[test]
    fn ensure_rejects_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("file");
        fs::write(&root, "x").unwrap();
        let err = Home { root: root.clone() }.ensure().unwrap_err();
        assert!(err.to_string().contains(&root.display().to_string()));
    }
}
