//! Output as the model gets it: terminal control sequences stripped, carriage-return
//! overwrites (progress bars) reduced to what a terminal would finally show, and byte ranges
//! cut on UTF-8 character boundaries.

/// The text of `bytes` without control sequences; `\r\n` becomes `\n`, and a line redrawn
/// with `\r` keeps only its last drawing.
pub fn for_model(bytes: &[u8]) -> String {
    // Redraws first: the stripper drops a lone `\r` along with the other controls.
    let mut drawn = Vec::with_capacity(bytes.len());
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            drawn.push(b'\n');
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        drawn.extend_from_slice(line.rsplit(|b| *b == b'\r').next().unwrap_or(line));
    }
    String::from_utf8_lossy(&strip_ansi_escapes::strip(&drawn)).into_owned()
}

/// How many bytes of `data` end on a character boundary: a trailing incomplete UTF-8
/// sequence (the rest is still to come) is left for the next read.
pub fn complete_utf8_len(data: &[u8]) -> usize {
    // Look back over at most 3 bytes for the start of a multi-byte sequence.
    for back in 1..=data.len().min(4) {
        let b = data[data.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: keep looking for the lead byte
        }
        let need = match b {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return data.len(), // not UTF-8 anyway
        };
        return if need > back {
            data.len() - back
        } else {
            data.len()
        };
    }
    data.len()
}

/// How many leading bytes of `data` are continuation bytes (the middle of a character cut
/// by an offset), at most 3.
pub fn leading_continuation_len(data: &[u8]) -> usize {
    data.iter()
        .take(3)
        .take_while(|b| *b & 0b1100_0000 == 0b1000_0000)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_colours_cursor_moves_and_redraws() {
        let raw = b"\x1b[1;31mred\x1b[0m plain\r\n10%\r50%\r100%\r\n\x1b]0;title\x07done\n";
        assert_eq!(for_model(raw), "red plain\n100%\ndone\n");
    }

    #[test]
    fn utf8_boundaries() {
        let s = "a\u{e9}\u{20ac}".as_bytes(); // 1 + 2 + 3 bytes
        assert_eq!(complete_utf8_len(s), 6);
        assert_eq!(complete_utf8_len(&s[..5]), 3);
        assert_eq!(complete_utf8_len(&s[..4]), 3);
        assert_eq!(complete_utf8_len(&s[..2]), 1);
        assert_eq!(complete_utf8_len(b""), 0);
        assert_eq!(leading_continuation_len(&s[4..]), 2);
        assert_eq!(leading_continuation_len(b"abc"), 0);
    }
}
