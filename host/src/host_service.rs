//! The `host` service: the methods the host itself answers for every
//! plugin (names and payload types in `dsh_wire::host_service`).

use std::sync::Arc;

use dsh_wire::host_service::{
    self as method, ExitParams, Info, PluginRow, RawModeParams, ReadInputParams, TextParams,
    TrustProjectParams,
};
use dsh_wire::{codes, Error};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use crate::host::stats;
use crate::router::Responder;
use crate::supervisor::Command;
use crate::terminal::Terminal;

/// What the methods answer from.
pub(crate) struct HostService {
    pub args: Vec<String>,
    /// `cwd` is read at each call.
    pub info: Info,
    pub exit: Arc<tokio::sync::watch::Sender<Option<i32>>>,
    pub terminal: Terminal,
    pub commands: mpsc::UnboundedSender<Command>,
    pub runtime: tokio::runtime::Handle,
    pub output: Output,
    /// `$DSH_HOME` (its trust record).
    pub home: std::path::PathBuf,
    /// The project offered for trust, until it is trusted.
    pub trust: crate::host::Offer,
}

/// Writes for `print` and `eprint`, on a thread of their own: a slow
/// terminal (a full pty, a slow ssh link) holds up the printing caller
/// only, never the router.
#[derive(Clone)]
pub(crate) struct Output(std::sync::mpsc::Sender<(String, bool, Responder)>);

impl Output {
    /// Starts the writer thread.
    pub fn start() -> std::io::Result<Output> {
        let (tx, rx) = std::sync::mpsc::channel::<(String, bool, Responder)>();
        std::thread::Builder::new()
            .name("dsh-output".into())
            .spawn(move || {
                for (text, to_stderr, responder) in rx {
                    responder.reply(print(&text, to_stderr));
                }
            })?;
        Ok(Output(tx))
    }

    fn write(
        &self,
        text: String,
        to_stderr: bool,
        responder: Responder,
    ) -> Option<Result<Value, Error>> {
        match self.0.send((text, to_stderr, responder)) {
            Ok(()) => None,
            Err(_) => Some(Err(Error::msg("the output thread is gone"))),
        }
    }
}

impl HostService {
    /// One call: answered now, or later through `responder` (`None`).
    pub fn call(
        &self,
        name: &str,
        params: Value,
        responder: Responder,
    ) -> Option<Result<Value, Error>> {
        Some(match name {
            method::ARGS => Ok(json!(self.args)),
            method::EXIT => parse::<ExitParams>(params).map(|p| {
                self.exit.send_replace(Some(p.code));
                Value::Null
            }),
            method::INFO => {
                let info = Info {
                    cwd: std::env::current_dir()
                        .ok()
                        .map(|d| d.display().to_string()),
                    untrusted_project: self.offer().as_ref().map(|o| o.project.clone()),
                    ..self.info.clone()
                };
                serde_json::to_value(info).map_err(Error::from)
            }
            method::STATS => Ok(json!(stats())),
            method::PRINT | method::EPRINT => match parse::<TextParams>(params) {
                Ok(p) => return self.output.write(p.text, name == method::EPRINT, responder),
                Err(e) => Err(e),
            },
            method::TERMINAL => serde_json::to_value(Terminal::info()).map_err(Error::from),
            method::READ_INPUT => match parse::<ReadInputParams>(params) {
                Ok(p) => return self.terminal.read(p.ack, responder),
                Err(e) => Err(e),
            },
            method::SET_RAW_MODE => parse::<RawModeParams>(params)
                .and_then(|p| self.terminal.set_raw(p.raw))
                .map(|()| Value::Null),
            method::PLUGINS => return self.plugins(responder),
            method::TRUST_PROJECT => parse::<TrustProjectParams>(params)
                .and_then(|p| self.trust_project(&p.dir, &p.offer)),
            other => Err(Error::new(
                codes::UNKNOWN_METHOD,
                format!("service `{}` has no method `{other}`", method::NAME),
            )),
        })
    }

    fn offer(&self) -> std::sync::MutexGuard<'_, Option<crate::host::TrustOffer>> {
        self.trust
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `trustProject`: records the offered project as trusted and has the
    /// tree composed again. Only the project offered can be trusted this
    /// way (`dsh-host trust DIR` trusts any).
    fn trust_project(&self, dir: &str, id: &str) -> Result<Value, Error> {
        let mut offer = self.offer();
        let Some(current) = offer.as_ref().filter(|o| o.project.dir == dir) else {
            return Err(Error::msg(format!(
                "{dir} is not the project offered for trust"
            )));
        };
        // The servers changed after the user was asked: nothing is
        // approved (the new offer is asked about instead).
        if current.project.offer != id {
            return Err(Error::msg(format!(
                "the servers of {dir} changed since you were asked; nothing was approved"
            )));
        }
        crate::trust::trust(&self.home, std::path::Path::new(dir), current.pins.clone())
            .map_err(|e| Error::msg(e.to_string()))?;
        let _ = current
            .recompose
            .send(crate::Change::Config(crate::trust::trust_path(&self.home)));
        *offer = None;
        Ok(Value::Null)
    }

    /// `plugins`: asks the supervisor, answering when it has.
    fn plugins(&self, responder: Responder) -> Option<Result<Value, Error>> {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Status(tx)).is_err() {
            return Some(Err(Error::msg("the host is shutting down")));
        }
        self.runtime.spawn(async move {
            let rows: Vec<PluginRow> = match rx.await {
                Ok(status) => status
                    .into_iter()
                    .map(|s| PluginRow {
                        id: s.id,
                        plugin: s.plugin,
                        state: serde_json::to_value(s.state)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default(),
                        generation: s.generations,
                        fiber: s.fiber,
                        error: s.error,
                    })
                    .collect(),
                Err(_) => {
                    responder.reply(Err(Error::msg("the host is shutting down")));
                    return;
                }
            };
            responder.reply(serde_json::to_value(rows).map_err(Error::from));
        });
        None
    }
}

/// The params of a method, or `INVALID_PAYLOAD` saying what is wrong.
fn parse<T: DeserializeOwned>(params: Value) -> Result<T, Error> {
    let params = if params.is_null() { json!({}) } else { params };
    serde_json::from_value(params).map_err(|e| Error::new(codes::INVALID_PAYLOAD, e.to_string()))
}

fn print(text: &str, to_stderr: bool) -> Result<Value, Error> {
    use std::io::Write;
    let result = if to_stderr {
        std::io::stderr().lock().write_all(text.as_bytes())
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes()).and_then(|_| out.flush())
    };
    result
        .map(|_| Value::Null)
        .map_err(|e| Error::msg(e.to_string()))
}
