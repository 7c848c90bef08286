//! `llm`: routes model requests to adapters by provider route.
//!
//! An adapter plugin registers `{providers, service}`; `llm.stream(request)`
//! runs the `llm/stream` waterfall over the request minus its messages
//! (listeners may reconfigure or re-route it), then streams from the
//! adapter: each item is read as a [`Chunk`] and forwarded as the adapter
//! wrote it. Any adapter-side failure — no adapter, a failed call, a stream
//! that broke, an item that is no chunk — becomes one terminal
//! `finish{error}` chunk, so consumers see a single grammar — or
//! `finish{aborted}` when the caller cancelled the request (the original's
//! aborted `signal`) or the failure's code is `ABORTED`.
//!
//! `resolveModelInfo` answers the adapter's metadata of one model, checked
//! (`model_info`); `resolveCallConfig` checks a call config against it and
//! fills in the model's defaults (`call_config`), as the agent loop does
//! before it logs a request's header.
//!
//! A caller that wants to cancel names its request with a `signal` (any
//! string of its choosing) and calls `llm.cancel {signal}`: the adapter call
//! is dropped (which stops it in its plugin) and the stream ends with
//! `finish{aborted}`. A name stays aborted ([`signals`]): a request that
//! starts under it after its cancel ends at once.

#[cfg(test)]
mod alloc_count;
mod call_config;
mod model_info;
mod replay;
mod signals;

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::api::llm::{
    AdaptersUpdated, CancelParams, CancelReply, ModelInfo, ModelInfoParams, RegisterAdapterParams,
};
use dsh_sdk::names::{bus, code, llm, llm_adapter, llm_failure, service};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::CallConfig;
use dsh_sdk::vocab::{Chunk, LlmFailure};
use dsh_sdk::RawObject;
use signals::{Signal, Signals};

struct Adapter {
    providers: Vec<String>,
    service: String,
    owner: u64,
}

type Registry = Rc<RefCell<Vec<Adapter>>>;

/// The codes of this service's own errors (the model metadata's are
/// `model_info::error_code`; `NO_ADAPTER` is `dsh_sdk::names::code`'s).
mod error_code {
    /// A registration without routes or a service.
    pub const INVALID_ADAPTER: &str = "INVALID_ADAPTER";
    /// A route another adapter serves already.
    pub const DUPLICATE_ADAPTER: &str = "DUPLICATE_ADAPTER";
}

/// The cancellation signals, by name.
type SharedSignals = Rc<RefCell<Signals>>;

/// The terminal chunk of a failed request: `aborted` when the caller's
/// signal was aborted or the failure is itself `ABORTED` (the original's
/// `adapterFailureChunk`), `error` otherwise.
fn failure_finish(code: &str, message: String, signal_aborted: bool) -> Chunk {
    LlmFailure::new(code, message).finish(signal_aborted || code == code::ABORTED)
}

/// Reads one item an adapter streamed as a [`Chunk`]: whether it is the
/// `finish`, or the failure that ends the stream when it is no chunk (the
/// set is closed: a consumer could only refuse it later).
///
/// This one typed reading is the check and the `finish` test at once. A
/// probe of `type` alone would spot `finish` with less work, but every item
/// must still be read whole to refuse what is no chunk (a `text-delta`
/// without its `text`, a `finish` of an unknown kind), so a probe would add
/// a reading, not save one. The item goes on as the text it came as.
fn read_chunk(item: &Payload) -> Result<bool, (String, String)> {
    match item.parse::<Chunk>() {
        Ok(chunk) => Ok(matches!(chunk, Chunk::Finish { .. })),
        Err(e) => Err((
            llm_failure::MALFORMED_RESPONSE.to_owned(),
            format!("the adapter streamed an item that is not a stream chunk: {e}"),
        )),
    }
}

/// Joins `request`'s `signal` (removed from the request, so adapters
/// never see it) for the life of the stream; a `signal` that is not a
/// name is refused.
fn take_signal(
    signals: &SharedSignals,
    request: &mut RawObject,
) -> Result<Option<(String, Rc<Signal>)>> {
    let Some(raw) = request.remove("signal") else {
        return Ok(None);
    };
    let name: String = serde_json::from_str(raw.get()).map_err(|e| {
        Error::new(
            codes::INVALID_PAYLOAD,
            format!(
                "the request's `signal` must be a string (the name `{}` stops it by): {e}",
                llm::CANCEL
            ),
        )
    })?;
    let signal = signals.borrow_mut().join(&name);
    Ok(Some((name, signal)))
}

