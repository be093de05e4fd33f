//! `search_files`: content search (regex or literal) and file-name search over a tree, the
//! way ripgrep does it and with ripgrep's own crates: `ignore` walks the tree in parallel
//! (`.gitignore`, `.ignore`, hidden files), `grep-regex` compiles the pattern and
//! `grep-searcher` reads each file (binary files skipped, context lines).
//!
//! Flow: the arguments become a [`Plan`] (pattern and globs compiled first, so a bad one is
//! an error before anything is read) → on the file tools' blocking thread, confined by the
//! sandbox like `read_file` ([`run_blocking`]), the parallel walker runs one [`Worker`] per
//! thread; each keeps the first results in path order (bounded: `offset + limit` of them)
//! and counts the rest, and merges into the shared [`Collector`] when its thread ends →
//! the results are rendered in path order, with totals and a note saying what was cut and
//! how to get the rest.
//!
//! Under a sandboxing policy the protected paths (`$TERN_HOME`, `[sandbox]
//! protected_paths`) are pruned from the walk, so their files are neither searched nor
//! listed; the kernel refuses them anyway, but a name seen in a directory listing would
//! still leak.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkFinish,
    SinkMatch,
};
use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::file_access::{check_cancel, floor_char_boundary, run_blocking, to_usize};
use crate::tool::{lenient_opt_u64, lenient_u64};
use crate::{Tool, ToolContext, ToolError, ToolResult};

/// Results returned when the model gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 50;
/// Largest `limit` the model may ask for.
pub const MAX_LIMIT: u64 = 1000;
/// Characters of a line shown when the model gives no `max_line_length`.
pub const DEFAULT_MAX_LINE_LENGTH: u64 = 500;
/// Most context lines before or after a match.
pub const MAX_CONTEXT: u64 = 20;
/// Entries a walker thread visits between two looks at the cancellation token.
const CANCEL_POLL: u64 = 16;

pub struct SearchFiles;

/// The arguments of `search_files`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// For target 'content': the regex to find in lines (Rust regex syntax, like ripgrep), or the exact text with fixed_strings. For target 'files': a glob on file names (e.g. '*.py', 'test_*', or with a '/' on the path below `path`, e.g. 'src/**/*.rs'), or without glob characters a substring of the name.
    #[schemars(length(min = 1))]
    pub pattern: String,
    /// 'content' searches inside files; 'files' finds files by name.
    #[serde(default)]
    pub target: Target,
    /// Directory or file to search, relative to the working directory or absolute. Default: the working directory.
    #[serde(default = "working_directory")]
    #[schemars(length(min = 1))]
    pub path: String,
    /// Only files matching this glob, e.g. '*.rs', '*.{ts,tsx}', 'src/**/*.go' (gitignore-style: without '/' it matches the name anywhere).
    #[serde(default)]
    pub file_glob: Option<String>,
    /// Skip files and directories matching this glob, e.g. '*_test.go', 'vendor'.
    #[serde(default)]
    pub exclude_glob: Option<String>,
    /// Content search: take the pattern as literal text, not a regex.
    #[serde(default)]
    pub fixed_strings: bool,
    /// sensitive (default), insensitive, or smart: insensitive unless the pattern has an uppercase letter.
    #[serde(default)]
    pub case: Case,
    /// Content search, output_mode 'content': lines shown before and after each match.
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(max = MAX_CONTEXT))]
    pub context: u64,
    /// Lines shown before each match (overrides context).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>", range(max = MAX_CONTEXT))]
    pub before_context: Option<u64>,
    /// Lines shown after each match (overrides context).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>", range(max = MAX_CONTEXT))]
    pub after_context: Option<u64>,
    /// Content search: 'content' (matching lines with path and line number), 'files_only' (paths of files that match) or 'count' (matching lines per file).
    #[serde(default)]
    pub output_mode: OutputMode,
    /// Most results to return: matching lines in output_mode 'content', files otherwise.
    #[serde(default = "default_limit", deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(min = 1, max = MAX_LIMIT))]
    pub limit: u64,
    /// Results to skip, to page through more than `limit` (results are in path order).
    #[serde(default, deserialize_with = "lenient_u64")]
    #[schemars(with = "u64")]
    pub offset: u64,
    /// Characters of a line shown; longer lines are cut, with a marker.
    #[serde(default = "default_max_line_length", deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(min = 20, max = 10000))]
    pub max_line_length: u64,
    /// Also search hidden files and directories (names starting with '.'). `.git` stays skipped unless include_ignored is true.
    #[serde(default)]
    pub include_hidden: bool,
    /// Also search what .gitignore, .ignore and git's excludes leave out (build output, dependencies).
    #[serde(default)]
    pub include_ignored: bool,
}

