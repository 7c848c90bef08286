//! Helpers for plugins that contribute tools or model adapters: one service
//! per fiber, registered with the `tools` (or `llm`) registry, which drops
//! the registrations when the fiber is disposed.
//!
//! Dependencies run one way: this module builds on [`crate::api::tools`]
//! (the service's types and client) and [`crate::api::llm`], which use
//! nothing of it. [`ToolSpec`] and [`args`] are defined in
//! [`crate::api::tools::spec`] and re-exported here, where plugin code
//! names them.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::api::llm::{Llm, ModelInfo, ModelInfoParams, RegisterAdapterParams};
use crate::api::tools::{Exec, RegisterParams, ToolReply, Tools};
use crate::context::{Context, Reply, Request};
use crate::error::Result;
use crate::names::{llm_adapter, tool_service};

mod typed;

pub use typed::{args, arguments, declaration, parameters, Number, ToolSpec, INVALID_ARGS};

/// Serves the tools described by `schemas` (made by [`declaration`]; their
/// `service` is set here) with `handler`, which receives each `execute`
/// request (its params are the call's [`Exec`], read with [`exec`]; `name`
/// says which tool).
pub async fn register_tools<F, Fut>(
    ctx: &Context,
    schemas: Vec<RegisterParams>,
    handler: F,
) -> Result<()>
where
    F: Fn(Request) -> Fut + 'static,
    Fut: Future<Output = Result<Reply>> + 'static,
{
    let service = serve_tools(ctx, handler);
    let tools = Tools::new(ctx);
    for mut params in schemas {
        params.service = service.clone();
        tools.register(&params).await?;
    }
    Ok(())
}

/// Provides this fiber's tool service, whose `execute` requests go to
/// `handler`, and answers its name: the `service` of the tools it
/// registers (for a plugin whose tools come and go, an MCP bridge; a fixed
/// set is [`register_tools`]).
pub fn serve_tools<F, Fut>(ctx: &Context, handler: F) -> String
where
    F: Fn(Request) -> Fut + 'static,
    Fut: Future<Output = Result<Reply>> + 'static,
{
    let service = format!("tool:{}:{}", ctx.plugin_name(), ctx.fiber());
    let handler = Rc::new(handler);
    ctx.provide(service.clone(), move |req| {
        let handler = handler.clone();
        async move {
            if req.method != tool_service::EXECUTE {
                return Err(req.unknown_method());
            }
            handler(req).await
        }
    });
    service
}

/// Serves the model routes `providers` with `handler`, which receives each
/// `stream` request and answers with a stream of chunks; `resolveModel`
/// answers [`ModelInfo::bare`] (see [`register_model_adapter`]).
pub async fn register_adapter<F, Fut>(
    ctx: &Context,
    providers: Vec<String>,
    handler: F,
) -> Result<()>
where
    F: Fn(Request) -> Fut + 'static,
    Fut: Future<Output = Result<Reply>> + 'static,
{
    register_model_adapter(ctx, providers, handler, |p| Ok(ModelInfo::bare(p))).await
}

/// [`register_adapter`], with `models` answering `resolveModel` (the
/// adapter's catalog: names, context windows, default output caps).
pub async fn register_model_adapter<F, Fut, M>(
    ctx: &Context,
    providers: Vec<String>,
    handler: F,
    models: M,
) -> Result<()>
where
    F: Fn(Request) -> Fut + 'static,
    Fut: Future<Output = Result<Reply>> + 'static,
    M: Fn(&ModelInfoParams) -> Result<ModelInfo> + 'static,
{
    register_model_adapter_async(ctx, providers, handler, move |params| {
        std::future::ready(models(&params))
    })
    .await
}

/// [`register_model_adapter`] with `models` answering asynchronously: an
/// adapter that may ask its server (a context window the config does not
/// state) answers `resolveModel` without holding up its `stream`
/// requests.
pub async fn register_model_adapter_async<F, Fut, M, MFut>(
    ctx: &Context,
    providers: Vec<String>,
    handler: F,
    models: M,
) -> Result<()>
where
    F: Fn(Request) -> Fut + 'static,
    Fut: Future<Output = Result<Reply>> + 'static,
    M: Fn(ModelInfoParams) -> MFut + 'static,
    MFut: Future<Output = Result<ModelInfo>> + 'static,
{
    let service = format!("llm:{}:{}", ctx.plugin_name(), ctx.fiber());
    let (handler, models) = (Rc::new(handler), Rc::new(models));
    ctx.provide(service.clone(), move |req| {
        let (handler, models) = (handler.clone(), models.clone());
        async move {
            match req.method.as_str() {
                llm_adapter::STREAM => handler(req).await,
                llm_adapter::RESOLVE_MODEL => Reply::json(models(req.params_as()?).await?),
                _ => Err(req.unknown_method()),
            }
        }
    });
    Llm::new(ctx)
        .register_adapter(&RegisterAdapterParams { providers, service })
        .await
}

/// The call an `execute` request carries (its agent, working directory,
/// arguments, fence, approval...); a field of the wrong type is
/// `INVALID_PAYLOAD` naming it.
pub fn exec(req: &Request) -> Result<Exec> {
    req.params_as()
}

/// A tool reply of one text block.
pub fn text_reply(text: &str) -> Result<Reply> {
    Reply::json(ToolReply::text(text))
}

/// `file` resolved against the call's working directory, as the fence sees
/// it ([`crate::fence::resolve`]): one path for every spelling of a file.
pub fn resolve(cwd: &str, file: &str) -> PathBuf {
    crate::fence::resolve(Path::new(cwd), Path::new(file))
}
