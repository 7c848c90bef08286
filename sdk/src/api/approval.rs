//! The `approval` service (provided by a front end; asked by plugin `tools`
//! when a `tools/pre-execute` policy answers `ask`): the params and reply
//! of [`crate::names::approval::REQUEST`], and [`Approval`], a client.

use serde::{Deserialize, Serialize};

use crate::names::{approval as method, service};
use crate::{Context, Result, Service};

/// Params of `request`: one tool call that needs the user's approval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The agent whose call it is.
    pub agent: String,
    /// The tool.
    pub tool_name: String,
    /// The call (null when the caller gave none).
    #[serde(default)]
    pub call_id: Option<String>,
    /// The policy's reason (null when it gave none).
    #[serde(default)]
    pub reason: Option<String>,
    /// The call's arguments, for the person to see what they approve (a
    /// dsh extension; absent from older callers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
    /// Whether an approval answers this call only and is never remembered
    /// for the session (a change to the workspace's configuration, `.git`,
    /// `.dsh`, `.claude`, is asked for every time: the policy's
    /// [`crate::api::tools::PreExecuteDecision::always_ask`]). A dsh
    /// extension; absent (false) from older callers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always_ask: bool,
}

/// What the user decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// This call may run.
    AllowedOnce,
    /// The user refused it.
    Rejected,
    /// The question was withdrawn (the caller cancelled).
    Cancelled,
    /// Another answer: taken as "no approval channel".
    #[serde(untagged)]
    Other(String),
}

/// Reply of `request`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalReply {
    /// The decision (none: no approval channel could answer).
    #[serde(default)]
    pub outcome: Option<ApprovalOutcome>,
}

/// A typed client of the `approval` service.
#[derive(Clone)]
pub struct Approval(Service);

impl Approval {
    /// The `approval` service of `ctx`.
    pub fn new(ctx: &Context) -> Approval {
        Approval(ctx.service(service::APPROVAL))
    }

    /// The untyped client underneath.
    pub fn service(&self) -> &Service {
        &self.0
    }

    /// `request`: asks the user about one call.
    pub async fn request(&self, params: &ApprovalRequest) -> Result<ApprovalReply> {
        self.0.call_as(method::REQUEST, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_writes_every_field_and_nulls_for_the_absent_ones() {
        let r = ApprovalRequest {
            agent: "a1".into(),
            tool_name: "write".into(),
            call_id: Some("c1".into()),
            reason: None,
            arguments: None,
            always_ask: false,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"agent":"a1","toolName":"write","callId":"c1","reason":null}"#
        );
        let with_args = ApprovalRequest {
            arguments: Some(json!({"file_path": "/x"})),
            ..r
        };
        assert!(serde_json::to_string(&with_args)
            .unwrap()
            .ends_with(r#""reason":null,"arguments":{"file_path":"/x"}}"#));
        let always = ApprovalRequest {
            always_ask: true,
            ..with_args
        };
        let text = serde_json::to_string(&always).unwrap();
        assert!(text.ends_with(r#","alwaysAsk":true}"#), "{text}");
        let back: ApprovalRequest = serde_json::from_str(&text).unwrap();
        assert!(back.always_ask);
        let older: ApprovalRequest =
            serde_json::from_value(json!({"agent": "a", "toolName": "t"})).unwrap();
        assert!(!older.always_ask);
    }

    #[test]
    fn outcomes_read_the_known_answers_and_keep_others() {
        let read = |v| serde_json::from_value::<ApprovalReply>(v).unwrap().outcome;
        assert_eq!(
            read(json!({"outcome": "allowed-once"})),
            Some(ApprovalOutcome::AllowedOnce)
        );
        assert_eq!(
            read(json!({"outcome": "cancelled"})),
            Some(ApprovalOutcome::Cancelled)
        );
        assert_eq!(
            read(json!({"outcome": "maybe"})),
            Some(ApprovalOutcome::Other("maybe".into()))
        );
        assert_eq!(read(json!({})), None);
    }
}
