//! The `host` service (the host itself, not a plugin): its params and
//! replies are defined once in the boundary layer (`dsh_wire::host_service`)
//! and re-exported here, with [`Host`], a client with one method per
//! service method.

pub use dsh_wire::host_service::{
    ExitParams, Info, Input, PluginRow, RawModeParams, ReadInputParams, TerminalInfo, TextParams,
    TrustProjectParams, UntrustedProject, ROW_ACTIVE,
};

use crate::names::{host as method, service};
use crate::{Context, Result, Service};

/// The params of a method that takes none: `{}`.
#[derive(serde::Serialize)]
struct NoParams {}

/// A typed client of the `host` service.
#[derive(Clone)]
pub struct Host(Service);

impl Host {
    /// The `host` service of `ctx`.
    pub fn new(ctx: &Context) -> Host {
        Host(ctx.service(service::HOST))
    }

    /// `args`: the process arguments after the host's own.
    pub async fn args(&self) -> Result<Vec<String>> {
        self.0.call_as(method::ARGS, NoParams {}).await
    }

    /// `info`: home, protected paths, working directory, version, pid,
    /// and the run's `--model` (read by `agent-default-model`).
    pub async fn info(&self) -> Result<Info> {
        self.0.call_as(method::INFO, NoParams {}).await
    }

    /// `trustProject`: trusts the project `info` offers
    /// (`untrustedProject.dir`); the host composes again and its servers
    /// start.
    pub async fn trust_project(&self, project: &UntrustedProject) -> Result<()> {
        let params = TrustProjectParams {
            dir: project.dir.clone(),
            offer: project.offer.clone(),
        };
        let _: serde_json::Value = self.0.call_as(method::TRUST_PROJECT, params).await?;
        Ok(())
    }

    /// `print`: writes `text` to stdout as it is.
    pub async fn print(&self, text: &str) -> Result<()> {
        self.write(method::PRINT, text).await
    }

    /// `eprint`: writes `text` to stderr as it is.
    pub async fn eprint(&self, text: &str) -> Result<()> {
        self.write(method::EPRINT, text).await
    }

    async fn write(&self, name: &str, text: &str) -> Result<()> {
        let params = TextParams {
            text: text.to_owned(),
        };
        self.0
            .call_as::<serde_json::Value>(name, &params)
            .await
            .map(drop)
    }

    /// `exit`: ends the process with `code` once the generation stopped.
    pub async fn exit(&self, code: i32) -> Result<()> {
        self.0
            .call_as::<serde_json::Value>(method::EXIT, ExitParams { code })
            .await
            .map(drop)
    }

    /// `terminal`: whether stdin and stdout are a terminal, and its size.
    pub async fn terminal(&self) -> Result<TerminalInfo> {
        self.0.call_as(method::TERMINAL, NoParams {}).await
    }

    /// `readInput`: waits for terminal input after `ack` (the seq of the
    /// last input handled; `None` for everything not yet acknowledged).
    /// Dropping the future loses nothing: unacknowledged input comes again.
    pub async fn read_input(&self, ack: Option<u64>) -> Result<Input> {
        self.0
            .call_as(method::READ_INPUT, ReadInputParams { ack })
            .await
    }

    /// `setRawMode`: raw mode on or off (the host restores the original at
    /// exit).
    pub async fn set_raw_mode(&self, raw: bool) -> Result<()> {
        self.0
            .call_as::<serde_json::Value>(method::SET_RAW_MODE, RawModeParams { raw })
            .await
            .map(drop)
    }

    /// `plugins`: the rows of the running composition, with their state,
    /// generation and error. Answered by the supervisor, so a plugin must
    /// not await it while it is being applied.
    pub async fn plugins(&self) -> Result<Vec<PluginRow>> {
        self.0.call_as(method::PLUGINS, NoParams {}).await
    }
}
