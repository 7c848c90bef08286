//! The MCP test server (`tests/fixtures/mcp-server`, rmcp's server side)
//! answers rmcp's client over the SDK's piped child: the parts the MCP
//! client plugin is built from, checked together before it exists.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_sdk::process::{spawn_piped, Launch};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::json;

#[tokio::test]
async fn the_fixture_server_answers_rmcp_over_a_piped_child() {
    let bin = dsh_testkit::mcp_server();
    let mut server = spawn_piped(Launch::new(&bin)).unwrap();
    let pipes = (server.stdout.take().unwrap(), server.stdin.take().unwrap());
    let client = ().serve(pipes).await.unwrap();
    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["add_tool", "crash", "echo", "env", "picture", "sleep"]
    );
    let args = json!({"text": "hi there"}).as_object().unwrap().clone();
    let echoed = client
        .call_tool(CallToolRequestParams::new("echo").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(echoed.content[0].as_text().unwrap().text, "hi there");
    let picture = client
        .call_tool(CallToolRequestParams::new("picture"))
        .await
        .unwrap();
    assert_eq!(picture.content[0].as_text().unwrap().text, "a pixel");
    assert_eq!(
        picture.content[1].as_image().unwrap().mime_type,
        "image/png"
    );
    // The server is gone with its handle: killed and reaped.
    drop(client);
    drop(server);
    let left = dsh_testkit::wait_gone("dsh-fixture-mcp-server", Duration::from_secs(10));
    assert!(left.is_empty(), "{left:?}");
}
