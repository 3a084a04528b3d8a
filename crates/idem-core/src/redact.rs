//! Database URLs as they may appear in logs, errors and `Debug` output.
//!
//! [`redact_db_url`] is the one place that decides what of a database URL may be printed.
//! Every crate that prints one (the stores, the server's start-up log, the CLI, the bench)
//! goes through it. It parses with the `url` crate (WHATWG rules: the userinfo ends at the
//! last `@` of the authority, so an unencoded `@` in a password stays in the password) and
//! masks the userinfo password and every query parameter that carries one. What it cannot
//! parse with certainty it does not print at all.

/// Query parameters that carry a password (libpq: `password`, `sslpassword`; `passwd` is a
/// common alias). Compared case-insensitively, after percent-decoding.
const SECRET_PARAMS: [&str; 3] = ["password", "passwd", "sslpassword"];

/// What replaces a secret.
const MASK: &str = "***";

/// A database URL fit for a log line: the userinfo password and any `password`, `passwd` or
/// `sslpassword` query parameter (any case) replaced by `***`.
///
/// - A SQLite URL (`sqlite:…`) or a bare path is printed unchanged (it holds no password),
///   unless it looks like a libpq `key=value` string with a password in it.
/// - A URL that cannot be parsed, or whose path, query or fragment holds an `@` (a password
///   with an unencoded `/`, `?` or `#` that the parser took for the path), prints as its
///   scheme followed by `<unparseable url>`: nothing of it can leak.
pub fn redact_db_url(url: &str) -> String {
    let Some((scheme, _)) = url.split_once("://") else {
        return redact_without_scheme(url);
    };
    if scheme.eq_ignore_ascii_case("sqlite") {
        return url.to_owned();
    }
    let unparseable = || {
        let valid_scheme = !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if valid_scheme {
            format!("{scheme}://<unparseable url>")
        } else {
            "<unparseable url>".to_owned()
        }
    };
    match redact_multi_host(scheme, url) {
        MultiHost::No => {}
        MultiHost::Shown(shown) => return shown,
        MultiHost::Unparseable => return unparseable(),
    }
    let Ok(mut parsed) = url::Url::parse(url) else {
        return unparseable();
    };
    let after_authority = [Some(parsed.path()), parsed.query(), parsed.fragment()];
    if after_authority
        .into_iter()
        .flatten()
        .any(|s| s.contains('@'))
    {
        return unparseable();
    }
    if parsed.password().is_some() && parsed.set_password(Some(MASK)).is_err() {
        return unparseable();
    }
    let has_secret_param = parsed.query_pairs().any(|(k, _)| is_secret_param(&k));
    if has_secret_param {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(k, v)| {
                let v = if is_secret_param(&k) {
                    MASK.to_owned()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

/// What [`redact_multi_host`] made of a URL.
enum MultiHost {
    /// No host list: redact it as any URL.
    No,
    /// The URL as it may be printed.
    Shown(String),
    /// A host list with something else in it: print nothing of the URL.
    Unparseable,
}

/// Stands in for a host list while the rest of a multi-host URL is parsed (`.invalid` never
/// resolves and cannot be in a real list, whose entries are checked below).
const HOSTS_PLACEHOLDER: &str = "idem-host-list.invalid";

/// A libpq multi-host URL (`postgres://u:pw@a:5432,b:5433/db?target_session_attrs=…`, which
/// the WHATWG parser refuses): the host list is set aside, the URL with one placeholder host
/// in its place is redacted as any other, and the list is put back. `None` when the URL has
/// no host list (one host, or none); a list with anything but host names, IP addresses and
/// ports prints as unparseable, like any URL this module cannot place.
fn redact_multi_host(scheme: &str, url: &str) -> MultiHost {
    let rest = &url[scheme.len() + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let hosts_at = authority.rfind('@').map_or(0, |i| i + 1);
    let hosts = &authority[hosts_at..];
    if !hosts.contains(',') {
        return MultiHost::No;
    }
    let plain = hosts.split(',').all(|h| {
        !h.is_empty()
            && h.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']')
            })
    });
    if !plain {
        return MultiHost::Unparseable;
    }
    let single = format!(
        "{scheme}://{}{HOSTS_PLACEHOLDER}{}",
        &authority[..hosts_at],
        &rest[authority_end..]
    );
    let shown = redact_db_url(&single);
    match shown.split_once(HOSTS_PLACEHOLDER) {
        Some((before, after)) if !after.contains(HOSTS_PLACEHOLDER) => {
            MultiHost::Shown(format!("{before}{hosts}{after}"))
        }
        _ => MultiHost::Shown(shown),
    }
}

fn is_secret_param(key: &str) -> bool {
    SECRET_PARAMS.iter().any(|p| key.eq_ignore_ascii_case(p))
}

/// A bare path, or a libpq `key=value …` connection string.
fn redact_without_scheme(s: &str) -> String {
    let lower = s.to_ascii_lowercase();
    // libpq (and tokio-postgres) allow any whitespace between a keyword and its `=`.
    let has_secret = SECRET_PARAMS.iter().any(|p| {
        lower.match_indices(p).any(|(i, _)| {
            lower[i + p.len()..]
                .trim_start_matches(char::is_whitespace)
                .starts_with('=')
        })
    });
    if has_secret {
        "<connection string with a password>".to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::redact_db_url;

    /// Redacts `url` and checks that no piece of `secret` survives.
    fn hides(url: &str, secret: &str) -> String {
        let r = redact_db_url(url);
        assert!(!r.contains(secret), "{url} → {r} shows {secret:?}");
        r
    }

    #[test]
    fn userinfo_password_is_masked() {
        assert_eq!(
            hides(
                "postgres://idem:s3cret@db:5432/idem?sslmode=disable",
                "s3cret"
            ),
            "postgres://idem:***@db:5432/idem?sslmode=disable"
        );
        assert_eq!(
            hides("postgresql://u:s3cret@h/db", "s3cret"),
            "postgresql://u:***@h/db"
        );
        assert_eq!(
            hides("POSTGRES://u:s3cret@h/db", "s3cret"),
            "postgres://u:***@h/db"
        );
    }

    #[test]
    fn an_at_sign_inside_the_password_stays_inside_it() {
        // Unencoded: the userinfo ends at the last `@`.
        let r = hides("postgres://u:p@ss@h:5432/db", "p@ss");
        assert_eq!(r, "postgres://u:***@h:5432/db");
        assert!(!r.contains("ss@"), "{r}");
        // Percent-encoded.
        assert_eq!(
            hides("postgres://u:p%40ss%3Aw%2Frd@h/db", "p%40ss"),
            "postgres://u:***@h/db"
        );
        assert_eq!(
            hides("postgres://u:%40@h/db", "%40"),
            "postgres://u:***@h/db"
        );
    }

    #[test]
    fn a_password_the_parser_cannot_place_prints_nothing() {
        for url in [
            "postgres://user:p@ss:w/rd@host/db",
            "postgres://u:12/ss@h/db",
            "postgres://u:12?ss@h/db",
            "postgres://u:12#ss@h/db",
            "postgres://u:pa ss@h:port/db",
        ] {
            let r = redact_db_url(url);
            assert_eq!(r, "postgres://<unparseable url>", "{url}");
        }
        assert_eq!(
            redact_db_url("not a scheme://u:secret@h"),
            "<unparseable url>"
        );
    }

    #[test]
    fn password_query_parameters_are_masked_in_any_case() {
        assert_eq!(
            hides("postgres://u@h/db?password=x", "=x"),
            "postgres://u@h/db?password=***"
        );
        let r = hides(
            "postgres://u@h/db?sslmode=require&PassWord=hunter2&application_name=idem",
            "hunter2",
        );
        assert_eq!(
            r,
            "postgres://u@h/db?sslmode=require&PassWord=***&application_name=idem"
        );
        hides("postgres://h/db?passwd=hunter2", "hunter2");
        hides(
            "postgres://h/db?sslpassword=keypass&sslkey=/k.pem",
            "keypass",
        );
        hides("postgres://h/db?pass%77ord=hunter2", "hunter2");
        // Both at once, and an empty one.
        let r = hides("postgres://u:one@h/db?password=two&password=", "one");
        assert!(!r.contains("two"), "{r}");
    }

    #[test]
    fn a_multi_host_url_is_readable_with_its_password_masked() {
        let r = hides(
            "postgres://idem:s3cret@pg-a:5432,pg-b:5433/idem?target_session_attrs=read-write",
            "s3cret",
        );
        assert_eq!(
            r,
            "postgres://idem:***@pg-a:5432,pg-b:5433/idem?target_session_attrs=read-write"
        );
        let r = hides(
            "postgresql://u:p@ss@10.0.0.1,10.0.0.2:6432,[::1]:5432/db?password=two",
            "p@ss",
        );
        assert_eq!(
            r,
            "postgresql://u:***@10.0.0.1,10.0.0.2:6432,[::1]:5432/db?password=***"
        );
        assert_eq!(
            redact_db_url("postgres://a,b/db"),
            "postgres://a,b/db",
            "nothing to hide"
        );
        // Not a URL at all (a libpq string with `://` in a value): nothing of it is shown,
        // not even as a scheme.
        let r = redact_db_url("PASSWd\u{c}=\rho:// host=h1,h2 user=idem dbname=idem");
        assert_eq!(r, "<unparseable url>");
        // A password the parser cannot place stays hidden, list or not.
        for url in [
            "postgres://u:12/ss@a,b/db",
            "postgres://u:x@a,b c/db",
            "postgres://u:x@a,,b/db",
        ] {
            let r = redact_db_url(url);
            assert_eq!(r, "postgres://<unparseable url>", "{url}");
        }
    }

    #[test]
    fn unicode_and_empty_passwords() {
        let r = hides("postgres://u:pässwört€@h/db", "pässwört");
        assert_eq!(r, "postgres://u:***@h/db");
        assert!(!r.contains("p%C3%A4"), "{r}");
        // An empty password is nothing to hide; the URL stays as it was.
        assert_eq!(redact_db_url("postgres://u:@h/db"), "postgres://u@h/db");
    }

    #[test]
    fn urls_without_a_password_are_unchanged() {
        for url in [
            "postgres://h/db",
            "postgres://postgres@127.0.0.1:5432/postgres",
            "postgresql://u@h/db?sslmode=disable&application_name=x",
        ] {
            assert_eq!(redact_db_url(url), url);
        }
    }

    #[test]
    fn sqlite_urls_and_paths_are_unchanged() {
        for url in [
            "sqlite://idem.db",
            "sqlite:///var/lib/idem/idem.db",
            "sqlite:idem.db",
            "/tmp/dir with space/x%20y.db",
            "idem.db",
            "sqlite://odd@name?.db",
        ] {
            assert_eq!(redact_db_url(url), url);
        }
    }

    #[test]
    fn other_schemes_are_masked_too() {
        assert_eq!(
            hides("mysql://root:toor@h/db", "toor"),
            "mysql://root:***@h/db"
        );
    }

    #[test]
    fn libpq_key_value_strings_with_a_password_print_nothing() {
        let r = hides("host=h user=u password=hunter2 dbname=x", "hunter2");
        assert!(!r.contains("host=h"), "{r}");
        hides("host=h PASSWORD = hunter2", "hunter2");
        // Found by the redact_db_url fuzz target: more (or other) whitespace before `=`
        // printed the password.
        for url in [
            "host=h password  =hunter2",
            "host=h password\t=hunter2",
            "host=h user=u PASSWORD\r\x0b\x0c= 'hunter2'",
            "passwd\n=hunter2 host=h",
            "host=h sslpassword \t = hunter2",
        ] {
            assert_eq!(
                hides(url, "hunter2"),
                "<connection string with a password>",
                "{url:?}"
            );
        }
        assert_eq!(redact_db_url("host=h user=u"), "host=h user=u");
    }
}
