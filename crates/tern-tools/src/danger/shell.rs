//! The shell side of the walk: parsing with tree-sitter-bash, the tree's structure (lists,
//! pipelines, redirections, functions, substitutions), and turning a word node into the
//! text bash would pass (quotes removed, escapes resolved, expansions marked).
//!
//! Flow: `Scan::script` parses → `Scan::node` dispatches on the node kind → a `command`
//! node gathers its words, its redirections and what its stdin is, then hands the words to
//! `Scan::simple` (in `commands`) → everything else is walked for the commands it holds.

use std::cell::RefCell;

use tree_sitter::{Node, Parser, Tree};

use super::{Rule, Scan};

/// Names that read code from a path meaning stdin.
pub(super) const STDIN_PATHS: &[&str] = &["-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];

/// Scripts inside scripts (`sh -c "sh -c '…'"`) deeper than this are not read: asking.
const MAX_NESTING: usize = 8;

/// Syntax trees deeper than this are not walked (the walk recurses): asking.
const MAX_TREE_DEPTH: usize = 200;

thread_local! {
    // One parser per thread: building one allocates, and `check_command` runs before every
    // terminal command.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// `None` when no tree could be had (the caller asks).
fn parse(src: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(src, None)
    })
}

/// One word as bash passes it to the command.
#[derive(Debug, Clone)]
pub(super) struct Word<'t> {
    /// Quotes removed and escapes resolved; expansions (`$X`, `${X}`, `$(…)`) kept as their
    /// source text, so `"$HOME"/x` reads `$HOME/x`.
    pub text: String,
    /// Holds an expansion: the real word is known only when the line runs.
    pub dynamic: bool,
    /// Holds an unquoted glob character (`*`, `?`, `[…]`).
    pub glob: bool,
    /// A substitution inside it runs `curl` or `wget`.
    pub downloads: bool,
    pub node: Node<'t>,
}

impl<'t> Word<'t> {
    pub(super) fn of(node: Node<'t>, src: &str) -> Self {
        let mut word = Word {
            text: String::new(),
            dynamic: false,
            glob: false,
            downloads: false,
            node,
        };
        word.append(node, src);
        word
    }

    fn append(&mut self, node: Node<'_>, src: &str) {
        let raw = &src[node.byte_range()];
        match node.kind() {
            "word" => unescape_unquoted(raw, &mut self.text, &mut self.glob),
            "number" => self.text.push_str(raw),
            "raw_string" => self.text.push_str(strip_quotes(raw, "'", "'")),
            "ansi_c_string" => decode_ansi_c(strip_quotes(raw, "$'", "'"), &mut self.text),
            "string" => self.append_double_quoted(node, src),
            "concatenation" | "translated_string" => self.append_pieces(node, src),
            // Expansions and anything unknown: the text bash passes is not known here.
            _ => {
                self.text.push_str(raw);
                self.dynamic = true;
            }
        }
    }

    /// The children in order, and whatever source text lies between them.
    fn append_pieces(&mut self, node: Node<'_>, src: &str) {
        let mut at = node.start_byte();
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            unescape_unquoted(&src[at..child.start_byte()], &mut self.text, &mut self.glob);
            self.append(child, src);
            at = child.end_byte();
        }
        unescape_unquoted(&src[at..node.end_byte()], &mut self.text, &mut self.glob);
    }

    fn append_double_quoted(&mut self, node: Node<'_>, src: &str) {
        let (start, end) = (node.start_byte(), node.end_byte());
        let raw = &src[start..end];
        let inner_start = start + usize::from(raw.starts_with('"'));
        let inner_end = if raw.len() > 1 && raw.ends_with('"') {
            end - 1
        } else {
            end
        };
        let mut at = inner_start;
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            let (s, e) = (child.start_byte(), child.end_byte());
            if s < at || e > inner_end {
                continue;
            }
            unescape_double_quoted(&src[at..s], &mut self.text);
            if child.kind() == "string_content" {
                unescape_double_quoted(&src[s..e], &mut self.text);
            } else {
                self.text.push_str(&src[s..e]);
                self.dynamic = true;
            }
            at = e;
        }
        if at < inner_end {
            unescape_double_quoted(&src[at..inner_end], &mut self.text);
        }
    }
}

fn strip_quotes<'a>(raw: &'a str, open: &str, close: &str) -> &'a str {
    let inner = raw.strip_prefix(open).unwrap_or(raw);
    inner.strip_suffix(close).unwrap_or(inner)
}