/// What `search_files` looks at.
// No doc comments on the variants: they would turn the schema's `enum` into a `oneOf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    #[default]
    Content,
    Files,
}

/// What a content search returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    #[default]
    Content,
    FilesOnly,
    Count,
}

/// How the pattern's case is matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Case {
    #[default]
    Sensitive,
    Insensitive,
    Smart,
}

fn working_directory() -> String {
    ".".to_owned()
}

fn default_limit() -> u64 {
    DEFAULT_LIMIT
}

fn default_max_line_length() -> u64 {
    DEFAULT_MAX_LINE_LENGTH
}

impl Tool for SearchFiles {
    const NAME: &'static str = "search_files";
    const TOOLSET: &'static str = super::FILE_TOOLSET;
    const DESCRIPTION: &'static str = "Search file contents or find files by name, recursively. \
        Use this instead of grep, rg, find or ls -R in the terminal. Files that .gitignore or \
        .ignore leave out, hidden files and binary files are skipped unless asked for. \
        target='content' (default): lines matching a regex (or literal text with \
        fixed_strings), as `path:line:text` (context lines as `path-line-text`, `--` \
        between groups); output_mode 'files_only' or 'count' for paths or counts per file. \
        target='files': file paths whose name matches a glob ('*.py', '*config*') or \
        contains the pattern. Narrow with path, file_glob and exclude_glob. Results are in \
        path order; when `truncated` is true, `note` says how many more there are and the \
        offset to continue from.";
    type Args = SearchFilesArgs;

    async fn run(&self, args: SearchFilesArgs, ctx: ToolContext) -> ToolResult {
        search_files(args, ctx).await
    }
}

async fn search_files(args: SearchFilesArgs, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let mut plan = Plan::new(&args, &ctx)?;
    let cancel = ctx.cancel.clone();
    let outcome = run_blocking(&ctx, move || {
        let found = plan.resolve_root().and_then(|()| plan.run(&cancel));
        (plan, found)
    })
    .await?;
    let (plan, found) = outcome;
    let found = found.map_err(|e| e.into_tool_error(&plan, &ctx))?;
    Ok(plan.render(found, ctx.limits.output_limit_chars))
}

/// What a search is asked to do, checked and compiled.
pub(crate) struct Plan {
    /// The path as the model gave it, for messages and result paths.
    shown: String,
    /// The path resolved against the working directory; canonical after
    /// [`Plan::resolve_root`].
    root: PathBuf,
    root_is_file: bool,
    target: Target,
    mode: OutputMode,
    /// Content search: the compiled pattern.
    matcher: Option<RegexMatcher>,
    /// File-name search: the compiled pattern.
    names: Option<NameMatcher>,
    file_glob: Option<String>,
    exclude_glob: Option<String>,
    before: usize,
    after: usize,
    offset: usize,
    limit: usize,
    max_line: usize,
    include_hidden: bool,
    include_ignored: bool,
    /// The sandbox's policy, when it confines the file tools.
    policy: Option<tern_sandbox::Policy>,
    /// Its protected paths, resolved by [`Plan::resolve_root`] (empty without a sandbox).
    protected: Vec<PathBuf>,
    /// Called after each file is searched (tests interrupt a search half-way with it).
    pub(crate) after_file: Option<Arc<dyn Fn() + Send + Sync>>,
}

