//! Reading n8n expressions (`={{ … }}`) and Code-node JavaScript as text.
//!
//! Nothing here evaluates anything: the audit looks for tokens (`$execution.id`, `Date.now()`,
//! `$getWorkflowStaticData`), for the path of an idem call inside a URL, for the field an
//! expression reads (`$json.key`, `$('Node').item.json.key`) and for the JavaScript that
//! assigns a field. Every function is total: any text, including garbage, gives an answer.

use std::collections::HashMap;
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

/// The JavaScript that assigns `field` (`field: …` in an object literal, `field = …`,
/// `json['field'] = …`), up to the end of that value; every assignment, joined. A shorthand
/// property (`{ ...$json, field }`) gives the local variable's name, `field`. `None` when the
/// code never names it.
pub fn js_assignment(code: &str, field: &str) -> Option<String> {
    if field.is_empty() {
        return None;
    }
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut parts = Vec::new();
    for (at, _) in code.match_indices(field) {
        let before = code[..at].chars().next_back();
        let quoted = matches!(before, Some('\'' | '"'));
        let before = if quoted {
            code[..at - 1].chars().next_back()
        } else {
            before
        };
        if before.is_some_and(ident) {
            continue;
        }
        let mut rest = &code[at + field.len()..];
        if rest.starts_with(ident) {
            continue;
        }
        if quoted {
            rest = rest.strip_prefix(['\'', '"']).unwrap_or(rest);
            // `json['field'] = …`
            if before == Some('[') {
                rest = rest.trim_start().strip_prefix(']').unwrap_or(rest);
            }
        }
        rest = rest.trim_start();
        let after = if let Some(r) = rest.strip_prefix(':') {
            r
        } else if let Some(r) = rest.strip_prefix('=') {
            // `==`, `===` and `=>` compare or declare; they assign nothing.
            if r.starts_with(['=', '>']) {
                continue;
            }
            r
        } else if !quoted
            && rest.starts_with([',', '}'])
            && code[..at].trim_end().ends_with(['{', ','])
            && field.chars().all(ident)
        {
            // A shorthand property: the value is the variable of that name.
            parts.push(field.to_owned());
            continue;
        } else {
            continue;
        };
        parts.push(value_until_end(after));
    }
    (!parts.is_empty()).then(|| parts.join(" | "))
}

/// The values a Code node gives the local variable `name` (`const name = …`, `let`, `var`, or
/// a plain `name = …` at the start of a statement), joined; `None` when it declares none.
pub fn js_local(code: &str, name: &str) -> Option<String> {
    js_local_in(code, &js_declarations(code), name)
}

/// Every declaration or plain assignment of a local variable in `code`: for each name, the
/// offsets where its values start (the first [`LOCAL_DEFS_MAX`]).
fn js_declarations(code: &str) -> HashMap<&str, Vec<usize>> {
    let mut out: HashMap<&str, Vec<usize>> = HashMap::new();
    // `==`, `===` and `=>` compare or declare a function; they assign nothing.
    for m in JS_DECLARATION
        .find_iter(code)
        .filter(|m| !code[m.end()..].starts_with(['=', '>']))
    {
        // The match ends with `NAME =`: the name is the identifier before the `=`.
        let head = m.as_str()[..m.as_str().len() - 1].trim_end();
        let start = head
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_alphanumeric() || *c == '_' || *c == '$'))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let at = out.entry(&head[start..]).or_default();
        if at.len() < LOCAL_DEFS_MAX {
            at.push(m.end());
        }
    }
    out
}

static JS_DECLARATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)(?:\b(?:const|let|var)\s+|(?:^|[;{}(])[ \t]*)[A-Za-z_$][\w$]*\s*=")
        .expect("static regex")
});

/// How many assignments of one variable are read (a reassigned variable is judged by all).
const LOCAL_DEFS_MAX: usize = 8;

fn js_local_in(code: &str, decls: &HashMap<&str, Vec<usize>>, name: &str) -> Option<String> {
    let parts: Vec<String> = decls
        .get(name)?
        .iter()
        .map(|at| value_until_end(&code[*at..]))
        .filter(|v| !v.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" | "))
}

/// How many rounds of local variables [`js_expand_locals`] follows (`key` ← `hash` ←
/// `digest` ← `data` is three), how many variables a round replaces, and the longest text it
/// builds (the rest is left as it is).
const LOCAL_ROUNDS: usize = 4;
const LOCAL_NAMES_MAX: usize = 64;
const LOCAL_TEXT_MAX: usize = 20_000;