/// Outside quotes a backslash keeps the next character as it is; backslash-newline is a
/// line continuation and disappears.
fn unescape_unquoted(raw: &str, out: &mut String, glob: &mut bool) {
    let mut chars = raw.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(next) => out.push(next),
                None => out.push('\\'),
            },
            '*' | '?' => {
                *glob = true;
                out.push(ch);
            }
            '[' if chars.as_str().contains(']') => {
                *glob = true;
                out.push(ch);
            }
            _ => out.push(ch),
        }
    }
}

/// Inside double quotes a backslash escapes only `$`, `` ` ``, `"`, `\` and a newline.
fn unescape_double_quoted(raw: &str, out: &mut String) {
    let mut chars = raw.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        match chars.peek() {
            Some('\n') => {
                chars.next();
            }
            Some(&next @ ('$' | '`' | '"' | '\\')) => {
                chars.next();
                out.push(next);
            }
            _ => out.push('\\'),
        }
    }
}

/// `$'…'` escapes, so that `$'\x72m'` reads `rm`.
fn decode_ansi_c(raw: &str, out: &mut String) {
    let mut chars = raw.chars().peekable();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let Some(esc) = chars.next() else {
            out.push('\\');
            break;
        };
        let mut number = |radix: u32, max_digits: usize, first: Option<char>| {
            let mut value = 0u32;
            let mut digits = 0;
            if let Some(d) = first.and_then(|c| c.to_digit(radix)) {
                value = d;
                digits = 1;
            }
            while digits < max_digits {
                let Some(d) = chars.peek().and_then(|c| c.to_digit(radix)) else {
                    break;
                };
                chars.next();
                value = value * radix + d;
                digits += 1;
            }
            (digits > 0).then(|| char::from_u32(value).unwrap_or('\u{FFFD}'))
        };
        let decoded = match esc {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(esc),
            '0'..='7' => number(8, 3, Some(esc)),
            'x' => number(16, 2, None),
            'u' => number(16, 4, None),
            'U' => number(16, 8, None),
            'c' => chars
                .next()
                .map(|c| char::from(c.to_ascii_uppercase() as u8 & 0x1f)),
            _ => None,
        };
        match decoded {
            Some(c) => out.push(c),
            None => {
                out.push('\\');
                out.push(esc);
            }
        }
    }
}

/// Where a command's standard input comes from, for interpreters that run their stdin.
#[derive(Debug, Clone, Default)]
pub(super) enum Stdin {
    /// Whatever the terminal tool gives the line.
    #[default]
    Inherited,
    /// The previous stage of a pipeline.
    Pipe {
        /// Some earlier stage runs `curl` or `wget`.
        downloads: bool,
        /// Some earlier stage runs `find`.
        finds: bool,
        /// The previous stage prints known text (a lone `echo`, `cat` of a heredoc): the
        /// text, and whether it is literal.
        text: Option<(String, bool)>,
    },
    /// A heredoc or here-string: its text, and whether it is literal.
    Text(String, bool),
    /// `< file`.
    File,
}

impl Stdin {
    pub(super) const fn finds(&self) -> bool {
        matches!(self, Self::Pipe { finds: true, .. })
    }
}

/// What the commands of one pipeline stage run, gathered while walking it.
#[derive(Debug, Clone, Default)]
pub(super) struct Stage {
    pub downloads: bool,
    pub finds: bool,
    pub commands: usize,
    /// The text the last `echo` (or `cat` of a heredoc) prints, and whether it is literal.
    pub text: Option<(String, bool)>,
}

impl Stage {
    fn merge(&mut self, other: Self) {
        self.downloads |= other.downloads;
        self.finds |= other.finds;
        self.commands += other.commands;
        if other.text.is_some() {
            self.text = other.text;
        }
    }

    /// The known text this stage prints, when it runs one command only.
    fn text_if_alone(&self) -> Option<(String, bool)> {
        if self.commands == 1 {
            self.text.clone()
        } else {
            None
        }
    }
}

const EXPANSION_KINDS: &[&str] = &[
    "simple_expansion",
    "expansion",
    "command_substitution",
    "arithmetic_expansion",
    "process_substitution",
];

impl Scan {
    /// Parses and walks one script: the command line itself, or a string handed to a shell.
    pub(super) fn script(&mut self, src: &str) {
        let Some(tree) = parse(src) else {
            self.add(Rule::UnparsedCommand);
            return;
        };
        let root = tree.root_node();
        if root.has_error() {
            self.add(Rule::UnparsedCommand);
        }
        self.node(root, src, &Stdin::Inherited, 0);
    }

