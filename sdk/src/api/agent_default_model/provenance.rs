//! Who chose the route a session runs on, in words, and how to change that
//! choice for good: what a message about the route says when the route is
//! not served, takes no key, does not offer the effort asked for, or does
//! not know the model ([`Provenance`]), and which model failures follow
//! from the route at all ([`follows_from_route`]).

use super::{CurrentSelection, ModelSelection, SelectionSource, SETTINGS_SECTION};
use crate::names::{code, llm_failure};
use crate::vocab::LlmFailure;

/// Where the person reads the message, which decides the advice: on the
/// command line (before an app runs, or from headless) the lasting fixes
/// are the settings file, a patch and `--model`; inside the chat it is
/// `/model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A message on stderr: headless, or the chat before it opens.
    CommandLine,
    /// A notice inside the running chat.
    Chat,
}

/// The route (and model) a session runs on, who chose it, and what to do
/// to change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// The route in force (with the reasoning effort chosen for it).
    pub route: ModelSelection,
    /// Who chose it, as words that follow the route: `chosen by the
    /// \`agent-default-model\` section of /h/settings.yaml`, or `its route
    /// chosen by ..., its model by ...` when two layers did.
    pub chosen: String,
    /// What to do to change it for good (or, in the chat, now).
    pub advice: String,
    /// Where the route's reasoning effort was chosen, when it has one (the
    /// settings section: no other layer sets one).
    pub effort_chosen: Option<String>,
}

/// A layer, in words.
fn layer(source: SelectionSource, settings_file: &str) -> String {
    match source {
        SelectionSource::Flag => "--model".to_owned(),
        SelectionSource::Settings => {
            format!("the `{SETTINGS_SECTION}` section of {settings_file}")
        }
        SelectionSource::Config => {
            format!(
                "the `{SETTINGS_SECTION}` row's config (a patch, a profile or the shipped default)"
            )
        }
    }
}

/// The advice inside the chat, whoever chose the route.
const CHAT_ADVICE: &str = "`/model <route> <model>` switches this session and saves the choice";

/// How to change a choice one of `sources` made, where the person is.
fn advice(sources: &[SelectionSource], settings_file: &str, place: Place) -> String {
    if place == Place::Chat {
        return CHAT_ADVICE.to_owned();
    }
    let once_then_save =
        "or run once with `--model <route>/<model>` and save it with `/model <route> <model>` in the chat";
    if sources.contains(&SelectionSource::Settings) {
        format!(
            "to change it, edit or remove the `{SETTINGS_SECTION}` section of {settings_file}, \
             {once_then_save}"
        )
    } else if sources.iter().all(|s| *s == SelectionSource::Flag) {
        "to change it, give `--model` a route that is served and one of its models".to_owned()
    } else {
        format!(
            "to change it, patch the row ([[patch]] id = \"{SETTINGS_SECTION}\" config = \
             {{ provider = \"<route>\", model = \"<model>\" }}), {once_then_save}"
        )
    }
}

impl CurrentSelection {
    /// Who chose this selection's route and model (each may come from
    /// another layer: `--model qwen3` keeps the route below it), and how to
    /// change it from `place`.
    pub fn provenance(&self, place: Place) -> Provenance {
        let file = &self.settings_file;
        let chosen = if self.provider_source == self.model_source {
            format!("chosen by {}", layer(self.provider_source, file))
        } else {
            format!(
                "its route chosen by {}, its model by {}",
                layer(self.provider_source, file),
                layer(self.model_source, file)
            )
        };
        Provenance {
            route: self.selection.clone(),
            chosen,
            advice: advice(&[self.provider_source, self.model_source], file, place),
            effort_chosen: self
                .selection
                .reasoning_effort
                .as_ref()
                .map(|_| layer(SelectionSource::Settings, file)),
        }
    }

    /// The line every app says when the user's settings section overrides
    /// a choice a patch or a profile made in the row's config (see
    /// [`CurrentSelection::overridden`]); none when nothing is overridden.
    pub fn override_notice(&self) -> Option<String> {
        let row = self.overridden.as_ref()?;
        Some(format!(
            "note: the model is {} from the `{SETTINGS_SECTION}` section of {} (a saved /model), \
             not {} that a patch or profile set in the `{SETTINGS_SECTION}` row: the settings \
             file wins. To use the row's: `/model {} {}` in the chat, edit or remove that \
             section, or `--model {}` for one run",
            self.selection.route(),
            self.settings_file,
            row.route(),
            row.provider,
            row.model,
            row.route()
        ))
    }
}

impl Provenance {
    /// The route the log of session `session` names, kept on resume. The
    /// advice is the command line's wherever the resume was asked for (a
    /// session that cannot resume has no `/model` yet); once it runs,
    /// [`Provenance::in_chat`] gives the chat's.
    pub fn logged(route: ModelSelection, session: &str) -> Provenance {
        Provenance {
            route,
            chosen: format!(
                "kept from the log of session \"{session}\" (a resumed session keeps its route)"
            ),
            effort_chosen: None,
            advice: format!(
                "to go on on another route, resume it with one: dsh-host --resume {session} \
                 --model <route>/<model>"
            ),
        }
    }

