use super::{closes, opening};
use crate::format::split;

fn count(s: &str) -> usize {
    s.chars().count()
}

/// Whether every fence `text` opens it also closes (the line rule `split` uses).
fn fences_balanced(text: &str) -> bool {
    let mut open: Option<String> = None;
    for line in text.lines() {
        match &open {
            Some(marker) if closes(line, marker) => open = None,
            Some(_) => {}
            None => open = opening(line).map(|f| f.marker),
        }
    }
    open.is_none()
}

/// Checks that `chunks` give back `original`: each chunk, less a fence line added at its
/// start or end, is the next piece of the original, and only whitespace lies between pieces.
fn assert_gives_back(original: &str, chunks: &[String]) {
    let mut cursor = 0;
    for (k, chunk) in chunks.iter().enumerate() {
        let first_line_len = chunk.find('\n').map_or(chunk.len(), |i| i + 1);
        let last_line_start = chunk.rfind('\n').unwrap_or(0);
        let mut found = None;
        'forms: for strip_head in [false, true] {
            for strip_tail in [false, true] {
                let head = if strip_head { first_line_len } else { 0 };
                let tail = if strip_tail {
                    last_line_start
                } else {
                    chunk.len()
                };
                if head > tail {
                    continue;
                }
                if strip_head && opening(chunk[..head].trim_end()).is_none() {
                    continue;
                }
                if strip_tail && opening(chunk[tail..].trim()).is_none() {
                    continue;
                }
                let body = &chunk[head..tail];
                if body.trim().is_empty() {
                    continue;
                }
                let rest = &original[cursor..];
                let gap_max = rest.len() - rest.trim_start().len();
                let gaps = rest[..gap_max].char_indices().map(|(i, _)| i);
                for gap in gaps.chain([gap_max]) {
                    if rest[gap..].starts_with(body) {
                        found = Some(cursor + gap + body.len());
                        break 'forms;
                    }
                }
            }
        }
        cursor = found.unwrap_or_else(|| {
            panic!("chunk {k} {chunk:?} is not the next piece of {original:?} after byte {cursor}; chunks: {chunks:#?}")
        });
    }
    assert!(
        original[cursor..].trim().is_empty(),
        "{:?} was left out; chunks: {chunks:#?}",
        &original[cursor..]
    );
}

fn check(original: &str, max: usize) -> Vec<String> {
    let chunks = split(original, max);
    for chunk in &chunks {
        assert!(count(chunk) <= max, "{} > {max}: {chunk:?}", count(chunk));
        assert!(!chunk.trim().is_empty(), "an empty chunk from {original:?}");
    }
    assert_gives_back(original, &chunks);
    chunks
}

#[test]
fn short_text_is_one_chunk_and_blank_text_none() {
    assert_eq!(split("hello", 10), vec!["hello"]);
    assert_eq!(split("  hello\n\n", 100), vec!["  hello"]);
    assert!(split("", 10).is_empty());
    assert!(split(" \n\n \t", 10).is_empty());
    assert_eq!(split("abc", 0), vec!["a", "b", "c"]);
    assert_eq!(split("a\n\nb", usize::MAX), vec!["a\n\nb"]);
}

