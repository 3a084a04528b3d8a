//! Plain-text tables and key/value blocks for human output.

/// Left-aligned columns separated by two spaces; cells are cut to `max` characters.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    const MAX: usize = 60;
    let cut = |s: &str| -> String {
        let one_line: String = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        if one_line.chars().count() > MAX {
            let mut t: String = one_line.chars().take(MAX - 1).collect();
            t.push('…');
            t
        } else {
            one_line
        }
    };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cut(c)).collect())
        .collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let pad = widths[i].saturating_sub(c.chars().count());
                l.push_str(c);
                l.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec());
    for r in &rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

/// `name  value` lines with the names aligned.
pub fn pairs(items: &[(&str, String)]) -> String {
    let w = items.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, v) in items {
        out.push_str(&format!("{k:<w$}  {v}\n"));
    }
    out
}

/// A JSON value as a short cell: strings bare, null as `-`, the rest as compact JSON.
pub fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "-".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let t = render(
            &["KEY", "STATE"],
            &[
                vec!["a".into(), "completed".into()],
                vec!["long-key".into(), "x".into()],
            ],
        );
        assert_eq!(t, "KEY       STATE\na         completed\nlong-key  x\n");
    }
}
