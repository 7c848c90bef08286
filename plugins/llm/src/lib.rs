//! `llm`: routes model requests to adapters by provider route.
//!
//! An adapter plugin registers `{providers, service}`; `llm.stream(request)`
//! runs the `llm/stream` waterfall over the request minus its messages
//! (listeners may reconfigure or re-route it), then streams from the adapter. Any adapter-side failure —
//! no adapter, a failed call, a stream that broke — becomes one terminal
//! `finish{error}` chunk, so consumers see a single grammar.

use std::cell::RefCell;
use std::rc::Rc;

use dsh_sdk::prelude::*;
use dsh_sdk::vocab::LlmFailure;

struct Adapter {
    providers: Vec<String>,
    service: String,
    owner: u64,
}

type Registry = Rc<RefCell<Vec<Adapter>>>;

async fn handle(ctx: Context, registry: Registry, req: Request) -> Result<Reply> {
    match req.method.as_str() {
        "registerAdapter" => {
            let providers: Vec<String> = serde_json::from_value(req.params["providers"].clone())?;
            let service = req.params["service"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if providers.is_empty() || providers.iter().any(String::is_empty) || service.is_empty()
            {
                return Err(Error::new(
                    "INVALID_ADAPTER",
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
                        "DUPLICATE_ADAPTER",
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
            ctx.emit("llm/adapters-updated", json!({}))?;
            Ok(Value::Null.into())
        }
        "providers" => {
            let v: Vec<String> = registry
                .borrow()
                .iter()
                .flat_map(|a| a.providers.clone())
                .collect();
            Reply::json(v)
        }
        "stream" => {
            let (tx, reply) = Reply::stream();
            let request = req.params.clone();
            let task_ctx = ctx.clone();
            task_ctx.spawn(async move {
                let fail = |tx: &ReplySender, code: &str, msg: String| {
                    tx.send(LlmFailure::new(code, msg).finish_chunk(false));
                };
                // The waterfall carries the request without its history
                // (listeners route and reconfigure; they do not rewrite the
                // logged history), so a long session does not ship its
                // whole transcript through every listener.
                let mut request = request;
                let messages = request
                    .as_object_mut()
                    .and_then(|o| o.shift_remove("messages"));
                let mut request = match ctx
                    .waterfall("llm/stream", request, |r| async move { Ok(r) })
                    .await
                {
                    Ok(r) => r,
                    Err(e) => return tx.fail(e),
                };
                if let Some(m) = messages {
                    request["messages"] = m;
                }
                let provider = request["provider"].as_str().unwrap_or_default().to_owned();
                let service = registry
                    .borrow()
                    .iter()
                    .find(|a| a.providers.contains(&provider))
                    .map(|a| a.service.clone());
                let Some(service) = service else {
                    return fail(
                        &tx,
                        "NO_ADAPTER",
                        format!("no adapter serves provider `{provider}`"),
                    );
                };
                let mut stream = ctx.service(service).stream("stream", request);
                while let Some(item) = stream.next().await {
                    match item {
                        Ok(chunk) => {
                            let done = chunk["type"] == "finish";
                            if !tx.send(chunk) || done {
                                return;
                            }
                        }
                        Err(e) => return fail(&tx, &e.code, e.message),
                    }
                }
            });
            Ok(reply)
        }
        _ => Err(req.unknown_method()),
    }
}

struct Llm;

impl Plugin for Llm {
    const NAME: &'static str = "llm";
    const DESCRIPTION: &'static str = "model routing (service `llm`)";
    const PROVIDES: &'static [&'static str] = &["llm"];
    type Config = ();

    async fn apply(ctx: Context, _config: ()) -> Result<()> {
        let registry: Registry = Rc::default();
        let ctx2 = ctx.clone();
        ctx.provide("llm", move |req| {
            handle(ctx2.clone(), registry.clone(), req)
        });
        Ok(())
    }
}

dsh_sdk::export_plugin!(Llm);
