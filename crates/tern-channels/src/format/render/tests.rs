use crate::format::{matrix_html, plain_text, telegram_html};

/// The tags Telegram's HTML parse mode accepts.
const TELEGRAM_TAGS: &[&str] = &[
    "b",
    "i",
    "u",
    "s",
    "code",
    "pre",
    "a",
    "blockquote",
    "tg-spoiler",
];

/// Every tag name in `html` (opening and closing), and checks they nest properly.
fn tags(html: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>').expect("a tag is closed");
        let tag = &after[..close];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let void = matches!(name.as_str(), "br" | "hr");
        if closing {
            assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "{html}");
        } else if !void {
            stack.push(name.clone());
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    assert!(stack.is_empty(), "unclosed {stack:?} in {html}");
    names
}

fn assert_telegram_tags_only(html: &str) {
    for name in tags(html) {
        assert!(TELEGRAM_TAGS.contains(&name.as_str()), "<{name}> in {html}");
    }
}

#[test]
fn telegram_inline_markup() {
    assert_eq!(
        telegram_html("**bold** *it* ~~gone~~ `a<b` [site](https://example.org/?a=1&b=2)"),
        "<b>bold</b> <i>it</i> <s>gone</s> <code>a&lt;b</code> \
         <a href=\"https://example.org/?a=1&amp;b=2\">site</a>"
    );
    assert_eq!(telegram_html("a & b < c > d"), "a &amp; b &lt; c &gt; d");
    assert_eq!(telegram_html("***both***"), "<i><b>both</b></i>");
}

#[test]
fn telegram_blocks() {
    let md = "# Title\n\nSome text.\n\n- one\n- two\n  - nested\n\n1. first\n2. second\n\n\
              > quoted\n> more\n\n---\n\n```rust\nfn main() {}\n```\n\n    indented\n";
    let html = telegram_html(md);
    assert_eq!(
        html,
        "<b>Title</b>\n\nSome text.\n\n• one\n• two\n  • nested\n\n1. first\n2. second\n\n\
         <blockquote>quoted\nmore</blockquote>\n\n──────────\n\n\
         <pre><code class=\"language-rust\">fn main() {}</code></pre>\n\n<pre>indented</pre>"
    );
    assert_telegram_tags_only(&html);
}

#[test]
fn telegram_loose_lists_and_numbering() {
    assert_eq!(
        telegram_html("3. three\n\n   still three\n4. four\n"),
        "3. three\n   still three\n4. four"
    );
    assert_eq!(
        telegram_html("- [x] done\n- [ ] todo\n"),
        "• ☑ done\n• ☐ todo"
    );
}

#[test]
fn telegram_tables_are_pre_blocks_of_plain_cells() {
    let md = "| name | n |\n|:-----|--:|\n| **a** | 1 |\n| b<c | 22 |\n";
    let html = telegram_html(md);
    assert_eq!(
        html,
        "<pre>name |  n\n-----|---\na    |  1\nb&lt;c  | 22</pre>"
    );
    assert_telegram_tags_only(&html);
}

#[test]
fn images_become_links() {
    assert_eq!(
        telegram_html("![a cat](https://img.example/cat.png)"),
        "<a href=\"https://img.example/cat.png\">a cat</a>"
    );
    assert_eq!(
        telegram_html("![](https://img.example/cat.png)"),
        "<a href=\"https://img.example/cat.png\">https://img.example/cat.png</a>"
    );
    assert_eq!(
        matrix_html("![a cat](https://img.example/cat.png)"),
        "<p><a href=\"https://img.example/cat.png\">a cat</a></p>"
    );
    assert_eq!(
        plain_text("![a cat](https://img.example/cat.png)"),
        "a cat (https://img.example/cat.png)"
    );
    assert_eq!(telegram_html("![](javascript:alert(1))"), "[image]");
}

#[test]
fn raw_html_is_escaped_never_passed_through() {
    let md =
        "<script>alert(1)</script>\n\nhi <b onclick=\"x()\">there</b> <img src=x onerror=alert(1)>";
    for html in [telegram_html(md), matrix_html(md)] {
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b onclick"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;b onclick=&quot;x()&quot;&gt;there&lt;/b&gt;"),
            "{html}"
        );
        tags(&html);
    }
    assert_telegram_tags_only(&telegram_html(md));
    // Plain text keeps what the model wrote, as text.
    assert!(plain_text(md).contains("<script>alert(1)</script>"));
}

