//! What `dsh-host --model` asks for: the text the host passes on as
//! [`crate::host_service::Info::model`], read in one place by both the
//! command line (which refuses a bad one before anything starts) and plugin
//! `agent-default-model` (which layers it over the other choices).

/// A `--model` choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// `provider/model`: that route and that model of it.
    Route {
        /// The provider route.
        provider: String,
        /// The model id on it.
        model: String,
    },
    /// `model` alone: that model, on the route the other choices name.
    Model(String),
}

impl ModelChoice {
    /// Reads `--model`'s text. `provider/model` splits at the first `/` (a
    /// model id may hold more: `local/Qwen/Qwen3-8B` is the model
    /// `Qwen/Qwen3-8B` of the route `local`); text without a `/` is a model
    /// of the default route. Surrounding whitespace is ignored; an empty
    /// part, inner whitespace or a control character is refused, with a
    /// message that says what is taken.
    pub fn parse(text: &str) -> Result<ModelChoice, String> {
        let text = text.trim();
        let bad = |why: &str| {
            format!(
                "--model takes `provider/model` (a route and one of its models, e.g. \
                 local/qwen3) or `model` (on the default route); {why}, got {text:?}"
            )
        };
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if text.chars().any(char::is_control) {
            return Err(bad("it holds a control character"));
        }
        if text.chars().any(char::is_whitespace) {
            return Err(bad("it holds whitespace"));
        }
        match text.split_once('/') {
            None => Ok(ModelChoice::Model(text.to_owned())),
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
                Ok(ModelChoice::Route {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                })
            }
            Some(_) => Err(bad("the route or the model is missing")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(p: &str, m: &str) -> ModelChoice {
        ModelChoice::Route {
            provider: p.into(),
            model: m.into(),
        }
    }

    #[test]
    fn a_choice_splits_at_the_first_slash() {
        assert_eq!(
            ModelChoice::parse("local/qwen3"),
            Ok(route("local", "qwen3"))
        );
        assert_eq!(
            ModelChoice::parse(" local/Qwen/Qwen3-8B\n"),
            Ok(route("local", "Qwen/Qwen3-8B"))
        );
        assert_eq!(
            ModelChoice::parse("qwen3"),
            Ok(ModelChoice::Model("qwen3".into()))
        );
    }

    #[test]
    fn empty_parts_whitespace_and_control_characters_are_refused() {
        for bad in [
            "",
            " ",
            "/qwen3",
            "local/",
            "/",
            "local/qwen 3",
            "loc al/qwen3",
            "local/qwen3\u{1b}[2J",
            "local/\tqwen3",
            "qwen3\u{7}",
        ] {
            let e = ModelChoice::parse(bad).unwrap_err();
            assert!(e.contains("provider/model"), "{bad:?}: {e}");
        }
        assert!(ModelChoice::parse("a b")
            .unwrap_err()
            .contains("whitespace"));
        assert!(ModelChoice::parse("a\u{1b}b")
            .unwrap_err()
            .contains("control character"));
    }
}
