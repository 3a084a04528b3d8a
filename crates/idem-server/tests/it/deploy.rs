//! The shipped Grafana dashboard and Prometheus rules only use what a real server exports.
//!
//! A dashboard panel or an alert on a misspelt or renamed metric shows "no data" / never
//! fires, silently. So: after some traffic, scrape `/metrics` and check that every `idem_*`
//! name in a panel expression, a template query or a rule expression is exported, that every
//! label those expressions filter or group on exists on the metrics they use, and that the
//! label values they match on for bounded labels (outcome, state, result, resumed) are ones
//! the server emits.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde_json::{json, Value};
use yaml_rust2::{Yaml, YamlLoader};

use idem_testkit::app::*;

/// Labels Prometheus itself adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];
/// Labels whose values are a fixed set registered at start-up: a matcher on any other value
/// can never match.
const BOUNDED: [&str; 4] = ["outcome", "state", "result", "resumed"];

fn repo_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `expr` of the dashboard's panels (rows included) and every template query.
fn dashboard_exprs(dash: &Value) -> Vec<String> {
    fn panels(v: &Value, out: &mut Vec<String>) {
        for p in v.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_owned());
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dash["panels"], &mut out);
    for var in dash["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = var["query"]["query"].as_str() {
            out.push(q.to_owned());
        }
    }
    out
}

