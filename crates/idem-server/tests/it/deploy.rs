//! The shipped Grafana dashboard and Prometheus rules only use what a real server exports.
//!
//! A dashboard panel or an alert on a misspelt or renamed metric shows "no data" / never
//! fires, silently. So: after traffic that makes every metric appear (claims, a fenced
//! completion, effects to a loopback destination, webhook intake forwarded to it), scrape
//! `/metrics` and check that every `idem_*` name in a panel expression, a template query or
//! a rule expression is exported, that every label those expressions filter or group on
//! exists on the metrics they use, and that the label values they match on (`=`, `=~`, `!=`,
//! `!~`) for bounded labels (outcome, state, result, resumed, attempt) are ones the server
//! emits. And the other way round: every metric the server describes is exported after that
//! traffic, and every exported family is read by at least one dashboard panel, so a new
//! metric without a panel fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use axum::http::{StatusCode, Uri};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use yaml_rust2::{Yaml, YamlLoader};

use idem_testkit::app::*;

/// Labels Prometheus itself adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["job", "instance"];
/// Labels whose values are a fixed set registered at start-up: a matcher on any other value
/// can never match.
const BOUNDED: [&str; 5] = ["outcome", "state", "result", "resumed", "attempt"];

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
    /// `(label, value)`: the raw value or pattern of `=`, `=~`, `!=` or `!~`.
    matchers: Vec<(String, String)>,
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
                let value = m[op_at..]
                    .trim_start_matches(['=', '!', '~'])
                    .trim()
                    .trim_matches('"')
                    .to_owned();
                matchers.push((label, value));
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

/// Every sample line of an exposition: the series name and its labels.
fn series(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let mut labels = BTreeMap::new();
        if line[name_end..].starts_with('{') {
            let close = line.rfind('}').expect("closing } in exposition");
            for m in split_matchers(&line[name_end + 1..close]) {
                if let Some((k, v)) = m.split_once('=') {
                    labels.insert(k.to_owned(), v.trim_matches('"').to_owned());
                }
            }
        }
        out.push((line[..name_end].to_owned(), labels));
    }
    out
}

/// Exported series: metric name → label name → values seen.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

fn exported(text: &str) -> Exported {
    let mut out = Exported::new();
    for (name, labels) in series(text) {
        let entry = out.entry(name).or_default();
        for (k, v) in labels {
            entry.entry(k).or_default().insert(v);
        }
    }
    out
}

/// The metric families of an exposition (`# TYPE name type`): name → type.
fn families(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_owned(), t.trim().to_owned()))
        .collect()
}

/// The names the server describes: the first argument of each `describe_counter!(`,
/// `describe_gauge!(` and `describe_histogram!(` of its metrics module.
fn described(src: &str) -> BTreeSet<String> {
    src.split("describe_")
        .skip(1)
        .filter_map(|rest| {
            let args = ["counter!(", "gauge!(", "histogram!("]
                .iter()
                .find_map(|m| rest.strip_prefix(m))?;
            let after = args.trim_start().strip_prefix('"')?;
            Some(after[..after.find('"')?].to_owned())
        })
        .collect()
}

