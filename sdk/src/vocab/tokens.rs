//! The fixed-density token estimate the original's token meter prices
//! content with (`packages/llm/token-meter/src/estimate.ts`): a quarter
//! token per UTF-16 unit of text, rounded up, plus a structural overhead
//! per block and per message. Compaction and pruning price with it, so
//! both sides of a log agree on every `shadowedTokenCount`.

use super::message::{ContentBlock, Message};
use super::{TokenUsage, ToolSchema};

/// UTF-16 units per estimated token.
const CHARS_PER_TOKEN: u64 = 4;

/// Per-block overhead (JSON framing, type tags).
pub const BLOCK_OVERHEAD: u64 = 4;

/// Per-message overhead (the role field).
pub const ROLE_OVERHEAD: u64 = 4;

/// `ceil(len / 4)` for a text of `len` UTF-16 units.
pub fn of_len(len: u64) -> u64 {
    len.div_ceil(CHARS_PER_TOKEN)
}

/// The estimate of a text (UTF-16 units, as JavaScript counts them).
pub fn of_text(text: &str) -> u64 {
    of_len(utf16_len(text))
}

/// The length of `text` in UTF-16 units.
pub fn utf16_len(text: &str) -> u64 {
    text.chars().map(|c| c.len_utf16() as u64).sum()
}

/// The estimate of a request's system prompt (0 when there is none).
pub fn of_system(system: Option<&str>) -> u64 {
    system.map_or(0, |s| of_text(s) + ROLE_OVERHEAD)
}

/// The estimate of content blocks: text and reasoning by their text, a
/// tool call by its name and arguments, a tool result by its content,
/// anything else by its JSON.
pub fn of_blocks(blocks: &[ContentBlock]) -> u64 {
    blocks.iter().map(of_typed_block).sum()
}

fn of_typed_block(block: &ContentBlock) -> u64 {
    BLOCK_OVERHEAD
        + match block {
            ContentBlock::Text(t) | ContentBlock::Reasoning(t) => of_text(&t.text),
            ContentBlock::ToolCall(c) => of_text(&c.name) + of_text(&c.arguments),
            ContentBlock::ToolResult(r) => of_blocks(&r.content),
            // Priced by their JSON (a block always serializes: its keys
            // are strings).
            ContentBlock::Image(_) | ContentBlock::Other(_) => {
                serde_json::to_string(block).map_or(0, |json| of_text(&json))
            }
        }
}

/// The estimate of one model-visible message: its content and the role.
pub fn of_typed_message(message: &Message) -> u64 {
    of_blocks(&message.content) + ROLE_OVERHEAD
}

/// The estimate of a request's tool schemas (0 when there are none).
pub fn of_tool_schemas(tools: &[ToolSchema]) -> u64 {
    if tools.is_empty() {
        return 0;
    }
    serde_json::to_string(tools).map_or(0, |json| of_text(&json) + BLOCK_OVERHEAD)
}

