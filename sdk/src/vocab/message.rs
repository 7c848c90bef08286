//! Messages and their content blocks, as the log and the model requests
//! carry them.
//!
//! A [`Message`] is `{id, role, content, source}`; its `content` is a list
//! of [`ContentBlock`]s tagged by `type` (`text`, `reasoning`, `tool-call`,
//! `tool-result`, `image`), its `source` a [`MessageSource`] tagged by
//! `kind` (`user`, `model`, `tool`, `plugin`). Both tag sets are open in
//! the original (plugins merge new members), so each enum has a variant
//! that keeps an unknown member whole; every known member keeps the fields
//! it does not know in `extra`. A message read from a log and written back
//! therefore loses nothing. Key order on writing is this harness's (the
//! original's own writers differ per call site); a stored event that
//! nobody rewrote keeps its text byte for byte (see [`crate::LazyJson`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::open;

/// Fields of a record this harness does not know, kept in their order so
/// that a record written by the original or by a newer plugin survives a
/// read and a write. Genuinely open: whoever wrote them defines them.
pub type Extra = Map<String, Value>;

/// Who a message is from, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A system message (rare: the system prompt travels beside the
    /// history).
    System,
    /// The user, a tool result, or context a plugin adds.
    User,
    /// The model.
    Assistant,
}

/// One message of the history.
///
/// The original writes a message's keys in an order that depends on the
/// code that made it (`content, source, role, id` for a user message,
/// `source, content, role, id` for a tool result); a message read keeps the
/// order it came in and is written back in it, so a log read and written
/// through these types is byte for byte what it was. A message made here
/// is written `id, role, content, source`.
#[derive(Debug, Clone)]
pub struct Message {
    /// Stable id (a UUID for fresh messages).
    pub id: String,
    /// Who it is from.
    pub role: Role,
    /// What it says.
    pub content: Vec<ContentBlock>,
    /// Where it came from.
    pub source: MessageSource,
    /// Fields this harness does not know.
    pub extra: Extra,
    /// The key order it was read in, when not this harness's own.
    layout: Option<Box<[Slot]>>,
}

/// One key position of a message as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Id,
    Role,
    Content,
    Source,
    /// The next field of `extra`.
    Extra,
}

/// This harness's own order.
const OWN_ORDER: [Slot; 4] = [Slot::Id, Slot::Role, Slot::Content, Slot::Source];

impl PartialEq for Message {
    /// Equal content; the key order a message was read in is not part of
    /// it.
    fn eq(&self, other: &Message) -> bool {
        self.id == other.id
            && self.role == other.role
            && self.content == other.content
            && self.source == other.source
            && self.extra == other.extra
    }
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(4 + self.extra.len()))?;
        let mut extras = self.extra.iter();
        let mut known = [false; 4];
        let own: Vec<Slot> = OWN_ORDER
            .iter()
            .copied()
            .chain(std::iter::repeat_n(Slot::Extra, self.extra.len()))
            .collect();
        let layout = self.layout.as_deref().unwrap_or(&own);
        // The layout, then whatever it does not place (fields added since
        // the message was read).
        let tail = OWN_ORDER
            .iter()
            .copied()
            .chain(std::iter::repeat_n(Slot::Extra, self.extra.len()));
        for slot in layout.iter().copied().chain(tail) {
            match slot {
                Slot::Extra => {
                    if let Some((k, v)) = extras.next() {
                        map.serialize_entry(k, v)?;
                    }
                }
                known_slot => {
                    let i = known_slot as usize;
                    if known[i] {
                        continue;
                    }
                    known[i] = true;
                    match known_slot {
                        Slot::Id => map.serialize_entry("id", &self.id)?,
                        Slot::Role => map.serialize_entry("role", &self.role)?,
                        Slot::Content => map.serialize_entry("content", &self.content)?,
                        _ => map.serialize_entry("source", &self.source)?,
                    }
                }
            }
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        open::deserialize(d)
    }
}

