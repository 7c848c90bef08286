//! The `approval` service (reference dsh-product §3 `user-approval`): a
//! tool call that the permission policy marks `ask` is put to whoever
//! provides `approval` (the chat's person, a test's fixture). Headless runs
//! have no provider, and a missing provider denies: approval fails closed.

use serde::{Deserialize, Serialize};

use crate::names::{approval as method, service};
use crate::{Context, Result, Service};

/// Params of `request`: the call that needs approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The agent whose call it is.
    pub agent: String,
    /// The tool called.
    pub tool_name: String,
    /// The call's id, when it has one.
    #[serde(default)]
    pub call_id: Option<String>,
    /// Why the policy asks, when it says.
    #[serde(default)]
    pub reason: Option<String>,
}

/// What the approver decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Run this call.
    AllowedOnce,
    /// Do not run it.
    Rejected,
    /// The question was withdrawn (the turn was cancelled).
    Cancelled,
    /// Nobody can answer; also any outcome this build does not know.
    #[serde(other)]
    Unavailable,
}

/// Reply of `request`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalReply {
    /// The decision.
    pub outcome: Outcome,
}

/// A client of the `approval` service.
#[derive(Clone)]
pub struct Approval(Service);

impl Approval {
    /// The `approval` service of `ctx`.
    pub fn new(ctx: &Context) -> Approval {
        Approval(ctx.service(service::APPROVAL))
    }

    /// `request`: asks whether the call may run.
    pub async fn request(&self, params: &ApprovalRequest) -> Result<ApprovalReply> {
        self.0.call_as(method::REQUEST, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_request_and_outcomes_have_the_wire_shape() {
        let r = ApprovalRequest {
            agent: "a".into(),
            tool_name: "write".into(),
            call_id: Some("c".into()),
            reason: None,
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"agent": "a", "toolName": "write", "callId": "c", "reason": null})
        );
        for (text, outcome) in [
            ("allowed-once", Outcome::AllowedOnce),
            ("rejected", Outcome::Rejected),
            ("cancelled", Outcome::Cancelled),
            ("unavailable", Outcome::Unavailable),
            ("something-new", Outcome::Unavailable),
        ] {
            let reply: ApprovalReply = serde_json::from_value(json!({"outcome": text})).unwrap();
            assert_eq!(reply.outcome, outcome);
        }
    }
}
