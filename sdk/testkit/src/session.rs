//! The session log alone: `session` and `session-jsonl` in a [`TestHost`],
//! for tests that drive `sessions.*` directly.

use std::path::PathBuf;

use crate::TestHost;

/// A host with the session log and JSONL persistence under
/// `$DSH_HOME/sessions` (that root returned), write batches held for an
/// hour so only `flush` makes them durable.
pub async fn store() -> (TestHost, PathBuf) {
    let t = TestHost::start().await;
    let root = t.home.path().join("sessions");
    t.apply(&format!(
        "[[row]]\nid='session'\nplugin='session'\n[[row]]\nid='jsonl'\nplugin='session-jsonl'\nconfig = {{ root = '{}', writeBatchMaxDelayMs = 3600000 }}\n",
        root.display()
    ))
    .await;
    (t, root)
}