    /// Shell code found inside the line (`sh -c TEXT`, `eval TEXT`, a heredoc fed to `sh`).
    /// Literal text is parsed and judged like the line itself. Text with expansions is
    /// known only when it runs: `interpreter_code`, and its approximate text is still
    /// searched for hard-line commands.
    pub(super) fn shell_code(&mut self, text: &str, literal: bool, downloads: bool) {
        if downloads {
            self.add(Rule::PipeToShell);
        }
        if !literal {
            self.add(Rule::InterpreterCode);
        }
        if self.nesting >= MAX_NESTING {
            self.add(Rule::InterpreterCode);
            return;
        }
        let (outer_hard_only, outer_stage) = (self.hard_only, std::mem::take(&mut self.stage));
        self.hard_only |= !literal;
        self.nesting += 1;
        self.script(text);
        self.nesting -= 1;
        self.hard_only = outer_hard_only;
        self.stage = outer_stage;
    }

    fn node(&mut self, n: Node<'_>, src: &str, stdin: &Stdin, depth: usize) {
        if depth > MAX_TREE_DEPTH {
            self.add(Rule::UnparsedCommand);
            return;
        }
        match n.kind() {
            "command" => self.command(n, src, stdin, &[], depth),
            "redirected_statement" => self.redirected(n, src, stdin, depth),
            "pipeline" => self.pipeline(n, src, stdin, depth),
            "function_definition" => {
                self.fork_bomb(n, src);
                self.children(n, src, stdin, depth);
            }
            "file_redirect" => {
                self.file_redirect(n, src);
                self.children(n, src, &Stdin::Inherited, depth);
            }
            "command_substitution" | "process_substitution" => {
                self.children(n, src, &Stdin::Inherited, depth);
            }
            _ => self.children(n, src, stdin, depth),
        }
    }

    fn children(&mut self, n: Node<'_>, src: &str, stdin: &Stdin, depth: usize) {
        let mut cursor = n.walk();
        for child in n.named_children(&mut cursor) {
            self.node(child, src, stdin, depth + 1);
        }
    }

