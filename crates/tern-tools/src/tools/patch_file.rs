//! `patch_file`: exact-text replacement in an existing file, with hints when the text is
//! not found (line-number prefixes copied from `read_file`, whitespace that differs) and a
//! small diff of the change.

use std::fs;
use std::io;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::file_access::{
    atomic_write, binary_error, check_cancel, decode_text, io_error, run_blocking,
};
use crate::{Tool, ToolContext, ToolError, ToolResult};

/// Lines of each side shown in a `patch_file` diff before it is cut.
const DIFF_MAX_LINES: usize = 40;
/// Match lines listed in the "occurs N times" error before it is cut.
const MAX_LISTED_MATCHES: usize = 20;

pub struct PatchFile;

/// The arguments of `patch_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchFileArgs {
    /// File to edit, relative to the working directory or absolute.
    #[schemars(length(min = 1))]
    pub path: String,
    /// Exact text to replace.
    #[schemars(length(min = 1))]
    pub old_string: String,
    /// Replacement text; must differ from old_string.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

impl Tool for PatchFile {
    const NAME: &'static str = "patch_file";
    const TOOLSET: &'static str = super::FILE_TOOLSET;
    const DESCRIPTION: &'static str = "Edit an existing file by replacing exact text. \
        `old_string` must match the file exactly, including indentation, blank lines and line \
        breaks (copy it from read_file output without the line-number prefix and tab), and \
        must occur exactly once unless `replace_all` is true; include a few \
        surrounding lines to make it unique. `new_string` replaces it (an empty \
        string deletes it). Read the file first. Returns the number of replacements, \
        the first changed line and a diff of the first change.";
    type Args = PatchFileArgs;

    async fn run(&self, args: PatchFileArgs, ctx: ToolContext) -> ToolResult {
        patch_file(args, ctx).await
    }
}