async fn handle(
    ctx: Context,
    registry: Registry,
    signals: SharedSignals,
    req: Request,
) -> Result<Reply> {
    match req.method.as_str() {
        llm::REGISTER_ADAPTER => register_adapter(&ctx, &registry, &req),
        llm::PROVIDERS => providers(&registry),
        llm::CANCEL => cancel(&signals, &req),
        llm::STREAM => stream(ctx, registry, signals, &req),
        llm::RESOLVE_MODEL_INFO => resolve_model_info(&ctx, &registry, &req).await,
        llm::RESOLVE_CALL_CONFIG => resolve_call_config(&ctx, &registry, &req).await,
        _ => Err(req.unknown_method()),
    }
}

/// The adapter service serving `provider`.
fn adapter_of(registry: &Registry, provider: &str) -> Option<String> {
    instance_of(registry, provider).map(|(service, _)| service)
}

/// Whether `instance` (its service and owner) is the adapter serving
/// `provider`, compared in place (nothing is cloned).
fn serves(registry: &Registry, instance: &(String, u64), provider: &str) -> bool {
    registry
        .borrow()
        .iter()
        .find(|a| a.providers.iter().any(|p| p == provider))
        .is_some_and(|a| a.service == instance.0 && a.owner == instance.1)
}

/// The adapter instance serving `provider`: its service and the fiber
/// that registered it.
fn instance_of(registry: &Registry, provider: &str) -> Option<(String, u64)> {
    registry
        .borrow()
        .iter()
        .find(|a| a.providers.iter().any(|p| p == provider))
        .map(|a| (a.service.clone(), a.owner))
}

/// `resolveModelInfo`: the adapter's metadata of one model, checked as the
/// original checks it (`model_info::check`).
async fn resolve_model_info(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let params: ModelInfoParams = req.params_as()?;
    Reply::json(model_info_of(ctx, registry, &params).await?)
}

/// `resolveCallConfig`: the call config checked against its model's
/// metadata, with the model's defaults filled in (`call_config::resolve`).
/// Dropping the call (the agent's cancel, its disposal) drops the
/// adapter's lookup with it.
async fn resolve_call_config(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let config: CallConfig = req.params_as()?;
    let params = ModelInfoParams {
        provider: config.provider.clone(),
        model: config.model.clone(),
    };
    let info = model_info_of(ctx, registry, &params).await?;
    Reply::json(call_config::resolve(config, &info)?)
}

/// The checked metadata of `params.model` from the adapter serving
/// `params.provider` (an adapter without `resolveModel` knows nothing of
/// it: [`ModelInfo::bare`]).
async fn model_info_of(
    ctx: &Context,
    registry: &Registry,
    params: &ModelInfoParams,
) -> Result<ModelInfo> {
    let Some(service) = adapter_of(registry, &params.provider) else {
        return Err(Error::new(
            code::NO_ADAPTER,
            format!("no adapter serves provider `{}`", params.provider),
        ));
    };
    let answer = ctx
        .service(service)
        .call_as::<ModelInfo>(llm_adapter::RESOLVE_MODEL, params)
        .await;
    let info = match answer {
        Ok(info) => info,
        // An adapter that does not describe its models knows nothing of
        // them: its id as its name, as the original's default
        // `resolveModel` answers.
        Err(e) if e.code == codes::UNKNOWN_METHOD => ModelInfo::bare(params),
        Err(e) => return Err(e),
    };
    model_info::check(&info, params)?;
    Ok(info)
}

