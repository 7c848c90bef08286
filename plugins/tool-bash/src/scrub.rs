//! Which environment variables never reach a command: credentials, found
//! by name and by value.
//!
//! By name: anything holding `KEY`, `TOKEN`, `SECRET`, `PASSWORD`,
//! `PASSWD`, `CREDENTIAL`, `AUTH`, `JWT`, `COOKIE` or `SESSION`; a `PAT`,
//! `DSN` or `DATABASE_URL` word (`GITHUB_PAT`, `SENTRY_DSN`). By value: a
//! URL with a password (`postgres://user:pass@host/db`, whatever its
//! name), a PEM block, and the shapes of well-known tokens (GitHub, GitLab,
//! Slack, OpenAI-style `sk-`, AWS access key ids, npm, Hugging Face,
//! Google API keys, JWTs).

/// Words that mark a credential anywhere in a name.
const NAME_PARTS: [&str; 10] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "JWT",
    "COOKIE",
    "SESSION",
];

/// Whole `_`-separated words that mark a credential (`GITHUB_PAT`,
/// `SENTRY_DSN`), not parts of words (`PATH`).
const NAME_WORDS: [&str; 2] = ["PAT", "DSN"];

/// Names that are credentials whatever their value.
const NAMES: [&str; 1] = ["DATABASE_URL"];

/// Token prefixes, each with the shortest run of token characters that
/// must follow it.
const TOKEN_PREFIXES: [(&str, usize); 16] = [
    ("ghp_", 20),
    ("gho_", 20),
    ("ghu_", 20),
    ("ghs_", 20),
    ("ghr_", 20),
    ("github_pat_", 20),
    ("glpat-", 16),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("xoxr-", 10),
    ("sk-", 16),
    ("sk_live_", 16),
    ("npm_", 20),
    ("hf_", 20),
    ("AIza", 30),
];

/// Whether variable `name=value` looks like a credential.
pub fn is_credential(name: &str, value: &str) -> bool {
    credential_name(name) || credential_value(value)
}

fn credential_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    NAME_PARTS.iter().any(|w| n.contains(w))
        || n.split('_').any(|word| NAME_WORDS.contains(&word))
        || NAMES.contains(&n.as_str())
}

fn credential_value(value: &str) -> bool {
    let v = value.trim();
    url_with_password(v)
        || v.contains("-----BEGIN ")
        || jwt(v)
        || aws_access_key(v)
        || TOKEN_PREFIXES.iter().any(|(prefix, min)| {
            v.strip_prefix(prefix)
                .is_some_and(|rest| token_run(rest) >= *min)
        })
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The length of the run of token characters `s` starts with.
fn token_run(s: &str) -> usize {
    s.chars().take_while(|c| token_char(*c)).count()
}

/// `scheme://user:password@host`, anywhere in the value (a list of URLs,
/// a proxy setting).
fn url_with_password(v: &str) -> bool {
    v.match_indices("://").any(|(i, _)| {
        let rest = &v[i + 3..];
        let authority = rest
            .split(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .next()
            .unwrap_or("");
        authority.rsplit_once('@').is_some_and(|(userinfo, _)| {
            userinfo.split_once(':').is_some_and(|(_, p)| !p.is_empty())
        })
    })
}

/// `eyJ…` header, payload and signature: three base64url parts.
fn jwt(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    v.starts_with("eyJ")
        && parts.len() == 3
        && parts[..2].iter().all(|p| p.len() >= 4)
        && parts.iter().all(|p| p.chars().all(token_char))
}

/// An AWS access key id: `AKIA` or `ASIA` and 16 upper-case letters or
/// digits.
fn aws_access_key(v: &str) -> bool {
    (v.starts_with("AKIA") || v.starts_with("ASIA"))
        && v.len() == 20
        && v[4..]
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::is_credential;

    #[test]
    fn names_that_hold_credentials_are_scrubbed() {
        for name in [
            "DEEPSEEK_API_KEY",
            "GITHUB_TOKEN",
            "GITHUB_PAT",
            "PAT",
            "gh_pat_x",
            "DATABASE_URL",
            "SENTRY_DSN",
            "CI_JOB_JWT",
            "CI_JOB_JWT_V2",
            "SESSION_COOKIE",
            "DBUS_SESSION_BUS_ADDRESS",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
            "NPM_AUTH",
        ] {
            assert!(is_credential(name, "x"), "{name}");
        }
    }

    #[test]
    fn ordinary_variables_stay() {
        for (name, value) in [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/root"),
            ("PATCH_LEVEL", "3"),
            ("LANG", "C.UTF-8"),
            ("HOMEBREW_URL", "https://brew.sh/install"),
            ("DOCS_URL", "https://user@example.com/docs"),
            ("TERM", "xterm-256color"),
            ("DESK", "sk-short"),
            ("EDITOR", "vim"),
            ("PS1", "\\u@\\h:\\w\\$ "),
            ("SHELL", "/bin/bash"),
            ("DSH_HOME", "/root/.dsh"),
        ] {
            assert!(!is_credential(name, value), "{name}={value}");
        }
    }

    #[test]
    fn values_that_look_like_credentials_are_scrubbed_whatever_the_name() {
        for value in [
            "postgres://u:p@h/db",
            "https://bob:hunter2@git.example.com/repo.git",
            "http://proxy.local:3128 https://user:pw@proxy.example:443",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghij",
            "glpat-abcdefghij0123456789",
            "xoxb-1234567890-abcdefghij",
            "xoxp-1234567890-abcdefghij",
            "sk-abcdefghijklmnopqrstuvwx",
            "sk_live_abcdefghijklmnopqrstu",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
            "npm_abcdefghijklmnopqrstuvwxyz0123",
        ] {
            assert!(is_credential("SOMETHING", value), "{value}");
        }
    }
}
