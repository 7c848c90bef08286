//! How much one host loads, so that it fails with a message instead of
//! aborting.
//!
//! Every enabled row is a generation: a private copy of its library mapped
//! in this process, a thread, and the pthread keys that the copy's own std
//! creates and never deletes (one per copy for a typical plugin; more for
//! some crates). glibc has 1,024 keys per process, and std aborts the whole
//! process ("out of TLS keys") when it cannot get one. A 10,000-row
//! configuration did exactly that.
//!
//! Two checks, both before anything is loaded:
//! - a composed tree may enable at most [`MAX_ROWS`] rows (checked by the
//!   composition, so the command line and `--watch` say it once, and by the
//!   supervisor for trees applied through the API);
//! - a load starts only while [`KEY_RESERVE`] keys stay free after the
//!   loads already in flight took [`KEYS_PER_LOAD`] each (when the
//!   executable interposes key creation, as `dsh-host` does; see
//!   [`crate::keys`]).

/// The most enabled rows one host runs.
pub const MAX_ROWS: usize = 256;

/// Keys kept free for the host, glibc and reloads.
pub const KEY_RESERVE: usize = 128;

/// Keys counted for each load in flight, before its library created them.
pub const KEYS_PER_LOAD: usize = 2;

/// The message for a tree that enables too many rows, when it does.
pub fn too_many_rows(tree: &crate::config::Tree) -> Option<String> {
    rows_over_cap(tree.rows.iter().filter(|r| !r.row.disabled).count())
}

/// The message for `enabled` enabled rows, when too many.
fn rows_over_cap(enabled: usize) -> Option<String> {
    (enabled > MAX_ROWS).then(|| {
        format!(
            "the configuration enables {enabled} rows; one host runs at most {MAX_ROWS}: every row loads its own copy of its library, with a thread and the pthread keys of that copy's std (glibc has 1024 per process, and running out aborts the process). Disable rows (`disabled = true` in a [[patch]]) or remove them"
        )
    })
}

/// The message when a load would leave too few pthread keys: `left` keys
/// are free and `in_flight` other loads have not created theirs yet.
pub fn too_few_keys(left: usize, in_flight: usize) -> Option<String> {
    let after = left.saturating_sub(in_flight * KEYS_PER_LOAD);
    (after < KEY_RESERVE + KEYS_PER_LOAD).then(|| {
        format!(
            "only {left} pthread keys are left in this process ({in_flight} other loads in flight), and every loaded library copy takes some (glibc has 1024; running out aborts the process). Unload rows first"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_cap_counts_enabled_rows() {
        assert_eq!(rows_over_cap(MAX_ROWS), None);
        let e = rows_over_cap(10_000).unwrap();
        assert!(
            e.contains("enables 10000 rows") && e.contains("at most 256"),
            "{e}"
        );
    }

    #[test]
    fn loads_in_flight_count_against_the_keys_left() {
        assert_eq!(too_few_keys(1000, 0), None);
        assert_eq!(too_few_keys(1000, 256), None);
        assert!(too_few_keys(KEY_RESERVE + 1, 0).is_some());
        assert!(too_few_keys(400, 200).is_some());
    }
}
