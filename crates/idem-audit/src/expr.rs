//! Reading n8n expressions (`={{ … }}`) and Code-node JavaScript as text.
//!
//! Nothing here evaluates anything: the audit looks for tokens (`$execution.id`, `Date.now()`,
//! `$getWorkflowStaticData`), for the path of an idem call inside a URL, for the field an
//! expression reads (`$json.key`, `$('Node').item.json.key`) and for the JavaScript that
//! assigns a field. Every function is total: any text, including garbage, gives an answer.

use std::sync::LazyLock;

use regex::Regex;

mod js;

pub(crate) use js::value_until_end;
pub use js::{js_assignment, js_expand_locals, js_local};

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

/// The operations of a key that idem serves under `/v1/namespaces/{ns}/keys/{key}/…`: the last
/// segment of such a URL must be one of these, exactly.
const KEY_OPS: &[&str] = &[
    "claim",
    "effect",
    "complete",
    "fail",
    "prepare",
    "heartbeat",
    "resolve",
    "approve",
    "reject",
];

/// The path of a URL: `(offset, masked path)`, the offset into `url` where the path starts
/// and the path with its expressions masked (see [`mask_expressions`]). The leading `=` of an
/// expression parameter, the scheme and host (`https://host:port`), the query and the
/// fragment are left out: only the path names what a URL calls. A `?` or `#` inside an
/// expression (`{{ a ? b : c }}`) is masked, so it ends nothing.
pub fn url_path(url: &str) -> (usize, String) {
    let masked = mask_expressions(url);
    let end = masked.find(['?', '#']).unwrap_or(masked.len());
    let mut start = usize::from(masked.starts_with('='));
    // `scheme://authority` before the first `/` of the rest; an expression for the base URL
    // (`{{ $vars.IDEM_URL }}/v1/…`) is masked and stays in front of the path.
    if let Some(at) = masked[start..end].find("://") {
        if !masked[start..start + at].contains('/') {
            let host = start + at + "://".len();
            start = masked[host..end]
                .find('/')
                .map_or(end, |slash| host + slash);
        }
    }
    (start, masked[start..end].to_owned())
}

/// Whether a URL (literal text and expressions) calls idem, and which operation. Idem is
/// recognised by its path alone (templates read the base URL from a settings node): a
/// `/v1/` route of idem that runs to the end of the path — a prefix before it is fine (a
/// proxy), text after it is not (`…/claimx`, `…/claim/more`), and an idem path in the query or
/// the fragment is not a call to idem. An expression may stand for the namespace or the key
/// (`keys/{{ $json.key }}/claim`), not for the operation: the operation must be visible.
pub fn idem_path(url: &str) -> Option<IdemPath> {
    let url = url.trim();
    let (offset, path) = url_path(url);
    path.match_indices("/v1/").find_map(|(at, _)| {
        let route_at = at + "/v1/".len();
        let route = path[route_at..]
            .strip_suffix('/')
            .unwrap_or(&path[route_at..]);
        let segments: Vec<&str> = route.split('/').collect();
        if segments.iter().any(|s| s.is_empty()) {
            return None;
        }
        let other = || IdemPath {
            op: "other".into(),
            key: None,
        };
        match segments.as_slice() {
            ["keys", "derive"] | ["tokens"] | ["audit"] => Some(other()),
            ["namespaces", _] | ["namespaces", _, "pause" | "resume" | "keys"] => Some(other()),
            ["namespaces", ns, "keys", key, rest @ ..] => {
                let op = match rest {
                    [] => "get",
                    [op] if KEY_OPS.contains(op) => *op,
                    _ => return None,
                };
                // Offsets in the masked path are offsets in `url`: masking keeps lengths.
                let key_start = offset + route_at + "namespaces/".len() + ns.len() + "/keys/".len();
                Some(IdemPath {
                    op: op.to_owned(),
                    key: url.get(key_start..key_start + key.len()).map(str::to_owned),
                })
            }
            _ => None,
        }
    })
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

/// What comes before `.json` when an expression reads another item than `$json`:
/// `$('Node').item` (`.first()`, `.last()`, `.all()[0]`, `.itemMatching(0)`), `$node["Node"]`,
/// `$input.item`, `$items("Node")[0]`.
const N8N_ITEM: &str = r#"\$\(\s*(?:'[^']*'|"[^"]*"|`[^`]*`)\s*\)\s*\.\s*(?:item\b|first\s*\(\s*\)|last\s*\(\s*\)|itemMatching\s*\([^()]*\)|all\s*\(\s*\)\s*\[\s*\d+\s*\])|\$node\s*(?:\[\s*(?:'[^']*'|"[^"]*")\s*\]|\.\s*[A-Za-z_][\w$]*)|\$input\s*\.\s*(?:item\b|first\s*\(\s*\)|last\s*\(\s*\)|all\s*\(\s*\)\s*\[\s*\d+\s*\])|\$items\s*\(\s*(?:'[^']*'|"[^"]*")?\s*\)\s*\[\s*\d+\s*\]"#;
/// What comes before `.json` in a Code node's loop or callback: `item`, `items[i]`.
const CODE_ITEM: &str = r"\b[A-Za-z_][\w$]*(?:\s*\[\s*[\w$]+\s*\])?";

/// An item's JSON: `$json`, or one of the item forms above followed by `.json`.
fn item_json(with_code_items: bool) -> String {
    let code = if with_code_items {
        format!("|{CODE_ITEM}")
    } else {
        String::new()
    };
    format!(r"(?:\$json\b|(?:{N8N_ITEM}{code})\s*\.\s*json\b)")
}

/// An item's JSON or its body, as expressions and Code nodes read it.
static BODY_READ: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r#"{}(?:\s*\.\s*body\b|\s*\[\s*['"]body['"]\s*\])?"#,
        item_json(true)
    ))
    .expect("static regex")
});
/// Whole items (not their JSON): what `JSON.stringify(…)` of it also makes a whole-body key.
static WHOLE_ITEMS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"^(?:items|item|\$input(?:\s*\.\s*(?:item|all\s*\(\s*\)|first\s*\(\s*\)|last\s*\(\s*\)))?|\$items\s*\([^()]*\)|\$\(\s*(?:'[^']*'|"[^"]*")\s*\)\s*\.\s*(?:item|all\s*\(\s*\)|first\s*\(\s*\)|last\s*\(\s*\)))$"#)
        .expect("static regex")
});
static STRINGIFY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"JSON\s*\.\s*stringify\s*\(").expect("static regex"));
static TO_JSON_STRING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*\.\s*toJsonString\s*\(").expect("static regex"));

/// Whether `text` uses the whole incoming body (or the whole item) as a value: `$json.body`
/// or `$json` on its own (also read as `$('Node').item.json`, `$input.item.json` or a Code
/// node's `item.json`), `JSON.stringify` of it or of whole items (`items`, `$input.all()`),
/// n8n's `$json.body.toJsonString()`. Reading a field of it (`$json.body.id`,
/// `JSON.stringify($json.body.id)`) is not.
pub fn whole_body(text: &str) -> Option<&'static str> {
    if stringify_args(text).iter().any(|a| whole_value(a)) {
        return Some("JSON.stringify($json…)");
    }
    for m in BODY_READ.find_iter(text) {
        let rest = &text[m.end()..];
        let body = m.as_str().contains("body");
        if TO_JSON_STRING.is_match(rest) {
            return Some(if body {
                "$json.body.toJsonString()"
            } else {
                "$json.toJsonString()"
            });
        }
        let next = rest.trim_start().chars().next();
        let continues =
            matches!(next, Some('.' | '[' | '?' | '(')) || next.is_some_and(char::is_alphanumeric);
        if !continues {
            return Some(if body { "$json.body" } else { "$json" });
        }
    }
    None
}

