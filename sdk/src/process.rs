//! Child processes for plugins, within the plugin rules: `std::process` on a
//! blocking thread, always waited, so no signal handler is ever installed
//! (tokio's `process` feature would register SIGCHLD handling).

use std::process::{Command, Output};

/// Runs `command` to completion on the blocking pool and returns its output.
pub async fn output(mut command: Command) -> std::io::Result<Output> {
    tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(std::io::Error::other)?
}
