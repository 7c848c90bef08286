//! The endpoints a server states its context window at, asked in order
//! until one answers, and how each answer is read.
//!
//! | server     | endpoint                  | field read                                        |
//! |------------|---------------------------|---------------------------------------------------|
//! | llama.cpp  | `GET {root}/props`        | `default_generation_settings.n_ctx` (per slot)    |
//! | vLLM, SGLang, OpenRouter, Groq... | `GET {baseUrl}/models` | `data[].max_model_len`, `context_length`, `context_window` |
//! | Ollama     | `GET {root}/api/ps`       | `models[].context_length` (the loaded runner's)   |
//! | Ollama     | `POST {root}/api/show`    | `num_ctx` in `parameters`, else `model_info["<arch>.context_length"]` |
//! | LM Studio  | `GET {root}/api/v1/models`| `models[].loaded_instances[].config.context_length`, else `max_context_length` |
//! | LM Studio  | `GET {root}/api/v0/models`| `data[].loaded_context_length`, else `max_context_length` |
//!
//! `{root}` is `baseUrl` without a trailing `/v1`. A figure is the real
//! window when it is what the server runs with: llama.cpp's `n_ctx`,
//! vLLM's `max_model_len`, Ollama's loaded runner or a Modelfile's
//! `num_ctx`, LM Studio's loaded instance. A model's trained length is not
//! (Ollama and LM Studio load a model on its first request with their
//! default context, 4,096 tokens at the least, whatever the model was
//! trained for; the rest is silently cut by Ollama): until the model is
//! loaded, the window is taken as the smaller of the trained length and
//! [`LOADER_DEFAULT`], a provisional figure asked again soon.
//! llama.cpp's `/v1/models` `meta.n_ctx_train` is a trained length too, and
//! is not read (its `/props` is asked first).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::error_body;
use crate::exchange::{error_chain, USER_AGENT};
use crate::lenient::{Label, TokenCount};

/// The most bytes of one endpoint's answer read: llama.cpp's `/props`
/// holds the chat template, Ollama's `/api/show` the license and template
/// (tens of KiB); a list of hundreds of models is longer and is not read
/// (the route's config can name the window).
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The smallest context Ollama and LM Studio load a model with when no
/// one chose another (Ollama: 4k, 32k or 256k by VRAM; LM Studio: its
/// default context length, 4,096 unless changed): the provisional window
/// of a model they have not loaded yet.
pub const LOADER_DEFAULT: u64 = 4096;

/// What one lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The window the server runs the model with, and the endpoint that
    /// said it.
    Stated(u64, String),
    /// A lower bound until the model is loaded (see [`LOADER_DEFAULT`]).
    Provisional(u64, String),
    /// The server answered, but no answer stated a window: each endpoint
    /// with why it did not.
    Silent(Vec<String>),
    /// No answer within the time, or the server cannot be reached.
    Unreachable(String),
}

/// What one endpoint's answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The window the model runs with.
    Stated(u64),
    /// A trained length, the model not loaded: the window is at most it.
    Trained(u64),
    /// Nothing usable, and why.
    Nothing(String),
}

/// One server's endpoints for `model`: `base_url` as configured (chat
/// completions are at `{base_url}/chat/completions`).
pub struct Prober<'a> {
    /// The HTTP client.
    pub client: &'a reqwest::Client,
    /// The route's `baseUrl`.
    pub base_url: &'a str,
    /// The key sent with every request, if the route has one.
    pub key: Option<&'a str>,
    /// The model asked about.
    pub model: &'a str,
}

/// The endpoints asked, in order: each its method and path, and its
/// reader.
enum Endpoint {
    Props,
    Models,
    OllamaPs,
    OllamaShow,
    LmStudioV1,
    LmStudioV0,
}

const ORDER: [Endpoint; 6] = [
    Endpoint::Props,
    Endpoint::Models,
    Endpoint::OllamaPs,
    Endpoint::OllamaShow,
    Endpoint::LmStudioV1,
    Endpoint::LmStudioV0,
];

/// `base_url` without a trailing `/` and `/v1`: where llama.cpp, Ollama
/// and LM Studio serve their own endpoints.
pub fn root_of(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// The path of `url` (what `/status` names the endpoint by).
pub fn path_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme.find('/').map_or("/", |i| &after_scheme[i..])
}

