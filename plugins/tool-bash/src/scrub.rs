//! Which environment variables never reach a command: credentials, found
//! by name and by value.
//!
//! By name, looked at word by word (the name upper-cased and split at `_`
//! and every other character that is not a letter or a digit), so that
//! `GIT_AUTHOR_NAME` (the word `AUTHOR`) or `TOKENIZERS_PARALLELISM` stay
//! while `NPM_AUTH` and `HF_TOKEN` go:
//!
//! - anywhere in the name: `PASSWORD`, `PASSWD`, `PASSPHRASE`, `SECRET`,
//!   `CREDENTIAL`, `COOKIE`, `JWT`, `WEBHOOK`, `CONNECTION_STRING`
//!   (`CONNECTIONSTRING`, `CONNSTR`) and `APIKEY`;
//! - a word that is or ends in `KEY`, `KEYS`, `TOKEN` or `AUTH`
//!   (`DEEPSEEK_API_KEY`, `GITHUBTOKEN`, `OAUTH`);
//! - a word that is exactly `PASS`, `PAT`, `DSN`, `SESSION` or `PWD`
//!   (`SMTP_PASS`, `GITHUB_PAT`, `SENTRY_DSN`, `MYSQL_PWD`; `PWD` alone is
//!   the working directory and stays);
//! - `DATABASE_URL`.
//!
//! By value: a URL with a password (`postgres://user:pass@host/db`,
//! whatever its name), a PEM block, and the shapes of well-known tokens
//! (GitHub, GitLab, Slack, OpenAI-style `sk-`, Stripe `sk_live_`/`rk_live_`,
//! SendGrid `SG.`, PyPI `pypi-`, Docker Hub `dckr_pat_`, npm, Hugging
//! Face, Google API keys, AWS access key ids, JWTs), at the start of the
//! value or after a space, `=` or a quote (`Bearer ghp_…`,
//! `--token=npm_…`).

/// Marks a credential anywhere in an upper-cased name.
const NAME_PARTS: [&str; 12] = [
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "SECRET",
    "CREDENTIAL",
    "COOKIE",
    "JWT",
    "WEBHOOK",
    "CONNECTION_STRING",
    "CONNECTIONSTRING",
    "CONNSTR",
    "APIKEY",
];

/// A word of the name that is or ends in one of these marks a credential.
const WORD_ENDINGS: [&str; 4] = ["KEY", "KEYS", "TOKEN", "AUTH"];

/// A word of the name that is exactly one of these marks a credential
/// (`PWD` only in a name of more than one word).
const WORDS: [&str; 5] = ["PASS", "PAT", "DSN", "SESSION", "PWD"];

/// The working directory, not a password.
const WORKING_DIRECTORY: &str = "PWD";

/// Names that are credentials whatever their value.
const NAMES: [&str; 1] = ["DATABASE_URL"];

/// Token prefixes, each with the shortest run of token characters that
/// must follow it.
const TOKEN_PREFIXES: [(&str, usize); 24] = [
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
    ("sk_test_", 16),
    ("rk_live_", 16),
    ("rk_test_", 16),
    ("whsec_", 16),
    ("pypi-", 32),
    ("dckr_pat_", 16),
    ("npm_", 20),
    ("hf_", 20),
    ("AIza", 30),
    // SendGrid: `SG.`, 22 characters, a dot and 43 more (the run checked
    // is the 22).
    ("SG.", 16),
    ("shpat_", 20),
];

/// Whether variable `name=value` looks like a credential.
pub fn is_credential(name: &str, value: &str) -> bool {
    credential_name(name) || credential_value(value)
}

fn credential_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    if NAMES.contains(&n.as_str()) || NAME_PARTS.iter().any(|p| n.contains(p)) {
        return true;
    }
    let words: Vec<&str> = n
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|w| {
        WORD_ENDINGS.iter().any(|e| w.ends_with(e))
            || (WORDS.contains(w) && !(*w == WORKING_DIRECTORY && words.len() == 1))
    })
}

