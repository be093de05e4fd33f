//! [`split`]: a long reply cut into chunks a platform accepts.
//!
//! Greedy: each chunk takes as much as fits, cut at the best boundary in its window — the end
//! of the text, then a blank line, a line break, a sentence's end, a space, and only then the
//! middle of a word. A cut in the first half of the window is taken only when the second half
//! has no boundary at all, so chunks stay long. Fenced code blocks are found line by line
//! (CommonMark's rule: up to three spaces, then three or more backticks or tildes, closed by
//! the same character at least as many times); a chunk that ends inside one gets a closing
//! fence, and the next chunk starts with the block's opening line again.

/// One fenced code block.
struct Fence {
    /// The opening line without its indentation, e.g. ```` ```python ````; what reopens it.
    open_line: String,
    /// The fence characters, e.g. ```` ``` ````; what closes it.
    marker: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Outside,
    Open(usize),
    Content(usize),
    Close(usize),
}

struct Doc {
    chars: Vec<char>,
    /// The line of each character (a line's `\n` belongs to it).
    line_of: Vec<usize>,
    kinds: Vec<LineKind>,
    fences: Vec<Fence>,
    /// For each index `i` (0..=n): the end of the text before `i` with trailing whitespace
    /// removed.
    trimmed_end: Vec<usize>,
    /// For each index `i`: the first non-whitespace character at or after `i` (or `n`).
    next_non_ws: Vec<usize>,
    /// For each index `i`: one past the last `\n` before `i`, or 0.
    after_last_newline: Vec<usize>,
}

impl Doc {
    fn new(text: &str) -> Doc {
        let chars: Vec<char> = text.chars().collect();
        let n = chars.len();
        let mut line_of = Vec::with_capacity(n);
        let mut kinds = Vec::new();
        let mut fences: Vec<Fence> = Vec::new();
        let mut open: Option<usize> = None;
        let mut start = 0;
        while start < n {
            let end = chars[start..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(n, |p| start + p + 1);
            let line: String = chars[start..end].iter().collect();
            let line = line.trim_end_matches(['\n', '\r']);
            let kind = match open {
                Some(f) if closes(line, &fences[f].marker) => {
                    open = None;
                    LineKind::Close(f)
                }
                Some(f) => LineKind::Content(f),
                None => match opening(line) {
                    Some(fence) => {
                        fences.push(fence);
                        open = Some(fences.len() - 1);
                        LineKind::Open(fences.len() - 1)
                    }
                    None => LineKind::Outside,
                },
            };
            line_of.extend(std::iter::repeat_n(kinds.len(), end - start));
            kinds.push(kind);
            start = end;
        }

        let mut trimmed_end = vec![0; n + 1];
        for i in 1..=n {
            trimmed_end[i] = if chars[i - 1].is_whitespace() {
                trimmed_end[i - 1]
            } else {
                i
            };
        }
        let mut next_non_ws = vec![n; n + 1];
        for i in (0..n).rev() {
            next_non_ws[i] = if chars[i].is_whitespace() {
                next_non_ws[i + 1]
            } else {
                i
            };
        }
        let mut after_last_newline = vec![0; n + 1];
        for i in 1..=n {
            after_last_newline[i] = if chars[i - 1] == '\n' {
                i
            } else {
                after_last_newline[i - 1]
            };
        }
        Doc {
            chars,
            line_of,
            kinds,
            fences,
            trimmed_end,
            next_non_ws,
            after_last_newline,
        }
    }

    fn kind_at(&self, i: usize) -> LineKind {
        self.line_of
            .get(i)
            .and_then(|l| self.kinds.get(*l))
            .copied()
            .unwrap_or(LineKind::Outside)
    }

    /// Where the chunk after a cut at `i` starts: past the whitespace at the cut, but keeping
    /// the indentation of the line it starts on (it may be a nested list or code).
    fn next_start(&self, i: usize) -> usize {
        let j = self.next_non_ws[i];
        if j == self.chars.len() {
            return j;
        }
        let line_start = self.after_last_newline[j];
        if line_start > i { line_start } else { j }
    }

    /// The fence a chunk starting at `pos` must reopen.
    fn open_fence_at(&self, pos: usize) -> Option<usize> {
        match self.kind_at(pos) {
            LineKind::Content(f) | LineKind::Close(f) => Some(f),
            _ => None,
        }
    }

    /// The fence a chunk whose text ends at `end` (exclusive, trimmed) leaves open.
    fn open_fence_before(&self, end: usize) -> Option<usize> {
        match end.checked_sub(1).map(|i| self.kind_at(i)) {
            Some(LineKind::Open(f) | LineKind::Content(f)) => Some(f),
            _ => None,
        }
    }

    /// Whether `i` is inside (not at the end of) a fence's opening or closing line.
    fn inside_fence_line(&self, i: usize) -> bool {
        let at_line_end = i == 0 || self.chars.get(i - 1) == Some(&'\n');
        !at_line_end
            && matches!(self.kind_at(i - 1), LineKind::Open(_) | LineKind::Close(_))
            && self.chars.get(i).is_some_and(|c| *c != '\n')
    }

    fn text(&self, from: usize, to: usize) -> String {
        self.chars[from..to].iter().collect()
    }
}

/// An opening fence line: up to three spaces, three or more `` ` `` or `~`, then an info
/// string (without backticks, for a backtick fence).
fn opening(line: &str) -> Option<Fence> {
    let rest = line.trim_start_matches(' ');
    if line.len() - rest.len() > 3 {
        return None;
    }
    let c = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let count = rest.chars().take_while(|&x| x == c).count();
    let info = &rest[count..];
    if count < 3 || (c == '`' && info.contains('`')) {
        return None;
    }
    Some(Fence {
        open_line: rest.trim_end().to_owned(),
        marker: rest[..count].to_owned(),
    })
}

/// Whether `line` closes a fence of `marker`: up to three spaces, at least as many of the
/// same character, nothing else but spaces.
fn closes(line: &str, marker: &str) -> bool {
    let rest = line.trim_start_matches(' ');
    let Some(c) = marker.chars().next() else {
        return false;
    };
    let count = rest.chars().take_while(|&x| x == c).count();
    line.len() - rest.len() <= 3
        && count >= marker.chars().count()
        && rest[count..].trim().is_empty()
}

/// How good a cut is; lower is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    End,
    Paragraph,
    Line,
    Sentence,
    Word,
    Hard,
}