/// `registerAdapter`: routes nobody serves yet, to a service; removed
/// again when the adapter's plugin goes.
fn register_adapter(ctx: &Context, registry: &Registry, req: &Request) -> Result<Reply> {
    let RegisterAdapterParams { providers, service } = req.params_as()?;
    if providers.is_empty() || providers.iter().any(String::is_empty) || service.is_empty() {
        return Err(Error::new(
            error_code::INVALID_ADAPTER,
            "an adapter needs routes and a service",
        ));
    }
    {
        let reg = registry.borrow();
        if let Some(p) = providers
            .iter()
            .find(|p| reg.iter().any(|a| a.providers.contains(p)))
        {
            return Err(Error::new(
                error_code::DUPLICATE_ADAPTER,
                format!("provider route `{p}` is already served"),
            ));
        }
    }
    let owner = req.caller;
    registry.borrow_mut().push(Adapter {
        providers,
        service,
        owner,
    });
    let r2 = registry.clone();
    req.on_caller_gone(move || r2.borrow_mut().retain(|a| a.owner != owner));
    ctx.emit(bus::LLM_ADAPTERS_UPDATED, AdaptersUpdated {})?;
    Reply::json(())
}

/// `providers`: every route served, in registration order.
fn providers(registry: &Registry) -> Result<Reply> {
    let v: Vec<String> = registry
        .borrow()
        .iter()
        .flat_map(|a| a.providers.clone())
        .collect();
    Reply::json(v)
}

/// `cancel`: aborts the requests under the signal, now and to come;
/// answers whether one was streaming.
fn cancel(signals: &SharedSignals, req: &Request) -> Result<Reply> {
    let CancelParams { signal: name } = req.params_as()?;
    let streaming = signals.borrow_mut().cancel(&name);
    Reply::json(CancelReply { streaming })
}

/// `stream`: the chunks of the request, routed on a task.
fn stream(
    ctx: Context,
    registry: Registry,
    signals: SharedSignals,
    req: &Request,
) -> Result<Reply> {
    let (tx, reply) = Reply::stream();
    // The request stays raw: this hop reads `signal` and `provider`
    // and hands the history on without parsing it.
    let mut request: RawObject = req.params_as()?;
    let signal = take_signal(&signals, &mut request)?;
    let task_ctx = ctx.clone();
    task_ctx.spawn(async move {
        let (name, signal) = match signal {
            Some((name, signal)) => (Some(name), signal),
            None => (None, Rc::default()),
        };
        route(&ctx, &registry, request, &signal, tx).await;
        if let Some(name) = name {
            signals.borrow_mut().leave(&name, signal);
        }
    });
    Ok(reply)
}

/// Streams `request` from the adapter of its provider into `tx`, ending
/// with `finish{aborted}` once `signal` is aborted.
async fn route(
    ctx: &Context,
    registry: &Registry,
    mut request: RawObject,
    signal: &Signal,
    tx: ReplySender,
) {
    // The waterfall carries the request without its history (listeners
    // route and reconfigure; they do not rewrite the logged history), so a
    // long session does not ship its whole transcript through every
    // listener.
    let messages = request.remove("messages");
    let request = match ctx
        .waterfall(bus::LLM_STREAM, &request, |r| async move { Ok(r) })
        .await
    {
        Ok(r) => r,
        Err(e) => return tx.fail(e),
    };
    let mut request = match RawObject::from_value(&request) {
        Ok(Some(r)) => r,
        Ok(None) => {
            return tx.fail(Error::new(
                codes::INVALID_PAYLOAD,
                format!(
                    "an `{}` listener answered {request}, not a request object",
                    bus::LLM_STREAM
                ),
            ))
        }
        Err(e) => return tx.fail(e.into()),
    };
    if let Some(m) = messages {
        request.insert("messages", m);
    }
    let terminal = match stream_from_adapter(ctx, registry, request, signal, &tx).await {
        Some((code, message)) => failure_finish(&code, message, signal.is_aborted()),
        None => return,
    };
    tx.send(terminal);
}