/// `value` (a JavaScript value from `code`) with each local variable it uses replaced by the
/// value the code gives it, a few rounds deep, so that the rules judge
/// `{ idempotencyKey: hash }` by what `hash` is made of. A plain read (`$json.body`) replaces
/// the name as it is, anything else in parentheses. Property names (`x.hash`, `{ hash: 1 }`)
/// and string literals are left alone.
pub fn js_expand_locals(code: &str, value: &str) -> String {
    let decls = js_declarations(code);
    let mut text = value.to_owned();
    // A variable used again in a value just put in is replaced again in the next round (a
    // variable assigned from itself only as many times as there are rounds).
    for _ in 0..LOCAL_ROUNDS {
        let mut defs: Vec<(String, String)> = Vec::new();
        for name in js_free_names(&text) {
            if defs.len() == LOCAL_NAMES_MAX {
                break;
            }
            if let Some(def) = js_local_in(code, &decls, &name) {
                let def = if MEMBER_CHAIN.is_match(&def) {
                    def
                } else {
                    format!("({def})")
                };
                defs.push((name, def));
            }
        }
        if defs.is_empty() {
            break;
        }
        text = js_substitute(&text, &defs);
        if text.len() >= LOCAL_TEXT_MAX {
            break;
        }
    }
    text
}

/// A value that only reads: `$('Webhook').first().json.body`, `item.json`, `order`.
static MEMBER_CHAIN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z_$][\w$]*(?:\s*\.\s*[A-Za-z_$][\w$]*|\s*\[[^\[\]]*\]|\s*\([^()]*\))*$")
        .expect("static regex")
});

/// The identifiers `js` uses as values, in order, each once.
fn js_free_names(js: &str) -> Vec<String> {
    let mut names = Vec::new();
    js_walk(js, &mut |name| {
        if !names.iter().any(|n: &String| n == name) {
            names.push(name.to_owned());
        }
        None
    });
    names
}

/// `js` with every identifier used as a value that `defs` names replaced by its definition.
fn js_substitute(js: &str, defs: &[(String, String)]) -> String {
    let mut room = LOCAL_TEXT_MAX.saturating_sub(js.len());
    js_walk(js, &mut |name| {
        let (_, def) = defs.iter().find(|(n, _)| n == name)?;
        room = room.checked_sub(def.len())?;
        Some(def.clone())
    })
}

/// Walks the identifiers of `js` that are used as values (not property names, not object
/// keys, not inside string literals; inside a template literal only in `${…}`), calling
/// `visit` with each; returns the text with the replacements `visit` gave.
fn js_walk(js: &str, visit: &mut dyn FnMut(&str) -> Option<String>) -> String {
    js_walk_at(js, visit, 0)
}

/// Template literals nested deeper than this are copied as they are.
const TEMPLATE_DEPTH_MAX: usize = 8;