impl open::FromMap for Message {
    fn from_map(mut map: Extra) -> Result<Self, String> {
        let layout: Vec<Slot> = map
            .keys()
            .map(|k| match k.as_str() {
                "id" => Slot::Id,
                "role" => Slot::Role,
                "content" => Slot::Content,
                "source" => Slot::Source,
                _ => Slot::Extra,
            })
            .collect();
        fn field<T: serde::de::DeserializeOwned>(
            map: &mut Extra,
            key: &'static str,
        ) -> Result<T, String> {
            let value = map
                .shift_remove(key)
                .ok_or_else(|| format!("missing field `{key}`"))?;
            T::deserialize(value).map_err(|e| format!("{key}: {e}"))
        }
        let id = field(&mut map, "id")?;
        let role = field(&mut map, "role")?;
        let content = field(&mut map, "content")?;
        let source = field(&mut map, "source")?;
        let own = layout.len() >= 4
            && layout[..4] == OWN_ORDER
            && layout[4..].iter().all(|s| *s == Slot::Extra);
        Ok(Message {
            id,
            role,
            content,
            source,
            extra: map,
            layout: (!own).then(|| layout.into_boxed_slice()),
        })
    }
}

impl Message {
    /// A user message with one text block, from the user.
    pub fn user_text(id: impl Into<String>, text: impl Into<String>) -> Message {
        Message::user(
            id,
            vec![ContentBlock::text(text)],
            MessageSource::User(Extra::new()),
        )
    }

    /// A user-role message with `content` from `source`.
    pub fn user(
        id: impl Into<String>,
        content: Vec<ContentBlock>,
        source: MessageSource,
    ) -> Message {
        Message {
            id: id.into(),
            role: Role::User,
            content,
            source,
            extra: Extra::new(),
            layout: None,
        }
    }

    /// An assistant message from `provider`'s `model`.
    pub fn assistant(
        id: impl Into<String>,
        content: Vec<ContentBlock>,
        provider: impl Into<String>,
        model: impl Into<String>,
    ) -> Message {
        Message {
            id: id.into(),
            role: Role::Assistant,
            content,
            source: MessageSource::Model(ModelSource {
                provider: provider.into(),
                model: model.into(),
                replay_state: None,
                extra: Extra::new(),
            }),
            extra: Extra::new(),
            layout: None,
        }
    }

    /// The message of a tool result: role `user`, one `tool-result` block
    /// answering `call_id` (`isError` always written), source the call.
    pub fn tool_result(
        id: impl Into<String>,
        call_id: impl Into<String>,
        content: Vec<ContentBlock>,
        is_error: bool,
    ) -> Message {
        let call_id = call_id.into();
        Message {
            id: id.into(),
            role: Role::User,
            content: vec![ContentBlock::ToolResult(ToolResultBlock {
                tool_call_id: call_id.clone(),
                content,
                is_error: Some(is_error),
                extra: Extra::new(),
            })],
            source: MessageSource::Tool(ToolSource {
                call_id,
                extra: Extra::new(),
            }),
            extra: Extra::new(),
            layout: None,
        }
    }

    /// The joined text of its `text` blocks.
    pub fn text(&self) -> String {
        joined_text(&self.content, "")
    }

    /// Its tool calls, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallBlock> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    /// The tool-result block of a tool-result message.
    pub fn tool_result_block(&self) -> Option<&ToolResultBlock> {
        match self.content.as_slice() {
            [ContentBlock::ToolResult(r)] => Some(r),
            _ => None,
        }
    }

    /// The call a tool-result message answers (its source's `callId`).
    pub fn call_id(&self) -> Option<&str> {
        match &self.source {
            MessageSource::Tool(t) => Some(&t.call_id),
            _ => None,
        }
    }
}

/// The texts of the `text` blocks of `blocks`, joined by `sep`.
pub fn joined_text(blocks: &[ContentBlock], sep: &str) -> String {
    blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join(sep)
}

