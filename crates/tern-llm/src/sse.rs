//! A minimal server-sent-events line parser for chat-completion streams. Written by hand:
//! the completion stream uses only `data:` lines, and a dependency would add more than these
//! few lines do.

/// Splits incoming bytes into complete SSE `data` payloads.
#[derive(Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    data: String,
}

impl SseParser {
    /// Feeds bytes; returns the data payloads of every event completed by them.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line);
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(std::mem::take(&mut self.data));
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            }
            // Comments (`:`), `event:`, `id:` and `retry:` lines carry nothing we need.
        }
        out
    }

    /// Data left when the stream ends without a final blank line.
    pub(crate) fn finish(&mut self) -> Option<String> {
        let rest = String::from_utf8_lossy(&self.buf).into_owned();
        self.buf.clear();
        if let Some(d) = rest.trim_end().strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(d.trim_start());
        }
        (!self.data.is_empty()).then(|| std::mem::take(&mut self.data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_events_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: {\"a\"").is_empty());
        assert_eq!(
            p.feed(b":1}\n\n: keepalive\n\ndata: [DONE]\r\n\r\n"),
            vec!["{\"a\":1}".to_owned(), "[DONE]".to_owned()]
        );
    }

    #[test]
    fn joins_multi_line_data_and_flushes_tail() {
        let mut p = SseParser::default();
        assert_eq!(p.feed(b"data: a\ndata: b\n\n"), vec!["a\nb".to_owned()]);
        assert!(p.feed(b"data: tail").is_empty());
        assert_eq!(p.finish(), Some("tail".to_owned()));
    }
}