/// Why a search produced no results.
#[derive(Debug)]
pub(crate) enum SearchError {
    NotFound,
    Protected,
    HoldsProtected,
    NotSearchable,
    Io(io::Error),
    Glob(String),
    Cancelled,
}

impl SearchError {
    fn into_tool_error(self, plan: &Plan, ctx: &ToolContext) -> ToolError {
        let shown = &plan.shown;
        match self {
            SearchError::NotFound if Path::new(shown).is_absolute() => {
                ToolError::new(format!("path not found: {shown}"))
            }
            SearchError::NotFound => ToolError::new(format!(
                "path not found: {shown} (relative to {})",
                ctx.workdir.display()
            )),
            SearchError::Protected => ToolError::new(format!(
                "permission denied: {shown} is protected by the sandbox ({}); tern's own files \
                 and the configured protected paths are never searched",
                ctx.limits.sandbox.policy().describe()
            )),
            SearchError::HoldsProtected => ToolError::new(format!(
                "permission denied: {shown} holds a path the sandbox protects (tern's own files \
                 or a configured protected path), and the sandbox cannot list a directory that \
                 holds one; search its subdirectories instead"
            )),
            SearchError::NotSearchable => ToolError::new(format!(
                "not a directory or regular file: {shown} (a device, socket or pipe cannot be \
                 searched)"
            )),
            SearchError::Io(e) => crate::file_access::io_error("search", shown, ctx, &e),
            SearchError::Glob(msg) => ToolError::new(msg),
            SearchError::Cancelled => ToolError::new("cancelled: the turn was interrupted"),
        }
    }
}

/// A file-name pattern: a glob when it has glob characters, else a substring.
enum NameMatcher {
    /// Matched against the file name, or the path below the root when it has a `/`.
    Glob {
        // A set rather than a `GlobMatcher`: the set matches a prefix, suffix or literal
        // glob without running its regex, as ripgrep's `-g` does.
        matcher: globset::GlobSet,
        on_path: bool,
    },
    Substring {
        needle: String,
        fold_case: bool,
    },
}

impl NameMatcher {
    fn new(pattern: &str, case: Case) -> Result<Self, ToolError> {
        let fold_case = match case {
            Case::Sensitive => false,
            Case::Insensitive => true,
            Case::Smart => !pattern.chars().any(char::is_uppercase),
        };
        if !pattern.contains(['*', '?', '[', '{']) {
            let needle = if fold_case {
                pattern.to_lowercase()
            } else {
                pattern.to_owned()
            };
            return Ok(NameMatcher::Substring { needle, fold_case });
        }
        let on_path = pattern.contains('/');
        let glob = globset::GlobBuilder::new(pattern.trim_start_matches("./"))
            .case_insensitive(fold_case)
            .literal_separator(on_path)
            .build()
            .map_err(|e| ToolError::new(format!("invalid glob {pattern:?}: {}", e.kind())))?;
        let matcher = globset::GlobSetBuilder::new()
            .add(glob)
            .build()
            .map_err(|e| ToolError::new(format!("invalid glob {pattern:?}: {}", e.kind())))?;
        Ok(NameMatcher::Glob { matcher, on_path })
    }

    /// Whether a file's `name`, or its path below the root (`rel`, made only when needed),
    /// matches.
    fn is_match<'p>(&self, name: &OsStr, rel: impl FnOnce() -> &'p Path) -> bool {
        match self {
            NameMatcher::Glob { matcher, on_path } => {
                if *on_path {
                    matcher.is_match(rel())
                } else {
                    matcher.is_match(Path::new(name))
                }
            }
            NameMatcher::Substring { needle, fold_case } => {
                let name = name.to_string_lossy();
                if *fold_case {
                    name.to_lowercase().contains(needle.as_str())
                } else {
                    name.contains(needle.as_str())
                }
            }
        }
    }
}

