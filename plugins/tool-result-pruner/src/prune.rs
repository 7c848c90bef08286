//! Head/tail pruning of one result's content, as the original's
//! `pruneContent` does it: text blocks counted in code points, non-text
//! blocks kept, the marker once where the removed span begins.

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::message::TextBlock;
use dsh_sdk::vocab::ContentBlock;
use serde::Deserialize;

/// Put where the middle of a result was removed.
pub const PRUNE_MARKER: &str = "\n\n[... tool result middle pruned ...]\n\n";

/// The row's `config`, with the original's defaults.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Results with more text than this (code points) are pruned.
    pub threshold_chars: usize,
    /// Code points kept from the start.
    pub head_chars: usize,
    /// Code points kept from the end.
    pub tail_chars: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threshold_chars: 8192,
            head_chars: 4096,
            tail_chars: 1024,
        }
    }
}

impl Config {
    /// Refuses a zero threshold and a head, marker and tail that would not
    /// fit under it (a pruned result must be within the threshold).
    pub fn checked(self) -> Result<Config> {
        if self.threshold_chars == 0 {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                "tool-result-pruner: thresholdChars must be a positive integer",
            ));
        }
        let emitted = self.head_chars + PRUNE_MARKER.chars().count() + self.tail_chars;
        if emitted > self.threshold_chars {
            return Err(Error::new(
                codes::INVALID_CONFIG,
                format!(
                    "tool-result-pruner: headChars + marker + tailChars ({emitted}) must be at most thresholdChars ({})",
                    self.threshold_chars
                ),
            ));
        }
        Ok(self)
    }
}

/// The code points of the text blocks of `blocks`.
pub fn text_chars(blocks: &[ContentBlock]) -> usize {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.chars().count())
        .sum()
}

/// `blocks` with the middle of their text removed, or `None` when their
/// text is within the threshold. A text block keeps its other fields.
pub fn prune_content(config: &Config, blocks: &[ContentBlock]) -> Option<Vec<ContentBlock>> {
    let total = text_chars(blocks);
    if total <= config.threshold_chars {
        return None;
    }
    let (removed_start, removed_end) = (config.head_chars, total - config.tail_chars);
    let mut out = Vec::with_capacity(blocks.len());
    let mut consumed = 0;
    let mut marked = false;
    for block in blocks {
        let ContentBlock::Text(TextBlock { text, extra }) = block else {
            out.push(block.clone());
            continue;
        };
        let len = text.chars().count();
        let (start, end) = (consumed, consumed + len);
        let head_end = removed_start.saturating_sub(start).min(len);
        let tail_start = removed_end.saturating_sub(start).min(len);
        let marker = if start < removed_end && end > removed_start && !marked {
            marked = true;
            PRUNE_MARKER
        } else {
            ""
        };
        let mut kept: String = text.chars().take(head_end).collect();
        kept.push_str(marker);
        kept.extend(text.chars().skip(tail_start));
        if !kept.is_empty() {
            out.push(ContentBlock::Text(TextBlock {
                text: kept,
                extra: extra.clone(),
            }));
        }
        consumed = end;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::text(t)
    }

    fn small() -> Config {
        Config {
            threshold_chars: 60,
            head_chars: 10,
            tail_chars: 5,
        }
        .checked()
        .unwrap()
    }

    #[test]
    fn a_long_text_keeps_its_head_and_tail_around_the_marker() {
        let c = small();
        assert_eq!(prune_content(&c, &[text(&"a".repeat(60))]), None);
        let long: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let pruned = prune_content(&c, &[text(&long)]).unwrap();
        let expected = format!("{}{PRUNE_MARKER}{}", &long[..10], &long[95..]);
        assert_eq!(pruned, [text(&expected)]);
        assert!(text_chars(&pruned) <= c.threshold_chars);
    }

    #[test]
    fn blocks_are_cut_across_and_non_text_is_kept() {
        let c = small();
        let image: ContentBlock =
            serde_json::from_value(json!({"type": "image", "attachment": {"id": "x"}})).unwrap();
        let blocks = [
            text(&"h".repeat(8)),
            image.clone(),
            text(&"m".repeat(80)),
            text("tail!"),
        ];
        let pruned = prune_content(&c, &blocks).unwrap();
        assert_eq!(
            pruned,
            [
                text(&"h".repeat(8)),
                image,
                text(&format!("mm{PRUNE_MARKER}")),
                text("tail!")
            ]
        );
    }

    #[test]
    fn code_points_not_bytes_are_counted() {
        let c = small();
        let smiles = "😀".repeat(61);
        let pruned = prune_content(&c, &[text(&smiles)]).unwrap();
        assert_eq!(
            pruned,
            [text(&format!(
                "{}{PRUNE_MARKER}{}",
                "😀".repeat(10),
                "😀".repeat(5)
            ))]
        );
    }

    #[test]
    fn the_defaults_are_the_originals_and_a_budget_over_the_threshold_is_refused() {
        let d = Config::default().checked().unwrap();
        assert_eq!(
            (d.threshold_chars, d.head_chars, d.tail_chars),
            (8192, 4096, 1024)
        );
        let over = Config {
            threshold_chars: 100,
            head_chars: 60,
            tail_chars: 30,
        };
        assert!(over
            .checked()
            .unwrap_err()
            .message
            .contains("at most thresholdChars"));
        assert!(Config {
            threshold_chars: 0,
            head_chars: 0,
            tail_chars: 0
        }
        .checked()
        .is_err());
        assert!(serde_json::from_value::<Config>(json!({"headchars": 1})).is_err());
    }
}
