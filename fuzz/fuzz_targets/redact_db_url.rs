//! Database URLs in logs and errors: whatever the text, redaction never panics, leaves text
//! without a password alone, and never prints a password — in URL userinfo, in a `password`/`passwd`/`sslpassword`
//! query parameter (any case, percent-encoded), or in a libpq `key = value` connection string
//! (whitespace around `=` as libpq allows, quoted values). The password is fuzzed; the URL is
//! built around it the ways an operator writes one.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use idem_core::redact::redact_db_url;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Place {
    Userinfo,
    Query { first: bool },
    Conninfo { quoted: bool, position: u8 },
}

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    raw: &'a str,
    secret: &'a str,
    place: Place,
    keyword: u8,
    case: u8,
    before_eq: u8,
    after_eq: u8,
    scheme: bool,
    user: u8,
    host: u8,
}

/// Everything redaction prints in place of a secret.
const MASKS: &str =
    "postgres://<unparseable url>|postgresql://<unparseable url>|<connection string with a password>|***";
const KEYWORDS: [&str; 3] = ["password", "passwd", "sslpassword"];
/// What libpq skips around `=` (isspace).
const SPACE: [&str; 6] = [" ", "\t", "\n", "\r", "\x0b", "\x0c"];

fn spaces(n: u8) -> String {
    (0..n % 4)
        .map(|i| SPACE[usize::from(n / 4 + i) % SPACE.len()])
        .collect()
}

fn cased(word: &str, mask: u8) -> String {
    word.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 8) & 1 == 1 {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn component(s: &str, set: &[u8]) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || set.contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn build(inp: &Input<'_>, secret: &str) -> String {
    let kw = cased(KEYWORDS[usize::from(inp.keyword) % 3], inp.case);
    let scheme = if inp.scheme { "postgres" } else { "postgresql" };
    let user = ["idem", "postgres", "u"][usize::from(inp.user) % 3];
    let host = ["db", "127.0.0.1:5432", "[::1]:5433", "h1,h2"][usize::from(inp.host) % 4];
    match inp.place {
        // As written by hand: not encoded (the parser must still find where it ends).
        Place::Userinfo => format!("{scheme}://{user}:{secret}@{host}/idem?sslmode=disable"),
        Place::Query { first } => {
            let v = component(secret, b"-._~");
            if first {
                format!("{scheme}://{user}@{host}/idem?{kw}={v}&sslmode=require")
            } else {
                format!("{scheme}://{host}/idem?application_name=x&{kw}={v}")
            }
        }
        Place::Conninfo { quoted, position } => {
            let value = if quoted {
                format!("'{}'", secret.replace('\\', "\\\\").replace('\'', "\\'"))
            } else {
                secret.to_owned()
            };
            let pw = format!(
                "{kw}{}={}{value}",
                spaces(inp.before_eq),
                spaces(inp.after_eq)
            );
            let mut parts = vec![
                format!("host={}", host.split(':').next().unwrap_or("db")),
                format!("user={user}"),
                "dbname=idem".to_owned(),
            ];
            parts.insert(usize::from(position) % 4, pw);
            parts.join(" ")
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(inp) = Input::arbitrary(&mut u) else {
        return;
    };

    // Any text: an answer, never a panic; a text with nothing that could be a password
    // (no userinfo, no password keyword) prints unchanged or as a placeholder, never altered
    // into something else.
    let once = redact_db_url(inp.raw);
    let lower = inp.raw.to_ascii_lowercase();
    if !inp.raw.contains('@') && !lower.contains("passw") && !inp.raw.contains("://") {
        assert_eq!(once, inp.raw);
    }

    // A password placed the ways an operator writes one.
    let secret = inp.secret;
    let unquoted_ok = !secret.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\');
    if secret.chars().count() < 4
        || secret.contains('\0')
        || (matches!(inp.place, Place::Conninfo { quoted: false, .. }) && !unquoted_ok)
    {
        return;
    }
    let url = build(&inp, secret);
    let out = redact_db_url(&url);
    // What the same URL with another password shows: a secret that is part of it anyway
    // (a host name, a word of the mask) is not a leak.
    let other = redact_db_url(&build(&inp, "Zz9-Qq8_Ww7"));
    for form in [secret.to_owned(), component(secret, b"-._~!$&'()*+,;=:")] {
        if !other.contains(&form)
            && !url.replace(secret, "").contains(&form)
            && !MASKS.contains(&form)
        {
            assert!(!out.contains(&form), "{url:?} shows as {out:?}");
        }
    }
});
