//! `Retry-After` parsing: any JSON value and any clock give a delay or an error, never a
//! panic; a delay is never negative and never longer than the longest duration idem accepts
//! anywhere (`MAX_DURATION_MS`, ten years), whichever form it came in; seconds as a number
//! and as a string mean the same; the three HTTP-date forms of one instant give the same
//! delay, which is the time from `now` to that instant (none for one in the past).
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use arbitrary::Arbitrary;
use idem_core::classify::parse_retry_after;
use idem_core::policy::MAX_DURATION_MS;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

#[derive(Debug, Arbitrary)]
enum Form<'a> {
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Text(&'a str),
    Digits(u64, u8),
    Date(u64),
    Json(&'a str),
}

#[derive(Debug, Arbitrary)]
struct Input<'a> {
    form: Form<'a>,
    now_ms: i64,
    realistic_now: u32,
}

/// Last second httpdate can show (9999-12-31T23:59:59Z).
const LAST: u64 = 253_402_300_799;

/// The IMF-fixdate, RFC 850 and asctime forms of one instant.
fn three_forms(secs: u64) -> [String; 3] {
    let imf = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
    // "Sun, 06 Nov 1994 08:49:37 GMT"
    let p: Vec<&str> = imf.split(' ').collect();
    let wday = p[0].trim_end_matches(',');
    let long = match wday {
        "Mon" => "Monday",
        "Tue" => "Tuesday",
        "Wed" => "Wednesday",
        "Thu" => "Thursday",
        "Fri" => "Friday",
        "Sat" => "Saturday",
        _ => "Sunday",
    };
    let (day, mon, year, time) = (p[1], p[2], p[3], p[4]);
    let rfc850 = format!("{long}, {day}-{mon}-{} {time} GMT", &year[2..]);
    let asctime = format!(
        "{wday} {mon} {:>2} {time} {year}",
        day.trim_start_matches('0')
    );
    [imf, rfc850, asctime]
}

fn check_bounds(v: &Value, now: i64) -> Option<i64> {
    let got = parse_retry_after(v, now);
    assert_eq!(got, parse_retry_after(v, now), "deterministic");
    match got {
        Ok(ms) => {
            assert!(ms >= 0, "{v} at {now}: negative delay {ms}");
            assert!(ms <= MAX_DURATION_MS, "{v} at {now}: absurd delay {ms} ms");
            Some(ms)
        }
        Err(e) => {
            assert!(!e.is_empty());
            None
        }
    }
}

fuzz_target!(|inp: Input<'_>| {
    // Any clock, and one near today (2001–2137) where dates are meaningful.
    let realistic = 1_000_000_000_000 + i64::from(inp.realistic_now) * 1000;
    for now in [inp.now_ms, realistic] {
        match &inp.form {
            Form::Unsigned(n) => {
                let got = check_bounds(&json!(n), now);
                let ok = *n <= (MAX_DURATION_MS / 1000) as u64;
                assert_eq!(got, ok.then(|| *n as i64 * 1000), "{n}");
                assert_eq!(check_bounds(&json!(n.to_string()), now), got);
                assert_eq!(check_bounds(&json!(format!(" {n}\t")), now), got);
            }
            Form::Signed(n) => {
                let got = check_bounds(&json!(n), now);
                if *n < 0 {
                    assert_eq!(got, None, "{n}");
                }
            }
            Form::Float(f) => {
                if let Some(n) = serde_json::Number::from_f64(*f) {
                    check_bounds(&Value::Number(n), now);
                }
            }
            Form::Text(s) => {
                check_bounds(&json!(s), now);
            }
            Form::Digits(n, zeros) => {
                let s = format!("{}{n}", "0".repeat(usize::from(*zeros % 8)));
                let got = check_bounds(&json!(s), now);
                let ok = *n <= (MAX_DURATION_MS / 1000) as u64;
                assert_eq!(got, ok.then(|| *n as i64 * 1000), "{s}");
            }
            Form::Date(secs) => {
                let secs = secs % (LAST + 1);
                let [imf, rfc850, asctime] = three_forms(secs);
                let at_ms = secs as i64 * 1000;
                let want = at_ms.saturating_sub(now).clamp(0, MAX_DURATION_MS);
                assert_eq!(check_bounds(&json!(imf), now), Some(want), "{imf} at {now}");
                assert_eq!(check_bounds(&json!(asctime), now), Some(want), "{asctime}");
                // Two-digit years are read as 1970–2069.
                let year: u32 = imf[12..16].parse().expect("year");
                if (1970..2070).contains(&year) {
                    assert_eq!(check_bounds(&json!(rfc850), now), Some(want), "{rfc850}");
                }
            }
            Form::Json(text) => {
                if let Ok(v) = serde_json::from_str::<Value>(text) {
                    check_bounds(&v, now);
                }
            }
        }
    }
});
