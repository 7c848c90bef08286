//! One tool call over the current connection: `tools/call` with the
//! server's own tool name, the row's timeout, and `notifications/cancelled`
//! sent when the call times out or its caller stops waiting (the turn was
//! stopped): a server is never left working for nobody.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, RequestId,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient, ServiceError};

use dsh_sdk::api::tools::{Exec, ToolReply};
use dsh_sdk::names::code;
use dsh_sdk::prelude::*;

use crate::bridge::Bridge;
use crate::result::CallResult;

/// Sends `notifications/cancelled` for a request when dropped before
/// [`CancelOnDrop::done`]: the call's future is dropped when its caller
/// goes away.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
    reason: &'static str,
}

impl CancelOnDrop {
    fn done(mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let (peer, reason) = (self.peer.clone(), self.reason);
        // rmcp's peer is Send: the notification goes out on the runtime's
        // next turn, after this drop.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            drop(runtime.spawn(async move {
                let param = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
                let _ = peer.notify_cancelled(param).await;
            }));
        }
    }
}

/// Runs `exec` (a call of one of `bridge`'s tools).
pub async fn call(bridge: &Bridge, exec: &Exec) -> Result<ToolReply> {
    let at = format!("mcp-client({})", bridge.server.name);
    let raw = bridge.raw_name(&exec.name).ok_or_else(|| {
        Error::new(
            code::MCP_UNAVAILABLE,
            format!("{at}: the server no longer offers {}", exec.name),
        )
    })?;
    let conn = bridge.connection()?;
    // Arguments that are not an object are sent as `{}` (as the original).
    let arguments = exec.arguments.as_object().cloned().unwrap_or_default();
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(raw.clone()).with_arguments(arguments),
    ));
    let handle = conn
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|e| failure(&at, e))?;
    let mut guard = CancelOnDrop {
        peer: handle.peer.clone(),
        id: Some(handle.id.clone()),
        reason: "the caller stopped waiting",
    };
    let limit = bridge.server.call_timeout;
    let answer = tokio::select! {
        answer = handle.rx => answer,
        () = tokio::time::sleep(limit) => {
            guard.reason = "request timeout";
            return Err(Error::new(
                code::MCP_TIMEOUT,
                format!("{at}: {} did not answer within {} ms", raw, limit.as_millis()),
            ));
        }
        () = conn.closed() => Ok(Err(ServiceError::TransportClosed)),
    };
    guard.done();
    bridge.tools_settled().await;
    let result = match answer {
        Ok(Ok(result)) => result,
        Ok(Err(e)) => return Err(failure(&at, e)),
        Err(_) => return Err(failure(&at, ServiceError::TransportClosed)),
    };
    let value = match result {
        ServerResult::CallToolResult(r) => serde_json::to_value(r)?,
        // A result with a block type rmcp does not know arrives untyped.
        ServerResult::CustomResult(r) => r.0,
        other => {
            return Err(Error::new(
                code::MCP_PROTOCOL,
                format!("{at}: tools/call answered something else: {other:?}"),
            ))
        }
    };
    let result: CallResult = serde_json::from_value(value).map_err(|e| {
        Error::new(
            code::MCP_PROTOCOL,
            format!("{at}: tools/call answered a malformed result: {e}"),
        )
    })?;
    result.into_reply(&raw)
}

fn failure(at: &str, e: ServiceError) -> Error {
    match e {
        ServiceError::McpError(data) => Error::new(
            code::MCP_PROTOCOL,
            format!("{at}: MCP error {}: {}", data.code.0, data.message),
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => Error::new(
            code::MCP_UNAVAILABLE,
            format!("{at}: the connection to the server closed during the call; it is being reconnected"),
        ),
        other => Error::new(code::MCP_PROTOCOL, format!("{at}: {other}")),
    }
}
