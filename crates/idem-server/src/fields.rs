//! The members of request bodies as validated types: each type reads itself from a strict
//! object ([`Obj`]) under its member name and refuses what the contract refuses, with the
//! member's name in the error. A value of one of these types has passed its check, so a
//! handler never re-checks a length, a range or a NUL. A request body is a struct of such
//! members, declared with `request_body!` (defined here, beside [`Member`]).
//!
//! What this module must never do: log or format a member's value into an error (owners,
//! notes and tokens are the caller's data; a token is half a credential), or accept a member
//! the schema says is refused. The schema of each member is written on the body struct's
//! field (`#[schema(...)]`); a test here keeps the two limits equal.

use idem::policy::MAX_LEASE_MS;
use idem::{Class, LeaseExpiry, ResolveAction, Role, State as RecState, Timestamp};
use serde_json::Value;

use crate::error::ApiError;
use crate::input::Obj;

/// Longest `wait_ms` honoured on claim (the contract caps it at 30 s).
pub const MAX_WAIT_MS: i64 = 30_000;

/// A value read from the member `name` of a body.
pub trait Member: Sized {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError>;
}

/// Declares a request body: the struct as written (derive `ToSchema` and document it there),
/// plus its `FIELDS` (the member names, which are also what the schema lists) and its
/// [`RequestBody`](crate::input::RequestBody) impl reading each member through its type's [`Member`]
/// impl, in declaration order. `optional` bodies may be empty (`{}`), `required` ones not.
macro_rules! request_body {
    (@empty optional) => { true };
    (@empty required) => { false };
    (
        $kind:ident;
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty ),*
        }

        impl $name {
            /// The members this body accepts (any other is 400 `unknown_field`).
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
        }

        impl $crate::input::RequestBody for $name {
            fn fields() -> &'static [&'static str] {
                Self::FIELDS
            }
            const EMPTY_OK: bool = $crate::fields::request_body!(@empty $kind);
            fn read(o: &mut $crate::input::Obj) -> Result<Self, $crate::error::ApiError> {
                Ok($name {
                    $( $field: <$ty as $crate::fields::Member>::read(o, stringify!($field))? ),*
                })
            }
        }

        impl $crate::fields::Member for Option<$name> {
            fn read(o: &mut $crate::input::Obj, name: &str) -> Result<Self, $crate::error::ApiError> {
                match o.opt_obj(name, $name::FIELDS)? {
                    None => Ok(None),
                    Some(mut nested) => {
                        <$name as $crate::input::RequestBody>::read(&mut nested).map(Some)
                    }
                }
            }
        }
    };
}
pub(crate) use request_body;

/// Text members: at most `MAX` characters and no U+0000 (a store may not keep it: PostgreSQL
/// text cannot hold NUL, so it is refused the same on every store). Required ones must be
/// non-empty.
macro_rules! text_member {
    ($( $(#[$meta:meta])* $name:ident, $max:expr; )*) => {$(
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq)]
        pub struct $name(String);

        impl $name {
            /// The most characters the member may have.
            pub const MAX: usize = $max;

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl std::fmt::Debug for $name {
            // The value is the caller's data: never in a Debug line.
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({} chars)"), self.0.chars().count())
            }
        }

        impl Member for $name {
            fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
                o.req_str(name, $max).map($name)
            }
        }

        impl Member for Option<$name> {
            fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
                Ok(o.opt_str(name, $max)?.map($name))
            }
        }
    )*};
}

text_member! {
    /// The fencing token of a claim, as the worker sends it back (whether it is the newest
    /// is the ledger's question: a made-up token is a lost lease, not bad input).
    FencingToken, 256;
    /// Informational holder name (e.g. the n8n execution id).
    Owner, 255;
    /// The caller's correlation id, carried into events and log lines.
    CorrelationId, 255;
    /// The destination's reference for the effect (an order id, a message id).
    ExternalRef, 512;
    /// Why an operator acted (recorded with who).
    Note, 2000;
    /// A token's label, recorded as the actor of its operator actions.
    Label, 255;
    /// A failure's category (`timeout`, `connection`, …; the classifier knows five).
    Category, 64;
    /// A claim's precomputed fingerprint before it is parsed (the parse names the member).
    FingerprintText, 128;
    /// A prefix or suffix of a derived key.
    KeyAffix, 255;
    /// A token's scope before it is checked: a namespace or `*`.
    ScopeText, 128;
    /// A destination of an intake source, by name (whether the event has it is the
    /// handler's question).
    DestinationName, 255;
}

