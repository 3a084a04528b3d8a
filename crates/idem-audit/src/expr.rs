//! Reading n8n expressions (`={{ … }}`) and Code-node JavaScript as text.
//!
//! Nothing here evaluates anything: the audit looks for tokens (`$execution.id`, `Date.now()`,
//! `$getWorkflowStaticData`), for the path of an idem call inside a URL, for the field an
//! expression reads (`$json.key`, `$('Node').item.json.key`) and for the JavaScript that
//! assigns a field. Every function is total: any text, including garbage, gives an answer.

use std::sync::LazyLock;

use regex::Regex;

/// Character that stands in for expression text when only the literal parts of a parameter
/// matter (same length, so offsets stay valid).
const MASK: u8 = 0x01;

/// The text with everything inside `{{ … }}` (braces included) replaced by [`MASK`]; the
/// leading `=` of an expression parameter is kept.
pub fn mask_expressions(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b'{' && b[i + 1] == b'{' {
            let end = s[i + 2..]
                .find("}}")
                .map(|e| i + 2 + e + 2)
                .unwrap_or(b.len());
            out[i..end].iter_mut().for_each(|c| *c = MASK);
            i = end;
        } else {
            i += 1;
        }
    }
    // Only whole `{{…}}` spans (ASCII delimiters) were replaced, so this stays UTF-8; fall
    // back to the original text rather than ever fail.
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// An operation of the idem API as a URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdemPath {
    /// `claim`, `effect`, `complete`, `fail`, `prepare`, `heartbeat`, `resolve`, … or `get`
    /// (the record itself), or `other` (namespaces, tokens, derive, audit).
    pub op: String,
    /// The key segment's text (between `/keys/` and `/{op}`), expressions included.
    pub key: Option<String>,
}

static IDEM_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"/v1/(?:namespaces/[^/?#]+(?:/(?:keys|pause|resume)(?:/.*)?)?|keys/derive|tokens|audit)/?(?:[?#].*)?$")
        .expect("static regex")
});

/// Whether a URL (literal text and expressions) calls idem, and which operation. Idem is
/// recognised by its path alone: templates read the base URL from a settings node.
pub fn idem_path(url: &str) -> Option<IdemPath> {
    let masked = mask_expressions(url.trim());
    let m = IDEM_PATH.find(&masked)?;
    let tail = &masked[m.start()..];
    let Some(keys_at) = tail
        .find("/keys/")
        .filter(|_| tail.starts_with("/v1/namespaces/"))
    else {
        return Some(IdemPath {
            op: "other".into(),
            key: None,
        });
    };
    let key_start = m.start() + keys_at + "/keys/".len();
    let rest = &masked[key_start..];
    let rest_end = rest.find(['?', '#']).unwrap_or(rest.len());
    let rest = rest[..rest_end].trim_end_matches('/');
    let original = url.trim();
    match rest.rfind('/') {
        Some(slash) => Some(IdemPath {
            op: rest[slash + 1..].to_owned(),
            key: original
                .get(key_start..key_start + slash)
                .map(str::to_owned),
        }),
        None => Some(IdemPath {
            op: "get".into(),
            key: original
                .get(key_start..key_start + rest.len())
                .map(str::to_owned),
        }),
    }
}

/// A token that makes a key differ between attempts of the same operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volatile {
    pub token: &'static str,
    /// A clock value cut to a date (`$today`, `.toISODate()`, `toFormat('yyyy-LL-dd')`):
    /// stable within a day, so stable for a schedule-triggered job.
    pub date_cut: bool,
}

struct Pattern {
    re: Regex,
    token: &'static str,
    clock: bool,
}