impl Prober<'_> {
    /// Asks the endpoints in order until one states a window, all within
    /// `time`.
    pub async fn ask(&self, time: Duration) -> Outcome {
        let deadline = Instant::now() + time;
        let mut silent = Vec::new();
        for endpoint in ORDER {
            let url = self.url(&endpoint);
            let label = path_of(&url).to_owned();
            let body = match self.fetch(&endpoint, &url, deadline, time).await {
                Ok(Ok(body)) => body,
                Ok(Err(why)) => {
                    silent.push(format!("{label}: {why}"));
                    continue;
                }
                Err(unreachable) => {
                    return Outcome::Unreachable(format!("{label}: {unreachable}"));
                }
            };
            match read(&endpoint, &body, self.model) {
                Read::Stated(n) => return Outcome::Stated(n, label),
                Read::Trained(n) => return Outcome::Provisional(n.min(LOADER_DEFAULT), label),
                Read::Nothing(why) => silent.push(format!("{label}: {why}")),
            }
        }
        Outcome::Silent(silent)
    }

    fn url(&self, endpoint: &Endpoint) -> String {
        let root = root_of(self.base_url);
        match endpoint {
            Endpoint::Props => format!("{root}/props"),
            Endpoint::Models => format!("{}/models", self.base_url.trim_end_matches('/')),
            Endpoint::OllamaPs => format!("{root}/api/ps"),
            Endpoint::OllamaShow => format!("{root}/api/show"),
            Endpoint::LmStudioV1 => format!("{root}/api/v1/models"),
            Endpoint::LmStudioV0 => format!("{root}/api/v0/models"),
        }
    }

    /// The answer's body, read whole within `deadline` and
    /// [`MAX_ANSWER_BYTES`]: `Ok(Err(why))` when the endpoint answered
    /// without one (an error status, a body too long), `Err(why)` when
    /// the server did not answer in time or cannot be reached.
    async fn fetch(
        &self,
        endpoint: &Endpoint,
        url: &str,
        deadline: Instant,
        time: Duration,
    ) -> Result<Result<String, String>, String> {
        let mut request = match endpoint {
            Endpoint::OllamaShow => self
                .client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(serde_json::json!({ "model": self.model }).to_string()),
            _ => self.client.get(url),
        }
        .header("User-Agent", USER_AGENT);
        if let Some(key) = self.key {
            request = request.bearer_auth(key);
        }
        let late = || format!("no answer within the lookup's {} ms", time.as_millis());
        let response = match tokio::time::timeout_at(deadline, request.send()).await {
            Err(_) => return Err(late()),
            Ok(Err(e)) => return Err(error_chain(&e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            return Ok(Err(format!("HTTP {}", status.as_u16())));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let body = error_body::read(response, left, MAX_ANSWER_BYTES).await;
        match body.cut {
            None => Ok(Ok(body.text)),
            Some(_) if Instant::now() >= deadline => Err(late()),
            Some(cut) => Ok(Err(cut)),
        }
    }
}

/// Reads `body` as `endpoint` answers it, for `model`.
fn read(endpoint: &Endpoint, body: &str, model: &str) -> Read {
    let parsed = match endpoint {
        Endpoint::Props => serde_json::from_str(body).map(read_props),
        Endpoint::Models | Endpoint::LmStudioV0 => {
            serde_json::from_str(body).map(|list| read_model_list(list, model))
        }
        Endpoint::OllamaPs => serde_json::from_str(body).map(|ps| read_ollama_ps(ps, model)),
        Endpoint::OllamaShow => serde_json::from_str(body).map(read_ollama_show),
        Endpoint::LmStudioV1 => {
            serde_json::from_str(body).map(|list| read_lmstudio_models(list, model))
        }
    };
    parsed.unwrap_or_else(|e| Read::Nothing(format!("not the expected JSON ({e})")))
}

/// A positive count, or `None`.
fn positive(count: TokenCount) -> Option<u64> {
    count.0.filter(|n| *n > 0)
}

// ---- llama.cpp -------------------------------------------------------------

/// `GET /props` (llama.cpp's server): what is read of it.
#[derive(Deserialize)]
struct Props {
    #[serde(default)]
    default_generation_settings: Option<GenerationSettings>,
}

#[derive(Deserialize)]
struct GenerationSettings {
    /// The context of one slot (`--ctx-size` divided among `--parallel`
    /// slots): the window a request has.
    #[serde(default)]
    n_ctx: TokenCount,
}

fn read_props(props: Props) -> Read {
    match props
        .default_generation_settings
        .and_then(|s| positive(s.n_ctx))
    {
        Some(n) => Read::Stated(n),
        None => Read::Nothing("no `default_generation_settings.n_ctx`".into()),
    }
}

// ---- OpenAI-compatible lists -----------------------------------------------

/// `GET {baseUrl}/models` (and LM Studio's `/api/v0/models`): `data[]`.
#[derive(Deserialize)]
struct ModelList {
    #[serde(default)]
    data: Vec<ModelCard>,
}

/// One model of a list; the fields servers state a window in.
#[derive(Deserialize)]
struct ModelCard {
    #[serde(default)]
    id: Label,
    /// LM Studio (`/api/v0`): the context of the loaded model.
    #[serde(default)]
    loaded_context_length: TokenCount,
    /// vLLM, SGLang.
    #[serde(default)]
    max_model_len: TokenCount,
    /// OpenRouter, Together and others.
    #[serde(default)]
    context_length: TokenCount,
    /// Groq.
    #[serde(default)]
    context_window: TokenCount,
    /// LM Studio (`/api/v0`): the trained length.
    #[serde(default)]
    max_context_length: TokenCount,
}

/// The card of `model` in `cards`: the one with its id, else the only one
/// (a server serving one model under another name).
fn card_of<'a, T>(cards: &'a [T], model: &str, id: impl Fn(&T) -> Option<&str>) -> Option<&'a T> {
    cards.iter().find(|c| id(c) == Some(model)).or(match cards {
        [only] => Some(only),
        _ => None,
    })
}