/// The total a provider's usage reports: input, cache reads and writes,
/// and output (disjoint buckets). The sum saturates: a usage the server
/// made up (`u64::MAX` in each bucket) must not overflow.
pub fn of_token_usage(usage: &TokenUsage) -> u64 {
    [
        usage.input_tokens,
        usage.cache_read_tokens.unwrap_or(0),
        usage.cache_write_tokens.unwrap_or(0),
        usage.output_tokens,
    ]
    .into_iter()
    .fold(0, u64::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    // The original's meter prices the JSON; these are its functions, the
    // reference the typed ones are checked against.
    /// The estimate of content blocks: text and reasoning by their text, a
    /// tool call by its name and arguments, a tool result by its content,
    /// anything else by its JSON.
    fn of_content(blocks: &[Value]) -> u64 {
        blocks.iter().map(of_block).sum()
    }

    fn of_block(block: &Value) -> u64 {
        let str_of = |key: &str| block[key].as_str().unwrap_or_default();
        BLOCK_OVERHEAD
            + match block["type"].as_str() {
                Some("text" | "reasoning") => of_text(str_of("text")),
                Some("tool-call") => {
                    let arguments = match &block["arguments"] {
                        Value::String(s) => of_text(s),
                        other => of_text(&other.to_string()),
                    };
                    of_text(str_of("name")) + arguments
                }
                Some("tool-result") => {
                    of_content(block["content"].as_array().map_or(&[], Vec::as_slice))
                }
                _ => of_text(&block.to_string()),
            }
    }

    /// The estimate of one model-visible message: its content and the role.
    fn of_message(message: &Value) -> u64 {
        of_content(message["content"].as_array().map_or(&[], Vec::as_slice)) + ROLE_OVERHEAD
    }

    /// The estimate of a request's tool schemas (0 when there are none).
    fn of_tools(tools: &[Value]) -> u64 {
        if tools.is_empty() {
            return 0;
        }
        of_text(&Value::from(tools.to_vec()).to_string()) + BLOCK_OVERHEAD
    }

    /// The total a provider's usage reports: input, cache reads and writes,
    /// and output (disjoint buckets). The sum saturates: a usage the server
    /// made up (`u64::MAX` in each bucket) must not overflow.
    fn of_usage(usage: &Value) -> u64 {
        [
            "inputTokens",
            "cacheReadTokens",
            "cacheWriteTokens",
            "outputTokens",
        ]
        .iter()
        .map(|k| usage[*k].as_u64().unwrap_or(0))
        .fold(0, u64::saturating_add)
    }
    use serde_json::json;

    #[test]
    fn text_is_priced_by_utf16_units_rounded_up() {
        assert_eq!(of_text(""), 0);
        assert_eq!(of_text("abcd"), 1);
        assert_eq!(of_text("abcde"), 2);
        // One astral character is two UTF-16 units, as JavaScript counts.
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len("é"), 1);
    }

    #[test]
    fn messages_are_priced_like_the_originals_meter() {
        let user = json!({"role": "user", "content": [{"type": "text", "text": "12345678"}]});
        assert_eq!(of_message(&user), 2 + BLOCK_OVERHEAD + ROLE_OVERHEAD);
        let call =
            json!({"type": "tool-call", "id": "c", "name": "read", "arguments": "{\"p\":1}"});
        assert_eq!(of_content(&[call]), 1 + 2 + BLOCK_OVERHEAD);
        let result = json!({"role": "tool", "content": [{"type": "tool-result", "callId": "c",
            "content": [{"type": "text", "text": "abcd"}]}]});
        assert_eq!(of_message(&result), 1 + 2 * BLOCK_OVERHEAD + ROLE_OVERHEAD);
        assert_eq!(
            of_usage(&json!({"inputTokens": 10, "cacheReadTokens": 5, "outputTokens": 2})),
            17
        );
        assert_eq!(
            of_usage(&json!({"inputTokens": u64::MAX, "outputTokens": u64::MAX})),
            u64::MAX
        );
        assert_eq!(of_system(None), 0);
        assert_eq!(of_tools(&[]), 0);
    }

    #[test]
    fn typed_figures_are_the_json_ones() {
        let content = json!([{"type": "text", "text": "12345678"},
            {"type": "reasoning", "text": "hm"},
            {"type": "tool-call", "id": "c", "name": "read", "arguments": "{\"p\":1}"},
            {"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "abcd"}], "isError": false},
            {"type": "image", "attachment": {"id": "a", "mediaType": "image/png"}},
            {"type": "later", "x": [1, 2]}]);
        let message =
            json!({"id": "m", "role": "user", "content": content, "source": {"kind": "user"}});
        let typed: Message = serde_json::from_value(message.clone()).unwrap();
        assert_eq!(of_typed_message(&typed), of_message(&message));
        let tools = json!([{"name": "t", "description": "d", "parameters": {"type": "object"}}]);
        let schemas: Vec<ToolSchema> = serde_json::from_value(tools.clone()).unwrap();
        assert_eq!(
            of_tool_schemas(&schemas),
            of_tools(tools.as_array().unwrap())
        );
        let usage = json!({"inputTokens": 10, "outputTokens": 2, "cacheReadTokens": 5, "cacheWriteTokens": 1});
        let typed: TokenUsage = serde_json::from_value(usage.clone()).unwrap();
        assert_eq!(of_token_usage(&typed), of_usage(&usage));
    }
}