/// Forwards the adapter's chunks; the failure that ends the stream early,
/// if any (`None` once a `finish` went out or the caller left).
async fn stream_from_adapter(
    ctx: &Context,
    registry: &Registry,
    request: RawObject,
    signal: &Signal,
    tx: &ReplySender,
) -> Option<(String, String)> {
    let aborted = || {
        Some((
            code::ABORTED.to_owned(),
            "the request was aborted".to_owned(),
        ))
    };
    if signal.is_aborted() {
        return aborted();
    }
    let provider = match request.get_as::<String>("provider") {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Some((
                code::NO_ADAPTER.to_owned(),
                "the request names no provider route (`provider`)".to_owned(),
            ))
        }
        Err(e) => {
            return Some((
                codes::INVALID_PAYLOAD.to_owned(),
                format!("the request's `provider` is not a route name: {e}"),
            ))
        }
    };
    let Some(instance) = instance_of(registry, &provider) else {
        return Some((
            code::NO_ADAPTER.to_owned(),
            format!("no adapter serves provider `{provider}`"),
        ));
    };
    let mut request = request;
    if let Some(messages) = request.get("messages") {
        // The request's own route is the adapter's; another route is looked
        // up only when a message of it has replay state.
        let same = |p: &str| p == provider || serves(registry, &instance, p);
        match replay::for_adapter(messages, same) {
            Ok(Some(filtered)) => request.insert("messages", filtered),
            Ok(None) => {}
            Err(e) => {
                return Some((
                    codes::INVALID_PAYLOAD.to_owned(),
                    format!("the request's `messages` are not a message list: {e}"),
                ))
            }
        }
    }
    let service = instance.0;
    // Dropping the adapter's stream (on a cancel) stops it in its plugin:
    // at once when the caller goes too, not at the adapter's next chunk (a
    // server may be silent for minutes, and its connection stays open
    // until the adapter is told).
    let mut stream = ctx.service(service).stream(llm_adapter::STREAM, &request);
    loop {
        let item = tokio::select! {
            biased;
            () = signal.aborted() => return aborted(),
            () = tx.closed() => return None,
            item = stream.next_payload() => item,
        };
        match item? {
            Ok(chunk) => {
                let done = match read_chunk(&chunk) {
                    Ok(done) => done,
                    Err(failure) => return Some(failure),
                };
                // Forwarded as the adapter wrote it.
                if !tx.send_payload(chunk) || done {
                    return None;
                }
            }
            Err(e) => return Some((e.code, e.message)),
        }
    }
}

struct Llm;

impl Plugin for Llm {
    const NAME: &'static str = "llm";
    const DESCRIPTION: &'static str = "model routing (service `llm`)";
    const PROVIDES: &'static [&'static str] = &[service::LLM];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry: Registry = Rc::default();
        let signals: SharedSignals = Rc::default();
        let ctx2 = ctx.clone();
        ctx.provide(service::LLM, move |req| {
            handle(ctx2.clone(), registry.clone(), signals.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Llm);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_aborted_when_the_signal_is_or_its_code_is_aborted() {
        let kind = |code: &str, aborted: bool| match failure_finish(code, "m".to_owned(), aborted) {
            Chunk::Finish { reason, .. } => reason.kind(),
            other => panic!("{other:?}"),
        };
        assert_eq!(kind(llm_failure::SERVER, false), "error");
        assert_eq!(kind(llm_failure::SERVER, true), "aborted");
        assert_eq!(kind(code::ABORTED, false), "aborted");
        let chunk = failure_finish(llm_failure::SERVER, "stopped".to_owned(), true);
        assert_eq!(
            serde_json::to_string(&chunk).unwrap(),
            r#"{"type":"finish","reason":{"kind":"aborted","failure":{"message":"stopped","code":"SERVER"}}}"#
        );
    }

    #[test]
    fn an_adapters_item_is_read_as_a_chunk() {
        let read = |text: &str| read_chunk(&Payload::from_text(text));
        assert_eq!(
            read(r#"{"type":"text-delta","index":0,"text":"hi"}"#),
            Ok(false)
        );
        assert_eq!(
            read(r#"{"type":"finish","reason":{"kind":"stop"},"x":1}"#),
            Ok(true)
        );
        for bad in [
            r#"{"type":"thinking","index":0}"#,
            r#"{"type":"finish","reason":{"kind":"later"}}"#,
            r#"{"type":"text-delta","index":0}"#,
            "[1]",
        ] {
            let (code, message) = read(bad).unwrap_err();
            assert_eq!(code, llm_failure::MALFORMED_RESPONSE, "{bad}");
            assert!(
                message.starts_with("the adapter streamed an item that is not a stream chunk: "),
                "{message}"
            );
        }
    }
}
