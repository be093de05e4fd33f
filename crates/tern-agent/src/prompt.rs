//! The default system prompt, and the project instructions that join it.
//!
//! Project instructions are `AGENTS.md` and `TERN.md` files, as codex, Hermes and Claude Code
//! read them: those in the working directory and its parents up to the repository root (the
//! directory holding `.git`), or — outside a repository — up to the user's home directory or
//! the filesystem root. They go into the system prompt farthest first, so the nearest, most
//! specific file comes last and wins where they differ; together they are capped, the nearest
//! kept first, and what is cut is said.

use std::path::{Path, PathBuf};

/// The files read in each directory, in this order.
pub const INSTRUCTION_FILES: [&str; 2] = ["AGENTS.md", "TERN.md"];

/// The most project instructions put into the system prompt, in bytes.
pub const INSTRUCTIONS_CAP: usize = 32 * 1024;

/// The system prompt used when neither the session nor the configuration sets one.
pub fn default_system_prompt(workdir: &Path) -> String {
    format!(
        "You are tern, an autonomous agent working on the user's machine through tools.\n\
         Working directory: {}\n\
         Use the tools to inspect and change things rather than guessing; read a file before \
         you patch it. Prefer small, reversible steps. Some commands need a human's approval and \
         may be denied: then take another approach or ask. When the task is done, answer in \
         plain text with what you did and what you found.",
        workdir.display()
    )
}

/// The instruction files that apply to `workdir`, farthest first. `home` ends the walk
/// outside a repository (it is read too).
pub fn instruction_files(workdir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut dir = Some(workdir);
    while let Some(d) = dir {
        dirs.push(d);
        if d.join(".git").exists() || home == Some(d) {
            break;
        }
        dir = d.parent();
    }
    dirs.iter()
        .rev()
        .flat_map(|d| INSTRUCTION_FILES.iter().map(|f| d.join(f)))
        .filter(|p| p.is_file())
        .collect()
}

/// The project instructions section of the system prompt for `workdir`, or `None` when no
/// file applies. Reads the files (blocking: call it off the async threads).
pub fn project_instructions(workdir: &Path, home: Option<&Path>) -> Option<String> {
    let files: Vec<(PathBuf, String)> = instruction_files(workdir, home)
        .into_iter()
        .filter_map(|p| match std::fs::read(&p) {
            Ok(b) => Some((p, String::from_utf8_lossy(&b).into_owned())),
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "cannot read project instructions");
                None
            }
        })
        .filter(|(_, text)| !text.trim().is_empty())
        .collect();
    if files.is_empty() {
        return None;
    }
    // The budget goes to the nearest files first: they are the most specific.
    let mut budget = INSTRUCTIONS_CAP;
    let mut kept: Vec<(PathBuf, String)> = Vec::new();
    for (path, text) in files.into_iter().rev() {
        if budget == 0 {
            kept.push((
                path,
                format!(
                    "[left out: project instructions are capped at {INSTRUCTIONS_CAP} bytes in all]"
                ),
            ));
            continue;
        }
        if text.len() <= budget {
            budget -= text.len();
            kept.push((path, text));
        } else {
            let mut cut = budget;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let note = format!(
                "\n[cut: {} of {} bytes left out; project instructions are capped at \
                 {INSTRUCTIONS_CAP} bytes in all]",
                text.len() - cut,
                text.len()
            );
            kept.push((path, format!("{}{note}", &text[..cut])));
            budget = 0;
        }
    }
    let mut out = String::from(
        "# Project instructions\n\
         The user's instructions for this project, from AGENTS.md and TERN.md files. Follow \
         them; where they differ, a later (nearer) file wins over an earlier one.",
    );
    for (path, text) in kept.into_iter().rev() {
        out.push_str(&format!("\n\n## {}\n\n{}", path.display(), text.trim_end()));
    }
    Some(out)
}