/// A failure's message: any text (the core sanitizes and cuts it before it is stored), at
/// most 100000 characters.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ErrorMessage(String);

impl ErrorMessage {
    pub const MAX: usize = 100_000;

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Debug for ErrorMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ErrorMessage({} chars)", self.0.chars().count())
    }
}

impl Member for Option<ErrorMessage> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        Ok(o.opt_text(name, ErrorMessage::MAX)?.map(ErrorMessage))
    }
}

/// Integer members with their ranges.
macro_rules! int_member {
    ($( $(#[$meta:meta])* $name:ident($ty:ty), $min:expr, $max:expr; )*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name(pub $ty);

        impl $name {
            pub const MIN: i64 = $min;
            pub const MAX: i64 = $max;
        }

        impl Member for Option<$name> {
            fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
                // In range by the check, so the conversion cannot fail.
                Ok(o.opt_i64(name, $min, $max)?
                    .and_then(|n| <$ty>::try_from(n).ok())
                    .map($name))
            }
        }
    )*};
}

int_member! {
    /// A lease length: 1 ms to 7 days.
    LeaseMs(i64), 1, MAX_LEASE_MS;
    /// How long a claim may wait for the holder (larger values are capped, see [`WaitMs::ms`]).
    WaitMs(i64), 0, i64::MAX;
    /// The destination's HTTP status of a failed attempt.
    HttpStatus(u16), 100, 599;
    /// A token's lifetime: 1 ms to about 10 years.
    ExpiresInMs(i64), 1, 315_360_000_000;
    /// Model tokens one attempt spent (`cost.tokens`).
    CostTokens(u64), 0, 1_000_000_000_000_000;
}

/// US dollars one attempt spent (`cost.usd`): a non-negative finite number up to
/// [`idem::MAX_COST_USD`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostUsd(pub f64);

impl Member for Option<CostUsd> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.value(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(f) if f.is_finite() && (0.0..=idem::MAX_COST_USD).contains(&f) => {
                    Ok(Some(CostUsd(f)))
                }
                _ => Err(o.invalid(
                    name,
                    &format!("must be a number from 0 to {}", idem::MAX_COST_USD),
                )),
            },
        }
    }
}

impl WaitMs {
    /// The wait actually granted: at most [`MAX_WAIT_MS`].
    pub fn ms(self) -> i64 {
        self.0.min(MAX_WAIT_MS)
    }
}

impl Member for Option<bool> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        o.opt_bool(name)
    }
}

/// Any JSON value but `null` (absent or `null` is `None`).
impl Member for Option<Value> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        Ok(o.value(name))
    }
}

/// A required JSON value (any but `null`).
impl Member for Value {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        o.value(name).ok_or_else(|| o.invalid(name, "is required"))
    }
}

/// The event a key is derived from (any JSON but `null`).
#[derive(Clone, PartialEq)]
pub struct Event(pub Value);

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Event(…)")
    }
}

impl Member for Event {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        o.value(name)
            .map(Event)
            .ok_or_else(|| o.invalid(name, "is required (the event JSON)"))
    }
}

/// RFC 6901 pointers into an event, in order (their syntax is checked by the derivation,
/// which names the offending one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointers(pub Vec<String>);

impl Member for Pointers {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.value(name) {
            Some(Value::Array(a)) => a
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(ApiError::invalid_field(
                        format!("{}[{i}]", o.name(name)),
                        "must be a JSON pointer string",
                    )),
                })
                .collect::<Result<_, _>>()
                .map(Pointers),
            _ => Err(o.invalid(name, "is required: an array of JSON pointers")),
        }
    }
}

