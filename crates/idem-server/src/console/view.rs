//! The console's HTML. Every page is a maud template: checked by the compiler, and every
//! `(value)` interpolation is HTML-escaped, so a key, owner, note, payload or error message
//! a client sent is always shown as text. Nothing here uses `PreEscaped` on client data, and
//! no page has inline script or style (the CSP forbids both).

use axum::http::StatusCode;
use axum::response::Html;
use idem::{Event, Record, State, Timestamp};
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

use super::Viewer;

/// Values longer than this are folded behind a "show all" (no script needed: `<details>`).
pub const FOLD_BYTES: usize = 4096;

/// The page frame: title, stylesheet, navigation and (when signed in) the sign-out button.
pub fn layout(title: &str, viewer: Option<&Viewer>, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · idem console" }
                    link rel="stylesheet" href="/console/assets/console.css";
                }
                body {
                    header.top {
                        nav aria-label="Console" {
                            a.brand href="/console" { "idem" }
                            a href="/console" { "Namespaces" }
                            a href="/console/review" { "Review queue" }
                            a href="/console/sources" { "Sources" }
                        }
                        @if let Some(v) = viewer {
                            div.who {
                                @match &v.caller {
                                    crate::auth::Caller::Token(t) => {
                                        span { (t.role.as_str()) " · " (t.scope) }
                                    }
                                    crate::auth::Caller::Anonymous => {
                                        span { "open (no tokens configured)" }
                                    }
                                }
                                @if !v.open {
                                    form method="post" action="/console/logout" {
                                        (csrf(v))
                                        button type="submit" { "Sign out" }
                                    }
                                }
                            }
                        }
                    }
                    main { (body) }
                }
            }
        }
        .into_string(),
    )
}

/// The hidden CSRF field every form carries.
pub fn csrf(v: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(v.csrf); }
}

pub fn error_page(status: StatusCode, message: &str) -> Html<String> {
    let title = status.canonical_reason().unwrap_or("Error");
    layout(
        title,
        None,
        html! {
            h1 { (status.as_u16()) " " (title) }
            p.error role="alert" { (message) }
            p { a href="/console" { "Back to the console" } }
        },
    )
}

pub fn login_page(token: &str, message: Option<&str>, next: &str) -> Html<String> {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(m) = message {
                p.error role="alert" { (m) }
            }
            form.card method="post" action="/console/login" {
                input type="hidden" name="csrf" value=(token);
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                input #token type="password" name="token" autocomplete="off" autofocus;
                button type="submit" { "Sign in" }
            }
            p.hint { "An operator or admin API token (idem token create --role operator)." }
        },
    )
}

/// A time for people: RFC 3339 UTC with milliseconds, as the API writes it.
pub fn time(t: Timestamp) -> String {
    t.to_rfc3339()
}

pub fn opt_time(t: Option<Timestamp>) -> String {
    t.map_or_else(|| "—".to_owned(), time)
}

/// An age in words ("3 min", "2 h 5 min").
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min", s / 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The path of a record's page (key percent-encoded).
pub fn record_href(ns: &str, key: &str) -> String {
    format!("/console/ns/{}/keys/{}", enc(ns), enc(key))
}

pub fn ns_href(ns: &str) -> String {
    format!("/console/ns/{}", enc(ns))
}

/// Percent-encodes everything but unreserved characters.
pub fn enc(s: &str) -> String {
    crate::percent::encode(s)
}

/// Pretty JSON; longer than [`FOLD_BYTES`] (and `fold`) it shows the start and the rest
/// behind a "show all" that needs no script.
pub fn json_block(v: &Value, fold: bool) -> Markup {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    if !fold || text.len() <= FOLD_BYTES {
        return html! { pre.json { (text) } };
    }
    let mut cut = 1024;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    html! {
        pre.json { (&text[..cut]) "\n…" }
        details {
            summary { "show all (" (text.len()) " bytes)" }
            pre.json { (text) }
        }
    }
}

/// A text value a client sent (may be long): folded like JSON.
pub fn text_block(s: &str) -> Markup {
    if s.len() <= FOLD_BYTES {
        return html! { (s) };
    }
    let mut cut = 1024;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    html! {
        (&s[..cut]) "…"
        details { summary { "show all (" (s.len()) " bytes)" } pre { (s) } }
    }
}

/// A hint as the console shows it: `…` and the last characters of the value the hint was
/// made of ([`idem::Secret::hint`]: a value of 8 characters or fewer has none), or only that
/// it is set.
pub fn hint_shown(hint: &str) -> String {
    if hint.is_empty() {
        "(set)".to_owned()
    } else {
        format!("…{hint}")
    }
}

/// Whether a header's value may carry a credential (the console shows it as a hint only):
/// `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`, and any name that holds
/// `token`, `secret`, `signature`, `api-key` / `apikey` / `api_key`, `auth`, `session`,
/// `password` or `cookie`, in any case.
pub fn credential_header(name: &str) -> bool {
    const PARTS: [&str; 10] = [
        "auth",
        "cookie",
        "token",
        "secret",
        "signature",
        "api-key",
        "apikey",
        "api_key",
        "session",
        "password",
    ];
    let name = name.to_ascii_lowercase();
    PARTS.iter().any(|p| name.contains(p))
}