/// Where a message came from (`source`, tagged by `kind`).
#[derive(Debug, Clone, PartialEq)]
pub enum MessageSource {
    /// `{kind: "user"}`: typed by a person (front-ends may add fields, an
    /// ACP `rpcId` for one).
    User(Extra),
    /// `{kind: "model", provider, model, replayState?}`.
    Model(ModelSource),
    /// `{kind: "tool", callId}`.
    Tool(ToolSource),
    /// `{kind: "plugin", plugin, form?, ...}`: context a plugin added.
    Plugin(PluginSource),
    /// `{kind: "subagent-settled", form: "notice", summary, senderSessionId}`:
    /// a background child's run ended (to its parent).
    SubagentSettled(RelaySource),
    /// `{kind: "subagent-report", form: "relay", senderSessionId}`: a
    /// child's `report` (to its parent).
    SubagentReport(RelaySource),
    /// `{kind: "coordinator", form: "relay", senderSessionId}`: a parent's
    /// `send_message` (to its child).
    Coordinator(RelaySource),
    /// A kind this harness does not know, kept whole (`kind` included).
    Other(Extra),
}

impl MessageSource {
    /// The `kind` tag.
    pub fn kind(&self) -> &str {
        match self {
            MessageSource::User(_) => source_kind::USER,
            MessageSource::Model(_) => source_kind::MODEL,
            MessageSource::Tool(_) => source_kind::TOOL,
            MessageSource::Plugin(_) => source_kind::PLUGIN,
            MessageSource::SubagentSettled(_) => source_kind::SUBAGENT_SETTLED,
            MessageSource::SubagentReport(_) => source_kind::SUBAGENT_REPORT,
            MessageSource::Coordinator(_) => source_kind::COORDINATOR,
            MessageSource::Other(o) => o.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// A plugin source of `plugin` without a form.
    pub fn plugin(plugin: impl Into<String>) -> MessageSource {
        MessageSource::Plugin(PluginSource {
            plugin: plugin.into(),
            form: None,
            extra: Extra::new(),
        })
    }
}

/// The `kind` tags of [`MessageSource`].
pub mod source_kind {
    /// A person.
    pub const USER: &str = "user";
    /// A model.
    pub const MODEL: &str = "model";
    /// A tool call.
    pub const TOOL: &str = "tool";
    /// A plugin.
    pub const PLUGIN: &str = "plugin";
    /// A background child's settlement notice.
    pub const SUBAGENT_SETTLED: &str = "subagent-settled";
    /// A child's report.
    pub const SUBAGENT_REPORT: &str = "subagent-report";
    /// A parent's message to its child.
    pub const COORDINATOR: &str = "coordinator";
}

/// The source of an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSource {
    /// The provider route.
    pub provider: String,
    /// The model id.
    pub model: String,
    /// What an adapter needs to replay this answer to the same provider
    /// (opaque to everything but that adapter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_state: Option<Value>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The source of a tool-result message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSource {
    /// The call it answers.
    pub call_id: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The source of context a plugin added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginSource {
    /// The plugin's name (`compact` for a compaction checkpoint).
    pub plugin: String,
    /// How the context is framed: `instructions`, `catalog`, `snapshot`,
    /// `notice`, `relay`, `recall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<String>,
    /// The form's own fields (`sections`, `summary`, ...) and the
    /// plugin's (`compactionId`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// The source of a message one agent sends another (a settlement notice,
/// a report, a parent's message): who sent it and how it is framed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RelaySource {
    /// `notice` (a settlement) or `relay` (a report, a parent's message).
    pub form: String,
    /// A short summary for displays (settlement notices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The session of the agent that sent it.
    pub sender_session_id: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl RelaySource {
    /// The `form` of a settlement notice.
    pub const NOTICE: &'static str = "notice";
    /// The `form` of a report or a parent's message.
    pub const RELAY: &'static str = "relay";

    /// A relay from `sender` in `form`, with no summary.
    pub fn new(form: &str, sender: impl Into<String>) -> RelaySource {
        RelaySource {
            form: form.to_owned(),
            summary: None,
            sender_session_id: sender.into(),
            extra: Extra::new(),
        }
    }
}

/// The shape every source is written in: the tag, then the member's
/// fields.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum TaggedSource<U, M, T, P, R> {
    User(U),
    Model(M),
    Tool(T),
    Plugin(P),
    #[serde(rename = "subagent-settled")]
    SubagentSettled(R),
    #[serde(rename = "subagent-report")]
    SubagentReport(R),
    Coordinator(R),
}

impl Serialize for MessageSource {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        type Ref<'a> = TaggedSource<
            &'a Extra,
            &'a ModelSource,
            &'a ToolSource,
            &'a PluginSource,
            &'a RelaySource,
        >;
        match self {
            MessageSource::User(e) => Ref::User(e).serialize(s),
            MessageSource::Model(m) => Ref::Model(m).serialize(s),
            MessageSource::Tool(t) => Ref::Tool(t).serialize(s),
            MessageSource::Plugin(p) => Ref::Plugin(p).serialize(s),
            MessageSource::SubagentSettled(r) => Ref::SubagentSettled(r).serialize(s),
            MessageSource::SubagentReport(r) => Ref::SubagentReport(r).serialize(s),
            MessageSource::Coordinator(r) => Ref::Coordinator(r).serialize(s),
            MessageSource::Other(o) => o.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for MessageSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        open::deserialize(d)
    }
}

impl open::FromMap for MessageSource {
    fn from_map(map: Extra) -> Result<Self, String> {
        let known = [
            source_kind::USER,
            source_kind::MODEL,
            source_kind::TOOL,
            source_kind::PLUGIN,
            source_kind::SUBAGENT_SETTLED,
            source_kind::SUBAGENT_REPORT,
            source_kind::COORDINATOR,
        ];
        let value = match open::split(map, "kind", &known)? {
            Ok(value) => value,
            Err(other) => return Ok(MessageSource::Other(other)),
        };
        type Owned = TaggedSource<Extra, ModelSource, ToolSource, PluginSource, RelaySource>;
        let tagged: Owned = open::known(value)?;
        Ok(match tagged {
            TaggedSource::User(mut e) => {
                e.shift_remove("kind");
                MessageSource::User(e)
            }
            TaggedSource::Model(m) => MessageSource::Model(m),
            TaggedSource::Tool(t) => MessageSource::Tool(t),
            TaggedSource::Plugin(p) => MessageSource::Plugin(p),
            TaggedSource::SubagentSettled(r) => MessageSource::SubagentSettled(r),
            TaggedSource::SubagentReport(r) => MessageSource::SubagentReport(r),
            TaggedSource::Coordinator(r) => MessageSource::Coordinator(r),
        })
    }
}

/// One content block (tagged by `type`).
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    /// `{type: "text", text}`: visible text.
    Text(TextBlock),
    /// `{type: "reasoning", text}`: the model's thinking.
    Reasoning(TextBlock),
    /// `{type: "tool-call", id, name, arguments}`.
    ToolCall(ToolCallBlock),
    /// `{type: "tool-result", toolCallId, content, isError?}`.
    ToolResult(ToolResultBlock),
    /// `{type: "image", attachment}`.
    Image(ImageBlock),
    /// A block type this harness does not know, kept whole (`type`
    /// included).
    Other(Extra),
}

/// The `type` tags of [`ContentBlock`].
pub mod block_type {
    /// Visible text.
    pub const TEXT: &str = "text";
    /// Reasoning.
    pub const REASONING: &str = "reasoning";
    /// A tool call.
    pub const TOOL_CALL: &str = "tool-call";
    /// A tool result.
    pub const TOOL_RESULT: &str = "tool-result";
    /// An image.
    pub const IMAGE: &str = "image";
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text(TextBlock::new(text))
    }

