//! Failure classification is total and follows the contract's table: every signal gets a
//! class or an error naming `kind`, `http_status` or `error.category`; an explicit kind
//! always wins; an idempotent destination is never ambiguous unless the caller says so; an
//! effect attempt's verdict agrees with the `fail` table for every 4xx/5xx status outside
//! `success`; and the backoff stays inside `[0, min(max_ms, base_ms * 2^(n-1))]`.
#![no_main]

use arbitrary::Arbitrary;
use idem_core::classify::{backoff_ms, classify, Class, FailSignal};
use idem_core::effect::{self, Lost, NotSent, Success, Transport, Verdict};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    kind: Option<u8>,
    http_status: Option<u16>,
    category: Option<&'a str>,
    category_pick: u8,
    sent: Option<bool>,
    idempotent: bool,
    success: Option<Vec<u16>>,
    transport: u8,
    retry_after_ms: Option<i64>,
    attempt: u32,
    base_ms: i64,
    max_ms: i64,
    jitter: f64,
}

const CATEGORIES: [&str; 6] = [
    "timeout",
    "connection",
    "validation",
    "auth",
    "business",
    "http",
];

fuzz_target!(|inp: Input<'_>| {
    let kind = inp
        .kind
        .map(|k| [Class::Retryable, Class::Permanent, Class::Ambiguous][usize::from(k % 3)]);
    let category = match inp.category {
        Some(_) if inp.category_pick.is_multiple_of(2) => {
            Some(CATEGORIES[usize::from(inp.category_pick / 2) % CATEGORIES.len()])
        }
        c => c,
    };
    let sig = FailSignal {
        kind,
        http_status: inp.http_status,
        category,
        sent: inp.sent,
        destination_idempotent: inp.idempotent,
    };
    let got = classify(&sig);
    assert_eq!(got, classify(&sig), "deterministic");
    for c in [Class::Retryable, Class::Permanent, Class::Ambiguous] {
        assert_eq!(Class::parse(c.as_str()), Some(c));
    }
    match (&got, kind, inp.http_status) {
        (_, Some(k), _) => assert_eq!(got.as_ref().ok(), Some(&k), "kind wins"),
        (Ok(_), None, Some(s)) => assert!((400..=599).contains(&s), "{s} classified"),
        (Err(e), None, Some(s)) => {
            assert_eq!(e.field, "http_status");
            assert!(!(400..=599).contains(&s), "{s} refused");
        }
        (Ok(c), None, None) => {
            let cat = category.expect("a class from a category");
            assert!(["timeout", "connection", "validation", "auth", "business"].contains(&cat));
            if inp.sent == Some(false) && matches!(cat, "timeout" | "connection") {
                assert_eq!(*c, Class::Retryable, "nothing was sent");
            }
        }
        (Err(e), None, None) => assert!(["kind", "error.category"].contains(&e.field)),
    }
    if inp.idempotent && kind.is_none() {
        assert_ne!(
            got.as_ref().ok(),
            Some(&Class::Ambiguous),
            "idempotent destination"
        );
    }

    // The effect table: total, and for an answered 4xx/5xx outside `success` the same class
    // as the fail table.
    let success = match inp.success {
        Some(l) => Success::List(l.into_iter().take(8).collect()),
        None => Success::TwoXx,
    };
    let status = inp.http_status.unwrap_or(500);
    let t = match inp.transport % 5 {
        0 => Transport::NotSent(NotSent::Dns),
        1 => Transport::NotSent(NotSent::Connect),
        2 => Transport::Lost(Lost::Timeout),
        3 => Transport::Lost(Lost::Broken),
        _ => Transport::Answered {
            status,
            retry_after_ms: inp.retry_after_ms,
        },
    };
    let v = effect::classify(&t, &success, inp.idempotent);
    let (category, message, http) = effect::failure(&t);
    assert!(!category.is_empty() && !message.is_empty());
    match t {
        Transport::Answered {
            status,
            retry_after_ms,
        } => {
            assert_eq!(http, Some(status));
            if success.contains(status) {
                assert_eq!(v, Verdict::Performed);
            } else if (400..=599).contains(&status) {
                let fail = classify(&FailSignal {
                    http_status: Some(status),
                    destination_idempotent: inp.idempotent,
                    ..Default::default()
                })
                .expect("a 4xx/5xx classifies");
                let want = match fail {
                    Class::Retryable => Verdict::Retryable { retry_after_ms },
                    Class::Permanent => Verdict::Permanent,
                    Class::Ambiguous => Verdict::Ambiguous,
                };
                assert_eq!(v, want, "status {status}");
            } else {
                assert_ne!(v, Verdict::Performed, "{status} outside success");
            }
        }
        Transport::NotSent(_) => assert_eq!(
            v,
            Verdict::Retryable {
                retry_after_ms: None
            }
        ),
        Transport::Lost(_) => assert_eq!(
            v,
            if inp.idempotent {
                Verdict::Retryable {
                    retry_after_ms: None,
                }
            } else {
                Verdict::Ambiguous
            }
        ),
    }

    // Backoff: within [0, ceiling] for any inputs, the ceiling as the doc says.
    let b = backoff_ms(inp.attempt, inp.base_ms, inp.max_ms, inp.jitter);
    assert!(b >= 0, "negative backoff {b}");
    let exp = inp.attempt.saturating_sub(1).min(40);
    let ceiling = inp
        .base_ms
        .saturating_mul(1i64 << exp)
        .min(inp.max_ms)
        .max(0);
    assert!(b <= ceiling, "{b} > {ceiling}");
    if inp.jitter.is_nan() || inp.jitter <= 0.0 {
        assert_eq!(b, 0);
    }
});
