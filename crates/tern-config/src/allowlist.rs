//! [`add_to_allowlist`]: the one edit tern makes to `config.toml`, keeping the user's
//! formatting and comments.

use std::fs;
use std::io;
use std::path::Path;

use crate::error::{ConfigError, line_column};
use crate::home::Home;

/// Appends an exact command to `[approvals] allowlist` in `config.toml`,
/// keeping the file's existing formatting and comments and creating the
/// file, table or array as needed. Does nothing if the command is already
/// there. The file is replaced atomically with mode 0600, since it may hold an
/// API key.
pub fn add_to_allowlist(home: &Home, command: &str) -> Result<(), ConfigError> {
    if command.trim().is_empty() {
        return Err(ConfigError::Invalid(
            "cannot add an empty command to the approvals allowlist".to_owned(),
        ));
    }
    home.ensure()?;
    let path = home.config_path();
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(ConfigError::Io {
                action: "read",
                path,
                source,
            });
        }
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = e.span().map(|s| line_column(&text, s.start)).unzip();
        ConfigError::Parse {
            path: path.clone(),
            line,
            column,
            message: e.message().trim().to_owned(),
        }
    })?;

    let approvals = doc
        .entry("approvals")
        .or_insert(toml_edit::table())
        .as_table_like_mut()
        .ok_or_else(|| ConfigError::Parse {
            path: path.clone(),
            line: None,
            column: None,
            message: "`approvals` must be a table".to_owned(),
        })?;
    let allowlist = approvals
        .entry("allowlist")
        .or_insert(toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| ConfigError::Parse {
            path: path.clone(),
            line: None,
            column: None,
            message: "`approvals.allowlist` must be an array of strings".to_owned(),
        })?;
    if allowlist.iter().any(|v| v.as_str() == Some(command)) {
        tracing::debug!(command, "command already in the approvals allowlist");
        return Ok(());
    }
    // Copy the previous element's indentation so one-per-line arrays stay
    // one-per-line, but not any comment in that prefix: toml_edit attaches a
    // comment after `"a",` to the next element's prefix.
    let prefix = allowlist
        .iter()
        .last()
        .and_then(|v| v.decor().prefix())
        .and_then(|p| p.as_str())
        .map(|p| match p.rfind('\n') {
            Some(i) => p[i..].to_owned(),
            None => p.to_owned(),
        });
    let mut value = toml_edit::Value::from(command);
    if let Some(prefix) = prefix {
        value.decor_mut().set_prefix(prefix);
    }
    allowlist.push_formatted(value);

    write_atomic(&path, doc.to_string().as_bytes())?;
    tracing::info!(command, path = %path.display(), "added command to the approvals allowlist");
    Ok(())
}

/// Replaces `path` with `contents` atomically, mode 0600 ([`tern_util::fs::write_private`]),
/// so a crash never leaves a truncated config behind.
fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ConfigError> {
    // Write through a symlinked config (e.g. one kept in a dotfiles repo)
    // instead of replacing the link with a regular file.
    let target = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    };
    tern_util::fs::write_private(&target, contents).map_err(|source| ConfigError::Io {
        action: "write",
        path: target,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{Config, load};

    #[test]
    fn allowlist_creates_file_when_absent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("fresh"),
        };
        add_to_allowlist(&home, "cargo test").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        let config: Config = toml::from_str(&text).unwrap();
        assert_eq!(config.approvals.allowlist, vec!["cargo test"]);
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec!["cargo test"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(home.config_path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn allowlist_preserves_comments_and_formatting() {
        let (_d, home) = temp_home();
        let original = "\
# tern configuration
[model]
name = \"llama3\"   # the local one

# commands I trust
[approvals]
allowlist = [
    \"ls\",   # listing
    \"pwd\",
]
";
        write_config(&home, original);
        add_to_allowlist(&home, "git status").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert_eq!(
            text,
            "\
# tern configuration
[model]
name = \"llama3\"   # the local one

# commands I trust
[approvals]
allowlist = [
    \"ls\",   # listing
    \"pwd\",
    \"git status\",
]
"
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(
            eff.config.approvals.allowlist,
            vec!["ls", "pwd", "git status"]
        );
    }

    #[test]
    fn allowlist_adds_table_to_existing_file() {
        let (_d, home) = temp_home();
        write_config(&home, "# keep me\n[model]\nname = \"m\" # and me\n");
        add_to_allowlist(&home, "make").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert!(
            text.starts_with("# keep me\n[model]\nname = \"m\" # and me\n"),
            "{text}"
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec!["make"]);
        assert_eq!(eff.config.model.name.as_deref(), Some("m"));
    }

    #[test]
    fn allowlist_adds_array_to_existing_table() {
        let (_d, home) = temp_home();
        write_config(&home, "[approvals] # trusted\n");
        add_to_allowlist(&home, "ls -la").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert!(text.starts_with("[approvals] # trusted\n"), "{text}");
        assert_eq!(
            load(&home, &no_env).unwrap().config.approvals.allowlist,
            vec!["ls -la"]
        );
    }

    #[test]
    fn allowlist_dedups() {
        let (_d, home) = temp_home();
        add_to_allowlist(&home, "ls").unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        add_to_allowlist(&home, "ls ").unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        let eff = load(&home, &no_env).unwrap();
        // Exact matching: "ls " is a different command from "ls".
        assert_eq!(eff.config.approvals.allowlist, vec!["ls", "ls "]);
    }

    #[test]
    fn allowlist_quotes_awkward_commands() {
        let (_d, home) = temp_home();
        let cmd = r#"echo "hi" 'there' \ done"#;
        add_to_allowlist(&home, cmd).unwrap();
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec![cmd]);
    }

    #[test]
    fn allowlist_rejects_empty_command() {
        let (_d, home) = temp_home();
        assert!(add_to_allowlist(&home, "  ").is_err());
        assert!(!home.config_path().exists());
    }

    #[test]
    fn allowlist_reports_wrong_types_and_bad_toml() {
        let (_d, home) = temp_home();
        write_config(&home, "approvals = 3\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(
            msg.contains("approvals") && msg.contains("config.toml"),
            "{msg}"
        );

        write_config(&home, "[approvals]\nallowlist = \"ls\"\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(msg.contains("allowlist"), "{msg}");

        write_config(&home, "[approvals\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(msg.contains("line 1"), "{msg}");
        // The broken file is left untouched.
        assert_eq!(
            fs::read_to_string(home.config_path()).unwrap(),
            "[approvals\n"
        );
    }

    #[test]
    fn allowlist_leaves_no_temp_files() {
        let (_d, home) = temp_home();
        add_to_allowlist(&home, "a").unwrap();
        add_to_allowlist(&home, "b").unwrap();
        let names: Vec<String> = fs::read_dir(&home.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["config.toml"]);
    }

    #[cfg(unix)]
    #[test]
    fn allowlist_writes_through_symlink() {
        let (dir, home) = temp_home();
        let real = dir.path().join("dotfiles-config.toml");
        fs::write(&real, "# linked\n[model]\nname = \"m\"\n").unwrap();
        std::os::unix::fs::symlink(&real, home.config_path()).unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        assert!(
            fs::symlink_metadata(home.config_path())
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let text = fs::read_to_string(&real).unwrap();
        assert!(text.starts_with("# linked\n"), "{text}");
        assert!(text.contains("\"ls\""), "{text}");
    }
}