/// The families that no name in `used` reads (a histogram only through its `_bucket`,
/// `_count` or `_sum`: its bare name is no series).
fn unwatched(families: &BTreeMap<String, String>, used: &BTreeSet<String>) -> Vec<String> {
    families
        .iter()
        .filter(|(name, kind)| {
            let names = if kind.as_str() == "histogram" {
                ["_bucket", "_count", "_sum"]
                    .map(|s| format!("{name}{s}"))
                    .to_vec()
            } else {
                vec![(*name).clone()]
            };
            !names.iter().any(|n| used.contains(n))
        })
        .map(|(name, _)| name.clone())
        .collect()
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
            if BOUNDED.contains(&label.as_str()) {
                for alt in value.split('|') {
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

const STRIPE_SECRET: &str = "whsec_deploy_test_secret";

fn stripe_sig(t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(STRIPE_SECRET.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// A loopback destination for forwards and effects, answering by path: `/ok` and
/// `/lookup/found/…` 200, `/gone` 410, `/lookup/missing/…` 404, anything else 500.
async fn destination() -> u16 {
    let app = axum::Router::new().fallback(|uri: Uri| async move {
        let p = uri.path();
        if p == "/ok" || p.starts_with("/lookup/found/") {
            StatusCode::OK
        } else if p == "/gone" {
            StatusCode::GONE
        } else if p.starts_with("/lookup/missing/") {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(l, app).await });
    port
}

/// POSTs a Stripe-signed body, signed at `t` (unix seconds), to `/in/{source}`.
async fn post_stripe(app: &TestApp, source: &str, t: i64, body: &[u8]) -> Resp {
    let req = app
        .http
        .post(format!("{}/in/{source}", app.base))
        .header("content-type", "application/json")
        .header("Stripe-Signature", stripe_sig(t, body))
        .body(body.to_vec());
    app.as_token(None).send(req).await
}

/// Claims, duplicates, fails with cost, a fenced completion.
async fn ledger_traffic(app: &TestApp) {
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
    // A fenced completion: the first worker reports after its lease was taken over.
    let zombie = Api::acquired(
        &app.claim("deploy", "fenced", json!({"lease_ms": 1000}))
            .await,
    );
    app.advance(1001);
    Api::acquired(&app.claim("deploy", "fenced", json!({})).await);
    app.complete("deploy", "fenced", json!({"token": zombie}))
        .await
        .problem(409, "lease_lost");
}

/// Effects of every kind the panels and rules look at: performed, needs_review, each
/// reconcile result, a destination the egress guard refuses.
async fn effect_traffic(app: &TestApp, port: u16) {
    let r = app
        .patch_namespace(
            "deploy",
            json!({"egress": {"allow": [format!("127.0.0.1:{port}")]}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    for (key, path, lookup, outcome) in [
        ("e-ok", "/ok", None, "performed"),
        ("e-review", "/fail", None, "needs_review"),
        ("e-found", "/fail", Some("/lookup/found/{key}"), "performed"),
        (
            "e-missing",
            "/fail",
            Some("/lookup/missing/{key}"),
            "backoff",
        ),
        (
            "e-unknown",
            "/fail",
            Some("/lookup/other/{key}"),
            "needs_review",
        ),
    ] {
        let mut body = json!({"request": {"method": "POST", "url": url(path), "body": {}}});
        if let Some(l) = lookup {
            body["reconcile"] = json!({"url": url(l), "found": [200], "not_found": [404]});
        }
        let r = app
            .post(&format!("{}/effect", Api::key_path("deploy", key)), body)
            .await;
        assert_eq!(r.body["outcome"], outcome, "{key}: {}", r.text);
    }
    // An action called over MCP (idem_action_calls_total).
    let r = app
        .send(
            app.http
                .put(format!("{}/v1/namespaces/deploy/actions/notify", app.base))
                .json(&json!({
                    "description": "Notifies once per order.",
                    "input_schema": {"type": "object",
                                     "properties": {"order_id": {"type": "string"}},
                                     "required": ["order_id"]},
                    "key": "{order_id}:notify",
                    "deliver": {"http": {"method": "POST", "url": url("/ok")}}
                })),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app
        .post(
            "/mcp/deploy",
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "notify", "arguments": {"order_id": "o1"}}}),
        )
        .await;
    assert_eq!(
        r.body["result"]["structuredContent"]["outcome"], "performed",
        "{}",
        r.text
    );
    let r = app
        .post(
            &format!("{}/effect", Api::key_path("deploy", "e-refused")),
            json!({"request": {"method": "POST", "url": "http://127.0.0.1:9/x", "body": {}}}),
        )
        .await;
    r.problem(422, "destination_forbidden");
}

/// Webhook intake: three sources forwarding to `port` (delivered, retry, dead), and on the
/// first a duplicate, a held event and both signature refusals. Waits for the forwards.
async fn intake_traffic(app: &TestApp, port: u16) {
    let now = app.now().0 / 1000;
    let sources = [
        ("deploy-ok", "/ok", "delivered"),
        ("deploy-retry", "/fail", "retry"),
        ("deploy-gone", "/gone", "dead"),
    ];
    for (source, path, _) in sources {
        let doc = json!({
            "provider": "stripe",
            "secrets": [STRIPE_SECRET],
            "namespace": "deploy",
            "forward": {
                "url": format!("http://127.0.0.1:{port}{path}"),
                "timeout_ms": 1000,
                "retry": {"max_attempts": 2, "base_ms": 60000, "max_ms": 60000},
            },
        });
        let r = app
            .send(
                app.http
                    .put(format!("{}/v1/sources/{source}", app.base))
                    .json(&doc),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
        let body = format!(r#"{{"id":"evt_{source}","type":"charge.succeeded"}}"#);
        let r = post_stripe(app, source, now, body.as_bytes()).await;
        assert_eq!(r.body["events"][0]["status"], "accepted", "{}", r.text);
    }
    let evt = br#"{"id":"evt_deploy-ok","type":"charge.succeeded"}"#;
    let r = post_stripe(app, "deploy-ok", now, evt).await;
    assert_eq!(r.body["events"][0]["status"], "duplicate", "{}", r.text);
    let r = post_stripe(app, "deploy-ok", now, br#"{"type":"no.id"}"#).await;
    assert_eq!(r.body["events"][0]["status"], "held", "{}", r.text);
    post_stripe(app, "deploy-ok", now - 3600, evt)
        .await
        .problem(401, "stale_signature");
    // Signed for another body.
    let req = app
        .http
        .post(format!("{}/in/deploy-ok", app.base))
        .header("Stripe-Signature", stripe_sig(now, b"another body"))
        .body(evt.to_vec());
    app.as_token(None)
        .send(req)
        .await
        .problem(401, "invalid_signature");
    let forwarded = eventually(Duration::from_secs(10), || async {
        let text = app.get("/metrics").await.text;
        let s = series(&text);
        sources.iter().all(|(source, _, result)| {
            s.iter().any(|(name, l)| {
                name == "idem_deliveries_total"
                    && l.get("source").map(String::as_str) == Some(*source)
                    && l.get("result").map(String::as_str) == Some(*result)
            })
        })
    })
    .await;
    assert!(forwarded, "every source forwarded its event once");
}

#[tokio::test]
async fn dashboard_and_alert_rules_use_only_exported_metrics() {
    let app = spawn_app().await;
    let port = destination().await;
    ledger_traffic(&app).await;
    effect_traffic(&app, port).await;
    intake_traffic(&app, port).await;
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
    let mut in_panels = BTreeSet::new();
    let mut problems = Vec::new();
    for (i, e) in panel_exprs.iter().enumerate() {
        in_panels.extend(parse_expr(e).0.into_iter().map(|u| u.name));
        problems.extend(check(&format!("dashboard expr #{i} `{e}`"), e, &exp));
    }
    for (name, e) in &rule_exprs {
        problems.extend(check(&format!("rule {name}"), e, &exp));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // Every metric the server describes is exported once the traffic above ran (a new
    // metric needs traffic here that makes it appear) ...
    let described = described(&repo_file("crates/idem-server/src/metrics.rs"));
    let fams = families(&scrape.text);
    assert!(described.len() >= 20, "{described:?}");
    let missing: Vec<&String> = described
        .iter()
        .filter(|d| !fams.contains_key(*d))
        .collect();
    assert!(
        missing.is_empty(),
        "described but not exported after the traffic: {missing:?}"
    );
    // ... and every exported family has a panel.
    let idem_fams: BTreeMap<String, String> = fams
        .into_iter()
        .filter(|(n, _)| n.starts_with("idem_"))
        .collect();
    let unwatched = unwatched(&idem_fams, &in_panels);
    assert!(
        unwatched.is_empty(),
        "no dashboard panel shows {unwatched:?} (deploy/grafana/idem.json)"
    );
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
    assert!(check("ok", "idem_alerts_total{result!~\"sent\"}", &exp).is_empty());
    for bad in [
        "idem_review_queue_dept > 0",
        "idem_alerts_total{reason=\"sent\"}",
        "idem_alerts_total{result=~\"gave_up|lost\"}",
        "idem_alerts_total{result!~\"snet\"}",
        "idem_alerts_total{result!=\"lost\"}",
        "sum by (state) (idem_alerts_total)",
    ] {
        assert_eq!(check("bad", bad, &exp).len(), 1, "{bad}");
    }
}

#[test]
fn a_family_no_panel_reads_is_reported() {
    let fams = families(
        "# HELP idem_a_total A.\n\
         # TYPE idem_a_total counter\n\
         idem_a_total 0\n\
         # TYPE idem_b_seconds histogram\n\
         idem_b_seconds_bucket{le=\"+Inf\"} 0\n\
         idem_b_seconds_sum 0\n\
         idem_b_seconds_count 0\n\
         # TYPE idem_c gauge\n\
         idem_c 0\n",
    );
    assert_eq!(fams.len(), 3, "{fams:?}");
    let used = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect();
    assert!(unwatched(
        &fams,
        &used(&["idem_a_total", "idem_b_seconds_bucket", "idem_c"])
    )
    .is_empty());
    assert!(unwatched(
        &fams,
        &used(&["idem_a_total", "idem_b_seconds_count", "idem_c"])
    )
    .is_empty());
    assert_eq!(
        unwatched(&fams, &used(&["idem_a_total", "idem_b_seconds_bucket"])),
        ["idem_c"]
    );
    // A gauge is not read through a histogram's suffixes.
    assert_eq!(
        unwatched(
            &fams,
            &used(&["idem_a_total", "idem_b_seconds", "idem_c_count"])
        ),
        ["idem_b_seconds", "idem_c"]
    );
    assert_eq!(
        described(
            "metrics::describe_counter!(\"idem_a_total\", \"A.\");\n\
             metrics::describe_histogram!(\n    \"idem_b_seconds\",\n    metrics::Unit::Seconds,\n    \"B.\"\n);"
        ),
        used(&["idem_a_total", "idem_b_seconds"])
    );
}
