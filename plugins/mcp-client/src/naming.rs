//! The name the model calls an MCP tool by, as the original makes it:
//! `mcp__<server>__<tool>`, every character outside `[A-Za-z0-9_-]` made
//! `_` (one per UTF-16 unit, as a JavaScript regex replaces them), and
//! when that changed the name or made it longer than 64 characters, its
//! first 51 characters, `_` and 12 hex digits of
//! `sha256(server + "\0" + tool)`: two tools that normalize alike still
//! differ, and the same tool always gets the same name.

use sha2::{Digest, Sha256};

/// The longest tool name model APIs accept.
const MAX_LEN: usize = 64;
/// The normalized prefix kept before the hash suffix.
const KEPT: usize = 51;
/// Hex digits of the hash suffix.
const HASH_HEX: usize = 12;

/// The public name of tool `raw` of server `server`.
pub fn public_name(server: &str, raw: &str) -> String {
    let joined = format!("mcp__{server}__{raw}");
    let mut normalized = String::with_capacity(joined.len());
    for c in joined.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            normalized.push(c);
        } else {
            normalized.extend(std::iter::repeat_n('_', c.len_utf16()));
        }
    }
    if normalized == joined && normalized.len() <= MAX_LEN {
        return normalized;
    }
    let digest = Sha256::new()
        .chain_update(server.as_bytes())
        .chain_update([0u8])
        .chain_update(raw.as_bytes())
        .finalize();
    let hash: String = digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(HASH_HEX)
        .map(|n| char::from_digit(u32::from(n), 16).unwrap_or('0'))
        .collect();
    // `normalized` is ASCII: any byte index is a character boundary.
    normalized.truncate(KEPT);
    format!("{normalized}_{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_kept() {
        assert_eq!(
            public_name("github", "list_issues"),
            "mcp__github__list_issues"
        );
        assert_eq!(public_name("a-b", "x-1"), "mcp__a-b__x-1");
    }

    #[test]
    fn altered_names_get_the_hash_of_server_and_raw_name() {
        // sha256("srv\0admin.reset"), first 12 hex digits.
        let digest = Sha256::digest(b"srv\0admin.reset");
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        let name = public_name("srv", "admin.reset");
        assert_eq!(name, format!("mcp__srv__admin_reset_{}", &hex[..12]));
        // Two tools that normalize alike stay apart.
        assert_ne!(public_name("srv", "admin reset"), name);
    }

    #[test]
    fn long_and_astral_names_are_cut_to_64() {
        let long = "x".repeat(80);
        let name = public_name("srv", &long);
        assert_eq!(name.len(), 64);
        assert!(name.starts_with("mcp__srv__xxxx"));
        assert_eq!(&name[51..52], "_");
        // One astral character is two UTF-16 units, so two underscores.
        assert!(public_name("s", "a😀b").starts_with("mcp__s__a__b_"));
        let exactly = "y".repeat(64 - "mcp__s__".len());
        assert_eq!(public_name("s", &exactly).len(), 64);
        assert_eq!(public_name("s", &exactly), format!("mcp__s__{exactly}"));
    }
}