/// Members that are one of a fixed set of words: the optional form, and the required form
/// with the sentence that lists the choices.
macro_rules! enum_member {
    ($( $ty:ty, $parse:path, $choices:expr, $required:expr; )*) => {$(
        impl Member for Option<$ty> {
            fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
                o.opt_enum(name, $parse, $choices)
            }
        }

        impl Member for $ty {
            fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
                o.opt_enum(name, $parse, $choices)?
                    .ok_or_else(|| o.invalid(name, $required))
            }
        }
    )*};
}

/// The states a bulk redeliver selects by: the ones an operator sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedeliverState(pub RecState);

impl RedeliverState {
    fn parse(s: &str) -> Option<RedeliverState> {
        match RecState::parse(s)? {
            s @ (RecState::NeedsReview | RecState::FailedRetryable | RecState::Completed) => {
                Some(RedeliverState(s))
            }
            _ => None,
        }
    }
}

/// An RFC 3339 time (`2026-01-31T12:00:00Z`, any offset), kept to the millisecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339(pub Timestamp);

impl Member for Option<Rfc3339> {
    fn read(o: &mut Obj, name: &str) -> Result<Self, ApiError> {
        match o.value(name) {
            None => Ok(None),
            Some(Value::String(s)) => chrono::DateTime::parse_from_rfc3339(&s)
                .map(|t| Some(Rfc3339(Timestamp(t.timestamp_millis()))))
                .map_err(|_| o.invalid(name, "must be an RFC 3339 time")),
            Some(_) => Err(o.invalid(name, "must be an RFC 3339 time")),
        }
    }
}