impl Plan {
    /// Checks and compiles the arguments; reads nothing.
    pub(crate) fn new(args: &SearchFilesArgs, ctx: &ToolContext) -> Result<Self, ToolError> {
        let (matcher, names) = match args.target {
            Target::Content => (Some(compile_regex(args)?), None),
            Target::Files => (None, Some(NameMatcher::new(&args.pattern, args.case)?)),
        };
        let context = args.context.min(MAX_CONTEXT);
        let lines = |n: Option<u64>| to_usize(n.unwrap_or(context).min(MAX_CONTEXT));
        let plan = Plan {
            shown: args.path.clone(),
            root: ctx.resolve(&args.path),
            root_is_file: false,
            target: args.target,
            mode: args.output_mode,
            matcher,
            names,
            file_glob: non_empty(args.file_glob.as_deref()),
            exclude_glob: non_empty(args.exclude_glob.as_deref()),
            before: lines(args.before_context),
            after: lines(args.after_context),
            offset: to_usize(args.offset),
            limit: to_usize(args.limit.clamp(1, MAX_LIMIT)),
            max_line: to_usize(args.max_line_length.clamp(20, 10_000)),
            include_hidden: args.include_hidden,
            include_ignored: args.include_ignored,
            policy: crate::escalation::confines(ctx).then(|| ctx.limits.sandbox.policy().clone()),
            protected: Vec::new(),
            after_file: None,
        };
        // The globs' syntax is checked now, before anything is read.
        plan.overrides().map_err(ToolError::new)?;
        Ok(plan)
    }

    /// Results kept while searching: the first `offset + limit` in path order.
    fn keep(&self) -> usize {
        self.offset.saturating_add(self.limit)
    }

    /// Whether the output lists lines (and so counts matching lines, not files).
    fn lines_mode(&self) -> bool {
        self.target == Target::Content && self.mode == OutputMode::Content
    }