fn credential_value(value: &str) -> bool {
    let v = value.trim();
    url_with_password(v)
        || v.contains("-----BEGIN ")
        || token_starts(v).any(|t| known_token(t) || jwt(t) || aws_access_key(t))
}

/// The places a token may start in `v`: its start, and after a space, `=`
/// or a quote.
fn token_starts(v: &str) -> impl Iterator<Item = &str> {
    std::iter::once(v).chain(
        v.match_indices(|c: char| c.is_whitespace() || c == '=' || c == '"' || c == '\'')
            .map(move |(i, sep)| &v[i + sep.len()..]),
    )
}

/// `t` starts with a known token prefix and enough token characters.
fn known_token(t: &str) -> bool {
    TOKEN_PREFIXES.iter().any(|(prefix, min)| {
        t.strip_prefix(prefix)
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

/// `eyJ…` header, payload and signature: three base64url parts, the token
/// ending at the first character that is none of these.
fn jwt(t: &str) -> bool {
    let end = t
        .find(|c: char| !(token_char(c) || c == '.'))
        .unwrap_or(t.len());
    let parts: Vec<&str> = t[..end].split('.').collect();
    t.starts_with("eyJ") && parts.len() == 3 && parts[..2].iter().all(|p| p.len() >= 4)
}

/// An AWS access key id: `AKIA` or `ASIA` and 16 upper-case letters or
/// digits, then the end of the token.
fn aws_access_key(t: &str) -> bool {
    let id: String = t.chars().take_while(|c| token_char(*c)).collect();
    (id.starts_with("AKIA") || id.starts_with("ASIA"))
        && id.len() == 20
        && id[4..]
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
            "GITHUBTOKEN",
            "HF_TOKEN",
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
            "AWS_SESSION_TOKEN",
            "PGPASSWORD",
            "NPM_AUTH",
            "GITHUB_OAUTH",
            "npm_config_//registry.npmjs.org/:_authToken",
            "SSH_AUTH_SOCK",
            "MYSQL_PWD",
            "SMTP_PASS",
            "REDIS_PASS",
            "GPG_PASSPHRASE",
            "SIGNING_KEY_PASSPHRASE",
            "AZURE_STORAGE_CONNECTION_STRING",
            "SERVICEBUS_CONNECTIONSTRING",
            "SQLCONNSTR_main",
            "SLACK_WEBHOOK_URL",
            "DISCORD_WEBHOOK",
            "OPENAI_APIKEY",
            "SSH_KEYS",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(is_credential(name, "x"), "{name}");
        }
    }

    #[test]
    fn ordinary_variables_stay() {
        for (name, value) in [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("PWD", "/home/u/project"),
            ("OLDPWD", "/home/u"),
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
            ("GIT_AUTHOR_NAME", "Ada Lovelace"),
            ("GIT_AUTHOR_EMAIL", "ada@example.com"),
            ("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z"),
            ("GIT_COMMITTER_NAME", "Ada Lovelace"),
            ("TOKENIZERS_PARALLELISM", "false"),
            ("OPENAI_MAX_TOKENS", "4096"),
            ("XKB_DEFAULT_KEYMAP", "us"),
            ("BYPASS_CACHE", "1"),
            ("CACHE_DIR", "/home/u/.cache/hf_hub_downloads_of_models"),
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
            "sk_test_abcdefghijklmnopqrstu",
            "rk_live_abcdefghijklmnopqrstu",
            "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
            "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0",
            "dckr_pat_abcdefghijklmnopqrstuvwxyz0",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----",
            "npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
            "Bearer ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "--token=npm_abcdefghijklmnopqrstuvwxyz0123456789",
            "{\"key\": \"sk_live_abcdefghijklmnopqrstu\"}",
        ] {
            assert!(is_credential("SOMETHING", value), "{value}");
        }
    }
}