async fn patch_file(args: PatchFileArgs, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let PatchFileArgs {
        path: shown,
        old_string,
        new_string,
        replace_all,
    } = args;
    let (old, new) = (old_string.as_str(), new_string.as_str());
    if old.is_empty() {
        return Err(ToolError::new(
            "old_string is empty; give the exact text to replace (use write_file to create a file)",
        ));
    }
    if old == new {
        return Err(ToolError::new(
            "old_string and new_string are identical; nothing would change",
        ));
    }
    let path = ctx.resolve(&shown);

    let read_path = path.clone();
    let bytes = run_blocking(&ctx, move || fs::read(&read_path))
        .await?
        .map_err(|e| {
            let err = io_error("read", &shown, &ctx, &e);
            if e.kind() == io::ErrorKind::NotFound {
                ToolError::new(format!("{}; use write_file to create a new file", err.0))
            } else {
                err
            }
        })?;
    let content = decode_text(bytes).ok_or_else(|| binary_error(&shown))?;

    let (old, new) = match pick_needle(&content, old, new) {
        Some(pair) => pair,
        None => {
            let mut msg = format!(
                "old_string not found in {shown}; read the file again and copy the exact text, \
                 including whitespace"
            );
            if let Some(hint) = not_found_hint(&content, old) {
                msg.push_str(". ");
                msg.push_str(&hint);
            }
            return Err(ToolError::new(msg));
        }
    };

    let starts: Vec<usize> = content
        .match_indices(old.as_str())
        .map(|(i, _)| i)
        .collect();
    let count = starts.len();
    if count > 1 && !replace_all {
        let lines = line_numbers(&content, &starts);
        let mut listed: Vec<String> = lines
            .iter()
            .take(MAX_LISTED_MATCHES)
            .map(ToString::to_string)
            .collect();
        if lines.len() > MAX_LISTED_MATCHES {
            listed.push("…".into());
        }
        return Err(ToolError::new(format!(
            "old_string occurs {count} times in {shown} (lines {}); add surrounding context to \
             make it unique, or set replace_all to true to replace every occurrence",
            listed.join(", ")
        )));
    }
    // `pick_needle` found `old`, so there is at least one match.
    let first = starts[0];
    let (diff, first_changed_line) = diff_snippet(&content, first, &old, &new);
    let updated = if replace_all {
        content.replace(old.as_str(), &new)
    } else {
        content.replacen(old.as_str(), &new, 1)
    };

    check_cancel(&ctx)?;
    run_blocking(&ctx, move || atomic_write(&path, updated.as_bytes()))
        .await?
        .map_err(|e| io_error("write", &shown, &ctx, &e))?;

    let mut result = Map::new();
    result.insert("path".into(), Value::String(shown));
    result.insert("replacements".into(), json!(count));
    result.insert("first_changed_line".into(), json!(first_changed_line));
    result.insert("diff".into(), Value::String(diff));
    if count > 1 {
        result.insert(
            "note".into(),
            Value::String(format!(
                "replaced {count} occurrences; the diff shows the first (lines {})",
                line_numbers(&content, &starts)
                    .iter()
                    .take(MAX_LISTED_MATCHES)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    Ok(Value::Object(result))
}

/// The old/new pair to apply: as given, or with `\n` turned into `\r\n` when the file uses
/// CRLF line endings and only that makes `old` match. `None` if `old` does not occur.
fn pick_needle(content: &str, old: &str, new: &str) -> Option<(String, String)> {
    if content.contains(old) {
        return Some((old.to_owned(), new.to_owned()));
    }
    if old.contains('\n') && !old.contains('\r') && content.contains("\r\n") {
        let crlf_old = old.replace('\n', "\r\n");
        if content.contains(crlf_old.as_str()) {
            let crlf_new = if new.contains('\r') {
                new.to_owned()
            } else {
                new.replace('\n', "\r\n")
            };
            return Some((crlf_old, crlf_new));
        }
    }
    None
}

/// 1-based line numbers of the given byte offsets (sorted ascending).
pub(super) fn line_numbers(content: &str, starts: &[usize]) -> Vec<usize> {
    let bytes = content.as_bytes();
    let mut line = 1;
    let mut pos = 0;
    starts
        .iter()
        .map(|&s| {
            line += bytes[pos..s].iter().filter(|&&b| b == b'\n').count();
            pos = s;
            line
        })
        .collect()
}

/// Explains a miss: line-number prefixes copied from read_file, or a match that differs
/// only in whitespace.
fn not_found_hint(content: &str, old: &str) -> Option<String> {
    let non_empty: Vec<&str> = old.lines().filter(|l| !l.trim().is_empty()).collect();
    if !non_empty.is_empty() && non_empty.iter().all(|l| has_line_number_prefix(l)) {
        return Some(
            "old_string seems to include the line-number prefixes of read_file output; \
             remove them and keep only the file's text"
                .into(),
        );
    }

    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut old_lines: Vec<String> = old.lines().map(norm).collect();
    while old_lines.last().is_some_and(String::is_empty) {
        old_lines.pop();
    }
    let leading_empty = old_lines.iter().take_while(|l| l.is_empty()).count();
    old_lines.drain(..leading_empty);
    if old_lines.is_empty() {
        return None;
    }
    let file_lines: Vec<String> = content.lines().map(norm).collect();
    let k = old_lines.len();
    if file_lines.len() >= k {
        for i in 0..=file_lines.len() - k {
            let matches = (0..k).all(|j| {
                let f = &file_lines[i + j];
                let o = &old_lines[j];
                if k == 1 {
                    f.contains(o.as_str())
                } else if j == 0 {
                    f.ends_with(o.as_str())
                } else if j == k - 1 {
                    f.starts_with(o.as_str())
                } else {
                    f == o
                }
            });
            if matches {
                return Some(format!(
                    "Text matching except for whitespace (indentation, tabs vs spaces, spacing or \
                     line endings) starts at line {}; read those lines and copy them exactly",
                    i + 1
                ));
            }
        }
    }
    if norm(content).contains(&norm(old)) {
        return Some(
            "The text exists if whitespace is ignored (indentation, line breaks or blank lines \
             differ); read the file and copy the exact text"
                .into(),
        );
    }
    None
}

/// Whether a line looks like `   12\tcode` (read_file's numbering).
pub(super) fn has_line_number_prefix(line: &str) -> bool {
    line.trim_start_matches(' ')
        .split_once('\t')
        .is_some_and(|(num, _)| !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()))
}

/// A small unified-style diff of replacing `old` at byte `at` by `new`, over the whole lines
/// involved, and the number of the first line that changes.
fn diff_snippet(content: &str, at: usize, old: &str, new: &str) -> (String, usize) {
    let region_start = content[..at].rfind('\n').map_or(0, |i| i + 1);
    let old_end = at + old.len();
    let region_end = content[old_end..]
        .find('\n')
        .map_or(content.len(), |i| old_end + i);
    let first_line = 1 + content.as_bytes()[..region_start]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();

    let before = &content[region_start..region_end];
    let after = format!(
        "{}{}{}",
        &content[region_start..at],
        new,
        &content[old_end..region_end]
    );
    let clean = |l: &str| l.strip_suffix('\r').unwrap_or(l).to_owned();
    let old_lines: Vec<String> = before.split('\n').map(clean).collect();
    let new_lines: Vec<String> = after.split('\n').map(clean).collect();

    let common_prefix = old_lines
        .iter()
        .zip(&new_lines)
        .take_while(|(a, b)| a == b)
        .count();
    let max_suffix = old_lines.len().min(new_lines.len()) - common_prefix;
    let common_suffix = old_lines
        .iter()
        .rev()
        .zip(new_lines.iter().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();

    let mut out = format!(
        "@@ -{first_line},{} +{first_line},{} @@\n",
        old_lines.len(),
        new_lines.len()
    );
    for l in &old_lines[..common_prefix] {
        out.push_str(&format!(" {l}\n"));
    }
    push_side(
        &mut out,
        '-',
        &old_lines[common_prefix..old_lines.len() - common_suffix],
    );
    push_side(
        &mut out,
        '+',
        &new_lines[common_prefix..new_lines.len() - common_suffix],
    );
    for l in &old_lines[old_lines.len() - common_suffix..] {
        out.push_str(&format!(" {l}\n"));
    }
    (out, first_line + common_prefix)
}

fn push_side(out: &mut String, mark: char, lines: &[String]) {
    for l in lines.iter().take(DIFF_MAX_LINES) {
        out.push(mark);
        out.push_str(l);
        out.push('\n');
    }
    if lines.len() > DIFF_MAX_LINES {
        out.push_str(&format!(
            "{mark}… ({} more lines)\n",
            lines.len() - DIFF_MAX_LINES
        ));
    }
}