    /// Resolves the root (symlinks too: the walker does not follow links, and the protected
    /// paths are compared with real paths) and checks it may be searched.
    pub(crate) fn resolve_root(&mut self) -> Result<(), SearchError> {
        if let Some(policy) = &self.policy {
            self.protected = tern_sandbox::rules::canonical_protected(policy);
        }
        let real = std::fs::canonicalize(&self.root).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => SearchError::NotFound,
            _ => SearchError::Io(e),
        })?;
        if self.is_protected(&real) {
            return Err(SearchError::Protected);
        }
        let meta = std::fs::metadata(&real).map_err(SearchError::Io)?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(SearchError::NotSearchable);
        }
        // Landlock cannot let a directory be listed without its protected child, so the
        // sandbox grants the entries of such a directory one by one and not the directory:
        // the walk would fail at its first step.
        if meta.is_dir() && self.protected.iter().any(|p| p.starts_with(&real)) {
            return Err(SearchError::HoldsProtected);
        }
        self.root_is_file = meta.is_file();
        self.root = real;
        Ok(())
    }

    fn is_protected(&self, path: &Path) -> bool {
        self.protected.iter().any(|p| path.starts_with(p))
    }

    /// The include and exclude globs, matched below the root; Err says which is invalid.
    fn overrides(&self) -> Result<Override, String> {
        let mut b = OverrideBuilder::new(&self.root);
        let bad = |what: &str, g: &str, e: ignore::Error| format!("invalid {what} {g:?}: {e}");
        if let Some(g) = &self.file_glob {
            b.add(g).map_err(|e| bad("file_glob", g, e))?;
        }
        if let Some(g) = &self.exclude_glob {
            b.add(&format!("!{g}"))
                .map_err(|e| bad("exclude_glob", g, e))?;
        }
        b.build().map_err(|e| e.to_string())
    }

    /// Walks and searches the tree (blocking; on the file tools' confined thread).
    pub(crate) fn run(&self, cancel: &CancellationToken) -> Result<Collector, SearchError> {
        let overrides = self.overrides().map_err(SearchError::Glob)?;
        let mut walk = WalkBuilder::new(&self.root);
        walk.standard_filters(!self.include_ignored)
            .hidden(!self.include_hidden)
            // `.gitignore` counts outside a git repository too: an agent's working directory
            // is not always a clone, and what it ignores is still noise.
            .require_git(false)
            .follow_links(false)
            .overrides(overrides);
        let protected = self.protected.clone();
        let skip_git = !self.include_ignored;
        walk.filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            if skip_git && is_dir && e.file_name() == ".git" {
                return false;
            }
            // Nothing below a root that passed `resolve_root` is protected, links are not
            // followed: this only guards against a protected path made during the walk.
            !protected.iter().any(|p| e.path().starts_with(p))
        });
        let shared = Mutex::new(Collector::new(self.keep()));
        let cancelled = AtomicBool::new(false);
        let mut builder = WorkerBuilder {
            plan: self,
            shared: &shared,
            cancel,
            cancelled: &cancelled,
        };
        walk.build_parallel().visit(&mut builder);
        if cancelled.load(Ordering::Relaxed) || cancel.is_cancelled() {
            return Err(SearchError::Cancelled);
        }
        Ok(shared.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// The path shown for `path`, found under the root.
    fn display(&self, path: &Path) -> String {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        if rel.as_os_str().is_empty() || self.root_is_file {
            return self.shown.clone();
        }
        let rel = rel.to_string_lossy();
        let base = self.shown.trim_end_matches('/');
        if base == "." || base.is_empty() {
            rel.into_owned()
        } else {
            format!("{base}/{rel}")
        }
    }

    /// Cuts a line to `max_line` characters; says whether it did.
    fn line_text(&self, bytes: &[u8]) -> (String, bool) {
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        let text = String::from_utf8_lossy(bytes);
        match text.char_indices().nth(self.max_line) {
            None => (text.into_owned(), false),
            Some((at, _)) => {
                let at = floor_char_boundary(&text, at);
                let rest = text[at..].chars().count();
                (format!("{} [… {rest} more characters]", &text[..at]), true)
            }
        }
    }

    /// The answer the model reads.
    fn render(&self, found: Collector, budget: usize) -> Value {
        let t = &found.totals;
        let mut out = Map::new();
        out.insert(
            "target".into(),
            json!(match self.target {
                Target::Content => "content",
                Target::Files => "files",
            }),
        );
        let (shown, total, unit, budget_hit) = match (self.target, self.mode) {
            (Target::Content, OutputMode::Content) => {
                let (content, shown, hit) = self.render_lines(&found, budget);
                out.insert("content".into(), Value::String(content));
                out.insert("total_matches".into(), json!(t.matches));
                out.insert("total_files".into(), json!(t.files));
                (shown, t.matches, "matches", hit)
            }
            (Target::Content, OutputMode::Count) => {
                let counts: Vec<Value> = self
                    .page(&found)
                    .map(|(p, h)| json!({"path": p, "count": h.count}))
                    .collect();
                let shown = counts.len();
                out.insert("counts".into(), Value::Array(counts));
                out.insert("total_matches".into(), json!(t.matches));
                out.insert("total_files".into(), json!(t.files));
                (shown, t.files, "files", false)
            }
            (Target::Content, OutputMode::FilesOnly) | (Target::Files, _) => {
                let files: Vec<Value> = self.page(&found).map(|(p, _)| json!(p)).collect();
                let shown = files.len();
                out.insert("files".into(), Value::Array(files));
                out.insert("total_files".into(), json!(t.files));
                (shown, t.files, "files", false)
            }
        };
        let total = to_usize(total);
        let more = total.saturating_sub(self.offset.saturating_add(shown));
        out.insert("truncated".into(), Value::Bool(more > 0));
        let note = if total == 0 {
            Some(format!(
                "no {}; searched {} files",
                if self.target == Target::Files {
                    "file names match"
                } else {
                    "matches"
                },
                t.searched
            ))
        } else if shown == 0 {
            Some(format!(
                "offset {} is past the last of the {total} {unit}",
                self.offset
            ))
        } else if more > 0 {
            let first = self.offset + 1;
            let last = self.offset + shown;
            let cut = if budget_hit {
                format!(" (the output reached its {budget}-character limit)")
            } else {
                String::new()
            };
            Some(format!(
                "showing {unit} {first}-{last} of {total}{cut}; {more} more: call again with \
                 offset={last}, or narrow the pattern, path or file_glob"
            ))
        } else {
            None
        };
        if let Some(note) = note {
            out.insert("note".into(), Value::String(note));
        }
        if t.binary > 0 {
            out.insert("binary_files_skipped".into(), json!(t.binary));
        }
        if t.unreadable > 0 {
            out.insert("unreadable_skipped".into(), json!(t.unreadable));
        }
        if found.lines_cut > 0 {
            out.insert("lines_cut".into(), json!(found.lines_cut));
        }
        Value::Object(out)
    }

    /// The files of the page `offset..offset + limit` (file-unit modes).
    fn page<'a>(&self, found: &'a Collector) -> impl Iterator<Item = (&'a String, &'a Hits)> {
        found.files.iter().skip(self.offset).take(self.limit)
    }

    /// The lines of the page, as `path:line:text` and `path-line-text`; stops early at
    /// `budget` characters. Returns the text, the matches shown, and whether the budget cut it.
    fn render_lines(&self, found: &Collector, budget: usize) -> (String, usize, bool) {
        let (first, end) = (self.offset, self.offset.saturating_add(self.limit));
        let with_context = self.before > 0 || self.after > 0;
        let mut out = String::new();
        let mut index = 0usize;
        let mut shown = 0usize;
        'files: for (path, hits) in &found.files {
            let file_first = index;
            index += hits.lines.iter().filter(|l| l.is_match).count();
            if index <= first {
                continue;
            }
            // The match lines of this file that are on the page, by line number.
            let mut k = file_first;
            let on_page: Vec<u64> = hits
                .lines
                .iter()
                .filter(|l| l.is_match)
                .filter_map(|l| {
                    let on = (first..end).contains(&k);
                    k += 1;
                    on.then_some(l.number)
                })
                .collect();
            let near = |n: u64| {
                on_page.iter().any(|&m| {
                    (n < m && m - n <= self.before as u64) || (n > m && n - m <= self.after as u64)
                })
            };
            let mut prev: Option<u64> = None;
            for line in &hits.lines {
                let show = if line.is_match {
                    on_page.binary_search(&line.number).is_ok()
                } else {
                    near(line.number)
                };
                if !show {
                    continue;
                }
                let sep = if line.is_match { ':' } else { '-' };
                let text = format!("{path}{sep}{}{sep}{}\n", line.number, line.text);
                let gap =
                    with_context && !out.is_empty() && prev.is_none_or(|p| line.number != p + 1);
                let need = text.len() + if gap { 3 } else { 0 };
                if shown > 0 && out.len() + need > budget {
                    return (out, shown, true);
                }
                if gap {
                    out.push_str("--\n");
                }
                out.push_str(&text);
                prev = Some(line.number);
                if line.is_match {
                    shown += 1;
                }
            }
            if index >= end {
                break 'files;
            }
        }
        (out, shown, false)
    }
}