#[test]
fn prefers_paragraphs_then_lines_then_sentences_then_words() {
    let text = "First paragraph here.\n\nSecond one, which is longer.";
    assert_eq!(
        check(text, 40),
        vec!["First paragraph here.", "Second one, which is longer."]
    );
    let text = "line one\nline two\nline three";
    assert_eq!(check(text, 20), vec!["line one\nline two", "line three"]);
    let text = "One sentence. Another sentence here";
    assert_eq!(
        check(text, 24),
        vec!["One sentence.", "Another sentence here"]
    );
    let text = "words without any stops at all";
    assert_eq!(check(text, 20), vec!["words without any", "stops at all"]);
    // Only a hard cut is left.
    assert_eq!(check("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
}

#[test]
fn a_paragraph_break_early_in_the_window_loses_to_a_later_line_break() {
    let text = "ab\n\ncdefghijklmnop\nqrstuvwxyz\nmore";
    assert_eq!(
        check(text, 30),
        vec!["ab\n\ncdefghijklmnop\nqrstuvwxyz", "more"]
    );
}

#[test]
fn counts_characters_not_bytes() {
    let text = "é".repeat(10) + " " + &"日".repeat(10);
    let chunks = check(&text, 11);
    assert_eq!(chunks, vec!["é".repeat(10), "日".repeat(10)]);
    let emoji = "🦀".repeat(9);
    assert_eq!(check(&emoji, 4), vec!["🦀🦀🦀🦀", "🦀🦀🦀🦀", "🦀"]);
}

#[test]
fn a_cut_code_block_is_closed_and_reopened() {
    let code: String = (1..=12).map(|i| format!("let x{i} = {i};\n")).collect();
    let text = format!("Intro.\n\n```rust\n{code}```\n\nAfter.");
    let chunks = check(&text, 80);
    assert!(chunks.len() >= 3, "{chunks:#?}");
    for chunk in &chunks {
        assert!(fences_balanced(chunk), "{chunk:?}");
    }
    assert!(
        chunks[0].starts_with("Intro.\n\n```rust\nlet x1 = 1;\n"),
        "{chunks:#?}"
    );
    assert!(chunks[0].ends_with(";\n```"), "{chunks:#?}");
    for chunk in &chunks[1..] {
        assert!(chunk.starts_with("```rust\nlet x"), "{chunk:?}");
    }
    assert!(
        chunks.last().is_some_and(|c| c.ends_with("```\n\nAfter.")),
        "{chunks:#?}"
    );
}

#[test]
fn longer_fences_and_tildes_are_reopened_as_written() {
    let text = format!("~~~~ python\n{}~~~~", "print('x')\n".repeat(10));
    let chunks = check(&text, 50);
    assert!(chunks.len() > 1);
    for chunk in &chunks {
        assert!(chunk.starts_with("~~~~ python\n"), "{chunk:?}");
        assert!(chunk.ends_with("~~~~"), "{chunk:?}");
        assert!(fences_balanced(chunk), "{chunk:?}");
    }
    // A shorter fence inside is content, not a close.
    let text = format!("````\n```\n{}```\n````", "y\n".repeat(20));
    for chunk in check(&text, 20) {
        assert!(chunk.starts_with("````\n"), "{chunk:?}");
        assert!(fences_balanced(&chunk), "{chunk:?}");
    }
}

#[test]
fn never_leaves_an_empty_code_block_when_it_can_cut_elsewhere() {
    let text = "Some words before it.\n```\nline\nline\nline\n```";
    let chunks = check(text, 30);
    assert_eq!(
        chunks,
        vec!["Some words before it.", "```\nline\nline\nline\n```"]
    );
}

/// Generated markdown: paragraphs of words and sentences, lines, long words, lists and fenced
/// code blocks, with multi-byte characters, from a seeded generator (the same inputs every
/// run).
fn generate(rng: &mut fastrand::Rng) -> String {
    const WORDS: &[&str] = &[
        "a",
        "tern",
        "agent",
        "chat",
        "é",
        "日本語",
        "🦀",
        "x",
        "message",
        "boundary",
        "end.",
        "done!",
        "why?",
        "(yes)",
        "**bold**",
        "`code`",
        "-",
        "*",
    ];
    let mut out = String::new();
    for _ in 0..rng.usize(1..12) {
        match rng.u8(0..10) {
            0..=4 => {
                for _ in 0..rng.usize(1..40) {
                    out.push_str(WORDS[rng.usize(..WORDS.len())]);
                    out.push(if rng.u8(0..8) == 0 { '\n' } else { ' ' });
                }
            }
            5 => out.push_str(&"z".repeat(rng.usize(1..150))),
            6 => {
                for i in 0..rng.usize(1..6) {
                    out.push_str(&format!("{}. item {i}\n", i + 1));
                }
            }
            _ => {
                let fence = ["```", "~~~", "````"][rng.usize(..3)];
                let language = ["", "rust", "py", "sh"][rng.usize(..4)];
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&format!("{fence}{language}\n"));
                for _ in 0..rng.usize(0..15) {
                    let indent = " ".repeat(rng.usize(0..6));
                    let line: String = (0..rng.usize(0..30))
                        .map(|_| ['a', ' ', ';', 'é', '{', '}'][rng.usize(..6)])
                        .collect();
                    out.push_str(&format!("{indent}{line}\n"));
                    if rng.u8(0..5) == 0 {
                        out.push('\n');
                    }
                }
                out.push_str(fence);
                out.push('\n');
            }
        }
        out.push_str(["\n", "\n\n", "\n\n\n", " "][rng.usize(..4)]);
    }
    out
}

#[test]
fn generated_inputs_keep_every_property() {
    let mut rng = fastrand::Rng::with_seed(15);
    for case in 0..600 {
        let text = generate(&mut rng);
        let max = rng.usize(16..300);
        let chunks = split(&text, max);
        for chunk in &chunks {
            assert!(
                count(chunk) <= max,
                "case {case}: {} > {max}: {chunk:?}",
                count(chunk)
            );
            assert!(!chunk.trim().is_empty(), "case {case}: an empty chunk");
            assert!(
                fences_balanced(chunk),
                "case {case}, max {max}: unbalanced {chunk:?}\nfrom {text:?}"
            );
        }
        assert_gives_back(&text, &chunks);
        if count(&text) <= max {
            assert!(chunks.len() <= 1, "case {case}: {chunks:#?}");
        }
    }
}

#[test]
fn generated_inputs_with_tiny_limits_still_fit() {
    let mut rng = fastrand::Rng::with_seed(4096);
    for _ in 0..200 {
        let text = generate(&mut rng);
        let max = rng.usize(1..16);
        check(&text, max);
    }
}
