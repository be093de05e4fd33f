//! One walk over `pulldown-cmark`'s events for all three outputs ([`Flavor`]).
//!
//! Blocks that change how their content is laid out (quotes, list items, tables, code) are
//! rendered into a buffer of their own and placed when they end: a plain-text quote prefixes
//! its lines, a list item indents its continuation lines under its marker, a table needs every
//! cell before it knows its column widths.

use pulldown_cmark::{Alignment, CodeBlockKind, Event, LinkType, Options, Parser, Tag, TagEnd};

use super::{escape_html, safe_href};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavor {
    Telegram,
    Matrix,
    Plain,
}

pub(super) fn render(markdown: &str, flavor: Flavor) -> String {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut r = Renderer::new(flavor);
    for event in Parser::new_ext(markdown, options) {
        r.event(event);
    }
    r.finish()
}

/// The output of the innermost frame.
fn innermost(frames: &mut Vec<Frame>) -> &mut String {
    if frames.is_empty() {
        // Not reached: the document frame is never popped; keep a frame to write to.
        frames.push(Frame {
            kind: FrameKind::Document,
            out: String::new(),
        });
    }
    let last = frames.len() - 1;
    &mut frames[last].out
}

/// The line a rule becomes in text.
const RULE: &str = "──────────";

enum FrameKind {
    Document,
    Quote,
    Item { marker: String },
}

struct Frame {
    kind: FrameKind,
    out: String,
}

struct LinkFrame {
    href: Option<String>,
    /// Where the link's text starts in the output it is written to.
    start: usize,
    image: bool,
}

struct Table {
    alignments: Vec<Alignment>,
    /// Rows of cells; the first is the header.
    rows: Vec<Vec<String>>,
    cell: Option<String>,
}

struct Code {
    language: Option<String>,
    text: String,
}

struct Renderer {
    flavor: Flavor,
    frames: Vec<Frame>,
    /// Open lists: the next number of an ordered one, `None` for bullets.
    lists: Vec<Option<u64>>,
    links: Vec<LinkFrame>,
    quote_depth: usize,
    code: Option<Code>,
    table: Option<Table>,
}

impl Renderer {
    fn new(flavor: Flavor) -> Self {
        Renderer {
            flavor,
            frames: vec![Frame {
                kind: FrameKind::Document,
                out: String::new(),
            }],
            lists: Vec::new(),
            links: Vec::new(),
            quote_depth: 0,
            code: None,
            table: None,
        }
    }

    /// The flavor inline content is written in: a Telegram table is a `<pre>` block, which
    /// may hold no other tags, so its cells are plain text (escaped when the table is placed).
    fn inline_flavor(&self) -> Flavor {
        let in_cell = self.table.as_ref().is_some_and(|t| t.cell.is_some());
        if in_cell && self.flavor == Flavor::Telegram {
            Flavor::Plain
        } else {
            self.flavor
        }
    }

    /// Where inline content goes: the open table cell, else the innermost frame.
    fn out(&mut self) -> &mut String {
        let Renderer { table, frames, .. } = self;
        match table.as_mut().and_then(|t| t.cell.as_mut()) {
            Some(cell) => cell,
            None => innermost(frames),
        }
    }

    fn frame_out(&mut self) -> &mut String {
        innermost(&mut self.frames)
    }

    fn push(&mut self, s: &str) {
        self.out().push_str(s);
    }

    /// Text from the markdown: escaped unless the output is plain.
    fn text(&mut self, text: &str) {
        if let Some(code) = &mut self.code {
            code.text.push_str(text);
            return;
        }
        let html = self.inline_flavor() != Flavor::Plain;
        let out = self.out();
        if html {
            escape_html(text, out);
        } else {
            out.push_str(text);
        }
    }