    /// The same, for a message inside the running chat (whose advice is
    /// `/model`).
    pub fn in_chat(self) -> Provenance {
        Provenance {
            advice: CHAT_ADVICE.to_owned(),
            ..self
        }
    }

    /// What a message about a failure of this route adds:
    /// `route local/qwen3, chosen by ...; to change it, ...`.
    pub fn explain(&self) -> String {
        format!(
            "route {}, {}; {}",
            self.route.route(),
            self.chosen,
            self.advice
        )
    }
}

/// Whether a model failure follows from the route chosen rather than from
/// the request: no key for it (`MISSING_CREDENTIAL`), no adapter
/// (`NO_ADAPTER`), an effort it does not offer, or a model its server does
/// not know (HTTP 404, or a message saying the model does not exist: what
/// OpenAI, vLLM, Ollama and DeepSeek answer). Such a failure names where
/// the route was chosen ([`Provenance::explain`]).
pub fn follows_from_route(failure: &LlmFailure) -> bool {
    if [
        llm_failure::MISSING_CREDENTIAL,
        code::NO_ADAPTER,
        code::UNSUPPORTED_REASONING_EFFORT,
    ]
    .contains(&failure.code.as_str())
    {
        return true;
    }
    if failure.code != llm_failure::INVALID_REQUEST {
        return false;
    }
    let message = failure.message.to_lowercase();
    failure.status == Some(404)
        || (message.contains("model")
            && ["not found", "not exist", "does not exist", "unknown model"]
                .iter()
                .any(|w| message.contains(w)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current(provider: SelectionSource, model: SelectionSource) -> CurrentSelection {
        CurrentSelection {
            selection: ModelSelection::new("deepseek-official", "qwen3"),
            source: SelectionSource::Flag,
            provider_source: provider,
            model_source: model,
            settings_file: "/h/settings.yaml".into(),
            overridden: None,
        }
    }

    #[test]
    fn the_route_and_the_model_are_blamed_on_their_own_layers() {
        let p = current(SelectionSource::Settings, SelectionSource::Flag)
            .provenance(Place::CommandLine);
        assert_eq!(
            p.chosen,
            "its route chosen by the `agent-default-model` section of /h/settings.yaml, its \
             model by --model"
        );
        assert!(
            p.advice
                .contains("edit or remove the `agent-default-model` section of /h/settings.yaml")
                && p.advice.contains("`/model <route> <model>` in the chat"),
            "{}",
            p.advice
        );
        let p =
            current(SelectionSource::Flag, SelectionSource::Flag).provenance(Place::CommandLine);
        assert_eq!(p.chosen, "chosen by --model");
        assert!(p.advice.contains("give `--model` a route"), "{}", p.advice);
        let p = current(SelectionSource::Config, SelectionSource::Config)
            .provenance(Place::CommandLine);
        assert!(p.chosen.contains("row's config"), "{}", p.chosen);
        assert!(p.advice.contains("[[patch]]"), "{}", p.advice);
        // Inside the chat the advice is /model.
        let p =
            current(SelectionSource::Settings, SelectionSource::Settings).provenance(Place::Chat);
        assert!(
            p.advice.starts_with("`/model <route> <model>`"),
            "{}",
            p.advice
        );
        assert!(p.explain().starts_with(
            "route deepseek-official/qwen3, chosen by the `agent-default-model` section"
        ));
    }

    #[test]
    fn the_override_notice_names_both_choices_the_file_and_the_ways_out() {
        let mut c = current(SelectionSource::Settings, SelectionSource::Settings);
        assert_eq!(c.override_notice(), None);
        c.overridden = Some(ModelSelection::new("local", "qwen3"));
        let n = c.override_notice().unwrap();
        for part in [
            "deepseek-official/qwen3",
            "/h/settings.yaml",
            "not local/qwen3",
            "`/model local qwen3`",
            "edit or remove that section",
            "`--model local/qwen3`",
        ] {
            assert!(n.contains(part), "{part:?} in {n}");
        }
        assert!(!n.contains('\n'));
    }

    #[test]
    fn failures_of_the_route_are_told_from_failures_of_the_request() {
        let f = |code: &str, status: Option<u16>, message: &str| LlmFailure {
            status,
            ..LlmFailure::new(code, message)
        };
        assert!(follows_from_route(&f("MISSING_CREDENTIAL", None, "no key")));
        assert!(follows_from_route(&f("NO_ADAPTER", None, "none")));
        assert!(follows_from_route(&f(
            "INVALID_REQUEST",
            Some(404),
            "HTTP 404: not here"
        )));
        assert!(follows_from_route(&f(
            "INVALID_REQUEST",
            Some(400),
            "HTTP 400: Model Not Exist"
        )));
        assert!(follows_from_route(&f(
            "INVALID_REQUEST",
            Some(404),
            "model \"x\" not found, try pulling it first"
        )));
        assert!(!follows_from_route(&f(
            "INVALID_REQUEST",
            Some(400),
            "messages: field required"
        )));
        assert!(!follows_from_route(&f("SERVER", Some(404), "gone")));
        assert!(!follows_from_route(&f("AUTH", Some(401), "bad key")));
    }
}
