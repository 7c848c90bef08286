//! How many events a log may expand to. A packed chunk row stores a run of
//! deltas as one array: each member `""` is 3 bytes of text but becomes a
//! whole event (hundreds of bytes) once loaded, so a 1 KB zstd log of one
//! row with millions of empty members would expand to gigabytes. Two caps
//! bound that, both checked before anything is allocated for the events:
//!
//! - [`Expansion::row_members`] (config `maxRowMembers`): the members of one
//!   packed row, counted in the row's text by [`largest_array`] before the
//!   row is parsed. The same count guards every record that is parsed into
//!   a tree (a packed row, or a row the typed fast path refused), so no
//!   array of a log grows past it.
//! - [`Expansion::events`] (config `maxEvents`): the events of one log,
//!   checked before a row's members are expanded.
//!
//! A log over a cap is `SESSION_CORRUPT`, naming the cap and its config
//! key; the file is left as it is.

/// The default of [`Expansion::row_members`]: 131,072 deltas in one run,
/// far above one answer's block (a model answer is at most some tens of
/// thousands of tokens, about one delta each).
pub const DEFAULT_MAX_ROW_MEMBERS: usize = 128 << 10;

/// The default of [`Expansion::events`]: a million events (thousands of
/// model answers), about a gigabyte once loaded.
pub const DEFAULT_MAX_EVENTS: usize = 1_000_000;

/// The deepest nesting [`largest_array`] follows: serde_json refuses
/// anything deeper (its recursion limit is 128), so nothing past it is
/// ever allocated.
const MAX_DEPTH: usize = 128;

/// The expansion caps a log is loaded under (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expansion {
    /// The events of one log.
    pub events: usize,
    /// The members of one packed row (and the entries of any array of a
    /// record parsed into a tree).
    pub row_members: usize,
}

impl Default for Expansion {
    fn default() -> Self {
        Expansion {
            events: DEFAULT_MAX_EVENTS,
            row_members: DEFAULT_MAX_ROW_MEMBERS,
        }
    }
}

impl Expansion {
    /// Why a record holding an array of `n` or more entries is refused.
    pub fn over_row(&self, n: usize) -> String {
        format!(
            "holds an array of {n} entries, more than {}, the cap of members in one packed chunk row (`maxRowMembers` in session-jsonl's config: raise it if the log is genuine)",
            self.row_members
        )
    }

    /// Why a record that would take the log past its event cap is refused.
    pub fn over_events(&self) -> String {
        format!(
            "takes the log past {} events, the cap of one log's events (`maxEvents` in session-jsonl's config: raise it if the log is genuine)",
            self.events
        )
    }
}

/// An upper bound of the entries of the largest array in the JSON text
/// `json` with two entries or more (one more than its commas), counted
/// without parsing or allocating beyond a fixed stack: what a parse into a
/// tree would allocate for that array. Strings are skipped (a comma in a
/// string is not counted); nesting past [`MAX_DEPTH`] ends the count, as it
/// ends the parse.
pub fn largest_array(json: &[u8]) -> usize {
    // Per open container: whether it is an array, and its commas.
    let mut open: Vec<(bool, usize)> = Vec::with_capacity(16);
    let mut largest = 0;
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                if open.len() == MAX_DEPTH {
                    break;
                }
                open.push((b == b'[', 0));
            }
            b']' | b'}' => {
                open.pop();
            }
            b',' => {
                if let Some((true, commas)) = open.last_mut() {
                    *commas += 1;
                    largest = largest.max(*commas + 1);
                }
            }
            _ => {}
        }
    }
    largest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_array_is_counted_without_strings_or_objects() {
        assert_eq!(largest_array(br#"{"a":1,"b":2,"c":3}"#), 0);
        assert_eq!(largest_array(br#"[1,2,3]"#), 3);
        assert_eq!(largest_array(br#"{"t":["a,b,c,d",""],"dt":[1,2,3,4]}"#), 4);
        assert_eq!(largest_array(br#"["\",\",", [1,2], {"x":[1,2,3]}]"#), 3);
        let bomb = format!("[{}\"\"]", "\"\",".repeat(9));
        assert_eq!(largest_array(bomb.as_bytes()), 10);
        // An unclosed array counts too.
        assert_eq!(largest_array(b"[0,0,0,0,0"), 5);
        // Past the depth serde_json parses, nothing is counted (or parsed).
        let deep = format!("{}0,0,0", "[".repeat(MAX_DEPTH + 1));
        assert_eq!(largest_array(deep.as_bytes()), 0);
    }

    #[test]
    fn the_refusals_name_the_cap_and_its_config_key() {
        let caps = Expansion {
            events: 7,
            row_members: 5,
        };
        assert!(
            caps.over_row(9).contains("more than 5") && caps.over_row(9).contains("maxRowMembers")
        );
        assert!(
            caps.over_events().contains("past 7 events")
                && caps.over_events().contains("maxEvents")
        );
    }
}
