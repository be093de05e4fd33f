//! The memory stores on disk: `USER.md` and `MEMORY.md` in one directory, each a list of
//! entries separated, as Hermes separates them, by a line holding only `§`.
//!
//! Every change is a read-modify-write under an exclusive `flock` on a lock file beside the
//! store (`USER.md.lock`), so concurrent writers — several turns, sessions or processes —
//! never lose each other's entries; the file is replaced atomically
//! ([`tern_util::fs::write_atomic`], mode 0600), so a reader (the system prompt, `tern memory
//! show`) never sees half of it and needs no lock. The limit is on the characters of the
//! whole store (its entries joined by the separator); a change that would pass it is refused
//! with the store's entries, so the model can make room. A file edited by hand beyond the
//! limit is read as it is; only changes that would grow it further are refused.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use tern_config::MemoryConfig;
use tern_util::fs::{Mode, write_atomic};

/// What separates two entries in a store file.
pub const ENTRY_DELIMITER: &str = "\n§\n";

/// One of the two stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `USER.md`: who the user is, preferences, style.
    User,
    /// `MEMORY.md`: the agent's notes on the environment, conventions, lessons.
    Memory,
}

impl Target {
    pub const ALL: [Target; 2] = [Target::User, Target::Memory];

    pub fn file_name(self) -> &'static str {
        match self {
            Target::User => "USER.md",
            Target::Memory => "MEMORY.md",
        }
    }

    /// The name the tool's `target` argument gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Target::User => "user",
            Target::Memory => "memory",
        }
    }

    /// What the store holds, in a few words.
    pub fn about(self) -> &'static str {
        match self {
            Target::User => "about the user",
            Target::Memory => "about the environment and lessons learned",
        }
    }
}

/// Why a change was refused; the store is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{0} cannot be empty")]
    Empty(&'static str),
    #[error("no entry of {file} contains {needle:?}; give a part of one of its entries")]
    NoMatch {
        file: &'static str,
        needle: String,
        entries: Vec<String>,
    },
    #[error("{count} entries of {file} contain {needle:?}; give a longer part of the one you mean")]
    Ambiguous {
        file: &'static str,
        needle: String,
        count: usize,
        entries: Vec<String>,
    },
    #[error(
        "{file} would hold {after} characters, over its limit of {limit} (it holds {current} \
         now); remove or shorten entries first"
    )]
    OverLimit {
        file: &'static str,
        current: usize,
        after: usize,
        limit: usize,
        entries: Vec<String>,
    },
    /// An operation of a batch failed (`n` from 1); none was applied.
    #[error("operation {n}: {source}")]
    Operation { n: usize, source: Box<MemoryError> },
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl MemoryError {
    /// The same error showing `stored` as the store's entries (an ambiguous match keeps its
    /// matches; a limit error already shows the store).
    fn with_entries(mut self, stored: Vec<String>) -> Self {
        if let MemoryError::NoMatch { entries, .. } = &mut self {
            *entries = stored;
        }
        self
    }

    /// The store's entries when they help the caller choose what to change.
    pub fn entries(&self) -> Option<&[String]> {
        match self {
            MemoryError::NoMatch { entries, .. }
            | MemoryError::Ambiguous { entries, .. }
            | MemoryError::OverLimit { entries, .. } => Some(entries),
            MemoryError::Operation { source, .. } => source.entries(),
            _ => None,
        }
    }
}

/// What a successful change left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// What was done (`entry added`, `entry already present`, …).
    pub message: &'static str,
    pub entries: usize,
    /// Characters used and allowed.
    pub chars: usize,
    pub limit: usize,
}

/// The two stores of one directory, with their limits.
#[derive(Debug, Clone)]
pub struct MemoryFiles {
    dir: PathBuf,
    user_limit: usize,
    memory_limit: usize,
}

impl MemoryFiles {
    pub fn new(dir: impl Into<PathBuf>, config: &MemoryConfig) -> Self {
        Self {
            dir: dir.into(),
            user_limit: config.user_char_limit,
            memory_limit: config.memory_char_limit,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self, target: Target) -> PathBuf {
        self.dir.join(target.file_name())
    }

    pub fn limit(&self, target: Target) -> usize {
        match target {
            Target::User => self.user_limit,
            Target::Memory => self.memory_limit,
        }
    }

    /// The store's entries; none when its file does not exist.
    pub fn read(&self, target: Target) -> Result<Vec<String>, MemoryError> {
        let path = self.path(target);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(parse(&text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(MemoryError::Io {
                what: "read",
                path,
                source,
            }),
        }
    }

    /// Appends `content` as a new entry (an entry already there is not added twice).
    pub fn add(&self, target: Target, content: &str) -> Result<Written, MemoryError> {
        self.apply(target, &[Op::Add(content.to_owned())])
    }

    /// Replaces the one entry containing `old_text` with `content`.
    pub fn replace(
        &self,
        target: Target,
        old_text: &str,
        content: &str,
    ) -> Result<Written, MemoryError> {
        self.apply(
            target,
            &[Op::Replace {
                old_text: old_text.to_owned(),
                content: content.to_owned(),
            }],
        )
    }

    /// Removes the one entry containing `old_text`.
    pub fn remove(&self, target: Target, old_text: &str) -> Result<Written, MemoryError> {
        self.apply(
            target,
            &[Op::Remove {
                old_text: old_text.to_owned(),
            }],
        )
    }

    /// Applies `ops` in order, all or nothing; the limit is checked on the result only, so
    /// one batch can make room and add.
    pub fn apply(&self, target: Target, ops: &[Op]) -> Result<Written, MemoryError> {
        let batch = ops.len() > 1;
        let in_op = |n: usize, e: MemoryError| {
            if batch {
                MemoryError::Operation {
                    n: n + 1,
                    source: Box::new(e),
                }
            } else {
                e
            }
        };
        self.change(target, |entries| {
            let stored = entries.clone();
            let mut message = "nothing changed";
            for (n, op) in ops.iter().enumerate() {
                // The error shows the store as it is, not as the batch left it halfway.
                message = apply_one(target, entries, op)
                    .map_err(|e| in_op(n, e.with_entries(stored.clone())))?;
            }
            Ok(Some(if batch { "operations applied" } else { message }))
        })
    }

    /// Creates the directory (0700) if needed.
    pub fn ensure_dir(&self) -> Result<(), MemoryError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|source| MemoryError::Io {
                what: "create",
                path: self.dir.clone(),
                source,
            })
    }