/// The first argument of every `JSON.stringify(…)` call in `text`.
pub fn stringify_args(text: &str) -> Vec<String> {
    STRINGIFY
        .find_iter(text)
        .map(|m| value_until_end(&text[m.end()..]))
        .collect()
}

/// Whether a JavaScript value is a whole item, its JSON or its body (nothing read from it).
fn whole_value(value: &str) -> bool {
    let v = strip_parens(value);
    WHOLE_ITEMS.is_match(v)
        || BODY_READ
            .find(v)
            .is_some_and(|m| m.start() == 0 && m.end() == v.len())
}

/// The text without whitespace around it and without parentheses that wrap all of it (a
/// few levels: nobody wraps a value deeper).
fn strip_parens(s: &str) -> &str {
    let mut s = s.trim();
    for _ in 0..16 {
        if !(s.starts_with('(') && s.ends_with(')') && closing_paren(s) == Some(s.len() - 1)) {
            break;
        }
        s = s[1..s.len() - 1].trim();
    }
    s
}

/// The byte offset of the `)` that closes the `(` at the start of `s`.
fn closing_paren(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
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

static N8N_ITEM_JSON: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&item_json(false)).expect("static regex"));
static BRACKET_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"\[\s*(?:'([A-Za-z_$][\w$]*)'|"([A-Za-z_$][\w$]*)")\s*\]"#).expect("static regex")
});

/// The text with, inside each `{{ … }}`, every read of an item's JSON written as `$json` and
/// every bracket read of a plain field (`['event_id']`) as a dot read:
/// `{{ $('Webhook').item.json.body['event_id'] }}`, `{{ $node["Webhook"].json.body.event_id }}`
/// and `{{ $json.body.event_id }}` all become the last one. Two keys that read the same field
/// through different forms are then the same text, and a node's name is not taken for a
/// literal part of the key. Text outside `{{ … }}` is kept as it is.
pub fn canonical_item_reads(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open + 2]);
        let inner = &rest[open + 2..];
        let close = inner.find("}}").unwrap_or(inner.len());
        let read = N8N_ITEM_JSON.replace_all(&inner[..close], "$$json");
        let read = BRACKET_FIELD.replace_all(&read, |c: &regex::Captures<'_>| {
            format!(".{}", c.get(1).or(c.get(2)).map_or("", |m| m.as_str()))
        });
        out.push_str(&read);
        rest = &inner[close..];
    }
    out.push_str(rest);
    out
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
    Regex::new(r"\boutcome['\x22\]]?\s*(===?|!==?)\s*['\x22`](\w+)['\x22`]").expect("static regex")
});
static OUTCOME_EQ_REV: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"['\x22`](\w+)['\x22`]\s*(===?|!==?)\s*[\w$.()'\x22\[\]]*\boutcome\b")
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

/// Whether an expression (the left side of a condition) reads the claim's `outcome`: the
/// word itself, not a longer name that holds it (`outcome_note`, `previous_outcome`).
pub fn reads_outcome(expr: &str) -> bool {
    OUTCOME_WORD.is_match(expr)
}

static OUTCOME_WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\boutcome\b").expect("static regex"));

#[cfg(test)]
mod tests;