    /// Separates a new block from what precedes it in its frame: a blank line in text (a
    /// single line break inside a list item), nothing in HTML, whose tags separate blocks.
    fn block_start(&mut self) {
        if self.flavor == Flavor::Matrix {
            return;
        }
        let in_item = matches!(
            self.frames.last().map(|f| &f.kind),
            Some(FrameKind::Item { .. })
        );
        let want = if in_item { 1 } else { 2 };
        let out = self.frame_out();
        if out.is_empty() {
            return;
        }
        let have = out.len() - out.trim_end_matches('\n').len();
        for _ in have..want {
            out.push('\n');
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => match self.inline_flavor() {
                Flavor::Plain => self.push(&code),
                _ => {
                    self.push("<code>");
                    self.text(&code);
                    self.push("</code>");
                }
            },
            // Raw HTML is the model's text, shown as written; never markup.
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
            Event::SoftBreak => self.push("\n"),
            Event::HardBreak => match self.inline_flavor() {
                Flavor::Matrix => self.push("<br>\n"),
                _ => self.push("\n"),
            },
            Event::Rule => {
                self.block_start();
                match self.flavor {
                    Flavor::Matrix => self.push("<hr>"),
                    _ => self.push(RULE),
                }
            }
            Event::TaskListMarker(done) => match (self.flavor, done) {
                (Flavor::Plain, true) => self.push("[x] "),
                (Flavor::Plain, false) => self.push("[ ] "),
                (_, true) => self.push("☑ "),
                (_, false) => self.push("☐ "),
            },
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        let flavor = self.inline_flavor();
        match tag {
            Tag::Paragraph => {
                self.block_start();
                if flavor == Flavor::Matrix {
                    self.push("<p>");
                }
            }
            Tag::Heading { level, .. } => {
                self.block_start();
                match flavor {
                    Flavor::Telegram => self.push("<b>"),
                    Flavor::Matrix => self.push(&format!("<{level}>")),
                    Flavor::Plain => {}
                }
            }
            Tag::BlockQuote(_) => {
                self.block_start();
                self.quote_depth += 1;
                self.frames.push(Frame {
                    kind: FrameKind::Quote,
                    out: String::new(),
                });
            }
            Tag::CodeBlock(kind) => {
                self.block_start();
                let language = match kind {
                    CodeBlockKind::Fenced(info) => language_of(&info),
                    CodeBlockKind::Indented => None,
                };
                self.code = Some(Code {
                    language,
                    text: String::new(),
                });
            }
            Tag::HtmlBlock => {
                self.block_start();
                if flavor == Flavor::Matrix {
                    self.push("<p>");
                }
            }
            Tag::List(start) => {
                self.block_start();
                self.lists.push(start);
                if flavor == Flavor::Matrix {
                    match start {
                        None => self.push("<ul>"),
                        Some(1) => self.push("<ol>"),
                        Some(n) => self.push(&format!("<ol start=\"{n}\">")),
                    }
                }
            }
            Tag::Item => {
                if flavor == Flavor::Matrix {
                    self.push("<li>");
                    return;
                }
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let marker = format!("{n}. ");
                        *n += 1;
                        marker
                    }
                    _ => "• ".to_owned(),
                };
                self.frames.push(Frame {
                    kind: FrameKind::Item { marker },
                    out: String::new(),
                });
            }
            Tag::Table(alignments) => {
                self.block_start();
                self.table = Some(Table {
                    alignments,
                    rows: Vec::new(),
                    cell: None,
                });
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(t) = &mut self.table {
                    t.rows.push(Vec::new());
                }
            }
            Tag::TableCell => {
                if let Some(t) = &mut self.table {
                    t.cell = Some(String::new());
                }
            }
            Tag::Emphasis => self.inline_tag(flavor, "<i>", "<em>"),
            Tag::Strong => self.inline_tag(flavor, "<b>", "<strong>"),
            Tag::Strikethrough => self.inline_tag(flavor, "<s>", "<del>"),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => self.link_start(flavor, &dest_url, link_type, false),
            Tag::Image {
                link_type,
                dest_url,
                ..
            } => self.link_start(flavor, &dest_url, link_type, true),
            // Not enabled in the parser's options; their content is shown as text.
            Tag::FootnoteDefinition(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_) => self.block_start(),
            Tag::Superscript | Tag::Subscript => {}
        }
    }

    fn inline_tag(&mut self, flavor: Flavor, telegram: &str, matrix: &str) {
        match flavor {
            Flavor::Telegram => self.push(telegram),
            Flavor::Matrix => self.push(matrix),
            Flavor::Plain => {}
        }
    }

    fn link_start(&mut self, flavor: Flavor, url: &str, link_type: LinkType, image: bool) {
        let href = safe_href(url, link_type == LinkType::Email);
        if let (Some(href), Flavor::Telegram | Flavor::Matrix) = (&href, flavor) {
            let mut tag = String::from("<a href=\"");
            escape_html(href, &mut tag);
            tag.push_str("\">");
            self.push(&tag);
        }
        let start = self.out().len();
        self.links.push(LinkFrame { href, start, image });
    }

    fn link_end(&mut self, flavor: Flavor) {
        let Some(link) = self.links.pop() else { return };
        let html = flavor != Flavor::Plain;
        let written = self.out().get(link.start..).unwrap_or("").to_owned();
        match (link.href, html) {
            (Some(href), true) => {
                if written.is_empty() {
                    self.text(&href);
                }
                self.push("</a>");
            }
            (Some(href), false) => {
                let shown = href.strip_prefix("mailto:").unwrap_or(&href);
                if written.is_empty() {
                    self.push(&href);
                } else if written != href && written != shown {
                    self.push(&format!(" ({href})"));
                }
            }
            (None, _) if written.is_empty() && link.image => self.text("[image]"),
            (None, _) => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        let flavor = self.inline_flavor();
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock => {
                if flavor == Flavor::Matrix {
                    self.push("</p>");
                }
            }
            TagEnd::Heading(level) => match flavor {
                Flavor::Telegram => self.push("</b>"),
                Flavor::Matrix => self.push(&format!("</{level}>")),
                Flavor::Plain => {}
            },
            TagEnd::BlockQuote(_) => self.quote_end(),
            TagEnd::CodeBlock => self.code_end(),
            TagEnd::List(ordered) => {
                self.lists.pop();
                if flavor == Flavor::Matrix {
                    self.push(if ordered { "</ol>" } else { "</ul>" });
                }
            }
            TagEnd::Item => self.item_end(),
            TagEnd::Table => self.table_end(),
            TagEnd::TableCell => {
                if let Some(t) = &mut self.table
                    && let Some(cell) = t.cell.take()
                    && let Some(row) = t.rows.last_mut()
                {
                    row.push(cell);
                }
            }
            TagEnd::TableHead | TagEnd::TableRow => {}
            TagEnd::Emphasis => self.inline_tag(flavor, "</i>", "</em>"),
            TagEnd::Strong => self.inline_tag(flavor, "</b>", "</strong>"),
            TagEnd::Strikethrough => self.inline_tag(flavor, "</s>", "</del>"),
            TagEnd::Link | TagEnd::Image => self.link_end(flavor),
            TagEnd::FootnoteDefinition
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::MetadataBlock(_)
            | TagEnd::Superscript
            | TagEnd::Subscript => {}
        }
    }

    fn pop_frame(&mut self) -> Frame {
        if self.frames.len() > 1
            && let Some(frame) = self.frames.pop()
        {
            return frame;
        }
        // Not reached (starts and ends pair up): an empty frame keeps the output intact.
        Frame {
            kind: FrameKind::Document,
            out: String::new(),
        }
    }

    fn quote_end(&mut self) {
        let frame = self.pop_frame();
        let content = frame.out.trim_end_matches('\n');
        self.quote_depth = self.quote_depth.saturating_sub(1);
        match self.flavor {
            Flavor::Matrix => {
                let html = format!("<blockquote>{content}</blockquote>");
                self.push(&html);
            }
            // Telegram refuses a blockquote inside another: the outer one stands for both.
            Flavor::Telegram if self.quote_depth > 0 => {
                let content = content.to_owned();
                self.push(&content);
            }
            Flavor::Telegram => {
                let html = format!("<blockquote>{content}</blockquote>");
                self.push(&html);
            }
            Flavor::Plain => {
                let quoted: Vec<String> = content
                    .lines()
                    .map(|l| {
                        if l.is_empty() {
                            ">".to_owned()
                        } else {
                            format!("> {l}")
                        }
                    })
                    .collect();
                let quoted = quoted.join("\n");
                self.push(&quoted);
            }
        }
    }

    fn item_end(&mut self) {
        if self.flavor == Flavor::Matrix {
            self.push("</li>");
            return;
        }
        let frame = self.pop_frame();
        let FrameKind::Item { marker } = frame.kind else {
            return;
        };
        let content = frame.out.trim_matches('\n');
        let indent = " ".repeat(marker.chars().count());
        let mut text = marker;
        for (i, line) in content.lines().enumerate() {
            if i > 0 {
                text.push('\n');
                if !line.is_empty() {
                    text.push_str(&indent);
                }
            }
            text.push_str(line);
        }
        let out = self.frame_out();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&text);
    }

    fn code_end(&mut self) {
        let Some(code) = self.code.take() else { return };
        let body = code.text.strip_suffix('\n').unwrap_or(&code.text);
        let mut html = String::new();
        match (self.flavor, &code.language) {
            (Flavor::Plain, _) => html.push_str(body),
            (Flavor::Telegram, None) => {
                html.push_str("<pre>");
                escape_html(body, &mut html);
                html.push_str("</pre>");
            }
            (_, language) => {
                html.push_str("<pre><code");
                if let Some(language) = language {
                    html.push_str(" class=\"language-");
                    escape_html(language, &mut html);
                    html.push('"');
                }
                html.push('>');
                escape_html(body, &mut html);
                html.push_str("</code></pre>");
            }
        }
        self.push(&html);
    }

    fn table_end(&mut self) {
        let Some(table) = self.table.take() else {
            return;
        };
        let rendered = match self.flavor {
            Flavor::Matrix => table_html(&table),
            Flavor::Telegram => {
                let mut html = String::from("<pre>");
                escape_html(&table_text(&table), &mut html);
                html.push_str("</pre>");
                html
            }
            Flavor::Plain => table_text(&table),
        };
        self.push(&rendered);
    }

    fn finish(mut self) -> String {
        while self.frames.len() > 1 {
            // Unreached for a parser's well-paired events; keep whatever was written.
            let frame = self.pop_frame();
            self.push(&frame.out);
        }
        let out = self.frame_out();
        let end = out.trim_end().len();
        out.truncate(end);
        std::mem::take(out)
    }
}