    /// Takes the store's lock (blocking until other writers are done); released when the
    /// returned value is dropped.
    pub fn lock(&self, target: Target) -> Result<Flock<File>, MemoryError> {
        self.ensure_dir()?;
        let path = self.dir.join(format!("{}.lock", target.file_name()));
        let io_err = |source| MemoryError::Io {
            what: "lock",
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_err)?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| io_err(errno.into()))
    }

    /// Replaces the store's file with `entries`, under the caller's lock.
    pub fn write_locked(&self, target: Target, entries: &[String]) -> Result<(), MemoryError> {
        let path = self.path(target);
        write_atomic(
            &path,
            entries.join(ENTRY_DELIMITER).as_bytes(),
            Mode::Exact(0o600),
        )
        .map_err(|source| MemoryError::Io {
            what: "write",
            path,
            source,
        })
    }

    /// Read, change and write back one store under its lock. `f` returns what it did, or
    /// `None` to write nothing.
    fn change(
        &self,
        target: Target,
        f: impl FnOnce(&mut Vec<String>) -> Result<Option<&'static str>, MemoryError>,
    ) -> Result<Written, MemoryError> {
        let _lock = self.lock(target)?;
        let before = self.read(target)?;
        let mut entries = before.clone();
        let message = f(&mut entries)?.unwrap_or("nothing changed");
        let limit = self.limit(target);
        let current = chars(&before);
        let after = chars(&entries);
        // A store already over its limit (edited by hand) may still shrink.
        if after > limit && after > current {
            return Err(MemoryError::OverLimit {
                file: target.file_name(),
                current,
                after,
                limit,
                entries: before,
            });
        }
        if entries != before {
            self.write_locked(target, &entries)?;
        }
        Ok(Written {
            message,
            entries: entries.len(),
            chars: after,
            limit,
        })
    }
}

/// One change to a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Append an entry (not if the same entry is there already).
    Add(String),
    /// Replace the one entry containing `old_text`.
    Replace { old_text: String, content: String },
    /// Remove the one entry containing `old_text`.
    Remove { old_text: String },
}

fn apply_one(
    target: Target,
    entries: &mut Vec<String>,
    op: &Op,
) -> Result<&'static str, MemoryError> {
    match op {
        Op::Add(content) => {
            let content = non_empty(content, "content")?;
            if entries.iter().any(|e| e == content) {
                return Ok("entry already present; nothing added");
            }
            entries.push(content.to_owned());
            Ok("entry added")
        }
        Op::Replace { old_text, content } => {
            let old_text = non_empty(old_text, "old_text")?;
            let content = non_empty(content, "content")?;
            let i = find_one(target, entries, old_text)?;
            entries[i] = content.to_owned();
            Ok("entry replaced")
        }
        Op::Remove { old_text } => {
            let old_text = non_empty(old_text, "old_text")?;
            let i = find_one(target, entries, old_text)?;
            entries.remove(i);
            Ok("entry removed")
        }
    }
}

/// The entries of a store file's text: split at the separator, trimmed, empty ones dropped.
pub fn parse(text: &str) -> Vec<String> {
    text.split(ENTRY_DELIMITER)
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The characters a store's entries take, as its limit counts them.
pub fn chars(entries: &[String]) -> usize {
    if entries.is_empty() {
        return 0;
    }
    entries.iter().map(|e| e.chars().count()).sum::<usize>()
        + (entries.len() - 1) * ENTRY_DELIMITER.chars().count()
}

fn non_empty<'a>(s: &'a str, what: &'static str) -> Result<&'a str, MemoryError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(MemoryError::Empty(what));
    }
    Ok(s)
}

/// The index of the one entry containing `needle`; identical duplicates count as one.
fn find_one(target: Target, entries: &[String], needle: &str) -> Result<usize, MemoryError> {
    let hits: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].contains(needle))
        .collect();
    let distinct = {
        let mut texts: Vec<&String> = hits.iter().map(|&i| &entries[i]).collect();
        texts.sort();
        texts.dedup();
        texts.len()
    };
    match (hits.first(), distinct) {
        (None, _) => Err(MemoryError::NoMatch {
            file: target.file_name(),
            needle: needle.to_owned(),
            entries: entries.to_vec(),
        }),
        (Some(&i), 1) => Ok(i),
        (Some(_), count) => Err(MemoryError::Ambiguous {
            file: target.file_name(),
            needle: needle.to_owned(),
            count,
            entries: hits.iter().map(|&i| entries[i].clone()).collect(),
        }),
    }
}
