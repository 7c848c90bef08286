//! Output contracts (reference: `output: {schema, render}`): the JSON
//! Schema a tool's canonical `value` must satisfy, and the projection of a
//! value into the content the model sees and the presentation meta by the
//! tool's `render`.

use dsh_sdk::api::tools::{Exec, OutputContract, RenderParams, Rendered, ToolResult};
use dsh_sdk::names::tool_service;
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::ContentBlock;
// A tool's value is its own shape (checked here against its own schema).
use serde_json::Value;

use crate::results::{failure, read};
use crate::schema;

/// The failure of a value that breaks its tool's output contract.
pub fn invalid_output(name: &str, violations: &[String]) -> ToolResult {
    failure(
        &format!(
            "tool \"{name}\" returned invalid output: {}",
            violations.join("; ")
        ),
        Some(("ToolOutputError", "INVALID_TOOL_OUTPUT")),
    )
}

/// A successful result for `value` under `output` (validated, then
/// rendered by the tool's service when it declares `render`; otherwise the
/// body's `content` and `meta` stand). `Err` is the failed call.
pub async fn project(
    ctx: &Context,
    service: &str,
    output: &OutputContract,
    exec: &Exec,
    value: Value,
    content: Vec<ContentBlock>,
    meta: Option<Value>,
) -> std::result::Result<ToolResult, ToolResult> {
    let name = exec.name.as_str();
    let violations = schema::validate_output(&output.schema, &value);
    if !violations.is_empty() {
        return Err(invalid_output(name, &violations));
    }
    let (content, meta) = if output.render {
        let params = RenderParams {
            exec: exec.clone(),
            value: value.clone(),
        };
        let rendered = ctx
            .service(service.to_owned())
            .call(tool_service::RENDER, &params)
            .await
            .and_then(|answer| read::<Option<Rendered>>(answer, "the output.render answer"))
            .map_err(|e| invalid_output(name, &[format!("output.render failed: {}", e.message)]))?;
        let Some(Rendered {
            content: Some(content),
            meta,
        }) = rendered
        else {
            return Err(invalid_output(
                name,
                &["output.render returned no content blocks".to_owned()],
            ));
        };
        (content, meta.filter(|m| !m.is_null()))
    } else {
        (content, meta)
    };
    Ok(ToolResult::success(value, content, meta))
}
