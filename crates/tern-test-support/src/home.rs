//! A temporary `$TERN_HOME`: a directory with `home/` (the home) and `work/` (a working
//! directory), removed with the value.

use std::path::{Path, PathBuf};

/// A temporary directory with `home/` (`$TERN_HOME`) and `work/` (the working directory of
/// what runs in it).
pub struct TempHome {
    pub dir: tempfile::TempDir,
}

impl TempHome {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        TempHome { dir }
    }

    /// The temporary directory holding `home/` and `work/`.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `$TERN_HOME`.
    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The working directory.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Writes `$TERN_HOME/config.toml`.
    pub fn config(&self, text: &str) {
        std::fs::write(self.home().join("config.toml"), text).unwrap();
    }
}

impl Default for TempHome {
    fn default() -> Self {
        Self::new()
    }
}