#[test]
fn dangerous_links_are_their_text() {
    for md in [
        "[click](javascript:alert(1))",
        "[click](JAVASCRIPT:alert(1))",
        "[click](data:text/html;base64,PHNjcmlwdD4=)",
        "[click](vbscript:msgbox)",
        "[click](/etc/passwd)",
        "[click](<java\tscript:alert(1)>)",
    ] {
        for html in [telegram_html(md), matrix_html(md)] {
            assert!(!html.contains("href"), "{md}: {html}");
            assert!(html.contains("click"), "{md}: {html}");
        }
        assert_eq!(plain_text(md), "click", "{md}");
    }
    // A quote in the URL cannot end the attribute.
    let html = telegram_html("[x](https://a.example/\"onmouseover=\"alert(1))");
    assert!(
        html.starts_with("<a href=\"https://a.example/&quot;onmouseover=&quot;alert(1)\">"),
        "{html}"
    );
    // Autolinks and e-mail addresses.
    assert_eq!(
        telegram_html("<https://a.example> <me@b.example>"),
        "<a href=\"https://a.example\">https://a.example</a> \
         <a href=\"mailto:me@b.example\">me@b.example</a>"
    );
    assert_eq!(
        plain_text("<https://a.example> <me@b.example>"),
        "https://a.example me@b.example"
    );
    assert_eq!(
        plain_text("[docs](https://a.example/d) and [tg](tg://resolve?domain=x)"),
        "docs (https://a.example/d) and tg",
        "a tg: link is only its text"
    );
}

#[test]
fn unbalanced_markup_is_text() {
    assert_eq!(telegram_html("2 * 3 = 6 and *oops"), "2 * 3 = 6 and *oops");
    assert_eq!(telegram_html("**not closed"), "**not closed");
    assert_eq!(telegram_html("`tick"), "`tick");
    assert_eq!(telegram_html("a_b_c snake_case"), "a_b_c snake_case");
    let html = telegram_html("*a **b* c**");
    tags(&html);
    assert_telegram_tags_only(&html);
    // An unclosed fence runs to the end, as CommonMark says.
    assert_eq!(telegram_html("```\ncode <x>"), "<pre>code &lt;x&gt;</pre>");
    // Only the fence's first word is its language, and only when it is a plain word.
    assert_eq!(
        telegram_html("```py\" onclick=\"x\nprint()\n```"),
        "<pre>print()</pre>"
    );
}

#[test]
fn telegram_nested_quotes_use_one_blockquote() {
    let html = telegram_html("> outer\n>\n> > inner\n");
    assert_eq!(html, "<blockquote>outer\n\ninner</blockquote>");
}

#[test]
fn hostile_inputs_always_give_well_formed_telegram_html() {
    for md in [
        "<",
        "&",
        "</b>",
        "<b>",
        "*",
        "**",
        "_*_*",
        "[",
        "[](",
        "[a](",
        "![",
        "> <pre>",
        "| a |\n|---|\n| <b> |",
        "```\n</pre><b>",
        "- <li>\n- </ul>",
        "# <h1>",
        "&amp;lt;",
        "\\<b\\>",
        "<!-- comment -->",
        "<![CDATA[x]]>",
    ] {
        let html = telegram_html(md);
        assert_telegram_tags_only(&html);
        let html = matrix_html(md);
        tags(&html);
    }
}

#[test]
fn matrix_blocks() {
    let md = "## Plan\n\nDo **this** then *that*.\n\n- a\n- b\n\n3. c\n4. d\n\n> q\n\n\
              ```sh\nls -l\n```\n\n| h1 | h2 |\n|---|:-:|\n| x | y |\n\nline one  \nline two\n\n***\n";
    let html = matrix_html(md);
    assert_eq!(
        html,
        "<h2>Plan</h2><p>Do <strong>this</strong> then <em>that</em>.</p>\
         <ul><li>a</li><li>b</li></ul><ol start=\"3\"><li>c</li><li>d</li></ol>\
         <blockquote><p>q</p></blockquote>\
         <pre><code class=\"language-sh\">ls -l</code></pre>\
         <table><thead><tr><th>h1</th><th align=\"center\">h2</th></tr></thead>\
         <tbody><tr><td>x</td><td align=\"center\">y</td></tr></tbody></table>\
         <p>line one<br>\nline two</p><hr>"
    );
    tags(&html);
    assert_eq!(
        matrix_html("~~x~~ `y`"),
        "<p><del>x</del> <code>y</code></p>"
    );
}