    /// A simple command: its words (name, arguments, and the words tree-sitter hangs on a
    /// redirection: `rm >/dev/null -rf /`), its redirections, its stdin.
    fn command(&mut self, n: Node<'_>, src: &str, stdin: &Stdin, extra: &[Word<'_>], depth: usize) {
        let outer_stage = std::mem::take(&mut self.stage);
        let mut inner = Stage::default();
        let mut name = None;
        let mut args = Vec::new();
        let mut stdin = stdin.clone();
        let mut parts = Vec::new();
        let mut cursor = n.walk();
        if cursor.goto_first_child() {
            loop {
                parts.push((cursor.field_name(), cursor.node()));
                if !cursor.goto_next_sibling() {
                    break;
                }
            }
        }
        for (field, child) in parts {
            if !child.is_named() {
                continue;
            }
            // Commands inside the word (`$(…)`) run first, on their own stdin.
            self.stage = Stage::default();
            self.node(child, src, &Stdin::Inherited, depth + 1);
            let seen = std::mem::take(&mut self.stage);
            match field {
                Some("name") => {
                    let word_node = child.named_child(0).unwrap_or(child);
                    let mut word = Word::of(word_node, src);
                    word.downloads = seen.downloads;
                    name = Some(word);
                }
                Some("argument") => {
                    let mut word = Word::of(child, src);
                    word.downloads = seen.downloads;
                    args.push(word);
                }
                Some("redirect") => {
                    if let Some(s) = redirect_stdin(child, src) {
                        stdin = s;
                    }
                    args.extend(redirect_extra_words(child, src));
                }
                _ => {}
            }
            inner.merge(seen);
        }
        self.stage = outer_stage;
        self.stage.merge(inner);
        let Some(name) = name else {
            return;
        };
        let mut words = Vec::with_capacity(args.len() + extra.len() + 1);
        words.push(name);
        words.extend(args);
        words.extend(extra.iter().cloned());
        self.simple(&words, &stdin);
    }

    fn redirected(&mut self, n: Node<'_>, src: &str, stdin: &Stdin, depth: usize) {
        let mut stdin = stdin.clone();
        let mut extra = Vec::new();
        // tree-sitter-bash puts the rest of a pipeline that starts on a heredoc's line
        // inside the heredoc (`cat <<EOF | sh`): those are the later stages.
        let mut later_stages = Vec::new();
        let mut cursor = n.walk();
        let redirects: Vec<Node<'_>> = n.children_by_field_name("redirect", &mut cursor).collect();
        for r in &redirects {
            if let Some(s) = redirect_stdin(*r, src) {
                stdin = s;
            }
            extra.extend(redirect_extra_words(*r, src));
            if r.kind() == "heredoc_redirect" {
                let mut cursor = r.walk();
                for child in r.named_children(&mut cursor) {
                    if child.kind() == "pipeline" {
                        let mut inner = child.walk();
                        later_stages.extend(child.named_children(&mut inner));
                    } else {
                        self.node(child, src, &Stdin::Inherited, depth + 1);
                    }
                }
            } else {
                self.node(*r, src, &Stdin::Inherited, depth + 1);
            }
        }
        let Some(body) = n.child_by_field_name("body") else {
            return;
        };
        let first = |scan: &mut Self, stdin: &Stdin| {
            if body.kind() == "command" {
                scan.command(body, src, stdin, &extra, depth + 1);
            } else {
                scan.node(body, src, stdin, depth + 1);
            }
        };
        self.stages(first, &later_stages, src, &stdin, depth);
    }

    fn pipeline(&mut self, n: Node<'_>, src: &str, stdin: &Stdin, depth: usize) {
        let mut cursor = n.walk();
        let stages: Vec<Node<'_>> = n.named_children(&mut cursor).collect();
        let Some((first, rest)) = stages.split_first() else {
            return;
        };
        let first = |scan: &mut Self, stdin: &Stdin| scan.node(*first, src, stdin, depth + 1);
        self.stages(first, rest, src, stdin, depth);
    }

    /// Runs the stages of a pipeline: each after the first reads the previous one's
    /// output, and what earlier stages run (a download, `find`, known text) tells what an
    /// interpreter at the end reads.
    fn stages(
        &mut self,
        first: impl FnOnce(&mut Self, &Stdin),
        rest: &[Node<'_>],
        src: &str,
        stdin: &Stdin,
        depth: usize,
    ) {
        let outer_stage = std::mem::take(&mut self.stage);
        first(self, stdin);
        let mut earlier = std::mem::take(&mut self.stage);
        let mut previous_text = earlier.text_if_alone();
        for stage in rest {
            let stage_stdin = Stdin::Pipe {
                downloads: earlier.downloads,
                finds: earlier.finds,
                text: previous_text.take(),
            };
            self.node(*stage, src, &stage_stdin, depth + 1);
            let seen = std::mem::take(&mut self.stage);
            previous_text = seen.text_if_alone();
            earlier.merge(seen);
        }
        earlier.text = None;
        self.stage = outer_stage;
        self.stage.merge(earlier);
    }

    /// `>`, `>|`, `&>` onto a file truncate it; `>>` appends. Disks and system paths count
    /// whichever way they are written.
    fn file_redirect(&mut self, n: Node<'_>, src: &str) {
        let Some(op) = operator(n) else {
            return;
        };
        let append = match op {
            ">" | ">|" | "&>" | ">&" => false,
            ">>" | "&>>" => true,
            _ => return,
        };
        let mut cursor = n.walk();
        let Some(dest) = n.children_by_field_name("destination", &mut cursor).next() else {
            return;
        };
        let word = Word::of(dest, src);
        // `>&2`, `2>&1`, `>&-`: a descriptor, not a file.
        if op == ">&" && (dest.kind() == "number" || word.text == "-") {
            return;
        }
        self.write_to(&word.text, append);
    }

    /// A fork bomb: a function that starts itself at least twice, in a pipeline or in the
    /// background, and is called outside its own body.
    fn fork_bomb(&mut self, def: Node<'_>, src: &str) {
        let (Some(name), Some(body)) = (
            def.child_by_field_name("name"),
            def.child_by_field_name("body"),
        ) else {
            return;
        };
        let name = &src[name.byte_range()];
        let mut calls = 0;
        let mut spawns = false;
        visit(body, &mut |n| {
            match n.kind() {
                "command" if command_name_text(n, src) == Some(name) => calls += 1,
                "pipeline" | "&" => spawns = true,
                _ => {}
            }
            n.kind() != "function_definition"
        });
        if calls < 2 || !spawns {
            return;
        }
        let mut root = def;
        while let Some(parent) = root.parent() {
            root = parent;
        }
        let mut called = false;
        visit(root, &mut |n| {
            if n.id() == def.id() {
                return false;
            }
            called |= n.kind() == "command" && command_name_text(n, src) == Some(name);
            true
        });
        if called {
            self.add(Rule::ForkBomb);
        }
    }
}