fn non_empty(glob: Option<&str>) -> Option<String> {
    glob.map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_owned)
}

fn compile_regex(args: &SearchFilesArgs) -> Result<RegexMatcher, ToolError> {
    let mut b = RegexMatcherBuilder::new();
    b.case_insensitive(args.case == Case::Insensitive)
        .case_smart(args.case == Case::Smart)
        .fixed_strings(args.fixed_strings)
        // Lines are searched one at a time; this lets the searcher skip to candidate lines.
        .line_terminator(Some(b'\n'));
    b.build(&args.pattern).map_err(|e| {
        ToolError::new(format!(
            "invalid regex {:?}: {e}{}",
            args.pattern,
            if args.fixed_strings {
                ""
            } else {
                "; set fixed_strings to true to search for the text as written"
            }
        ))
    })
}

/// One line kept for the output.
#[derive(Debug)]
struct Line {
    number: u64,
    text: String,
    is_match: bool,
}

/// What one file gave.
#[derive(Debug, Default)]
pub(crate) struct Hits {
    /// Matching lines in the file (all of them, kept or not).
    count: u64,
    /// Match and context lines kept, in order.
    lines: Vec<Line>,
    /// Results this file takes of the kept budget: its kept matching lines, or 1.
    units: usize,
}

#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    /// Matching lines in all files.
    pub(crate) matches: u64,
    /// Files with a match (or, for target 'files', whose name matches).
    pub(crate) files: u64,
    /// Files searched or names tested.
    pub(crate) searched: u64,
    pub(crate) binary: u64,
    pub(crate) unreadable: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.matches += o.matches;
        self.files += o.files;
        self.searched += o.searched;
        self.binary += o.binary;
        self.unreadable += o.unreadable;
    }
}