#[test]
fn plain_text_is_readable() {
    let md = "# Title\n\nSome **bold** and `code`.\n\n- one\n- two\n  1. a\n  2. b\n\n\
              > quoted\n> > deeper\n\n```\nlet x = 1;\n```\n\n| a | bb |\n|---|---|\n| 1 | 2 |\n";
    assert_eq!(
        plain_text(md),
        "Title\n\nSome bold and code.\n\n• one\n• two\n  1. a\n  2. b\n\n\
         > quoted\n>\n> > deeper\n\nlet x = 1;\n\na | bb\n--|---\n1 | 2"
    );
    assert_eq!(plain_text(""), "");
    assert_eq!(plain_text("a &amp; b"), "a & b");
}

/// Checks one tag's inside (`a href="…"`, `/b`, …) against what the flavor may emit.
fn assert_tag_allowed(tag: &str, telegram: bool, html: &str) {
    let closing = tag.starts_with('/');
    let tag = tag.trim_start_matches('/');
    let (name, attrs) = tag.split_once(' ').unwrap_or((tag, ""));
    let allowed_attr = match name {
        _ if closing => attrs.is_empty(),
        "a" => {
            let href = attrs.trim_start_matches("href=\"").to_ascii_lowercase();
            attrs.starts_with("href=\"")
                && attrs.ends_with('"')
                && ["http://", "https://", "tg:", "mailto:"]
                    .iter()
                    .any(|scheme| href.starts_with(scheme))
        }
        "code" => attrs.is_empty() || attrs.starts_with("class=\"language-"),
        "ol" if !telegram => attrs.is_empty() || attrs.starts_with("start=\""),
        "th" | "td" if !telegram => attrs.is_empty() || attrs.starts_with("align=\""),
        _ => attrs.is_empty(),
    };
    assert!(allowed_attr, "<{tag}> in {html}");
    // The attribute's value holds no quote of its own: nothing can follow it.
    if let Some(value) = attrs.split_once('"').map(|(_, v)| v) {
        assert_eq!(value.matches('"').count(), 1, "<{tag}> in {html}");
    }
    let matrix_tags = [
        "p",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "strong",
        "em",
        "del",
        "code",
        "pre",
        "a",
        "blockquote",
        "ul",
        "ol",
        "li",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "hr",
        "br",
    ];
    let known = if telegram {
        TELEGRAM_TAGS.contains(&name)
    } else {
        matrix_tags.contains(&name)
    };
    assert!(known, "<{tag}> in {html}");
}

/// Generated text full of markup, half-markup and HTML: whatever the model writes, the
/// output's tags are the renderer's own, well nested, with the attributes it sets.
#[test]
fn generated_hostile_inputs_never_inject_tags() {
    const PIECES: &[&str] = &[
        "<script>",
        "</script>",
        "<b>",
        "</pre>",
        "<a href=\"javascript:x\">",
        "<img src=x>",
        "<!--",
        "-->",
        "&",
        "&amp;",
        "&#60;",
        "\"",
        "'",
        "*",
        "**",
        "_",
        "__",
        "~~",
        "`",
        "```",
        "```js\" x=\"",
        "[",
        "]",
        "(",
        ")",
        "](",
        "](javascript:alert(1))",
        "](http://a.example/\"x)",
        "![",
        "<http://a.example>",
        "<me@b.example>",
        "\n",
        "\n\n",
        "> ",
        "- ",
        "1. ",
        "# ",
        "| a | b |\n|---|---|\n",
        "|",
        "    ",
        "\\",
        "word",
        "é",
        "🦀",
        "[x]: http://ref.example",
        "[x]",
        "- [ ] ",
        "---",
        "<tg-spoiler>",
        "||",
    ];
    let mut rng = fastrand::Rng::with_seed(1515);
    for _ in 0..1500 {
        let md: String = (0..rng.usize(1..40))
            .map(|_| PIECES[rng.usize(..PIECES.len())])
            .collect();
        for (telegram, html) in [(true, telegram_html(&md)), (false, matrix_html(&md))] {
            tags(&html);
            let mut rest = html.as_str();
            while let Some(open) = rest.find('<') {
                let after = &rest[open + 1..];
                let close = after.find('>').unwrap();
                assert_tag_allowed(&after[..close], telegram, &html);
                rest = &after[close + 1..];
            }
        }
        // Plain text is text: whatever it holds is the model's to show.
        plain_text(&md);
    }
}
