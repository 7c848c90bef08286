//! Where the context window `/status` shows came from: the route of the
//! session's last answer (the one a compaction engine measures against)
//! asked of `llm.resolveModelInfo`, whose `contextSource` says whether the
//! figure is the config's, the adapter's catalog's, the server's (and
//! which endpoint stated it) or the adapter's default.

use dsh_sdk::api::llm::{ContextSource, Llm};
use dsh_sdk::prelude::*;
use dsh_sdk::vocab::records::AssistantMessage;
use dsh_sdk::vocab::{event, MessageSource, SessionEvent};

/// `window from the server's /props` and the like; `None` for a kind this
/// build does not know.
pub fn describe(source: &ContextSource) -> Option<String> {
    Some(match source {
        ContextSource::Config => "window from the config".to_owned(),
        ContextSource::Catalog => "window from the adapter's catalog".to_owned(),
        ContextSource::Server { endpoint } => format!("window from the server's {endpoint}"),
        ContextSource::Default => {
            "window: the adapter's default, stated by neither the config nor the server".to_owned()
        }
        ContextSource::Other => return None,
    })
}

/// The route (provider and model) of the last answer in `events`.
fn last_route(events: &[SessionEvent]) -> Option<(String, String)> {
    events
        .iter()
        .rev()
        .filter(|e| e.kind == event::ASSISTANT_MESSAGE)
        .find_map(|e| {
            let answer: AssistantMessage = e.data_as().ok()?;
            match answer.message.source {
                MessageSource::Model(m) => Some((m.provider, m.model)),
                _ => None,
            }
        })
}

/// Where the window of the session's last route came from, said for
/// `/status`; `None` when there is no answer yet, the adapter does not
/// say, or it cannot be asked (a warning).
pub async fn of_session(ctx: &Context, events: &[SessionEvent]) -> Option<String> {
    let (provider, model) = last_route(events)?;
    match Llm::new(ctx).resolve_model_info(&provider, &model).await {
        Ok(info) => info.context_source.as_ref().and_then(describe),
        Err(e) => {
            dsh_sdk::tracing::warn!(
                "/status: where the window of {provider}/{model} came from is not known: {e}"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_source_is_said_plainly() {
        let server = ContextSource::Server {
            endpoint: "/props".into(),
        };
        assert_eq!(
            describe(&server).as_deref(),
            Some("window from the server's /props")
        );
        assert_eq!(
            describe(&ContextSource::Config).as_deref(),
            Some("window from the config")
        );
        assert!(describe(&ContextSource::Default)
            .unwrap()
            .contains("the adapter's default"));
        assert_eq!(describe(&ContextSource::Other), None);
    }

    #[test]
    fn the_wire_names_the_kind_and_a_newer_kind_is_not_a_refusal() {
        let server: ContextSource =
            serde_json::from_value(serde_json::json!({"kind": "server", "endpoint": "/api/show"}))
                .unwrap();
        assert_eq!(
            server,
            ContextSource::Server {
                endpoint: "/api/show".into()
            }
        );
        assert_eq!(
            serde_json::to_value(&ContextSource::Catalog).unwrap(),
            serde_json::json!({"kind": "catalog"})
        );
        let newer: ContextSource =
            serde_json::from_value(serde_json::json!({"kind": "measured"})).unwrap();
        assert_eq!(newer, ContextSource::Other);
    }
}
