//! Output contracts (reference: `output: {schema, render}`): the JSON
//! Schema a tool's canonical `value` must satisfy, and the projection of a
//! value into the content the model sees and the presentation meta by the
//! tool's `render`.

use dsh_sdk::api::tools::{Exec, OutputContract, RenderParams, Rendered};
use dsh_sdk::names::tool_service;
use dsh_sdk::prelude::*;

use crate::results::failure;
use crate::schema;

/// The failure of a value that breaks its tool's output contract.
pub fn invalid_output(name: &str, violations: &[String]) -> Value {
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
    content: Value,
    meta: Option<Value>,
) -> std::result::Result<Value, Value> {
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
            .map_err(|e| invalid_output(name, &[format!("output.render failed: {}", e.message)]))?;
        let Ok(Rendered {
            content: Some(content),
            meta,
        }) = serde_json::from_value::<Rendered>(rendered)
        else {
            return Err(invalid_output(
                name,
                &["output.render returned no content blocks".to_owned()],
            ));
        };
        (Value::Array(content), meta.filter(|m| !m.is_null()))
    } else {
        (content, meta)
    };
    Ok(success(value, content, meta))
}

/// A successful result in the pipeline's format.
pub fn success(value: Value, content: Value, meta: Option<Value>) -> Value {
    let mut result = json!({"isError": false, "value": value, "content": content});
    // Presentation meta (reference §5.3 step 7).
    if let Some(meta) = meta {
        result["meta"] = meta;
    }
    result
}

/// The value, content and meta of a tool's answer or a result (`null`,
/// `[]` and none when absent).
pub fn parts(v: &Value) -> (Value, Value, Option<Value>) {
    (
        v.get("value").cloned().unwrap_or(Value::Null),
        v.get("content").cloned().unwrap_or_else(|| json!([])),
        v.get("meta").filter(|m| !m.is_null()).cloned(),
    )
}