static VOLATILE: LazyLock<Vec<Pattern>> = LazyLock::new(|| {
    let p = |re: &str, token, clock| Pattern {
        re: Regex::new(re).expect("static regex"),
        token,
        clock,
    };
    vec![
        p(r"\$execution\s*\.\s*id\b", "$execution.id", false),
        p(
            r"\$execution\s*\[\s*['\x22]id['\x22]\s*\]",
            "$execution.id",
            false,
        ),
        p(r"\$now\b", "$now", true),
        p(r"\$today\b", "$today", true),
        p(r"\bDate\s*\.\s*now\s*\(", "Date.now()", true),
        p(r"\bnew\s+Date\s*\(\s*\)", "new Date()", true),
        p(
            r"\bDateTime\s*\.\s*(?:now|local|utc)\s*\(\s*\)",
            "DateTime.now()",
            true,
        ),
        p(r"\bMath\s*\.\s*random\s*\(", "Math.random()", false),
        p(r"\$runIndex\b", "$runIndex", false),
        p(r"\brandomUUID\s*\(", "randomUUID()", false),
        p(r"\buuid(?:v[14])?\s*\(", "uuid()", false),
        p(r"\buuid\s*\.\s*v[14]\s*\(", "uuid()", false),
        p(r"\$uuid\b", "uuid()", false),
    ]
});

