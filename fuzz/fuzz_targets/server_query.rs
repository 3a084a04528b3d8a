//! What every API request carries besides its body: the `Authorization: Bearer` header, the
//! review queue's query string and the `cursor` of a source's event list.
//!
//! - `bearer`: any header bytes give no token (no header), a token, or 401 `unauthorized`;
//!   a token is never empty and has no surrounding whitespace; `Bearer <t>` (any case of the
//!   scheme, any padding) gives `t` back.
//! - `review_query`: any query string and any caller give a query or a typed refusal: 422
//!   `invalid_field` naming one of the parameters, or 403 for a token of one namespace
//!   asking for another. A query has a limit of 1–1000 (100 when none is given), filters of
//!   at most 255 characters without NUL, and for a scoped token only its own namespace.
//! - the event-list cursor: any text decodes or is refused; a cursor the server writes for
//!   any row decodes to that row's `received_at` and key, and a decoded key is a key.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::header::AUTHORIZATION;
use http::HeaderValue;
use idem_core::ids::Key;
use idem_core::Timestamp;
use idem_server::fuzzing::{
    bearer, events_cursor, parse_events_cursor, review_query, Body, Request,
};
use idem_server::ApiError;
use idem_store::{ApiToken, IntakeEventRow, Role};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    auth: Option<&'a [u8]>,
    scheme_case: u8,
    pad: (u8, u8, u8),
    query: &'a str,
    params: Vec<(u8, &'a str)>,
    caller: Option<(u8, bool)>,
    received_at: i64,
    key: &'a str,
    cursor: &'a str,
}

const PARAMS: [&str; 7] = [
    "namespace",
    "state",
    "owner",
    "correlation_id",
    "limit",
    "cursor",
    "other",
];
const SCOPES: [&str; 3] = ["*", "shop", "other:ns"];

fn request(auth: &[u8]) -> Option<Request> {
    let v = HeaderValue::from_bytes(auth).ok()?;
    let mut req = Request::new(Body::empty());
    req.headers_mut().insert(AUTHORIZATION, v);
    Some(req)
}

fn check_bearer(inp: &Input) {
    assert!(matches!(
        bearer(Request::new(Body::empty()).headers()),
        Ok(None)
    ));
    if let Some(raw) = inp.auth {
        if let Some(req) = request(raw) {
            match bearer(req.headers()) {
                Ok(Some(t)) => {
                    assert!(!t.is_empty());
                    assert_eq!(t.trim(), t);
                }
                Ok(None) => panic!("a header gave no token"),
                Err(e) => assert!(matches!(e, ApiError::Unauthorized(_)), "{e:?}"),
            }
        }
        // A token written the usual way is read back.
        let token: String = String::from_utf8_lossy(raw)
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .collect();
        let scheme = match inp.scheme_case % 3 {
            0 => "Bearer",
            1 => "bearer",
            _ => "BEARER",
        };
        let sp = |n: u8| " ".repeat(usize::from(n % 3));
        let written = format!(
            "{}{scheme} {}{token}{}",
            sp(inp.pad.0),
            sp(inp.pad.1),
            sp(inp.pad.2)
        );
        let req = request(written.as_bytes()).expect("visible ASCII is a header value");
        match bearer(req.headers()) {
            Ok(Some(t)) => assert_eq!(t, token),
            Ok(None) => panic!("no token"),
            Err(e) => {
                assert!(token.is_empty(), "{written:?}: {e:?}");
                assert!(matches!(e, ApiError::Unauthorized(_)), "{e:?}");
            }
        }
    }
}

fn check_review(inp: &Input) {
    let caller = match inp.caller {
        None => idem_server::auth::Caller::Anonymous,
        Some((scope, operator)) => idem_server::auth::Caller::Token(ApiToken {
            id: 1,
            secret_hash: String::new(),
            role: if operator {
                Role::Operator
            } else {
                Role::Admin
            },
            scope: SCOPES[usize::from(scope) % SCOPES.len()].to_owned(),
            label: None,
            created_at: Timestamp(0),
            expires_at: None,
            last_used_at: None,
        }),
    };
    let built: String = inp
        .params
        .iter()
        .map(|(k, v)| {
            url::form_urlencoded::Serializer::new(String::new())
                .append_pair(PARAMS[usize::from(*k) % PARAMS.len()], v)
                .finish()
        })
        .collect::<Vec<_>>()
        .join("&");
    for raw in [inp.query, built.as_str()] {
        match review_query(&caller, raw) {
            Ok(q) => {
                assert!((1..=1000).contains(&q.limit), "{raw:?}: {}", q.limit);
                let given_limit = url::form_urlencoded::parse(raw.as_bytes())
                    .any(|(k, v)| k == "limit" && !v.is_empty());
                if !given_limit {
                    assert_eq!(q.limit, 100);
                }
                for f in [&q.owner, &q.correlation_id].into_iter().flatten() {
                    assert!(f.chars().count() <= 255 && !f.contains('\0'));
                }
                if let idem_server::auth::Caller::Token(t) = &caller {
                    if t.scope != "*" {
                        assert_eq!(q.namespace.as_ref().map(|n| n.as_str()), Some(&*t.scope));
                    }
                }
            }
            Err(ApiError::InvalidField { field, .. }) => {
                assert!(PARAMS[..5].contains(&field.as_str()), "{raw:?}: {field}")
            }
            Err(ApiError::Forbidden(_)) => {
                assert!(
                    matches!(&caller, idem_server::auth::Caller::Token(t) if t.scope != "*"),
                    "{raw:?}"
                )
            }
            Err(e) => panic!("{raw:?}: {e:?}"),
        }
    }
}

fn check_cursor(inp: &Input) {
    for text in [inp.cursor.to_owned(), hex::encode(inp.cursor)] {
        if let Some((_, k)) = parse_events_cursor(&text) {
            assert!(Key::try_from(k.as_str()).is_ok(), "{text:?}");
        }
    }
    if Key::try_from(inp.key).is_ok() {
        let row = IntakeEventRow {
            namespace: "shop".into(),
            key: inp.key.to_owned(),
            source: "stripe".into(),
            event_id: None,
            content_type: None,
            headers: "{}".into(),
            body: None,
            received_at: Timestamp(inp.received_at),
            attempts: "[]".into(),
            delivered_at: None,
            state: None,
            event_key: None,
            destination: None,
            destinations: None,
        };
        let c = events_cursor(&row);
        assert_eq!(
            parse_events_cursor(&c),
            Some((inp.received_at, inp.key.to_owned())),
            "{c:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(inp) = Input::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    check_bearer(&inp);
    check_review(&inp);
    check_cursor(&inp);
});