enum_member! {
    RedeliverState, RedeliverState::parse, "needs_review, failed_retryable, completed",
        "is required: needs_review, failed_retryable or completed";
    LeaseExpiry, LeaseExpiry::parse, "reclaim, review", "is required: reclaim or review";
    Class, Class::parse, "retryable, permanent, ambiguous",
        "is required: retryable, permanent or ambiguous";
    ResolveAction, ResolveAction::parse, "completed, retry, failed_permanent",
        "is required: completed, retry or failed_permanent";
    Role, Role::parse, "worker, operator, admin", "is required: worker, operator or admin";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value, fields: &[&str]) -> Obj {
        Obj::body(v, fields, true).expect("an object")
    }

    #[test]
    fn text_members_name_the_member_and_never_show_the_value() {
        let mut o = obj(
            json!({"owner": "x".repeat(256), "note": "a\u{0}b"}),
            &["owner", "note"],
        );
        let e = <Option<Owner>>::read(&mut o, "owner").map(|_| ());
        assert!(matches!(e, Err(ApiError::InvalidField { field, .. }) if field == "owner"));
        let e = <Option<Note>>::read(&mut o, "note").map(|_| ());
        assert!(matches!(e, Err(ApiError::InvalidField { field, .. }) if field == "note"));
        let mut o = obj(json!({"token": ""}), &["token"]);
        let e = FencingToken::read(&mut o, "token").map(|_| ());
        assert!(matches!(e, Err(ApiError::InvalidField { field, message })
            if field == "token" && message.contains("required")));
        let mut o = obj(json!({"label": "secret-ish"}), &["label"]);
        let label = <Option<Label>>::read(&mut o, "label").ok().flatten();
        let shown = format!("{label:?}");
        assert!(!shown.contains("secret-ish"), "{shown}");
        assert_eq!(label.map(Label::into_string).as_deref(), Some("secret-ish"));
    }

    #[test]
    fn cost_members_refuse_negative_and_non_numeric_values() {
        let mut o = obj(
            json!({"t": -1, "u": -0.5, "s": "12", "x": 1.5, "ok": 0.25, "n": 12.0}),
            &["t", "u", "s", "x", "ok", "n"],
        );
        assert!(<Option<CostTokens>>::read(&mut o, "t").is_err());
        assert!(<Option<CostUsd>>::read(&mut o, "u").is_err());
        assert!(<Option<CostUsd>>::read(&mut o, "s").is_err());
        assert!(<Option<CostTokens>>::read(&mut o, "x").is_err());
        assert_eq!(
            <Option<CostUsd>>::read(&mut o, "ok").ok(),
            Some(Some(CostUsd(0.25)))
        );
        assert_eq!(
            <Option<CostTokens>>::read(&mut o, "n").ok(),
            Some(Some(CostTokens(12)))
        );
        assert_eq!(CostTokens::MAX as u64, idem::MAX_COST_TOKENS);
    }

    #[test]
    fn integer_members_keep_their_ranges() {
        let mut o = obj(
            json!({"a": 0, "b": 7.0, "c": 600, "w": 99_999}),
            &["a", "b", "c", "w"],
        );
        assert!(<Option<LeaseMs>>::read(&mut o, "a").is_err());
        assert_eq!(
            <Option<LeaseMs>>::read(&mut o, "b").ok(),
            Some(Some(LeaseMs(7)))
        );
        assert!(<Option<HttpStatus>>::read(&mut o, "c").is_err());
        let wait = <Option<WaitMs>>::read(&mut o, "w").ok().flatten();
        assert_eq!(wait.map(WaitMs::ms), Some(MAX_WAIT_MS));
    }

    #[test]
    fn pointers_and_words_name_what_is_wrong() {
        let mut o = obj(
            json!({"fields": ["/a", 1], "role": "root"}),
            &["fields", "role"],
        );
        let e = Pointers::read(&mut o, "fields").map(|_| ());
        assert!(matches!(e, Err(ApiError::InvalidField { field, .. }) if field == "fields[1]"));
        let e = Role::read(&mut o, "role").map(|_| ());
        assert!(matches!(e, Err(ApiError::InvalidField { field, .. }) if field == "role"));
        let mut o = obj(json!({}), &["role", "event"]);
        assert!(Role::read(&mut o, "role").is_err());
        assert!(Event::read(&mut o, "event").is_err());
    }

    #[test]
    fn the_schema_states_the_limits_these_types_check() {
        let schemas = &crate::routes::document()["components"]["schemas"];
        let text = |n: usize| i64::try_from(n).ok();
        for (schema, member, key, want) in [
            ("ClaimBody", "owner", "maxLength", text(Owner::MAX)),
            (
                "ClaimBody",
                "correlation_id",
                "maxLength",
                text(CorrelationId::MAX),
            ),
            ("ClaimBody", "lease_ms", "minimum", Some(LeaseMs::MIN)),
            ("ClaimBody", "lease_ms", "maximum", Some(LeaseMs::MAX)),
            ("ClaimBody", "wait_ms", "minimum", Some(WaitMs::MIN)),
            ("HeartbeatBody", "lease_ms", "maximum", Some(LeaseMs::MAX)),
            ("PrepareBody", "token", "maxLength", text(FencingToken::MAX)),
            (
                "HeartbeatBody",
                "token",
                "maxLength",
                text(FencingToken::MAX),
            ),
            (
                "CompleteBody",
                "token",
                "maxLength",
                text(FencingToken::MAX),
            ),
            (
                "CompleteBody",
                "external_ref",
                "maxLength",
                text(ExternalRef::MAX),
            ),
            ("FailBody", "token", "maxLength", text(FencingToken::MAX)),
            ("FailBody", "http_status", "minimum", Some(HttpStatus::MIN)),
            ("FailBody", "http_status", "maximum", Some(HttpStatus::MAX)),
            (
                "FailErrorBody",
                "category",
                "maxLength",
                text(Category::MAX),
            ),
            (
                "FailErrorBody",
                "message",
                "maxLength",
                text(ErrorMessage::MAX),
            ),
            (
                "ResolveBody",
                "external_ref",
                "maxLength",
                text(ExternalRef::MAX),
            ),
            ("ResolveBody", "note", "maxLength", text(Note::MAX)),
            ("NoteBody", "note", "maxLength", text(Note::MAX)),
            ("TokenBody", "label", "maxLength", text(Label::MAX)),
            ("DeriveBody", "prefix", "maxLength", text(KeyAffix::MAX)),
            ("DeriveBody", "suffix", "maxLength", text(KeyAffix::MAX)),
        ] {
            let got = schemas[schema]["properties"][member][key].as_i64();
            assert_eq!(got, want, "{schema}.{member} {key}");
        }
    }
}