static TIME_TOKENS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[HhmsSaZXxtT]").expect("static regex"));
static TO_FORMAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:\.\s*(?:toUTC|setZone|startOf|minus|plus)\s*\([^)]*\)\s*)*\.\s*toFormat\s*\(\s*['\x22`]([^'\x22`]*)['\x22`]")
        .expect("static regex")
});
static DATE_CUT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:\.\s*(?:toUTC|setZone|minus|plus)\s*\([^)]*\)\s*)*\.\s*(?:toISODate\s*\(|toSQLDate\s*\(|startOf\s*\(\s*['\x22](?:day|month|year|week)|toISOString\s*\(\s*\)\s*\.\s*(?:slice|substring|substr)\s*\(\s*0\s*,\s*10\s*\)|toISOString\s*\(\s*\)\s*\.\s*split\s*\(\s*['\x22]T['\x22]\s*\)\s*\[\s*0\s*\]|toDateString\s*\(|toLocaleDateString\s*\()")
        .expect("static regex")
});

/// Every volatile token in `text`, each once, in order of appearance.
pub fn volatile_tokens(text: &str) -> Vec<Volatile> {
    let mut found: Vec<(usize, Volatile)> = Vec::new();
    for p in VOLATILE.iter() {
        for m in p.re.find_iter(text) {
            let date_cut = p.clock && (p.token == "$today" || is_date_cut(&text[m.end()..]));
            // `$now` inside `Date.now` etc. cannot happen; but `new Date()` and `Date.now(`
            // never overlap either, so duplicates only come from repeated use.
            found.push((
                m.start(),
                Volatile {
                    token: p.token,
                    date_cut,
                },
            ));
        }
    }
    found.sort_by_key(|(at, _)| *at);
    let mut out: Vec<Volatile> = Vec::new();
    for (_, v) in found {
        match out.iter_mut().find(|o| o.token == v.token) {
            // One undated use of a clock is enough to make the key volatile.
            Some(o) => o.date_cut &= v.date_cut,
            None => out.push(v),
        }
    }
    out
}

fn is_date_cut(after: &str) -> bool {
    let mut cut = after.len().min(160);
    while !after.is_char_boundary(cut) {
        cut -= 1;
    }
    let after = &after[..cut];
    // `$now` directly followed by `.toFormat('…')`: a date when the format has no time part.
    if let Some(c) = TO_FORMAT.captures(after) {
        return c
            .get(1)
            .is_some_and(|f| !TIME_TOKENS.is_match(&strip_quoted(f.as_str())));
    }
    // The call to `Date.now(` / `new Date(` is already open or closed: skip its parens.
    let after = after.trim_start_matches([')', ' ']);
    DATE_CUT.is_match(after)
}

/// Removes Luxon's quoted literal text (`'T'`) from a format string.
fn strip_quoted(format: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for c in format.chars() {
        if c == '\'' {
            quoted = !quoted;
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

static STRINGIFY_WHOLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"JSON\s*\.\s*stringify\s*\(\s*(?:\$json\b|\$input\b|\$\(\s*['\x22][^'\x22]*['\x22]\s*\)\s*\.\s*(?:item|first\(\s*\)|last\(\s*\))\s*\.\s*json\b|\$node\s*\[[^\]]*\]\s*\.\s*json\b|items?\b)")
        .expect("static regex")
});
static BODY_READ: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\$json|\$\(\s*['\x22][^'\x22]*['\x22]\s*\)\s*\.\s*(?:item|first\(\s*\)|last\(\s*\))\s*\.\s*json|\$node\s*\[[^\]]*\]\s*\.\s*json)(?:\s*\.\s*body\b|\s*\[\s*['\x22]body['\x22]\s*\])?")
        .expect("static regex")
});

/// Whether `text` uses the whole incoming body (or the whole item) as a value: `$json.body`
/// on its own, `$json` on its own, `JSON.stringify($json…)`. Reading a field of it
/// (`$json.body.id`) is not.
pub fn whole_body(text: &str) -> Option<&'static str> {
    if STRINGIFY_WHOLE.is_match(text) {
        return Some("JSON.stringify($json…)");
    }
    for m in BODY_READ.find_iter(text) {
        let next = text[m.end()..].trim_start().chars().next();
        let continues =
            matches!(next, Some('.' | '[' | '?')) || next.is_some_and(char::is_alphanumeric);
        if !continues {
            return Some(if m.as_str().contains("body") {
                "$json.body"
            } else {
                "$json"
            });
        }
    }
    None
}

static STATIC_DATA: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$?getWorkflowStaticData\s*\(").expect("static regex"));

/// Whether the text reads or writes n8n's workflow static data.
pub fn uses_static_data(text: &str) -> bool {
    STATIC_DATA.is_match(text)
}

/// A field an expression reads from an item: `node` is `None` for `$json` (the item that
/// arrived), else the node named in `$('Node')` / `$node["Node"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRef {
    pub node: Option<String>,
    pub field: String,
}

static JSON_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\$\(\s*['\x22]([^'\x22]+)['\x22]\s*\)\s*\.\s*(?:item|first\(\s*\)|last\(\s*\)|all\(\s*\)\s*\[\s*\d+\s*\])\s*\.\s*json|\$node\s*\[\s*['\x22]([^'\x22]+)['\x22]\s*\]\s*\.\s*json|\$json)\s*(?:\.\s*([A-Za-z_$][\w$]*)|\[\s*['\x22]([^'\x22]+)['\x22]\s*\])")
        .expect("static regex")
});

/// Every item field the text reads, in order.
pub fn field_refs(text: &str) -> Vec<FieldRef> {
    JSON_FIELD
        .captures_iter(text)
        .filter_map(|c| {
            let node = c.get(1).or(c.get(2)).map(|m| m.as_str().to_owned());
            let field = c.get(3).or(c.get(4))?.as_str().to_owned();
            Some(FieldRef { node, field })
        })
        .collect()
}

/// The JavaScript that assigns `field` (`field: …` in an object literal, `field = …`), up to
/// the end of that value; every assignment, joined. `None` when the code never names it.
pub fn js_assignment(code: &str, field: &str) -> Option<String> {
    if field.is_empty() {
        return None;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut parts = Vec::new();
    for (at, _) in code.match_indices(field) {
        let before = code[..at].chars().next_back();
        let before = match before {
            Some('\'' | '"') => code[..at - 1].chars().next_back(),
            b => b,
        };
        if before.is_some_and(ident) {
            continue;
        }
        let mut rest = &code[at + field.len()..];
        if rest.starts_with(ident) {
            continue;
        }
        rest = rest.strip_prefix(['\'', '"']).unwrap_or(rest).trim_start();
        let after = if let Some(r) = rest.strip_prefix(':') {
            r
        } else if let Some(r) = rest.strip_prefix('=') {
            // `==`, `===` and `=>` compare or declare; they assign nothing.
            if r.starts_with(['=', '>']) {
                continue;
            }
            r
        } else {
            continue;
        };
        parts.push(value_until_end(after));
    }
    (!parts.is_empty()).then(|| parts.join(" | "))
}

/// The text of one JavaScript value: up to a `,` `;` or newline at depth 0, or a closing
/// bracket that was not opened inside it.
fn value_until_end(s: &str) -> String {
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut out = String::new();
    let mut prev = '\0';
    for c in s.chars() {
        if let Some(q) = quote {
            out.push(c);
            if c == q && prev != '\\' {
                quote = None;
            }
            prev = c;
            continue;
        }
        match c {
            '\'' | '"' | '`' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            }
            ',' | ';' | '\n' if depth == 0 => break,
            _ => {}
        }
        out.push(c);
        prev = c;
        if out.len() > 2000 {
            break;
        }
    }
    out.trim().to_owned()
}

/// The literal parts of a key: text outside `{{ }}` and string literals inside, trimmed,
/// without the empty ones. Two keys whose literal parts differ name different operations
/// (`…:crm` and `…:receipt`).
pub fn literal_pieces(key: &str) -> Vec<String> {
    let key = key.strip_prefix('=').unwrap_or(key);
    let mut out = Vec::new();
    let mut rest = key;
    while !rest.is_empty() {
        match rest.find("{{") {
            Some(open) => {
                push_piece(&mut out, &rest[..open]);
                let inner = &rest[open + 2..];
                let close = inner.find("}}").unwrap_or(inner.len());
                string_literals(&inner[..close], &mut out);
                rest = inner.get(close + 2..).unwrap_or("");
            }
            None => {
                push_piece(&mut out, rest);
                break;
            }
        }
    }
    out
}

fn push_piece(out: &mut Vec<String>, s: &str) {
    let t = s.trim();
    if !t.is_empty() {
        out.push(t.to_owned());
    }
}

fn string_literals(js: &str, out: &mut Vec<String>) {
    let mut chars = js.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if matches!(c, '\'' | '"' | '`') {
            let start = i + 1;
            let mut end = js.len();
            let mut prev = '\0';
            for (j, d) in chars.by_ref() {
                if d == c && prev != '\\' {
                    end = j;
                    break;
                }
                prev = d;
            }
            let lit = &js[start..end];
            // Template literals: only the text outside `${…}`.
            if c == '`' {
                for part in lit.split("${") {
                    let text = part.split_once('}').map(|(_, t)| t).unwrap_or(part);
                    push_piece(out, text);
                }
            } else {
                push_piece(out, lit);
            }
        }
    }
}

