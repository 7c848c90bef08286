//! What `list` shows of a log beyond its header: how many turns it started
//! and its last user prompt. `list` runs for every `--continue`, over every
//! log of the directory, so this reads at most [`SUMMARY_MAX`] decoded
//! bytes of a log (a longer one is listed without them) and never expands
//! a packed chunk row: each line's type is read without building its tree,
//! and only `user/message` lines are parsed further.

use dsh_sdk::vocab::message::joined_text;
use dsh_sdk::vocab::{event, ContentBlock, MessageSource, SessionEvent};
use serde::Deserialize;

use crate::fields::Object;
use crate::tail::row_type;

/// What `list` reads of a `user/message`: who it is from and what it says
/// (an identified message or one of before identities alike).
#[derive(Deserialize)]
struct Prompt {
    source: MessageSource,
    content: Vec<ContentBlock>,
}

/// The most of a log `list` decodes for its turns and last prompt: 32 MiB
/// (a long session of ordinary size; a log over it is still listed, with
/// those unknown).
pub const SUMMARY_MAX: usize = 32 << 20;

/// The turns started and the last user prompt of a log's text (the header
/// line first). Reading stops at the first line that is not a whole record
/// (a torn tail): `sessions show` is the one that judges a damaged log.
pub fn summarize(text: &[u8]) -> (u64, String) {
    let text = String::from_utf8_lossy(text);
    let mut turns = 0;
    let mut last_prompt = None;
    for line in text.split_inclusive('\n').skip(1) {
        let Some(line) = line.strip_suffix('\n') else {
            break;
        };
        let Some(kind) = row_type(line) else {
            break;
        };
        if kind == event::TURN_START {
            turns += 1;
        } else if kind == event::USER_MESSAGE {
            let Ok(e) = serde_json::from_str::<SessionEvent>(line) else {
                break;
            };
            // A message that does not read as one (the shape checks of
            // `load` judge it) is no prompt.
            if let Ok(Object(Prompt {
                source: MessageSource::User(_),
                content,
            })) = e.data.parse()
            {
                last_prompt = Some(joined_text(&content, ""));
            }
        }
    }
    (turns, last_prompt.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str =
        "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn user(seq: u64, text: &str, kind: &str) -> String {
        format!(
            "{{\"type\":\"user/message\",\"seq\":{seq},\"time\":1,\"data\":{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"source\":{{\"kind\":\"{kind}\"}}}}}}\n"
        )
    }

    #[test]
    fn turns_and_the_last_user_prompt_without_expanding_packed_rows() {
        let packed = format!(
            "{{\"type\":\"text-chunks\",\"seq0\":2,\"time0\":1,\"data\":{{\"turn\":1,\"step\":1,\"index\":0,\"texts\":[{}\"\"],\"dt\":[]}}}}\n",
            "\"\",".repeat(10_000)
        );
        let text = [
            HEAD.to_owned(),
            "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n".into(),
            user(1, "first", "user"),
            packed,
            "{\"type\":\"turn/start\",\"seq\":10003,\"time\":1,\"data\":{\"turn\":2}}\n".into(),
            user(10004, "second", "user"),
            user(10005, "from a hook", "hook"),
            "{\"type\":\"turn/st".into(),
        ]
        .concat();
        assert_eq!(summarize(text.as_bytes()), (2, "second".to_owned()));
        assert_eq!(summarize(HEAD.as_bytes()), (0, String::new()));
    }
}