fn read_model_list(list: ModelList, model: &str) -> Read {
    let Some(card) = card_of(&list.data, model, |c| c.id.0.as_deref()) else {
        return Read::Nothing(format!("no model `{model}` listed"));
    };
    let stated = [
        card.loaded_context_length,
        card.max_model_len,
        card.context_length,
        card.context_window,
    ]
    .into_iter()
    .find_map(positive);
    match (stated, positive(card.max_context_length)) {
        (Some(n), _) => Read::Stated(n),
        (None, Some(trained)) => Read::Trained(trained),
        (None, None) => Read::Nothing(format!("no window for `{model}` in its entry")),
    }
}

// ---- Ollama ----------------------------------------------------------------

/// `GET /api/ps` (Ollama): the running models.
#[derive(Deserialize)]
struct OllamaPs {
    #[serde(default)]
    models: Vec<OllamaRunning>,
}

#[derive(Deserialize)]
struct OllamaRunning {
    #[serde(default)]
    name: Label,
    #[serde(default)]
    model: Label,
    /// The context the runner was loaded with.
    #[serde(default)]
    context_length: TokenCount,
}

/// Whether Ollama's `name` is `model` (`qwen3` is `qwen3:latest`).
fn same_ollama_model(name: Option<&str>, model: &str) -> bool {
    name.is_some_and(|n| {
        n == model || (!model.contains(':') && n.strip_suffix(":latest") == Some(model))
    })
}

fn read_ollama_ps(ps: OllamaPs, model: &str) -> Read {
    let running = ps.models.iter().find(|m| {
        same_ollama_model(m.name.0.as_deref(), model)
            || same_ollama_model(m.model.0.as_deref(), model)
    });
    match running.map(|m| positive(m.context_length)) {
        Some(Some(n)) => Read::Stated(n),
        Some(None) => Read::Nothing(format!("`{model}` runs, without a `context_length`")),
        None => Read::Nothing(format!("`{model}` is not loaded")),
    }
}

/// `POST /api/show {"model"}` (Ollama): the Modelfile's parameters and
/// the model's metadata.
#[derive(Deserialize)]
struct OllamaShow {
    /// `name value` lines (`num_ctx 8192`).
    #[serde(default)]
    parameters: Option<String>,
    /// GGUF metadata: `general.architecture` and `<arch>.context_length`
    /// among others (an open map by nature).
    #[serde(default)]
    model_info: Option<Map<String, Value>>,
}

fn read_ollama_show(show: OllamaShow) -> Read {
    let num_ctx = show.parameters.as_deref().and_then(|p| {
        p.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx"))
                .then(|| words.next()?.parse::<u64>().ok())
                .flatten()
        })
    });
    if let Some(n) = num_ctx.filter(|n| *n > 0) {
        return Read::Stated(n);
    }
    let trained = show.model_info.as_ref().and_then(|info| {
        let arch = info.get("general.architecture").and_then(Value::as_str)?;
        info.get(&format!("{arch}.context_length"))?.as_u64()
    });
    match trained.filter(|n| *n > 0) {
        Some(n) => Read::Trained(n),
        None => Read::Nothing("no `num_ctx` and no `<arch>.context_length`".into()),
    }
}

// ---- LM Studio -------------------------------------------------------------

/// `GET /api/v1/models` (LM Studio 0.4): `models[]`.
#[derive(Deserialize)]
struct LmStudioModels {
    #[serde(default)]
    models: Vec<LmStudioModel>,
}

#[derive(Deserialize)]
struct LmStudioModel {
    #[serde(default)]
    key: Label,
    #[serde(default)]
    loaded_instances: Vec<LmStudioInstance>,
    /// The trained length.
    #[serde(default)]
    max_context_length: TokenCount,
}

#[derive(Deserialize)]
struct LmStudioInstance {
    #[serde(default)]
    id: Label,
    #[serde(default)]
    config: Option<LmStudioInstanceConfig>,
}

#[derive(Deserialize)]
struct LmStudioInstanceConfig {
    #[serde(default)]
    context_length: TokenCount,
}