/// The language of a fenced block's info string (`rust ignore` → `rust`), if it is a plain
/// word: anything else would not be a language name, and goes in an attribute.
fn language_of(info: &str) -> Option<String> {
    let word = info.split_whitespace().next()?;
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '.' | '#'));
    (plain && word.len() <= 32).then(|| word.to_owned())
}

/// A table as aligned columns of text, the header underlined.
fn table_text(table: &Table) -> String {
    let columns = table.rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in &table.rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.trim().chars().count());
        }
    }
    let mut lines = Vec::new();
    for (r, row) in table.rows.iter().enumerate() {
        let cells: Vec<String> = (0..columns)
            .map(|i| {
                let cell = row.get(i).map_or("", |c| c.trim());
                let pad = widths[i] - cell.chars().count();
                match table.alignments.get(i) {
                    Some(Alignment::Right) => format!("{}{cell}", " ".repeat(pad)),
                    Some(Alignment::Center) => {
                        format!("{}{cell}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
                    }
                    _ => format!("{cell}{}", " ".repeat(pad)),
                }
            })
            .collect();
        lines.push(cells.join(" | ").trim_end().to_owned());
        if r == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat((*w).max(1))).collect();
            lines.push(rule.join("-|-"));
        }
    }
    lines.join("\n")
}

fn table_html(table: &Table) -> String {
    let mut html = String::from("<table>");
    for (r, row) in table.rows.iter().enumerate() {
        let cell_tag = if r == 0 { "th" } else { "td" };
        if r == 0 {
            html.push_str("<thead>");
        } else if r == 1 {
            html.push_str("<tbody>");
        }
        html.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let align = match table.alignments.get(i) {
                Some(Alignment::Left) => " align=\"left\"",
                Some(Alignment::Center) => " align=\"center\"",
                Some(Alignment::Right) => " align=\"right\"",
                _ => "",
            };
            html.push_str(&format!("<{cell_tag}{align}>{cell}</{cell_tag}>"));
        }
        html.push_str("</tr>");
        if r == 0 {
            html.push_str("</thead>");
        }
    }
    if table.rows.len() > 1 {
        html.push_str("</tbody>");
    }
    html.push_str("</table>");
    html
}

#[cfg(test)]
mod tests;