/// A stored header's value as the console shows it: in full, or as a hint when its name says
/// it may carry a credential ([`credential_header`]).
pub fn header_value_shown(name: &str, value: &str) -> String {
    if credential_header(name) {
        hint_shown(&idem::Secret::new(value).hint())
    } else {
        value.to_owned()
    }
}

pub fn state_badge(s: State) -> Markup {
    html! { span class={ "state state-" (s.as_str()) } { (s.as_str()) } }
}

/// The table of records shared by the review queue and the namespace page.
pub fn records_table(records: &[Record], now: Timestamp, show_ns: bool) -> Markup {
    let mut columns = vec!["Key"];
    if show_ns {
        columns.push("Namespace");
    }
    columns.extend(["State", "Attempt", "Owner", "Correlation id", "Since"]);
    let rows = html! {
        @for r in records {
            tr {
                td { a href=(record_href(r.namespace.as_str(), r.key.as_str())) { (r.key.as_str()) } }
                @if show_ns {
                    td { a href=(ns_href(r.namespace.as_str())) { (r.namespace.as_str()) } }
                }
                td { (state_badge(r.state)) }
                td { (r.attempt) }
                td { (r.owner.as_deref().unwrap_or("—")) }
                td { (r.correlation_id.as_deref().unwrap_or("—")) }
                td title=(time(r.updated_at)) { (age(now.0 - r.updated_at.0)) " ago" }
            }
        }
        @if records.is_empty() { (empty_row(7, "Nothing here.")) }
    };
    table("records", &columns, rows)
}

/// A record's history, oldest first.
pub fn history(events: &[Event]) -> Markup {
    let columns = ["#", "Type", "Time", "From → to", "Attempt", "Actor", "Note"];
    let rows = html! {
        @for e in events {
            tr {
                td { (e.seq) }
                td.type { (e.kind.as_str()) }
                td { (time(e.at)) }
                td {
                    (e.from_state.map_or("—", State::as_str)) " → "
                    (e.to_state.map_or("—", State::as_str))
                }
                td { (e.attempt) }
                td { (actor(e)) }
                td.note { (text_block(e.note.as_deref().unwrap_or(""))) }
            }
        }
    };
    table("history", &columns, rows)
}

/// Who did what an event records: its actor; for what a worker does (a claim, a report) its
/// owner when no actor was recorded. An operator's decision (`resolved`, `approved`,
/// `rejected`) and what idem does by itself (`moved_to_review`, `result_expired`,
/// `alert_sent`) are never credited to the record's owner: without an actor (a server with no
/// tokens) they show "—".
fn actor(e: &Event) -> &str {
    use idem::EventType as T;
    let worker = !matches!(
        e.kind,
        T::Resolved
            | T::Approved
            | T::Rejected
            | T::MovedToReview
            | T::ResultExpired
            | T::AlertSent
    );
    e.actor
        .as_deref()
        .or(e.owner.as_deref().filter(|_| worker))
        .unwrap_or("—")
}

/// A table of the console: its class, one header per column, then the body's rows.
pub fn table(class: &str, columns: &[&str], rows: Markup) -> Markup {
    html! {
        table class=(class) {
            thead { tr { @for c in columns { th scope="col" { (c) } } } }
            tbody { (rows) }
        }
    }
}

/// The one row a table shows instead of rows it does not have, across `colspan` columns.
pub fn empty_row(colspan: usize, text: &str) -> Markup {
    html! { tr { td colspan=(colspan) { (text) } } }
}

/// The tabs above a list filtered by state: "all", then every state; `current` is the state
/// shown (empty: all), `href` the unfiltered list.
pub fn state_tabs(label: &str, href: &str, current: &str) -> Markup {
    html! {
        nav.tabs aria-label=(label) {
            a href=(href) aria-current=[current.is_empty().then_some("page")] { "all" }
            @for s in State::ALL {
                a href={ (href) "?state=" (s.as_str()) }
                  aria-current=[(current == s.as_str()).then_some("page")] { (s.as_str()) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_shown_as_hints_and_others_in_full() {
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "set-cookie",
            "X-Auth-Token",
            "x-webhook-secret",
            "X-Hub-Signature-256",
            "stripe-signature",
            "X-Api-Key",
            "x-apikey",
            "X_API_KEY",
            "X-Session-Id",
            "X-Password",
        ] {
            assert!(credential_header(name), "{name}");
            assert_eq!(
                header_value_shown(name, "Bearer s3cr3t-value-3456"),
                "…3456"
            );
            assert_eq!(header_value_shown(name, "short"), "(set)");
        }
        for name in [
            "X-GitHub-Event",
            "content-type",
            "User-Agent",
            "X-Request-Id",
        ] {
            assert!(!credential_header(name), "{name}");
            assert_eq!(header_value_shown(name, "push"), "push");
        }
    }
}
