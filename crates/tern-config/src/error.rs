//! [`ConfigError`]: everything that can go wrong locating, reading, validating or editing the
//! configuration, with messages that name the file, the key or the variable.

use std::io;
use std::path::{Path, PathBuf};

use crate::env::{ENV_BASE_URL, ENV_MODEL};

/// Errors from locating, reading, validating or editing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither an explicit home, `$TERN_HOME` nor `$HOME` is available.
    #[error(
        "cannot find the tern home directory: set TERN_HOME (or HOME, to use $HOME/.tern) or pass an explicit path"
    )]
    NoHome,

    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being attempted, e.g. "read".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// `config.toml` is not valid TOML or does not match the schema
    /// (including unknown keys).
    #[error("invalid config file {}{}: {message}", path.display(), location_suffix(*line, *column))]
    Parse {
        path: PathBuf,
        /// 1-based line, when the parser could point at one.
        line: Option<usize>,
        /// 1-based column in characters, when the parser could point at one.
        column: Option<usize>,
        message: String,
    },

    /// A value is well-typed but unusable; the message names where it came
    /// from (a file key or an environment variable).
    #[error("{0}")]
    Invalid(String),

    /// The model endpoint or name is missing.
    #[error("{}", model_not_configured_message(*missing_base_url, *missing_name, config_path))]
    ModelNotConfigured {
        missing_base_url: bool,
        missing_name: bool,
        /// Where the user could set the missing values instead.
        config_path: PathBuf,
    },
}

fn location_suffix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn model_not_configured_message(
    missing_base_url: bool,
    missing_name: bool,
    config_path: &Path,
) -> String {
    let base_url_var =
        format!("{ENV_BASE_URL} (the OpenAI-compatible endpoint, e.g. http://localhost:11434/v1)");
    let name_var = format!("{ENV_MODEL} (the model name)");
    let (vars, keys) = match (missing_base_url, missing_name) {
        (true, true) => (
            format!("{base_url_var} and {name_var}"),
            "base_url and name",
        ),
        (true, false) => (base_url_var, "base_url"),
        // Both false cannot come from `resolved_model`; say something sensible anyway.
        (false, _) => (name_var, "name"),
    };
    format!(
        "no model is configured: set {vars}, or set [model] {keys} in {}",
        config_path.display()
    )
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_counts_chars() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("é\né", 5), (2, 2));
        // Inside a multi-byte character: points at that character.
        assert_eq!(line_column("é\né", 4), (2, 1));
        assert_eq!(line_column("ab", 99), (1, 3));
    }
}