/// `(alert name, expr)` of every rule.
fn rule_exprs(rules: &[Yaml]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for doc in rules {
        for group in doc["groups"].as_vec().into_iter().flatten() {
            for rule in group["rules"].as_vec().into_iter().flatten() {
                let name = rule["alert"]
                    .as_str()
                    .or_else(|| rule["record"].as_str())
                    .unwrap_or("?");
                let expr = rule["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("rule {name} has no expr"));
                out.push((name.to_owned(), expr.to_owned()));
            }
        }
    }
    out
}

/// A metric name used in an expression, with the label matchers written right after it.
#[derive(Debug)]
struct Use {
    name: String,
    /// `(label, value)`; the value is the raw pattern of `=`/`=~` (`None` for `!=`/`!~`).
    matchers: Vec<(String, Option<String>)>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The `idem_*` metrics an expression uses, and every label it groups on (`by`/`without`).
fn parse_expr(expr: &str) -> (Vec<Use>, BTreeSet<String>) {
    let chars: Vec<char> = expr.chars().collect();
    let mut uses = Vec::new();
    let mut grouped = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_name_char(chars[i]) || (i > 0 && is_name_char(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_name_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let mut j = i;
        while j < chars.len() && chars[j] == ' ' {
            j += 1;
        }
        if (word == "by" || word == "without") && chars.get(j) == Some(&'(') {
            let close = (j..chars.len())
                .find(|&k| chars[k] == ')')
                .expect("closing )");
            let list: String = chars[j + 1..close].iter().collect();
            grouped.extend(
                list.split(',')
                    .map(|l| l.trim().to_owned())
                    .filter(|l| !l.is_empty()),
            );
            i = close + 1;
            continue;
        }
        if !word.starts_with("idem_") {
            continue;
        }
        let mut matchers = Vec::new();
        if chars.get(i) == Some(&'{') {
            let close = (i..chars.len())
                .find(|&k| chars[k] == '}')
                .expect("closing }");
            let body: String = chars[i + 1..close].iter().collect();
            for m in split_matchers(&body) {
                let op_at = m.find(['=', '!']).expect("matcher operator");
                let label = m[..op_at].trim().to_owned();
                let rest = &m[op_at..];
                let positive = !rest.starts_with('!');
                let value = rest
                    .trim_start_matches(['=', '!', '~'])
                    .trim()
                    .trim_matches('"')
                    .to_owned();
                matchers.push((label, positive.then_some(value)));
            }
            i = close + 1;
        }
        uses.push(Use {
            name: word,
            matchers,
        });
    }
    (uses, grouped)
}

/// Splits `a="x", b=~"y|z"` at the commas outside quotes.
fn split_matchers(body: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in body.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Exported series: metric name → label name → values seen.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn exported(text: &str) -> Exported {
    let mut out = Exported::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let close = line.rfind('}').expect("closing } in exposition");
            for m in split_matchers(&line[name_end + 1..close]) {
                if let Some((k, v)) = m.split_once('=') {
                    labels
                        .entry(k.to_owned())
                        .or_default()
                        .insert(v.trim_matches('"').to_owned());
                }
            }
        }
    }
    out
}

/// Every problem of one expression against what the server exports.
fn check(origin: &str, expr: &str, exp: &Exported) -> Vec<String> {
    let (uses, grouped) = parse_expr(expr);
    let mut problems = Vec::new();
    let mut known_labels: BTreeSet<&str> = TARGET_LABELS.into_iter().collect();
    for u in &uses {
        let Some(labels) = exp.get(&u.name) else {
            problems.push(format!("{origin}: {} is not exported", u.name));
            continue;
        };
        known_labels.extend(labels.keys().map(String::as_str));
        for (label, value) in &u.matchers {
            if TARGET_LABELS.contains(&label.as_str()) {
                continue;
            }
            let Some(values) = labels.get(label) else {
                problems.push(format!("{origin}: {} has no label {label}", u.name));
                continue;
            };
            if let (Some(v), true) = (value, BOUNDED.contains(&label.as_str())) {
                for alt in v.split('|') {
                    if !values.contains(alt) {
                        problems.push(format!(
                            "{origin}: {}{{{label}}} is never {alt:?} (exported: {values:?})",
                            u.name
                        ));
                    }
                }
            }
        }
    }
    for g in &grouped {
        if !known_labels.contains(g.as_str()) {
            problems.push(format!(
                "{origin}: groups by {g}, a label none of its metrics has"
            ));
        }
    }
    problems
}

#[tokio::test]
async fn dashboard_and_alert_rules_use_only_exported_metrics() {
    let app = spawn_app().await;
    // Traffic that touches every route family the panels and rules look at.
    let t = Api::acquired(
        &app.claim("deploy", "k1", json!({"payload": {"n": 1}}))
            .await,
    );
    assert_eq!(
        app.complete("deploy", "k1", json!({"token": t}))
            .await
            .status,
        200
    );
    app.claim("deploy", "k1", json!({"payload": {"n": 1}}))
        .await;
    let t = Api::acquired(&app.claim("deploy", "k2", json!({})).await);
    app.fail("deploy", "k2", json!({"token": t, "http_status": 503}))
        .await;
    // Cost, first attempt and retry (the cost panels filter on both `attempt` values).
    let t = Api::acquired(&app.claim("deploy", "k3", json!({})).await);
    app.fail(
        "deploy",
        "k3",
        json!({"token": t, "kind": "retryable", "cost": {"tokens": 3, "usd": 0.01}}),
    )
    .await;
    assert_eq!(app.get("/readyz").await.status, 200);
    let scrape = app.get("/metrics").await;
    assert_eq!(scrape.status, 200);
    let exp = exported(&scrape.text);
    assert!(
        exp.contains_key("idem_claims_total"),
        "the scrape holds idem's metrics:\n{}",
        scrape.text
    );

    let dash: Value =
        serde_json::from_str(&repo_file("deploy/grafana/idem.json")).expect("dashboard JSON");
    let panel_exprs = dashboard_exprs(&dash);
    let rules = YamlLoader::load_from_str(&repo_file("deploy/prometheus/alerts.yml"))
        .expect("alerts.yml is YAML");
    let rule_exprs = rule_exprs(&rules);

    // The extraction itself must see the files' contents, or the check below proves nothing.
    assert!(panel_exprs.len() >= 15, "{panel_exprs:?}");
    assert!(rule_exprs.len() >= 6, "{rule_exprs:?}");
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    for (i, e) in panel_exprs.iter().enumerate() {
        used.extend(parse_expr(e).0.into_iter().map(|u| u.name));
        problems.extend(check(&format!("dashboard expr #{i} `{e}`"), e, &exp));
    }
    for (name, e) in &rule_exprs {
        used.extend(parse_expr(e).0.into_iter().map(|u| u.name));
        problems.extend(check(&format!("rule {name}"), e, &exp));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The dashboard and rules between them watch every metric the server documents.
    for family in [
        "idem_claims_total",
        "idem_duplicate_hits_total",
        "idem_acquired_total",
        "idem_fails_total",
        "idem_reclaims_total",
        "idem_records",
        "idem_review_queue_depth",
        "idem_oldest_processing_seconds",
        "idem_janitor_expired_total",
        "idem_alerts_total",
        "idem_http_request_duration_seconds_bucket",
        "idem_http_request_duration_seconds_count",
        "idem_cost_tokens_total",
        "idem_cost_usd_total",
        "idem_recovery_seconds_bucket",
        "idem_fenced_completions_total",
        "idem_review_oldest_seconds",
    ] {
        assert!(used.contains(family), "nothing watches {family}");
    }
}

#[test]
fn the_checker_catches_a_wrong_name_label_or_value() {
    let exp = exported(
        "# TYPE idem_alerts_total counter\n\
         idem_alerts_total{result=\"sent\"} 0\n\
         idem_alerts_total{result=\"gave_up\"} 0\n\
         idem_review_queue_depth 0\n",
    );
    assert!(check("ok", "max by (job) (idem_review_queue_depth) > 0", &exp).is_empty());
    assert!(check(
        "ok",
        "sum by (result) (increase(idem_alerts_total{result=~\"gave_up|sent\", job=\"idem\"}[5m]))",
        &exp
    )
    .is_empty());
    for bad in [
        "idem_review_queue_dept > 0",
        "idem_alerts_total{reason=\"sent\"}",
        "idem_alerts_total{result=~\"gave_up|lost\"}",
        "sum by (state) (idem_alerts_total)",
    ] {
        assert_eq!(check("bad", bad, &exp).len(), 1, "{bad}");
    }
}