/// The first results in path order (at most `keep` units beyond the file that reaches
/// `keep`), and the totals of everything found.
#[derive(Debug)]
pub(crate) struct Collector {
    keep: usize,
    files: BTreeMap<String, Hits>,
    units: usize,
    pub(crate) totals: Totals,
    lines_cut: u64,
}

impl Collector {
    fn new(keep: usize) -> Self {
        Collector {
            keep,
            files: BTreeMap::new(),
            units: 0,
            totals: Totals::default(),
            lines_cut: 0,
        }
    }

    fn insert(&mut self, path: String, hits: Hits) {
        // A file past the last kept one when the kept ones already fill the budget.
        if self.units >= self.keep
            && self
                .files
                .last_key_value()
                .is_some_and(|(last, _)| &path > last)
        {
            return;
        }
        self.units += hits.units;
        self.files.insert(path, hits);
        while self.files.len() > 1 {
            let Some((_, last)) = self.files.last_key_value() else {
                break;
            };
            if self.units - last.units < self.keep {
                break;
            }
            self.units -= last.units;
            self.files.pop_last();
        }
    }

    fn merge(&mut self, other: Collector) {
        self.totals.add(&other.totals);
        self.lines_cut += other.lines_cut;
        for (path, hits) in other.files {
            self.insert(path, hits);
        }
    }
}

struct WorkerBuilder<'a> {
    plan: &'a Plan,
    shared: &'a Mutex<Collector>,
    cancel: &'a CancellationToken,
    cancelled: &'a AtomicBool,
}

impl<'a> ParallelVisitorBuilder<'a> for WorkerBuilder<'a> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 'a> {
        let mut searcher = SearcherBuilder::new();
        searcher
            .line_number(true)
            .before_context(self.plan.before)
            .after_context(self.plan.after)
            .binary_detection(BinaryDetection::quit(b'\0'));
        Box::new(Worker {
            plan: self.plan,
            visits: 0,
            // A clone per thread: each gets its own regex caches, as in ripgrep.
            matcher: self.plan.matcher.clone(),
            searcher: searcher.build(),
            local: Collector::new(self.plan.keep()),
            shared: self.shared,
            cancel: self.cancel,
            cancelled: self.cancelled,
        })
    }
}

/// One walker thread: searches the files it is given into a collector of its own, merged
/// into the shared one when the thread is done.
struct Worker<'a> {
    plan: &'a Plan,
    /// Entries visited, for polling the cancellation token.
    visits: u64,
    matcher: Option<RegexMatcher>,
    searcher: Searcher,
    local: Collector,
    shared: &'a Mutex<Collector>,
    cancel: &'a CancellationToken,
    cancelled: &'a AtomicBool,
}

impl ParallelVisitor for Worker<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        // The token takes a lock to read: polled every few entries (the first included),
        // and what one thread saw is passed to the others through the flag.
        let poll = self.visits.is_multiple_of(CANCEL_POLL);
        self.visits += 1;
        if self.cancelled.load(Ordering::Relaxed) {
            return WalkState::Quit;
        }
        if poll && self.cancel.is_cancelled() {
            self.cancelled.store(true, Ordering::Relaxed);
            return WalkState::Quit;
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                // A directory or file that cannot be read is counted, not fatal.
                tracing::debug!(error = %e, "search_files skipped an entry");
                self.local.totals.unreadable += 1;
                return WalkState::Continue;
            }
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            return WalkState::Continue;
        }
        match self.plan.target {
            Target::Files => self.name(&entry),
            Target::Content => self.content(&entry),
        }
        if let Some(f) = &self.plan.after_file {
            f();
        }
        WalkState::Continue
    }
}

