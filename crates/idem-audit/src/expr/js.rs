//! Code-node JavaScript read as text: the code that assigns a field, the definition of a
//! local variable, a value with its locals expanded (bounded in rounds, names and length), and
//! the end of one JavaScript value.
//!
//! Like the rest of `expr`, nothing here evaluates anything and every function is total: any
//! text, including garbage, gives an answer within the bounds; it must never run or parse the
//! code as a program.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;

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
pub(super) const LOCAL_TEXT_MAX: usize = 20_000;

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
pub(super) fn js_free_names(js: &str) -> Vec<String> {
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
pub(crate) fn value_until_end(s: &str) -> String {
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