/// The text with runs of whitespace collapsed (to compare two key expressions).
pub fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

static OUTCOME_EQ: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"outcome['\x22\]]?\s*(===?|!==?)\s*['\x22`](\w+)['\x22`]").expect("static regex")
});
static OUTCOME_EQ_REV: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"['\x22`](\w+)['\x22`]\s*(===?|!==?)\s*[\w$.()'\x22\[\]]*outcome\b")
        .expect("static regex")
});

/// A boolean expression comparing the claim's `outcome` with a value: `(equal, value)`.
pub fn outcome_comparison(expr: &str) -> Option<(bool, String)> {
    if let Some(c) = OUTCOME_EQ.captures(expr) {
        return Some((!c[1].starts_with('!'), c[2].to_owned()));
    }
    OUTCOME_EQ_REV
        .captures(expr)
        .map(|c| (!c[2].starts_with('!'), c[1].to_owned()))
}

/// Whether an expression (the left side of a condition) reads the claim's `outcome`.
pub fn reads_outcome(expr: &str) -> bool {
    expr.contains("outcome")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idem_paths_are_found_by_path_not_host() {
        let url = "={{ $('idem settings').first().json.idem_url }}/v1/namespaces/{{ encodeURIComponent($('s').first().json.namespace) }}/keys/{{ encodeURIComponent($json.body.id + ':crm') }}/claim";
        let p = idem_path(url).unwrap();
        assert_eq!(p.op, "claim");
        assert_eq!(
            p.key.as_deref(),
            Some("{{ encodeURIComponent($json.body.id + ':crm') }}")
        );
        let p = idem_path("https://idem.example/v1/namespaces/pay/keys/order-1:charge/complete/")
            .unwrap();
        assert_eq!(
            (p.op.as_str(), p.key.as_deref()),
            ("complete", Some("order-1:charge"))
        );
        assert_eq!(
            idem_path("http://x/v1/namespaces/a/keys/k").unwrap().op,
            "get"
        );
        assert_eq!(idem_path("http://x/v1/keys/derive").unwrap().op, "other");
        assert!(idem_path("https://api.stripe.com/v1/charges").is_none());
        assert!(idem_path("={{ $json.url }}").is_none());
    }

    #[test]
    fn volatile_tokens_and_date_cuts() {
        let t = volatile_tokens("={{ $execution.id + ':' + Math.random() }}");
        let names: Vec<_> = t.iter().map(|v| v.token).collect();
        assert_eq!(names, ["$execution.id", "Math.random()"]);
        assert!(volatile_tokens("{{ $now.toUTC().toFormat('yyyy-LL-dd') }}")[0].date_cut);
        assert!(!volatile_tokens("{{ $now.toFormat('yyyy-LL-dd HH:mm') }}")[0].date_cut);
        assert!(volatile_tokens("{{ $now.toISODate() }}")[0].date_cut);
        assert!(volatile_tokens("new Date().toISOString().slice(0, 10)")[0].date_cut);
        assert!(!volatile_tokens("{{ $now }}")[0].date_cut);
        assert!(volatile_tokens("{{ $today }}")[0].date_cut);
        // A multi-byte character where the look-ahead window ends.
        let long = format!("{{{{ $now }}}}{}", "é".repeat(100));
        assert!(!volatile_tokens(&long)[0].date_cut);
        // A date parsed from the event is not a clock; a field named like a generator is not one.
        assert!(
            volatile_tokens("new Date($json.created_at).getTime() + $json.event_uuid").is_empty()
        );
        assert_eq!(
            volatile_tokens("crypto.randomUUID()")[0].token,
            "randomUUID()"
        );
        assert_eq!(volatile_tokens("uuidv4()")[0].token, "uuid()");
    }

    #[test]
    fn whole_body_versus_a_field_of_it() {
        assert_eq!(whole_body("={{ $json.body }}"), Some("$json.body"));
        assert_eq!(
            whole_body("{{ JSON.stringify($json.body) }}"),
            Some("JSON.stringify($json…)")
        );
        assert_eq!(
            whole_body("$('Webhook').item.json.body"),
            Some("$json.body")
        );
        assert_eq!(whole_body("={{ $json.body.id }}"), None);
        assert_eq!(whole_body("$('Webhook').item.json.body['id']"), None);
        assert_eq!(whole_body("={{ $json.key }}"), None);
    }

    #[test]
    fn field_refs_and_js_assignments() {
        let refs =
            field_refs("{{ $json.key }} {{ $('Build key').item.json.idem_key }} {{ $json['k2'] }}");
        assert_eq!(
            refs[0],
            FieldRef {
                node: None,
                field: "key".into()
            }
        );
        assert_eq!(
            refs[1],
            FieldRef {
                node: Some("Build key".into()),
                field: "idem_key".into()
            }
        );
        assert_eq!(refs[2].field, "k2");
        let code = "const key = `evt-${$json.body.id}`;\nreturn [{ json: { idem_key: $execution.id + ':x', other: Date.now() } }];";
        assert_eq!(
            js_assignment(code, "idem_key").unwrap(),
            "$execution.id + ':x'"
        );
        assert_eq!(
            js_assignment(code, "key").unwrap(),
            "`evt-${$json.body.id}`"
        );
        assert!(js_assignment(code, "missing").is_none());
        assert!(js_assignment("if (a.key == b) {}", "key").is_none());
    }

    #[test]
    fn literal_pieces_of_keys() {
        assert_eq!(
            literal_pieces("{{ encodeURIComponent($json.body.id + ':crm') }}"),
            [":crm"]
        );
        assert_eq!(
            literal_pieces("=order-{{ $json.id }}:charge"),
            ["order-", ":charge"]
        );
        assert_eq!(
            literal_pieces("={{ `job-${$json.id}:ship` }}"),
            ["job-", ":ship"]
        );
        assert!(literal_pieces("={{ $json.idem.key }}").is_empty());
    }

    #[test]
    fn outcome_comparisons() {
        assert_eq!(
            outcome_comparison("={{ $json.body.outcome === 'acquired' }}"),
            Some((true, "acquired".into()))
        );
        assert_eq!(
            outcome_comparison("={{ $json.outcome != \"completed\" }}"),
            Some((false, "completed".into()))
        );
        assert_eq!(
            outcome_comparison("={{ 'acquired' == $json.body.outcome }}"),
            Some((true, "acquired".into()))
        );
        assert_eq!(outcome_comparison("={{ $json.statusCode === 200 }}"), None);
    }

    #[test]
    fn static_data_is_seen_in_code() {
        assert!(uses_static_data(
            "const s = $getWorkflowStaticData('global');"
        ));
        assert!(!uses_static_data("const s = $json.staticData;"));
    }
}
