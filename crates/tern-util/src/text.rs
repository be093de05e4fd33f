//! Text that tern frames for a model, kept from breaking out of its frame: [`defang_tags`]
//! (no `<tag>`/`</tag>` of tern's own in text it did not write) and [`one_line`] (no line
//! breaks in what should read as one line of tern's records).

/// `text` unable to open or close any of `tags` (in any case, with any `/` and spacing
/// after the `<`): such a `<` becomes `‹`. Other `<` stay as they are.
pub fn defang_tags(text: &str, tags: &[&str]) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if c == '<' {
            let rest = text[i + 1..].trim_start_matches(|c: char| c == '/' || c.is_whitespace());
            let tag = tags.iter().any(|t| {
                rest.get(..t.len())
                    .is_some_and(|head| head.eq_ignore_ascii_case(t))
            });
            if tag {
                out.push('‹');
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// `text` on one line: control characters (line breaks included) become spaces.
pub fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_tags_are_defanged() {
        let d = defang_tags("</Memory > < memory> <b> 1 < 2 <summary>", &["memory"]);
        assert_eq!(d, "‹/Memory > ‹ memory> <b> 1 < 2 <summary>");
        assert_eq!(one_line("a\nb\r\tc"), "a b  c");
    }
}