    /// A reasoning block.
    pub fn reasoning(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Reasoning(TextBlock::new(text))
    }

    /// A tool-call block.
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> ContentBlock {
        ContentBlock::ToolCall(ToolCallBlock {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            extra: Extra::new(),
        })
    }

    /// The `type` tag.
    pub fn block_type(&self) -> &str {
        match self {
            ContentBlock::Text(_) => block_type::TEXT,
            ContentBlock::Reasoning(_) => block_type::REASONING,
            ContentBlock::ToolCall(_) => block_type::TOOL_CALL,
            ContentBlock::ToolResult(_) => block_type::TOOL_RESULT,
            ContentBlock::Image(_) => block_type::IMAGE,
            ContentBlock::Other(o) => o.get("type").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The text of a `text` block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(t) => Some(&t.text),
            _ => None,
        }
    }

    /// The text of a `text` or `reasoning` block.
    pub fn any_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text(t) | ContentBlock::Reasoning(t) => Some(&t.text),
            _ => None,
        }
    }
}

/// A `text` or `reasoning` block's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

impl TextBlock {
    /// A block of `text`.
    pub fn new(text: impl Into<String>) -> TextBlock {
        TextBlock {
            text: text.into(),
            extra: Extra::new(),
        }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallBlock {
    /// The provider's call id (pairs the result).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: raw JSON text, never parsed
    /// in transit.
    pub arguments: String,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool's result, sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultBlock {
    /// The call it answers.
    pub tool_call_id: String,
    /// What the tool returned.
    pub content: Vec<ContentBlock>,
    /// Whether it failed (always written by this harness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An image block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    /// The attachment reference (its shape belongs to the attachment
    /// service: id, media type, size; kept as written).
    pub attachment: Value,
    /// Fields this harness does not know.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The shape every block is written in: the tag, then the member's fields.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type")]
enum TaggedBlock<T, C, R, I> {
    #[serde(rename = "text")]
    Text(T),
    #[serde(rename = "reasoning")]
    Reasoning(T),
    #[serde(rename = "tool-call")]
    ToolCall(C),
    #[serde(rename = "tool-result")]
    ToolResult(R),
    #[serde(rename = "image")]
    Image(I),
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        type Ref<'a> =
            TaggedBlock<&'a TextBlock, &'a ToolCallBlock, &'a ToolResultBlock, &'a ImageBlock>;
        match self {
            ContentBlock::Text(b) => Ref::Text(b).serialize(s),
            ContentBlock::Reasoning(b) => Ref::Reasoning(b).serialize(s),
            ContentBlock::ToolCall(b) => Ref::ToolCall(b).serialize(s),
            ContentBlock::ToolResult(b) => Ref::ToolResult(b).serialize(s),
            ContentBlock::Image(b) => Ref::Image(b).serialize(s),
            ContentBlock::Other(o) => o.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        open::deserialize(d)
    }
}

impl open::FromMap for ContentBlock {
    fn from_map(map: Extra) -> Result<Self, String> {
        let known = [
            block_type::TEXT,
            block_type::REASONING,
            block_type::TOOL_CALL,
            block_type::TOOL_RESULT,
            block_type::IMAGE,
        ];
        let value = match open::split(map, "type", &known)? {
            Ok(value) => value,
            Err(other) => return Ok(ContentBlock::Other(other)),
        };
        type Owned = TaggedBlock<TextBlock, ToolCallBlock, ToolResultBlock, ImageBlock>;
        let tagged: Owned = open::known(value)?;
        Ok(match tagged {
            TaggedBlock::Text(b) => ContentBlock::Text(b),
            TaggedBlock::Reasoning(b) => ContentBlock::Reasoning(b),
            TaggedBlock::ToolCall(b) => ContentBlock::ToolCall(b),
            TaggedBlock::ToolResult(b) => ContentBlock::ToolResult(b),
            TaggedBlock::Image(b) => ContentBlock::Image(b),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(text: &str) -> String {
        let typed: T = serde_json::from_str(text).unwrap();
        serde_json::to_string(&typed).unwrap()
    }

    #[test]
    fn known_blocks_round_trip_with_their_unknown_fields() {
        for text in [
            r#"{"type":"text","text":"hi"}"#,
            r#"{"type":"text","text":"hi","cacheControl":{"x":1}}"#,
            r#"{"type":"reasoning","text":"hm","signature":"s"}"#,
            r#"{"type":"tool-call","id":"c1","name":"read","arguments":"{\"path\":\"a\"}"}"#,
            r#"{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"ok"}],"isError":false}"#,
            r#"{"type":"image","attachment":{"id":"a","mediaType":"image/png"}}"#,
            r#"{"type":"future-block","payload":[1,2],"z":null}"#,
        ] {
            assert_eq!(round_trip::<ContentBlock>(text), text);
        }
    }

    #[test]
    fn a_malformed_known_block_is_an_error_naming_the_field() {
        let err = serde_json::from_str::<ContentBlock>(r#"{"type":"text","text":3}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        let err =
            serde_json::from_str::<ContentBlock>(r#"{"type":"tool-call","id":"c"}"#).unwrap_err();
        assert!(err.to_string().contains("name"), "{err}");
        assert!(serde_json::from_str::<ContentBlock>(r#"{"text":"x"}"#).is_err());
    }

    #[test]
    fn sources_of_every_kind_round_trip() {
        for text in [
            r#"{"kind":"user"}"#,
            r#"{"kind":"user","rpcId":"7"}"#,
            r#"{"kind":"model","provider":"p","model":"m"}"#,
            r#"{"kind":"model","provider":"p","model":"m","replayState":{"r":1}}"#,
            r#"{"kind":"tool","callId":"c"}"#,
            r#"{"kind":"plugin","plugin":"compact","compactionId":"x"}"#,
            r#"{"kind":"plugin","plugin":"p","form":"snapshot","sections":[{"name":"a","text":"b"}]}"#,
            r#"{"kind":"subagent-report","form":"relay","senderSessionId":"s"}"#,
        ] {
            assert_eq!(round_trip::<MessageSource>(text), text);
        }
    }

    #[test]
    fn a_message_is_written_back_in_the_key_order_it_was_read_in() {
        // The original's writers, as its logs hold them.
        for text in [
            r#"{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"role":"user","id":"u1"}"#,
            r#"{"role":"assistant","content":[],"source":{"kind":"model","provider":"p","model":"m"},"id":"a1"}"#,
            r#"{"source":{"kind":"tool","callId":"c"},"content":[{"type":"tool-result","toolCallId":"c","content":[],"isError":false}],"role":"user","id":"r1"}"#,
            r#"{"id":"x","note":1,"role":"user","content":[],"source":{"kind":"user"},"later":[2]}"#,
            r#"{"id":"u","role":"user","content":[],"source":{"kind":"user"}}"#,
        ] {
            assert_eq!(round_trip::<Message>(text), text);
        }
        let a: Message = serde_json::from_str(
            r#"{"role":"user","content":[],"source":{"kind":"user"},"id":"u"}"#,
        )
        .unwrap();
        assert_eq!(
            a,
            Message::user("u", vec![], MessageSource::User(Extra::new())),
            "order is not content"
        );
        let err =
            serde_json::from_str::<Message>(r#"{"id":"u","role":"user","source":{"kind":"user"}}"#)
                .unwrap_err();
        assert!(err.to_string().contains("missing field `content`"), "{err}");
        let err = serde_json::from_str::<Message>(
            r#"{"id":"u","role":"robot","content":[],"source":{"kind":"user"}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("role: unknown variant `robot`"),
            "{err}"
        );
    }

    #[test]
    fn builders_write_the_logged_shapes() {
        assert_eq!(
            serde_json::to_value(Message::user_text("u", "hi")).unwrap(),
            json!({"id": "u", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}})
        );
        let r = Message::tool_result("r", "c", vec![ContentBlock::text("out")], true);
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"id": "r", "role": "user",
                   "content": [{"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "out"}], "isError": true}],
                   "source": {"kind": "tool", "callId": "c"}})
        );
        assert_eq!(r.call_id(), Some("c"));
        let a = Message::assistant(
            "a",
            vec![
                ContentBlock::text("x"),
                ContentBlock::tool_call("c", "read", "{}"),
            ],
            "p",
            "m",
        );
        assert_eq!(a.text(), "x");
        assert_eq!(
            a.tool_calls().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
    }
}
