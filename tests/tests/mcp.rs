//! The MCP client end to end: `dsh-host --profile headless` with an
//! `mcp-client` row for the fixture server (rmcp's server side, over
//! stdio), the fake model calling its tools.
#![cfg(test)] // test code to clippy as well: helpers may unwrap (tests/README.md)

use std::time::Duration;

use dsh_testkit::fake_llm::{text, tool_calls, FakeLlm};
use dsh_testkit::headless::Headless;
use dsh_testkit::{mcp_server, out};

#[allow(dead_code)] // the pty helpers this suite does not call
mod support;
use serde_json::json;

/// A row for server `name` running the fixture with `args`, the row's
/// other config keys in `more` (TOML inline-table members), inserted
/// into the `tools` group: before the app's row, so a row that waits for
/// its server (`failOnStartupError`) is connected before the first
/// request, as the rows of `.mcp.json` are.
fn row(name: &str, args: &[&str], more: &str) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "[[patch]]\nid = \"tools\"\ninsert = [{{ id = \"mcp:{name}\", plugin = \"mcp-client\", config = {{ transport = \"stdio\", serverName = \"{name}\", command = {:?}, args = [{}]{more} }} }}]\n",
        mcp_server(),
        args.join(", ")
    )
}

#[tokio::test]
async fn the_models_calls_reach_the_server_and_its_answers_come_back() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[
            ("mcp__fx__echo", json!({"text": "hi there"})),
            ("mcp__fx__picture", json!({})),
            ("mcp__fx__env", json!({"name": "FIXTURE_PLAIN"})),
            ("mcp__fx__env", json!({"name": "FIXTURE_API_TOKEN"})),
            ("mcp__fx__env", json!({"name": "FIXTURE_PASSED_SECRET"})),
        ]),
        text("done"),
    ]);
    let rows = row(
        "fx",
        &[],
        ", failOnStartupError = true, env = { FIXTURE_PLAIN = \"plain\" }, envVars = [\"FIXTURE_PASSED_SECRET\"]",
    );
    let e = Headless::new(&fake, &rows)
        .env("FIXTURE_API_TOKEN", "must-not-leak")
        .env("FIXTURE_PASSED_SECRET", "passed");
    let (code, stdout, stderr) = out(&e.run(&["use the server"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "done");
    // The server's schema reached the model as sent.
    let tools = fake.requests()[0]["tools"].clone();
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__fx__echo")
        .unwrap_or_else(|| panic!("no echo in {tools}"));
    assert_eq!(
        echo["function"]["description"],
        "Answers the text it is given"
    );
    assert_eq!(
        echo["function"]["parameters"]["properties"]["text"]["description"],
        "What to answer."
    );
    assert_eq!(
        fake.tool_results(1),
        [
            "hi there",
            "a pixel\n[image unavailable: image/png; no attachment store is mounted; raw image data remains available to programmatic callers]",
            "plain",
            "(unset)",
            "passed",
        ]
    );
    // The server's stderr went to the log, not to the terminal.
    assert!(!stderr.contains("fixture server up"), "{stderr}");
}

#[tokio::test]
async fn the_servers_stderr_is_in_the_log() {
    let fake = FakeLlm::start().await;
    fake.push([text("done")]);
    let e =
        Headless::new(&fake, &row("fx", &[], ", failOnStartupError = true")).env("DSH_LOG", "info");
    let (code, _, stderr) = out(&e.run(&["hello"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("mcp-client(fx) stderr: fixture server up"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_tool_the_server_adds_is_offered_under_a_normalized_hashed_name() {
    let fake = FakeLlm::start().await;
    // sha256("fx\0late.tool"), its first 12 hex digits, after the name
    // with the dot made `_`.
    let late = "mcp__fx__late_tool_62b9d65234b7";
    fake.push([
        tool_calls(&[("mcp__fx__add_tool", json!({}))]),
        // The very next request: the call returned after the re-sync.
        tool_calls(&[(late, json!({}))]),
        text("done"),
    ]);
    let e = Headless::new(&fake, &row("fx", &[], ", failOnStartupError = true"));
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert!(!fake
        .offered_tools(0)
        .iter()
        .any(|n| n.starts_with("mcp__fx__late")));
    assert!(
        fake.offered_tools(1).contains(&late.to_owned()),
        "{:?}",
        fake.offered_tools(1)
    );
    assert_eq!(fake.tool_results(2)[1], "late answer");
}

#[tokio::test]
async fn a_crashed_server_fails_its_calls_clearly_then_is_reconnected() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("mcp__fx__crash", json!({}))]),
        tool_calls(&[("mcp__fx__echo", json!({"text": "meanwhile"}))]),
        tool_calls(&[("bash", json!({"command": "sleep 2", "description": "wait"}))]),
        tool_calls(&[("mcp__fx__echo", json!({"text": "back"}))]),
        text("done"),
    ]);
    let rows = row(
        "fx",
        &[],
        ", failOnStartupError = true, reconnect = { initialDelayMs = 200 }",
    );
    let e = Headless::new(&fake, &rows);
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    let crashed = &fake.tool_results(1)[0];
    assert!(
        crashed.starts_with(
            "Error: mcp-client(fx): the connection to the server closed during the call"
        ),
        "{crashed}"
    );
    let meanwhile = &fake.tool_results(2)[1];
    assert!(
        meanwhile.starts_with("Error: mcp-client(fx): "),
        "{meanwhile}"
    );
    assert_eq!(fake.tool_results(4)[3], "back");
    assert!(
        stderr.contains("mcp-client(fx): connection lost; reconnecting in 200ms (attempt 1/10)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_call_past_its_timeout_fails_and_the_server_is_told_to_stop() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("mcp__fx__sleep", json!({"ms": 60000}))]),
        tool_calls(&[("mcp__fx__echo", json!({"text": "still here"}))]),
        text("done"),
    ]);
    let rows = row(
        "fx",
        &[],
        ", failOnStartupError = true, toolCallTimeoutMs = 300",
    );
    let e = Headless::new(&fake, &rows).env("DSH_LOG", "info");
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        fake.tool_results(1),
        ["Error: mcp-client(fx): sleep did not answer within 300 ms"]
    );
    // The connection is still good for the next call.
    assert_eq!(fake.tool_results(2)[1], "still here");
    // The server dropped the call: it was sent `notifications/cancelled`.
    assert!(
        stderr.contains("mcp-client(fx) stderr: sleep cancelled"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_does_not_delay_the_first_request() {
    let fake = FakeLlm::start().await;
    fake.push([text("answered")]);
    let dir = dsh_testkit::TempDir::new("mcp-hang");
    let pid_file = dir.path().join("pid");
    let rows = row(
        "stuck",
        &["--hang", "--pid-file", &pid_file.display().to_string()],
        ", startupTimeoutMs = 600000",
    ) + &row("fx", &[], ", failOnStartupError = true");
    let e = Headless::new(&fake, &rows);
    let run = tokio::time::timeout(Duration::from_secs(60), e.run(&["hello"]))
        .await
        .expect("the run waited for a server that never answers");
    let (code, stdout, stderr) = out(&run);
    assert_eq!((code, stdout.trim()), (0, "answered"), "{stderr}");
    let names = fake.offered_tools(0);
    assert!(names.contains(&"mcp__fx__echo".to_owned()), "{names:?}");
    assert!(
        !names.iter().any(|n| n.starts_with("mcp__stuck")),
        "{names:?}"
    );
    // The stuck server was started, and is gone with the host.
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    dsh_testkit::wait_for("the stuck server to be gone", || {
        // SAFETY: kill with signal 0 only checks the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    })
    .await;
}

#[tokio::test]
async fn a_bad_row_is_refused_with_its_reason() {
    let fake = FakeLlm::start().await;
    fake.push([text("answered")]);
    let rows = "[[row]]\nid = \"mcp:bad\"\nplugin = \"mcp-client\"\nconfig = { transport = \"stdio\", serverName = \"a.b\", command = \"x\" }\n";
    let e = Headless::new(&fake, rows);
    let (_, _, stderr) = out(&e.run(&["hello"]).await);
    assert!(
        stderr.contains("serverName \"a.b\" must match [A-Za-z0-9_-]{1,32}"),
        "{stderr}"
    );
}

/// The fixture serving Streamable HTTP on 127.0.0.1 (killed when dropped)
/// and its endpoint.
struct HttpFixture {
    child: std::process::Child,
    url: String,
    _dir: dsh_testkit::TempDir,
}

impl HttpFixture {
    async fn start(bearer: &str) -> HttpFixture {
        HttpFixture::with(&["--bearer", bearer]).await
    }

    async fn with(args: &[&str]) -> HttpFixture {
        let dir = dsh_testkit::TempDir::new("mcp-http");
        let port_file = dir.path().join("port");
        let child = std::process::Command::new(mcp_server())
            .arg("--http")
            .arg(&port_file)
            .args(args)
            .spawn()
            .unwrap();
        dsh_testkit::wait_for("the HTTP fixture's port", || {
            std::fs::read_to_string(&port_file).is_ok_and(|p| !p.is_empty())
        })
        .await;
        let port = std::fs::read_to_string(&port_file).unwrap();
        HttpFixture {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            _dir: dir,
        }
    }

    fn row(&self, name: &str, more: &str) -> String {
        format!(
            "[[patch]]\nid = \"tools\"\ninsert = [{{ id = \"mcp:{name}\", plugin = \"mcp-client\", config = {{ transport = \"streamable-http\", serverName = \"{name}\", url = {:?}, failOnStartupError = true{more} }} }}]\n",
            self.url
        )
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_streamable_http_server_with_a_bearer_token_answers_the_model() {
    let server = HttpFixture::start("sekrit").await;
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[
            ("mcp__web__echo", json!({"text": "over http"})),
            ("mcp__web__picture", json!({})),
        ]),
        text("done"),
    ]);
    let rows = server.row("web", ", bearerTokenEnvVar = \"FIXTURE_BEARER\"");
    let e = Headless::new(&fake, &rows).env("FIXTURE_BEARER", "sekrit");
    let (code, stdout, stderr) = out(&e.run(&["go"]).await);
    assert_eq!((code, stdout.trim()), (0, "done"), "{stderr}");
    let results = fake.tool_results(1);
    assert_eq!(results[0], "over http");
    assert!(
        results[1].starts_with("a pixel\n[image unavailable: image/png;"),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_refused_token_fails_the_row_with_the_servers_answer() {
    let server = HttpFixture::start("sekrit").await;
    let fake = FakeLlm::start().await;
    fake.push([text("answered")]);
    let rows = server.row("web", ", bearerTokenEnvVar = \"FIXTURE_BEARER\"");
    let e = Headless::new(&fake, &rows).env("FIXTURE_BEARER", "wrong");
    let (_, _, stderr) = out(&e.run(&["go"]).await);
    assert!(
        stderr.contains("mcp-client(web): initial connection or tool synchronization failed"),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong"), "the token was shown: {stderr}");
}

#[tokio::test]
async fn a_server_that_ignores_its_closed_stdin_dies_with_a_killed_host() {
    let fake = FakeLlm::start().await;
    let gate = dsh_testkit::fake_llm::Gate::new();
    fake.push([dsh_testkit::fake_llm::gated_text("never", &gate)]);
    let dir = dsh_testkit::TempDir::new("mcp-orphan");
    let pid_file = dir.path().join("pid");
    let rows = row(
        "stuck",
        &["--hang", "--pid-file", &pid_file.display().to_string()],
        "",
    );
    let e = Headless::new(&fake, &rows);
    let host = e.spawn(&["hello"]);
    dsh_testkit::wait_for("the stuck server's pid", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| !p.is_empty())
    })
    .await;
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    host.kill();
    dsh_testkit::wait_for("the stuck server to die with the host", || {
        // SAFETY: kill with signal 0 only checks the process exists.
        unsafe { libc::kill(pid, 0) != 0 }
    })
    .await;
    gate.open();
}

#[tokio::test]
async fn a_server_on_2025_11_25_is_met_with_initialize() {
    let fake = FakeLlm::start().await;
    fake.push([
        tool_calls(&[("mcp__old__echo", json!({"text": "from an old server"}))]),
        text("done"),
    ]);
    let rows = row("old", &["--legacy"], ", failOnStartupError = true");
    let e = Headless::new(&fake, &rows).env("DSH_LOG", "info");
    let (code, _, stderr) = out(&e.run(&["go"]).await);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(fake.tool_results(1), ["from an old server"]);
    assert!(
        stderr.contains("mcp-client(old) stderr: legacy initialize asked for \"2025-11-25\""),
        "{stderr}"
    );
}

/// A GET of `url` (`http://127.0.0.1:PORT/...`) as a browser makes it:
/// the status and the `Location` it answers.
fn browser_get(url: &str) -> (u16, Option<String>) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let location = answer.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .starts_with("location:")
            .then(|| l[9..].trim().to_owned())
    });
    (status, location)
}

/// A server that answers 401 and publishes OAuth metadata: the row waits
/// for a login, `/mcp login` shows the authorization URL, the "browser"
/// approves, the code comes back to the loopback redirect and is
/// exchanged with its PKCE verifier (the fixture checks it), the token is
/// stored 0600 and the server connects. The next run uses the stored
/// token without asking.
#[tokio::test]
async fn an_oauth_server_is_logged_in_from_the_chat_and_the_token_kept() {
    let server = HttpFixture::with(&["--oauth"]).await;
    let fake = FakeLlm::start().await;
    // Not `failOnStartupError`: the row waits for its login.
    let rows = server
        .row("web", "")
        .replace("failOnStartupError = true", "failOnStartupError = false");
    let e = Headless::new(&fake, &rows);
    let mut p = support::pty::Pty::dsh_host(&e, &[], &[("DSH_LOG", "info")]);
    p.wait_for("`/mcp login web` in the chat authorizes it", 30)
        .await;
    // Typed once the chat reads keys (before, the terminal is cooked).
    p.wait_for("Ctrl-D exits", 30).await;
    p.send("/mcp\r");
    p.wait_for("needs-login", 20).await;
    p.send("/mcp login web\r");
    p.wait_for("the link is good for 10 minutes", 20).await;
    let screen = p.contents();
    let shown = screen.find("to authorize web:").unwrap();
    let start = shown + screen[shown..].find("http://127.0.0.1").unwrap();
    let end = start + screen[start..].find("the server connects").unwrap();
    let url: String = screen[start..end].split_whitespace().collect();
    let (status, callback) = browser_get(&url);
    assert_eq!(status, 302, "{url}");
    let callback = callback.unwrap();
    // A connection that sends nothing (a browser's preconnect) does not
    // hold up the redirect.
    let authority = callback["http://".len()..].split('/').next().unwrap();
    let _idle = std::net::TcpStream::connect(authority).unwrap();
    // Another local process guessing at the redirect is turned away, and
    // the login still waits for the browser.
    let forged = format!(
        "{}?code=x&state=forged",
        &callback[..callback.find('?').unwrap()]
    );
    assert_eq!(browser_get(&forged).0, 400);
    let (status, _) = browser_get(&callback);
    assert_eq!(status, 200);
    p.wait_for("mcp-client(web): connected, 6 tools", 30).await;
    p.send("\x04");
    assert_eq!(p.wait_exit(20).await, 0);
    let dir = e.home.path().join("mcp-auth");
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // The next run: the stored token, no login.
    fake.push([
        tool_calls(&[("mcp__web__echo", json!({"text": "with the stored token"}))]),
        text("done"),
    ]);
    // This time the row holds the first request until it is connected.
    let patch = std::fs::read_to_string(&e.patch).unwrap();
    std::fs::write(
        &e.patch,
        patch.replace("failOnStartupError = false", "failOnStartupError = true"),
    )
    .unwrap();
    let (code, stdout, stderr) = out(&e.run(&["go"]).await);
    assert_eq!((code, stdout.trim()), (0, "done"), "{stderr}");
    assert_eq!(fake.tool_results(1)[0], "with the stored token");
}