/// Depth-first over every child (anonymous ones too); `enter` says whether to go inside.
fn visit<'t>(node: Node<'t>, enter: &mut impl FnMut(Node<'t>) -> bool) {
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        if enter(n) {
            let mut cursor = n.walk();
            stack.extend(n.children(&mut cursor));
        }
    }
}

fn command_name_text<'s>(command: Node<'_>, src: &'s str) -> Option<&'s str> {
    command
        .child_by_field_name("name")
        .map(|n| &src[n.byte_range()])
}

/// The redirection operator (`>`, `>>`, `<`, …): the first anonymous child.
fn operator<'t>(n: Node<'t>) -> Option<&'t str> {
    let mut cursor = n.walk();
    let op = n.children(&mut cursor).find(|c| !c.is_named())?.kind();
    Some(op)
}

/// What a redirection makes the command's stdin, if it does.
fn redirect_stdin(r: Node<'_>, src: &str) -> Option<Stdin> {
    match r.kind() {
        "file_redirect" => {
            let descriptor = r
                .child_by_field_name("descriptor")
                .map(|d| &src[d.byte_range()]);
            let source = r
                .child_by_field_name("destination")
                .map(|d| Word::of(d, src).text);
            // `< /dev/stdin` leaves stdin where it was.
            let same = source.is_some_and(|s| STDIN_PATHS.contains(&s.as_str()));
            (operator(r) == Some("<") && descriptor.is_none_or(|d| d == "0") && !same)
                .then_some(Stdin::File)
        }
        "heredoc_redirect" => {
            let mut cursor = r.walk();
            let children: Vec<Node<'_>> = r.named_children(&mut cursor).collect();
            let start = children.iter().find(|c| c.kind() == "heredoc_start")?;
            let body = children.iter().find(|c| c.kind() == "heredoc_body");
            // A quoted delimiter (`<<'EOF'`) turns expansions off in the body.
            let quoted = src[start.byte_range()].contains(['\'', '"', '\\']);
            let text = body.map_or("", |b| &src[b.byte_range()]).to_owned();
            let literal = quoted
                || body.is_none_or(|b| {
                    let mut found = false;
                    visit(*b, &mut |n| {
                        found |= EXPANSION_KINDS.contains(&n.kind());
                        true
                    });
                    !found
                });
            Some(Stdin::Text(text, literal))
        }
        "herestring_redirect" => {
            let word = r.named_child(0)?;
            let word = Word::of(word, src);
            Some(Stdin::Text(word.text, !word.dynamic))
        }
        _ => None,
    }
}

/// tree-sitter-bash hangs the words after a redirection's target on the redirection
/// (`rm >/dev/null -rf /`); bash passes them to the command.
fn redirect_extra_words<'t>(r: Node<'t>, src: &str) -> Vec<Word<'t>> {
    if r.kind() != "file_redirect" {
        return Vec::new();
    }
    let mut cursor = r.walk();
    r.children_by_field_name("destination", &mut cursor)
        .skip(1)
        .map(|d| Word::of(d, src))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_word(src: &str) -> (String, bool) {
        let tree = parse(src).unwrap();
        let command = tree.root_node().named_child(0).unwrap();
        let name = command.child_by_field_name("name").unwrap();
        let w = Word::of(name.named_child(0).unwrap(), src);
        (w.text, w.dynamic)
    }

    #[test]
    fn words_are_unquoted_like_bash_does() {
        for (src, text) in [
            ("r''m x", "rm"),
            ("\"rm\" x", "rm"),
            ("\\rm x", "rm"),
            ("r\\m x", "rm"),
            ("$'\\x72m' x", "rm"),
            ("$'\\162\\155' x", "rm"),
            ("'r'\"m\" x", "rm"),
            ("\"r\\m\" x", "r\\m"),
        ] {
            assert_eq!(first_word(src), (text.to_owned(), false), "{src}");
        }
        for src in [
            "$RM x",
            "$(echo rm) x",
            "`echo rm` x",
            "\"$RM\" x",
            "${RM} x",
        ] {
            assert!(first_word(src).1, "{src} must be dynamic");
        }
    }

    #[test]
    fn double_quoted_escapes() {
        let mut out = String::new();
        unescape_double_quoted(r#"a\"b\$c\\d\e"#, &mut out);
        assert_eq!(out, r#"a"b$c\d\e"#);
    }
}