impl crate::Agent {
    /// The system prompt of a turn: the session's (or the configured, or the default) base,
    /// the project instructions where they are read (`tern chat`), the prompt lines of the
    /// enabled toolsets, and what their `SessionContext`s keep outside the transcript (the
    /// todo list, the memory), read from the store at the start of the turn: a compaction
    /// cannot lose it.
    pub(crate) async fn system_prompt(
        &self,
        req: &crate::TurnRequest,
        session_prompt: Option<String>,
    ) -> String {
        let mut system = session_prompt
            .or_else(|| self.settings().system_prompt.clone())
            .unwrap_or_else(|| default_system_prompt(&req.workdir));
        if let Some(home) = &self.project_instructions {
            let (workdir, home) = (req.workdir.clone(), home.clone());
            let found = tokio::task::spawn_blocking(move || {
                project_instructions(&workdir, home.as_deref())
            })
            .await
            .unwrap_or_default();
            if let Some(text) = found {
                system.push_str("\n\n");
                system.push_str(&text);
            }
        }
        // Whatever the base prompt, an enabled toolset's own line comes with its tools (the
        // inbox's: after asking, end the turn); a disabled toolset's does not.
        for line in self.registry().prompt_lines(&req.toolsets) {
            system.push_str("\n\n");
            system.push_str(line);
        }
        for context in self.registry().contexts(&req.toolsets) {
            if let Some(section) = context.prompt(&req.session_id).await {
                system.push_str("\n\n");
                system.push_str(&section);
            }
        }
        system
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_file_last_and_the_walk_stops_at_the_repository_root() {
        let d = tempfile::tempdir().unwrap();
        let above = d.path();
        let repo = above.join("repo");
        let sub = repo.join("crates/sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir(repo.join(".git")).unwrap();
        std::fs::write(above.join("AGENTS.md"), "OUTSIDE THE REPO").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "repo-wide rule").unwrap();
        std::fs::write(repo.join("TERN.md"), "tern rule").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "sub rule").unwrap();
        let p = project_instructions(&sub, None).unwrap();
        assert!(!p.contains("OUTSIDE THE REPO"), "{p}");
        let at = |s: &str| p.find(s).unwrap_or_else(|| panic!("{s} missing:\n{p}"));
        assert!(at("repo-wide rule") < at("tern rule"), "{p}");
        assert!(at("tern rule") < at("sub rule"), "nearest last:\n{p}");
        assert!(p.contains(&sub.join("AGENTS.md").display().to_string()));
    }

    #[test]
    fn outside_a_repository_the_walk_stops_at_home() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("home");
        let work = home.join("projects/x");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(d.path().join("AGENTS.md"), "ABOVE HOME").unwrap();
        std::fs::write(home.join("AGENTS.md"), "home rule").unwrap();
        std::fs::write(work.join("TERN.md"), "work rule").unwrap();
        let p = project_instructions(&work, Some(&home)).unwrap();
        assert!(p.contains("home rule") && p.contains("work rule"), "{p}");
        assert!(!p.contains("ABOVE HOME"), "{p}");
        let empty = d.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        std::fs::create_dir(empty.join(".git")).unwrap();
        assert_eq!(project_instructions(&empty, Some(&home)), None);
    }

    #[test]
    fn the_cap_keeps_the_nearest_and_says_what_was_cut() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path();
        let sub = repo.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir(repo.join(".git")).unwrap();
        std::fs::write(repo.join("AGENTS.md"), "far ".repeat(5000)).unwrap();
        std::fs::write(sub.join("AGENTS.md"), "near ".repeat(5000)).unwrap();
        std::fs::write(sub.join("TERN.md"), "é".repeat(10_000)).unwrap();
        let p = project_instructions(&sub, None).unwrap();
        // Whole: the nearest file; cut: the one before it; the farthest only named.
        assert_eq!(p.matches("é").count(), 10_000, "the nearest is whole");
        assert!(p.contains(&"near ".repeat(2000)), "the next is partly kept");
        assert!(p.contains("[cut: "), "{}", &p[..300]);
        assert!(!p.contains("far far"), "the farthest is left out");
        assert!(p.contains("[left out: project instructions are capped"));
        assert!(p.len() < INSTRUCTIONS_CAP + 2048, "{}", p.len());
    }
}