impl Worker<'_> {
    fn name(&mut self, entry: &DirEntry) {
        let Some(names) = &self.plan.names else {
            return;
        };
        self.local.totals.searched += 1;
        if names.is_match(entry.file_name(), || {
            entry
                .path()
                .strip_prefix(&self.plan.root)
                .unwrap_or(entry.path())
        }) {
            self.local.totals.files += 1;
            let hits = Hits {
                units: 1,
                ..Hits::default()
            };
            self.local.insert(self.plan.display(entry.path()), hits);
        }
    }

    fn content(&mut self, entry: &DirEntry) {
        let Some(matcher) = &self.matcher else {
            return;
        };
        self.local.totals.searched += 1;
        let mut sink = FileSink {
            plan: self.plan,
            cancel: self.cancel,
            keep: if self.plan.lines_mode() {
                self.plan.keep()
            } else {
                0
            },
            hits: Hits::default(),
            kept: 0,
            after_left: 0,
            binary: false,
            lines_cut: 0,
        };
        if let Err(e) = self.searcher.search_path(matcher, entry.path(), &mut sink) {
            tracing::debug!(error = %e, path = %entry.path().display(), "search_files skipped a file");
            self.local.totals.unreadable += 1;
            return;
        }
        if sink.binary {
            self.local.totals.binary += 1;
            return;
        }
        if sink.hits.count == 0 {
            return;
        }
        let mut hits = sink.hits;
        hits.units = if self.plan.lines_mode() { sink.kept } else { 1 };
        self.local.totals.matches += hits.count;
        self.local.totals.files += 1;
        self.local.lines_cut += sink.lines_cut;
        self.local.insert(self.plan.display(entry.path()), hits);
    }
}

impl Drop for Worker<'_> {
    fn drop(&mut self) {
        let local = std::mem::replace(&mut self.local, Collector::new(0));
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .merge(local);
    }
}

/// The searcher's output for one file.
struct FileSink<'a> {
    plan: &'a Plan,
    cancel: &'a CancellationToken,
    /// Matching lines to keep (0: count only).
    keep: usize,
    hits: Hits,
    kept: usize,
    /// After-context lines still wanted after the last kept match.
    after_left: usize,
    binary: bool,
    lines_cut: u64,
}

impl FileSink<'_> {
    fn push(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        let (text, cut) = self.plan.line_text(bytes);
        if cut {
            self.lines_cut += 1;
        }
        self.hits.lines.push(Line {
            number: number.unwrap_or(0),
            text,
            is_match,
        });
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        self.hits.count += 1;
        if self.plan.mode == OutputMode::FilesOnly {
            // One match is enough to list the file.
            return Ok(false);
        }
        if self.kept < self.keep {
            self.kept += 1;
            self.after_left = self.plan.after;
            self.push(mat.line_number(), mat.bytes(), true);
        }
        // A huge file with many matches stops when the turn is interrupted.
        Ok(!self.hits.count.is_multiple_of(1024) || !self.cancel.is_cancelled())
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        let wanted = match ctx.kind() {
            SinkContextKind::Before => self.kept < self.keep,
            SinkContextKind::After => {
                let wanted = self.after_left > 0;
                self.after_left = self.after_left.saturating_sub(1);
                wanted
            }
            SinkContextKind::Other => false,
        };
        if wanted {
            self.push(ctx.line_number(), ctx.bytes(), false);
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, io::Error> {
        self.binary = true;
        Ok(false)
    }

    fn finish(&mut self, _: &Searcher, finish: &SinkFinish) -> Result<(), io::Error> {
        if finish.binary_byte_offset().is_some() {
            self.binary = true;
        }
        Ok(())
    }
}
