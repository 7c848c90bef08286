//! The `systemPrompt` service (plugin `system-prompt`, reference dsh-core
//! §6): the params and reply of each method of
//! [`crate::names::system_prompt`], the call a section provider answers,
//! the payloads of the bus events the provider dispatches, and
//! [`SystemPrompt`], a client with one method per service method.
//!
//! Every registration is global, or scoped to one agent with `scope`.
//! `serde_json::Value` stays where a payload is open: tool schemas (the
//! `tools` service's), and the fields an `system-prompt/assemble` listener
//! adds to an assembly.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::names::{service, system_prompt as method};
use crate::{Context, Result, Service};

// ---- params ----------------------------------------------------------------

/// Params of `section` and `context`: a named text (or a provider that
/// answers it at each assembly), ordered by `order`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SectionParams {
    /// The agent the entry is for; global when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The entry's name (non-empty, unique in its layer).
    #[serde(default)]
    pub name: String,
    /// Where it goes: a finite number, lowest first.
    #[serde(default)]
    pub order: Order,
    /// The text (may use `{{variable}}`s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A service method that answers the text, instead of `text`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<SectionProvider>,
    /// A section that replaces all the others (at most one is active).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub complete: bool,
}

/// The prefix of a section that goes with a tool: a section named
/// `tool:<name>` (the original's naming of a tool's guidance) is part of an
/// assembly only when that assembly offers tool `<name>`, so an agent
/// whose filter denies a tool, or a host where the tool is not registered
/// (yet), is not told how to use it.
pub const TOOL_SECTION_PREFIX: &str = "tool:";

/// The name of the section that goes with tool `tool`.
pub fn tool_section_name(tool: &str) -> String {
    format!("{TOOL_SECTION_PREFIX}{tool}")
}

/// An `order` as sent: any JSON value, so that one which is not a finite
/// number is refused with a message naming the entry rather than as a
/// malformed payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Order(Value);

impl Order {
    /// The order, if it is a finite number.
    pub fn get(&self) -> Option<f64> {
        self.0.as_f64().filter(|n| n.is_finite())
    }
}

impl From<f64> for Order {
    fn from(n: f64) -> Order {
        Order(Value::from(n))
    }
}

impl From<i64> for Order {
    fn from(n: i64) -> Order {
        Order(Value::from(n))
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The service method of a provided section, called with
/// [`ProviderRequest`] and answering the text (a string).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SectionProvider {
    /// The service (non-empty).
    pub service: String,
    /// Its method (non-empty).
    pub method: String,
}

/// Params of `variable`: a value for `{{name}}` in the texts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariableParams {
    /// The agent the value is for; global when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The name, `[a-z][a-z0-9_]*`.
    #[serde(default)]
    pub name: String,
    /// The value; null registers the name without one (a text using it
    /// then fails to render).
    #[serde(default)]
    pub value: Option<String>,
}

/// Params of `suppressRuntimeContext`: no runtime context in the scope's
/// assemblies while the registration lives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeParams {
    /// The agent; every assembly when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Params of `assemble`: the prompt of one scope, for the tools it may
/// use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleParams {
    /// The agent; only the global entries when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The tool schemas (the `tools` service's), put in canonical order.
    #[serde(default)]
    pub tools: Vec<Value>,
    /// The caller's variables (the loop's `provider`, `model`, `cwd`; null
    /// is a variable without a value); registered ones shadow them.
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// Every tool name a provider knows, for checking `toolOrder`; the
    /// names of `tools` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub known_tools: Option<Vec<String>>,
}

/// The call a [`SectionProvider`] answers with the text of its entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderRequest {
    /// `"section"` or `"context"`.
    pub kind: String,
    /// The entry's name.
    pub name: String,
    /// The assembly's scope (null when global).
    pub scope: Option<String>,
    /// The assembly's params without the tools, as the caller sent them.
    pub context: Value,
}

// ---- replies ---------------------------------------------------------------

/// A named text of an assembly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedText {
    /// The entry's name.
    pub name: String,
    /// Its text (raw in `sections`/`contexts`, rendered in
    /// `contextSections`).
    pub text: String,
}

/// Reply of `assemble`: the assembly as the `system-prompt/assemble`
/// waterfall left it, with its rendered forms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Assembly {
    /// The sections, in order.
    #[serde(default)]
    pub sections: Vec<NamedText>,
    /// The runtime contexts, in order.
    #[serde(default)]
    pub contexts: Vec<NamedText>,
    /// The tool schemas, in canonical order.
    #[serde(default)]
    pub tools: Vec<Value>,
    /// The variables the texts were rendered with.
    #[serde(default)]
    pub variables: Map<String, Value>,
    /// The system prompt: the sections rendered, joined.
    #[serde(default)]
    pub system: String,
    /// The runtime-context snapshot (`""` when no context is active).
    #[serde(default)]
    pub context: String,
    /// The rendered contexts that make up `context`.
    #[serde(default)]
    pub context_sections: Vec<NamedText>,
    /// Fields a waterfall listener added.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

// ---- bus payloads ----------------------------------------------------------

/// Payload of [`crate::names::bus::SYSTEM_PROMPT_CHANGE`] (emitted when a
/// registration comes or goes): nothing, `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {}

// The payload of `system-prompt/assemble` (waterfall, scoped when the
// assembly is) is an [`Assembly`] before rendering: `sections`, `contexts`,
// `tools`, `variables`.

// ---- client ----------------------------------------------------------------

/// A typed client of the `systemPrompt` service: one method per service
/// method, each sending the params type above and parsing the reply type
/// (an unexpected reply is `INVALID_PAYLOAD`). A registration lives until
/// the calling plugin is disposed.
#[derive(Clone)]
pub struct SystemPrompt(Service);

impl SystemPrompt {
    /// The `systemPrompt` service of `ctx`.
    pub fn new(ctx: &Context) -> SystemPrompt {
        SystemPrompt(ctx.service(service::SYSTEM_PROMPT))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `section`: registers a section of the system prompt.
    pub async fn section(&self, params: &SectionParams) -> Result<()> {
        self.0.call_as(method::SECTION, params).await
    }

    /// `context`: registers a runtime context.
    pub async fn context(&self, params: &SectionParams) -> Result<()> {
        self.0.call_as(method::CONTEXT, params).await
    }

    /// `variable`: registers a prompt variable.
    pub async fn variable(&self, params: &VariableParams) -> Result<()> {
        self.0.call_as(method::VARIABLE, params).await
    }

    /// `suppressRuntimeContext`: no runtime context in `scope` (every
    /// scope when `None`).
    pub async fn suppress_runtime_context(&self, scope: Option<&str>) -> Result<()> {
        let params = ScopeParams {
            scope: scope.map(str::to_owned),
        };
        self.0
            .call_as(method::SUPPRESS_RUNTIME_CONTEXT, &params)
            .await
    }

    /// `assemble`: the prompt of a scope.
    pub async fn assemble(&self, params: &AssembleParams) -> Result<Assembly> {
        self.0.call_as(method::ASSEMBLE, params).await
    }
}

#[cfg(test)]
mod tests;
