//! The `sessions.create` params of an `agentLoop.create`: the session's id,
//! its working directory, and the lineage a subagent's creator gives it
//! (`parentSession`, `origin`, `delegationDepth`). The session header
//! records the lineage, and session-jsonl writes it in the log's header
//! line. `CreateMeta` has already checked each field as it was read.

use dsh_sdk::api::agent_loop::{CreateMeta, CreateParams};
use dsh_sdk::api::sessions;
use dsh_sdk::new_id;
use dsh_sdk::vocab::shape::SESSION_FORMAT_VERSION;
use dsh_sdk::vocab::SessionHeader;

/// What `sessions.create` gets for `params`. Without lineage, the id (if
/// any) and the cwd, as before. With lineage, also a header that carries
/// it: `sessions.create` takes lineage only in a supplied header, and that
/// header must name the session's own id, so an id the caller left out is
/// chosen here, in the form `sessions` would give it (`session-<uuid>`).
pub(crate) fn session_create(params: &CreateParams) -> sessions::CreateParams {
    let meta = params.meta.as_ref();
    let lineage = meta.filter(|m| has_lineage(m));
    let id = match (&params.session_id, lineage) {
        (Some(id), _) => Some(id.clone()),
        (None, Some(_)) => Some(format!("session-{}", new_id())),
        (None, None) => None,
    };
    let header = lineage.zip(id.clone()).map(|(m, id)| SessionHeader {
        version: SESSION_FORMAT_VERSION,
        id,
        parent_session: m.parent_session.clone(),
        origin: m.origin.map(|o| o.as_str().to_owned()),
        delegation_depth: m.delegation_depth,
        ..SessionHeader::default()
    });
    sessions::CreateParams {
        id,
        header,
        // Without `meta.cwd` the session has no cwd (not `/`).
        meta: Some(sessions::CreateMeta {
            cwd: meta.and_then(|m| m.cwd.clone()),
        }),
        // Announced by the commit of the creation transaction.
        unpublished: true,
        ..sessions::CreateParams::default()
    }
}

/// True when `meta` sets any lineage field.
fn has_lineage(meta: &CreateMeta) -> bool {
    meta.parent_session.is_some() || meta.origin.is_some() || meta.delegation_depth.is_some()
}

#[cfg(test)]
mod tests {
    use dsh_sdk::api::agent_loop::SessionOrigin;

    use super::*;

    fn params(session_id: Option<&str>, meta: CreateMeta) -> CreateParams {
        CreateParams {
            session_id: session_id.map(str::to_owned),
            meta: Some(meta),
            ..CreateParams::default()
        }
    }

    fn subagent() -> CreateMeta {
        CreateMeta {
            cwd: Some("/w".into()),
            parent_session: Some("parent".into()),
            origin: Some(SessionOrigin::Subagent),
            delegation_depth: Some(1),
        }
    }

    #[test]
    fn without_lineage_no_header_is_supplied() {
        let cwd = CreateMeta {
            cwd: Some("/w".into()),
            ..CreateMeta::default()
        };
        let args = session_create(&params(None, cwd.clone()));
        assert_eq!((args.id, args.header), (None, None));
        assert_eq!(args.meta.and_then(|m| m.cwd).as_deref(), Some("/w"));
        let args = session_create(&params(Some("s"), cwd));
        assert_eq!((args.id.as_deref(), args.header), (Some("s"), None));
        let args = session_create(&CreateParams::default());
        assert_eq!(args.meta.and_then(|m| m.cwd), None);
    }

    #[test]
    fn lineage_goes_into_a_header_of_the_sessions_own_id() {
        let args = session_create(&params(Some("kid"), subagent()));
        assert_eq!(args.id.as_deref(), Some("kid"));
        let header = args.header.unwrap();
        assert_eq!(header.id, "kid");
        assert_eq!(header.version, SESSION_FORMAT_VERSION);
        assert_eq!(header.parent_session.as_deref(), Some("parent"));
        assert_eq!(header.origin.as_deref(), Some("subagent"));
        assert_eq!(header.delegation_depth, Some(1));
        // The cwd still goes through `meta` (checked there).
        assert_eq!(header.cwd, None);
        assert_eq!(args.meta.and_then(|m| m.cwd).as_deref(), Some("/w"));
    }

    #[test]
    fn each_lineage_field_alone_is_carried() {
        let depth = CreateMeta {
            delegation_depth: Some(0),
            ..CreateMeta::default()
        };
        let header = session_create(&params(Some("s"), depth)).header.unwrap();
        assert_eq!(
            (
                header.delegation_depth,
                header.parent_session,
                header.origin
            ),
            (Some(0), None, None)
        );
        let origin = CreateMeta {
            origin: Some(SessionOrigin::Subagent),
            ..CreateMeta::default()
        };
        let header = session_create(&params(Some("s"), origin)).header.unwrap();
        assert_eq!(header.origin.as_deref(), Some("subagent"));
    }

    #[test]
    fn without_an_id_one_is_chosen_for_the_header() {
        let args = session_create(&params(None, subagent()));
        let id = args.id.unwrap();
        assert!(id.starts_with("session-"), "{id}");
        assert_eq!(args.header.unwrap().id, id);
        let again = session_create(&params(None, subagent())).id.unwrap();
        assert_ne!(again, id, "each create gets its own id");
    }
}