struct Candidate {
    /// The cut: the chunk's text is `pos..end` trimmed, the next chunk starts after the
    /// whitespace at `cut`.
    cut: usize,
    end: usize,
    level: Level,
    /// The fence the chunk closes at its end.
    close: Option<usize>,
    len: usize,
}

pub(super) fn split(markdown: &str, max_chars: usize) -> Vec<String> {
    let max = max_chars.max(1);
    let doc = Doc::new(markdown);
    let n = doc.chars.len();
    let mut chunks = Vec::new();
    // The first line keeps its indentation, as after any cut.
    let mut pos = doc.after_last_newline[doc.next_non_ws[0]];
    while pos < n {
        let (chunk, next) = next_chunk(&doc, pos, max, true)
            .or_else(|| next_chunk(&doc, pos, max, false))
            .unwrap_or_else(|| {
                // Unreached: without fence repair one character always fits.
                let end = pos.saturating_add(max).min(n);
                (doc.text(pos, end), doc.next_start(end))
            });
        if !chunk.trim().is_empty() {
            chunks.push(chunk);
        }
        pos = next.max(pos + 1);
    }
    chunks
}

/// The chunk starting at `pos` and where the next one starts. With `repair`, fences cut by
/// the chunk are closed and reopened; `None` when that leaves no room for any text.
fn next_chunk(doc: &Doc, pos: usize, max: usize, repair: bool) -> Option<(String, usize)> {
    let n = doc.chars.len();
    let reopen = if repair { doc.open_fence_at(pos) } else { None };
    let reopen_len = reopen.map_or(0, |f| doc.fences[f].open_line.chars().count() + 1);
    let budget = max.checked_sub(reopen_len)?;
    let mut candidates = Vec::new();
    for cut in (pos + 1)..=n.min(pos.saturating_add(budget)) {
        let end = doc.trimmed_end[cut];
        // Half a fence line breaks the fence it belongs to: no repair can mend that.
        if end <= pos || (repair && doc.inside_fence_line(cut)) {
            continue;
        }
        let rest_after = doc.next_start(cut) < n;
        let close = if repair && rest_after {
            doc.open_fence_before(end)
        } else {
            None
        };
        let close_len = close.map_or(0, |f| doc.fences[f].marker.chars().count() + 1);
        let len = end - pos;
        if reopen_len + len + close_len > max {
            continue;
        }
        let level = if !rest_after {
            Level::End
        } else {
            let c = doc.chars.get(cut).copied().unwrap_or('\n');
            let before = doc.chars[end - 1];
            if c == '\n' {
                let next_line_blank = doc.next_non_ws[cut + 1..]
                    .first()
                    .is_none_or(|&j| doc.after_last_newline[j] > cut + 1);
                if next_line_blank || doc.after_last_newline[cut] > doc.trimmed_end[cut] {
                    Level::Paragraph
                } else {
                    Level::Line
                }
            } else if c.is_whitespace() {
                let sentence_end = matches!(before, '.' | '!' | '?' | '…' | ':' | ';')
                    || (matches!(before, ')' | '"' | '\'' | '”' | '’')
                        && end >= 2
                        && matches!(doc.chars[end - 2], '.' | '!' | '?'));
                if sentence_end {
                    Level::Sentence
                } else {
                    Level::Word
                }
            } else if doc.chars[cut - 1].is_whitespace() {
                // The window ends just past a space: the cut is that space's.
                Level::Word
            } else {
                Level::Hard
            }
        };
        candidates.push(Candidate {
            cut,
            end,
            level,
            close,
            len,
        });
    }
    let half = budget / 2;
    candidates.sort_by_key(|c| {
        (
            c.level != Level::End && c.len < half,
            c.level,
            std::cmp::Reverse(c.cut),
        )
    });
    let flawed = |c: &Candidate| {
        // An empty code block at the end of this chunk or at the start of the next one:
        // fine to render, but a cut elsewhere reads better.
        matches!(doc.kind_at(c.end - 1), LineKind::Open(_))
            || (c.close.is_some()
                && matches!(doc.kind_at(doc.next_start(c.cut)), LineKind::Close(_)))
    };
    let best = candidates
        .iter()
        .find(|c| !flawed(c))
        .or(candidates.first())?;

    let mut chunk = String::new();
    if let Some(f) = reopen {
        chunk.push_str(&doc.fences[f].open_line);
        chunk.push('\n');
    }
    chunk.push_str(&doc.text(pos, best.end));
    if let Some(f) = best.close {
        chunk.push('\n');
        chunk.push_str(&doc.fences[f].marker);
    }
    Some((chunk, doc.next_start(best.cut)))
}

#[cfg(test)]
mod tests;