fn js_walk_at(js: &str, visit: &mut dyn FnMut(&str) -> Option<String>, depth: usize) -> String {
    if depth > TEMPLATE_DEPTH_MAX {
        return js.to_owned();
    }
    let is_start = |c: char| c.is_alphabetic() || c == '_' || c == '$';
    let is_part = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let chars: Vec<(usize, char)> = js.char_indices().collect();
    let mut out = String::with_capacity(js.len());
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        match c {
            '\'' | '"' => {
                // A string literal, copied as it is.
                let mut j = i + 1;
                while j < chars.len() && !(chars[j].1 == c && chars[j - 1].1 != '\\') {
                    j += 1;
                }
                let end = chars.get(j + 1).map_or(js.len(), |(e, _)| *e);
                out.push_str(&js[at..end]);
                i = j + 1;
            }
            '`' => {
                // A template literal: text as it is, `${…}` walked as code.
                out.push('`');
                let mut j = i + 1;
                while j < chars.len() && chars[j].1 != '`' {
                    if chars[j].1 == '\\' {
                        out.push('\\');
                        if let Some((_, e)) = chars.get(j + 1) {
                            out.push(*e);
                        }
                        j += 2;
                        continue;
                    }
                    if chars[j].1 == '$' && chars.get(j + 1).is_some_and(|(_, n)| *n == '{') {
                        let open = chars[j + 1].0 + 1;
                        let mut braces = 1;
                        let mut k = j + 2;
                        while k < chars.len() {
                            match chars[k].1 {
                                '{' => braces += 1,
                                '}' => {
                                    braces -= 1;
                                    if braces == 0 {
                                        break;
                                    }
                                }
                                _ => {}
                            }
                            k += 1;
                        }
                        let close = chars.get(k).map_or(js.len(), |(e, _)| *e);
                        out.push_str("${");
                        out.push_str(&js_walk_at(&js[open..close], visit, depth + 1));
                        if k < chars.len() {
                            out.push('}');
                        }
                        j = k + 1;
                        continue;
                    }
                    out.push(chars[j].1);
                    j += 1;
                }
                if j < chars.len() {
                    out.push('`');
                }
                i = j + 1;
            }
            c if is_start(c) => {
                let mut j = i;
                while j < chars.len() && is_part(chars[j].1) {
                    j += 1;
                }
                let end = chars.get(j).map_or(js.len(), |(e, _)| *e);
                let name = &js[at..end];
                let before = js[..at].trim_end();
                // `x.name` is a property, but `...name` spreads the variable.
                let property = before.ends_with('.') && !before.ends_with("...");
                let key = js[end..].trim_start().starts_with(':')
                    && !js[end..].trim_start().starts_with("::")
                    && (before.ends_with('{') || before.ends_with(','));
                let replaced = if property || key { None } else { visit(name) };
                out.push_str(replaced.as_deref().unwrap_or(name));
                i = j;
            }
            c if c.is_ascii_digit() => {
                // A number (`0x1f`, `1e3`): not an identifier.
                let mut j = i;
                while j < chars.len() && is_part(chars[j].1) {
                    out.push(chars[j].1);
                    j += 1;
                }
                i = j;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
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
    fn whole_body_through_code_node_item_forms_and_helpers() {
        let whole = "JSON.stringify($json…)";
        for text in [
            "JSON.stringify($input.item.json.body)",
            "JSON.stringify(item.json.body)",
            "JSON.stringify(item.json)",
            "JSON.stringify(items[i].json)",
            "JSON.stringify(items)",
            "JSON.stringify(item)",
            "JSON.stringify($input.all())",
            "JSON.stringify($input.first().json.body, null, 2)",
            "JSON.stringify( ( $json.body ) )",
            "JSON.stringify($json['body'])",
            "JSON.stringify($('Webhook').last().json)",
            "JSON.stringify($items(\"Webhook\")[0].json.body)",
            "$crypto.sha256(JSON.stringify($json.body))",
            "crypto.createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex')",
            "new TextEncoder().encode(JSON.stringify($json))",
        ] {
            assert_eq!(whole_body(text), Some(whole), "{text}");
        }
        assert_eq!(
            whole_body("={{ $json.body.toJsonString().hash('sha256') }}"),
            Some("$json.body.toJsonString()")
        );
        assert_eq!(
            whole_body("{{ $('Webhook').item.json.toJsonString() }}"),
            Some("$json.toJsonString()")
        );
        assert_eq!(whole_body("sha256(item.json.body)"), Some("$json.body"));
        assert_eq!(whole_body("{ ...$input.item.json }"), Some("$json"));
        // A field of the body, or chosen fields, are not the whole body.
        for text in [
            "JSON.stringify($json.body.id)",
            "JSON.stringify($json.body.order_id, null, 2)",
            "JSON.stringify(item.json.body.order_id)",
            "JSON.stringify({ order: $json.body.order_id, customer: $json.body.customer_id })",
            "JSON.stringify([$input.item.json.body.id, 'receipt'])",
            "crypto.createHash('sha256').update(String($json.body.id)).digest('hex')",
            "$json.body.id.toString()",
            "$json.body.toJsonString",
            "await res.json()",
            "items.length",
            "JSON.stringify(",
            "",
        ] {
            assert_eq!(whole_body(text), None, "{text}");
        }
    }

    #[test]
    fn stringify_arguments() {
        assert_eq!(
            stringify_args(
                "JSON.stringify($json.body, null, 2) + JSON . stringify ( {a: [1, 2]} )"
            ),
            ["$json.body", "{a: [1, 2]}"]
        );
        assert_eq!(stringify_args("JSON.stringify()"), [""]);
        assert!(stringify_args("JSON.parse(x)").is_empty());
    }

    #[test]
    fn js_assignments_shorthand_and_bracket_forms() {
        assert_eq!(
            js_assignment(
                "return { json: { ...$json, idempotencyKey } };",
                "idempotencyKey"
            )
            .as_deref(),
            Some("idempotencyKey")
        );
        assert_eq!(
            js_assignment(
                "return [{ json: { idempotencyKey, other: 1 } }];",
                "idempotencyKey"
            )
            .as_deref(),
            Some("idempotencyKey")
        );
        assert_eq!(
            js_assignment("item.json['idempotencyKey'] = h;", "idempotencyKey").as_deref(),
            Some("h")
        );
        assert_eq!(
            js_assignment("item.json[\"idempotencyKey\"]=h", "idempotencyKey").as_deref(),
            Some("h")
        );
        assert_eq!(
            js_assignment("$json.idempotencyKey = sha(x);", "idempotencyKey").as_deref(),
            Some("sha(x)")
        );
        // A call argument, a comparison or a string are no assignment.
        assert!(js_assignment("log(a, idempotencyKey);", "idempotencyKey").is_none());
        assert!(js_assignment("if (idempotencyKey === k) {}", "idempotencyKey").is_none());
        assert!(js_assignment("const s = ['idempotencyKey', 1];", "idempotencyKey").is_none());
    }

    #[test]
    fn js_locals_and_their_values() {
        let code = "let crypto;\ntry {\n  crypto = require('crypto');\n} catch (e) {}\nconst hash = crypto.createHash('sha256').update(body).digest('hex');\nvar n = 1, m = 2;\nfor (let i = 0; i < 3; i++) {}\nobj.prop = 3;\n$dollar = 4;\nconst f = (x) => x;\nif (hash == 1) {}";
        assert_eq!(
            js_local(code, "crypto").as_deref(),
            Some("require('crypto')")
        );
        assert_eq!(
            js_local(code, "hash").as_deref(),
            Some("crypto.createHash('sha256').update(body).digest('hex')")
        );
        assert_eq!(js_local(code, "n").as_deref(), Some("1"));
        assert_eq!(js_local(code, "i").as_deref(), Some("0"));
        assert_eq!(js_local(code, "f").as_deref(), Some("(x) => x"));
        assert!(js_local(code, "m").is_none(), "only the first of a list");
        assert!(
            js_local(code, "prop").is_none(),
            "a property is not a local"
        );
        assert!(
            js_local(code, "dollar").is_none(),
            "$dollar is another name"
        );
        assert!(js_local(code, "body").is_none());
        assert!(js_local(code, "").is_none());
        assert_eq!(
            js_local("let k = 1; k = 2;", "k").as_deref(),
            Some("1 | 2"),
            "every assignment"
        );
    }

    #[test]
    fn js_locals_are_expanded_into_the_value() {
        // One local variable.
        let code = "const crypto = require('crypto');\nconst hash = crypto.createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex');\nreturn { json: { ...$json, idempotencyKey: hash } };";
        assert_eq!(
            js_expand_locals(code, "hash"),
            "(require('crypto').createHash('sha256').update(JSON.stringify($input.item.json.body)).digest('hex'))"
        );
        // Three rounds: the key, the digest, the data.
        let code = "const data = new TextEncoder().encode(JSON.stringify($json.body));\nconst digest = await crypto.subtle.digest('SHA-256', data);\nconst idempotencyKey = [...new Uint8Array(digest)].map((b) => b.toString(16)).join('');";
        let v = js_expand_locals(code, "idempotencyKey");
        assert!(v.contains("JSON.stringify($json.body)"), "{v}");
        // A plain read replaces the name as it is, so a field of it stays a field.
        let code = "const body = $('Webhook').first().json.body;\nconst other = body.id || 'x';";
        assert_eq!(
            js_expand_locals(code, "`${body.order_id}:${other}`"),
            "`${$('Webhook').first().json.body.order_id}:${($('Webhook').first().json.body.id || 'x')}`"
        );
        // Property names, object keys, strings and template text are not variables; a spread is.
        let code = "const id = $json.body.id;\nconst order = $json.body;";
        assert_eq!(
            js_expand_locals(
                code,
                "x.id + { id: 1 }.id + 'id' + `order-${id}` + [...order]"
            ),
            "x.id + { id: 1 }.id + 'id' + `order-${$json.body.id}` + [...$json.body]"
        );
        // Unknown names stay; a variable assigned from itself ends.
        assert_eq!(js_expand_locals("", "a + b"), "a + b");
        assert_eq!(
            js_expand_locals("let h = 1; h = h + 1;", "h"),
            "(1 | (1 | (1 | (1 | h + 1) + 1) + 1) + 1)"
        );
    }

    #[test]
    fn js_local_expansion_is_bounded() {
        // Every round multiplies the text by four: the text stops growing at the limit.
        let code = "const a = b + b + b + b;\nconst b = c + c + c + c;\nconst c = d + d + d + d;\nconst d = e + e + e + e;\nconst e = 'x'.repeat(1000);";
        let code = code.replace("'x'.repeat(1000)", &format!("'{}'", "x".repeat(1900)));
        let v = js_expand_locals(&code, "a + a + a + a + a + a + a + a");
        assert!(v.len() <= LOCAL_TEXT_MAX, "{}", v.len());
        // Template literals nested far deeper than anyone writes them do not overflow the stack.
        let deep = "`${".repeat(20_000);
        let _ = js_expand_locals("const a = 1;", &deep);
        let _ = js_free_names(&deep);
    }

    #[test]
    fn canonical_item_reads_write_one_form() {
        let canonical = "{{ $json.body.event_id }}";
        for read in [
            "$json.body.event_id",
            "$('Webhook').item.json.body.event_id",
            "$(\"Webhook\").item.json.body.event_id",
            "$('Webhook').first().json.body.event_id",
            "$('Webhook').last().json.body.event_id",
            "$('Webhook').all()[0].json.body.event_id",
            "$('Webhook').itemMatching(0).json.body.event_id",
            "$('Webhook (prod)').item.json.body.event_id",
            "$('Web}}hook').item.json.body.event_id",
            "$node[\"Webhook\"].json.body.event_id",
            "$node['Webhook'].json.body.event_id",
            "$node.Webhook.json.body.event_id",
            "$input.item.json.body.event_id",
            "$input.first().json.body.event_id",
            "$input.all()[0].json.body.event_id",
            "$items(\"Webhook\")[0].json.body.event_id",
            "$items()[0].json.body.event_id",
            "$json['body']['event_id']",
            "$json[\"body\"].event_id",
            "$('Webhook').item.json.body[ 'event_id' ]",
        ] {
            let key = format!("{{{{ {read} }}}}");
            if read.contains("}}") {
                // `}}` in a node's name ends the expression: n8n reads it so too.
                assert_ne!(canonical_item_reads(&key), canonical, "{read}");
                continue;
            }
            assert_eq!(canonical_item_reads(&key), canonical, "{read}");
        }
        assert_eq!(
            canonical_item_reads(
                "={{ encodeURIComponent($('Webhook').item.json.body.id + ':crm') }}"
            ),
            "={{ encodeURIComponent($json.body.id + ':crm') }}"
        );
        assert_eq!(
            canonical_item_reads(
                "=order-{{ $node[\"Order webhook\"].json.body['order-id'] }}:charge"
            ),
            "=order-{{ $json.body['order-id'] }}:charge",
            "a bracket read of a name that is no identifier stays"
        );
        assert_eq!(
            canonical_item_reads("{{ $( 'Webhook' ) . first ( ) . json . body }}"),
            "{{ $json . body }}"
        );
        // Literal text is kept, even when it looks like a read; Code-node item variables are
        // not n8n expressions.
        for text in [
            "daily-report.json:send",
            "$('A').item.json.k",
            "no reads :crm",
            "{{ item.json.k }}",
            "{{ $json.k",
            "",
        ] {
            assert_eq!(canonical_item_reads(text), text);
        }
        assert_eq!(
            canonical_item_reads("{{ $('A').item.json.k }}-{{ $node['B'].json['k2'] }}"),
            "{{ $json.k }}-{{ $json.k2 }}"
        );
        assert_eq!(
            canonical_item_reads("{{ $('A').item.json.k"),
            "{{ $json.k",
            "an unclosed expression runs to the end"
        );
    }

    proptest::proptest! {
        #[test]
        fn new_readings_are_total(code in "\\PC{0,200}", value in "\\PC{0,80}") {
            let _ = whole_body(&value);
            let _ = stringify_args(&value);
            let _ = js_assignment(&code, &value);
            let _ = js_local(&code, &value);
            let v = js_expand_locals(&code, &value);
            proptest::prop_assert!(v.len() <= LOCAL_TEXT_MAX.max(value.len()));
            let c = canonical_item_reads(&value);
            proptest::prop_assert_eq!(canonical_item_reads(&c), c.clone());
            let key = format!("{{{{ {value} }}}}");
            let c = canonical_item_reads(&key);
            proptest::prop_assert_eq!(canonical_item_reads(&c), c.clone());
        }
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