fn read_lmstudio_models(list: LmStudioModels, model: &str) -> Read {
    let found = list.models.iter().find(|m| {
        m.key.0.as_deref() == Some(model)
            || m.loaded_instances
                .iter()
                .any(|i| i.id.0.as_deref() == Some(model))
    });
    let Some(found) = found else {
        return Read::Nothing(format!("no model `{model}` listed"));
    };
    let loaded = found
        .loaded_instances
        .iter()
        .filter_map(|i| i.config.as_ref().and_then(|c| positive(c.context_length)))
        .min();
    match (loaded, positive(found.max_context_length)) {
        (Some(n), _) => Read::Stated(n),
        (None, Some(trained)) => Read::Trained(trained),
        (None, None) => Read::Nothing(format!("no window for `{model}` in its entry")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_json(endpoint: Endpoint, v: Value, model: &str) -> Read {
        read(&endpoint, &v.to_string(), model)
    }

    #[test]
    fn the_root_drops_a_trailing_v1_and_the_label_is_the_path() {
        assert_eq!(root_of("http://h:8080/v1/"), "http://h:8080");
        assert_eq!(root_of("http://h:8080"), "http://h:8080");
        assert_eq!(path_of("http://h:8080/v1/models"), "/v1/models");
        assert_eq!(path_of("http://h:8080"), "/");
    }

    #[test]
    fn llama_cpp_props_state_the_slot_context() {
        let props =
            json!({"default_generation_settings": {"n_ctx": 4096, "params": {}}, "total_slots": 1});
        assert_eq!(read_json(Endpoint::Props, props, "m"), Read::Stated(4096));
        // LM Studio answers unknown paths with an error object.
        let other = json!({"error": "Unexpected endpoint or method. (GET /props)"});
        assert!(matches!(
            read_json(Endpoint::Props, other, "m"),
            Read::Nothing(_)
        ));
        assert!(matches!(
            read(&Endpoint::Props, "<html>", "m"),
            Read::Nothing(_)
        ));
    }

    #[test]
    fn a_model_list_states_the_models_window_or_its_only_ones() {
        let vllm = json!({"object": "list", "data": [
            {"id": "a", "max_model_len": 8192}, {"id": "b", "max_model_len": 4096}]});
        assert_eq!(
            read_json(Endpoint::Models, vllm.clone(), "b"),
            Read::Stated(4096)
        );
        assert!(matches!(
            read_json(Endpoint::Models, vllm, "c"),
            Read::Nothing(_)
        ));
        let only = json!({"data": [{"id": "served-name", "context_length": 32768}]});
        assert_eq!(read_json(Endpoint::Models, only, "m"), Read::Stated(32768));
        // A string, a float or zero is no window.
        let loose = json!({"data": [{"id": "m", "max_model_len": "4k", "context_window": 0}]});
        assert!(matches!(
            read_json(Endpoint::Models, loose, "m"),
            Read::Nothing(_)
        ));
        // LM Studio's v0 list: loaded, or only a trained length.
        let v0 = json!({"data": [{"id": "m", "state": "not-loaded", "max_context_length": 32768}]});
        assert_eq!(
            read_json(Endpoint::LmStudioV0, v0, "m"),
            Read::Trained(32768)
        );
    }

    #[test]
    fn ollama_states_the_runner_or_num_ctx_else_a_trained_length() {
        let ps = json!({"models": [{"name": "qwen3:latest", "model": "qwen3:latest", "context_length": 8192}]});
        assert_eq!(
            read_json(Endpoint::OllamaPs, ps.clone(), "qwen3"),
            Read::Stated(8192)
        );
        assert!(matches!(
            read_json(Endpoint::OllamaPs, ps, "qwen3:4b"),
            Read::Nothing(_)
        ));
        let show = |parameters: &str| json!({"parameters": parameters, "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}});
        assert_eq!(
            read_json(
                Endpoint::OllamaShow,
                show("num_ctx                        16384\nstop \"<|im_end|>\""),
                "qwen3"
            ),
            Read::Stated(16384)
        );
        assert_eq!(
            read_json(Endpoint::OllamaShow, show("stop \"x\""), "qwen3"),
            Read::Trained(40960)
        );
    }

    #[test]
    fn lm_studio_states_a_loaded_instance_else_the_trained_length() {
        let list = |loaded: Value| json!({"models": [{"type": "llm", "key": "m", "loaded_instances": loaded, "max_context_length": 32768}]});
        assert_eq!(
            read_json(
                Endpoint::LmStudioV1,
                list(json!([{"id": "m", "config": {"context_length": 4096}}])),
                "m"
            ),
            Read::Stated(4096)
        );
        assert_eq!(
            read_json(Endpoint::LmStudioV1, list(json!([])), "m"),
            Read::Trained(32768)
        );
    }
}
