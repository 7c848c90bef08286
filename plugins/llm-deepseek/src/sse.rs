//! Server-sent events framing: `data:` lines joined per event, comments
//! (keep-alives) ignored. Tolerates `\r\n` and events split across reads.

#[derive(Default)]
pub struct Parser {
    line: Vec<u8>,
    data: Vec<String>,
}

impl Parser {
    /// Feeds bytes; returns the `data` of every event completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&self.line).into_owned();
            self.line.clear();
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                self.data
                    .push(rest.strip_prefix(' ').unwrap_or(rest).to_owned());
            }
            // `:` comments, `event:`, `id:` and `retry:` lines carry nothing we use.
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_events_across_reads_and_skips_comments() {
        let mut p = Parser::default();
        assert!(p.feed(b": keep-alive\n\ndata: {\"a\"").is_empty());
        assert_eq!(
            p.feed(b":1}\r\n\r\ndata: [DONE]\n\n"),
            vec!["{\"a\":1}", "[DONE]"]
        );
    }
}
