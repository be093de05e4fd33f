//! `tern memory show|edit`: the `memory` tool's stores, as the user sees and edits them.
//!
//! These are the stores of `tern chat` (`$TERN_HOME/memory/USER.md` and `MEMORY.md`; a
//! gateway key's are under `memory/keys/<key id>/`). `edit` opens `$VISUAL` (else `$EDITOR`)
//! on a private copy beside the store, not on the store itself: the agent may write to the
//! store meanwhile, and holding its lock for as long as an editor is open would stall the
//! agent. When the editor is done, the copy replaces the store — atomically, under the lock —
//! unless the store changed in the meantime; then the copy is kept, named, for the user to
//! merge, so neither side's change is lost. Last, the size is checked against `[memory]`'s
//! limit and reported.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use tern_session_tools::memory::{Memory, usage};
use tern_session_tools::memory_files::{MemoryFiles, Target, chars, parse};
use tern_util::fs::{Mode, write_atomic};

use crate::context;

#[derive(Args, Debug)]
pub struct MemoryArgs {
    #[command(subcommand)]
    pub command: MemoryCommand,
}

#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// Print the memory stores: USER.md (about you) and MEMORY.md (the agent's notes)
    Show {
        /// Only USER.md
        #[arg(long, conflicts_with = "memory")]
        user: bool,
        /// Only MEMORY.md
        #[arg(long)]
        memory: bool,
    },
    /// Edit a store in $VISUAL or $EDITOR (entries are separated by a line holding only §)
    Edit {
        /// Which store
        #[arg(value_enum, default_value = "memory")]
        store: Store,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Store {
    /// USER.md: about you
    User,
    /// MEMORY.md: the agent's notes on the environment and lessons
    Memory,
}

impl From<Store> for Target {
    fn from(s: Store) -> Self {
        match s {
            Store::User => Target::User,
            Store::Memory => Target::Memory,
        }
    }
}

pub async fn run(home: Option<PathBuf>, args: MemoryArgs) -> anyhow::Result<ExitCode> {
    let (home, eff) = context::load_config(home)?;
    let files = Memory::local(&home.root, &eff.config.memory);
    match args.command {
        MemoryCommand::Show { user, memory } => {
            let targets: &[Target] = match (user, memory) {
                (true, _) => &[Target::User],
                (_, true) => &[Target::Memory],
                _ => &Target::ALL,
            };
            show(&files, targets)
        }
        MemoryCommand::Edit { store } => {
            home.ensure()?;
            let target = Target::from(store);
            tokio::task::spawn_blocking(move || edit(&files, target)).await?
        }
    }
}

fn show(files: &MemoryFiles, targets: &[Target]) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for (i, &target) in targets.iter().enumerate() {
        let entries = files.read(target)?;
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "# {} ({}): {}, {} ({})",
            target.file_name(),
            target.about(),
            count(entries.len()),
            usage(chars(&entries), files.limit(target)),
            files.path(target).display()
        )?;
        if entries.is_empty() {
            writeln!(out, "(empty)")?;
        } else {
            writeln!(out, "{}", entries.join("\n§\n"))?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `1 entry`, `2 entries`.
fn count(n: usize) -> String {
    if n == 1 {
        "1 entry".to_owned()
    } else {
        format!("{n} entries")
    }
}

/// The editor the user chose: `$VISUAL`, else `$EDITOR`.
fn editor() -> anyhow::Result<String> {
    ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|k| context::env_var(k))
        .find(|v| !v.trim().is_empty())
        .context("no editor: set $VISUAL or $EDITOR (e.g. EDITOR=nano)")
}

fn edit(files: &MemoryFiles, target: Target) -> anyhow::Result<ExitCode> {
    let editor = editor()?;
    files.ensure_dir()?;
    let path = files.path(target);
    let name = target.file_name();
    let original = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    // The copy keeps the store's name at the end, so editors pick Markdown for it.
    let copy = files
        .dir()
        .join(format!(".edit-{}-{name}", std::process::id()));
    write_atomic(&copy, &original, Mode::Exact(0o600))
        .with_context(|| format!("writing {}", copy.display()))?;

    let status = run_editor(&editor, &copy);
    let edited = match status {
        Ok(()) => std::fs::read(&copy).with_context(|| format!("reading {}", copy.display())),
        Err(e) => Err(e),
    };
    let edited = match edited {
        Ok(b) => b,
        Err(e) => {
            let _ = std::fs::remove_file(&copy);
            return Err(e.context(format!("{name} unchanged")));
        }
    };
    if edited == original {
        let _ = std::fs::remove_file(&copy);
        println!("{name} unchanged");
        return Ok(ExitCode::SUCCESS);
    }

    {
        let _lock = files.lock(target)?;
        let now = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if now != original {
            bail!(
                "{name} changed while you edited it (the agent wrote to it); it was left as the \
                 agent wrote it, and your version is kept in {}: merge the two with `tern memory \
                 edit`, then remove the copy",
                copy.display()
            );
        }
        write_atomic(&path, &edited, Mode::Exact(0o600))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let _ = std::fs::remove_file(&copy);

    let entries = parse(&String::from_utf8_lossy(&edited));
    let used = chars(&entries);
    let limit = files.limit(target);
    println!(
        "saved {name}: {}, {}",
        count(entries.len()),
        usage(used, limit)
    );
    if used > limit {
        let key = match target {
            Target::User => "user_char_limit",
            Target::Memory => "memory_char_limit",
        };
        eprintln!(
            "warning: {name} holds {used} characters, over its limit of {limit} ([memory] \
             {key}): the agent can add nothing to it until it is shortened"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the editor on `file` through the shell, as git does, so that `$EDITOR` may carry
/// arguments (`code --wait`).
fn run_editor(editor: &str, file: &Path) -> anyhow::Result<()> {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$@\""))
        .arg(editor)
        .arg(file)
        .status()
        .with_context(|| format!("starting the editor {editor:?}"))?;
    if !status.success() {
        bail!("the editor {editor:?} failed ({status})");
    }
    Ok(())
}
