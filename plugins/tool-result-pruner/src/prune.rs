//! Head/tail pruning of one result's content, as the original's
//! `pruneContent` does it: text blocks counted in code points, non-text
//! blocks kept, the marker once where the removed span begins
//! (`dsh_sdk::vocab::compaction::cut`). An engine may also give a token
//! bound (a result's share of its model's window, by the meter's
//! estimate): a result over it is pruned too, and what is kept stays
//! within it.

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::compaction::cut::{cut_within, Keep};
use dsh_sdk::vocab::{tokens, ContentBlock};
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
/// text is within the threshold and their estimate within `max_tokens`
/// (when given). Over the threshold, the configured head and tail code
/// points are kept; over `max_tokens`, what is kept is bounded further to
/// it, its bytes following the text's density (`cut_within`). A text
/// block keeps its other fields.
pub fn prune_content(
    config: &Config,
    blocks: &[ContentBlock],
    max_tokens: Option<u64>,
) -> Option<Vec<ContentBlock>> {
    let over_chars = text_chars(blocks) > config.threshold_chars;
    let over_tokens = max_tokens.is_some_and(|max| tokens::of_blocks(blocks) > max);
    if !over_chars && !over_tokens {
        return None;
    }
    let keep = if over_chars {
        Keep::chars(config.head_chars, config.tail_chars)
    } else {
        Keep::chars(usize::MAX, usize::MAX)
    };
    cut_within(blocks, keep, max_tokens, PRUNE_MARKER)
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
        assert_eq!(prune_content(&c, &[text(&"a".repeat(60))], None), None);
        let long: String = (0..100)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let pruned = prune_content(&c, &[text(&long)], None).unwrap();
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
        let pruned = prune_content(&c, &blocks, None).unwrap();
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
        let pruned = prune_content(&c, &[text(&smiles)], None).unwrap();
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
    fn a_token_bound_prunes_a_result_under_the_threshold_and_keeps_it_within() {
        let c = Config::default();
        // 5,000 code points of digits: under the 8,192 threshold, about
        // 5,000 tokens by the estimate (a token a digit).
        let digits: String = (0..1000).map(|i| format!("{:04}\n", i)).collect();
        assert_eq!(prune_content(&c, &[text(&digits)], None), None);
        assert_eq!(prune_content(&c, &[text(&digits)], Some(6000)), None);
        let pruned = prune_content(&c, &[text(&digits)], Some(1000)).unwrap();
        assert!(tokens::of_blocks(&pruned) <= 1000);
        let kept = pruned[0].as_text().unwrap();
        assert!(kept.starts_with("0000\n0001\n"));
        assert!(kept.ends_with("0998\n0999\n"));
        assert_eq!(kept.matches(PRUNE_MARKER).count(), 1);
        // Over the threshold too: the smaller of the two keeps wins.
        let long = "z".repeat(20_000);
        let pruned = prune_content(&c, &[text(&long)], Some(100_000)).unwrap();
        assert_eq!(text_chars(&pruned), 4096 + PRUNE_MARKER.len() + 1024);
        let pruned = prune_content(&c, &[text(&long)], Some(300)).unwrap();
        assert!(tokens::of_blocks(&pruned) <= 300);
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
