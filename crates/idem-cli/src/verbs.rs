//! Client verbs over HTTP: claim, prepare, heartbeat, complete, fail, get, ls, resolve,
//! approve, reject, pause, resume, ns get/set.
//!
//! Each verb sends one request and prints either a human table or, with `--json`, the
//! server's answer verbatim. Lease tokens are printed only in `--json` output (where scripts
//! need them), never in tables, so they do not end up in terminal scrollback by accident.

use serde_json::{json, Value};

use crate::args::{
    ClaimCmd, CompleteCmd, Conn, EffectCmd, FailCmd, HeartbeatCmd, KeyTarget, LsCmd, NoteCmd,
    NsSetCmd, NsTarget, PrepareCmd, ResolveCmd, ReviewCmd, Server,
};
use crate::client::{Answer, AnswerExt, Client};
use crate::exit::{self, CliError};
use crate::gate::parse_outcome;
use crate::table::{cell, pairs, render};
use crate::util::{json_arg, opt_duration_ms, payload};

fn client(s: &Server) -> Result<Client, CliError> {
    Ok(Client::new(&s.url, s.token.clone())?)
}

fn print_raw(ans: &Answer) {
    let t = ans.text.trim_end();
    println!("{t}");
}

/// Key/value lines for a record.
fn record_pairs(r: &Value) -> Vec<(&'static str, String)> {
    let mut v = vec![
        ("namespace", cell(&r["namespace"])),
        ("key", cell(&r["key"])),
        ("state", cell(&r["state"])),
        ("attempt", cell(&r["attempt"])),
        ("owner", cell(&r["owner"])),
        ("lease_expires_at", cell(&r["lease_expires_at"])),
        ("not_before", cell(&r["not_before"])),
        ("external_ref", cell(&r["external_ref"])),
        ("result", cell(&r["result"])),
    ];
    if r["result_expired"].as_bool() == Some(true) {
        v.push(("result_expired", "true".into()));
    }
    if !r["prepared_payload"].is_null() {
        v.push(("prepared_payload", cell(&r["prepared_payload"])));
    }
    if let Some(e) = r["last_error"].as_object() {
        let status = e.get("http_status").map(cell).unwrap_or_default();
        v.push((
            "last_error",
            format!(
                "{} (http {status}): {}",
                e.get("category").map(cell).unwrap_or_default(),
                e.get("message").map(cell).unwrap_or_default()
            ),
        ));
    }
    v.push(("fingerprint", cell(&r["fingerprint"])));
    v.push(("updated_at", cell(&r["updated_at"])));
    v
}

fn print_record(r: &Value) {
    print!("{}", pairs(&record_pairs(r)));
}

pub async fn claim(cmd: ClaimCmd) -> Result<u8, CliError> {
    let KeyTarget { ns, key, conn } = &cmd.target;
    let c = client(&conn.server)?;
    let mut body = json!({});
    if let Some(p) = payload(cmd.payload.as_deref(), cmd.payload_file.as_deref())? {
        body["payload"] = p;
    }
    if let Some(f) = &cmd.fingerprint {
        body["fingerprint"] = json!(f);
    }
    if let Some(o) = &cmd.owner {
        body["owner"] = json!(o);
    }
    if let Some(l) = opt_duration_ms("--lease", cmd.lease.as_deref())? {
        body["lease_ms"] = json!(l);
    }
    if let Some(w) = opt_duration_ms("--wait", cmd.wait.as_deref())? {
        body["wait_ms"] = json!(w);
    }
    if let Some(c) = &cmd.correlation_id {
        body["correlation_id"] = json!(c);
    }
    if let Some(l) = &cmd.lease_expiry {
        body["lease_expiry"] = json!(l);
    }
    let ans = c.claim(ns, key, &body).await?;
    let outcome = ans.body["outcome"]
        .as_str()
        .and_then(parse_outcome)
        .ok_or_else(|| {
            crate::client::ApiError::Protocol(format!("unknown outcome: {}", ans.text))
        })?;
    if conn.json {
        print_raw(&ans);
    } else {
        let mut head = vec![("outcome", outcome.as_str().to_owned())];
        if let Some(r) = ans.body["resumed"].as_bool() {
            head.push(("resumed", r.to_string()));
        }
        if let Some(ms) = ans.body["retry_after_ms"].as_i64() {
            head.push(("retry_after_ms", ms.to_string()));
        }
        if ans.body.get("token").is_some_and(|t| !t.is_null()) {
            head.push(("token", "(hidden; use --json and read .token)".into()));
        }
        if ans.replayed {
            head.push(("replayed", "true".into()));
        }
        print!("{}", pairs(&head));
        if ans.body["record"].is_object() {
            print_record(&ans.body["record"]);
        }
    }
    Ok(exit::for_outcome(outcome))
}

/// The exit code of an effect answer: 0 only when this call performed the effect, else the
/// claim outcome's code (`completed` 19 for a replay, `failed_permanent` 17, `backoff` 11,
/// `needs_review` 12, …).
pub fn effect_exit(outcome: &str) -> Option<u8> {
    match outcome {
        "performed" => Some(exit::OK),
        other => parse_outcome(other).map(exit::for_outcome),
    }
}

/// The body of `idem effect` from its flags (header values are never echoed in errors).
pub fn effect_body(cmd: &EffectCmd) -> Result<Value, CliError> {
    let mut headers = serde_json::Map::new();
    for h in &cmd.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| CliError::input("-H: give `Name: value`"))?;
        headers.insert(name.trim().to_owned(), json!(value.trim_start()));
    }
    let mut request = json!({"method": cmd.method.to_ascii_uppercase(), "url": cmd.url});
    if !headers.is_empty() {
        request["headers"] = Value::Object(headers);
    }
    if let Some(d) = &cmd.data {
        request["body"] = match d.strip_prefix('@') {
            Some(path) => crate::util::json_file("--data", std::path::Path::new(path))?,
            None => json_arg("--data", d)?,
        };
    }
    let mut body = json!({"request": request});
    if cmd.no_idempotency_header {
        body["idempotency_header"] = Value::Null;
    } else if let Some(h) = &cmd.idempotency_header {
        body["idempotency_header"] = json!(h);
    }
    if let Some(t) = cmd.timeout_ms {
        body["timeout_ms"] = json!(t);
    }
    if cmd.destination_idempotent {
        body["destination_idempotent"] = json!(true);
    }
    if let Some(o) = &cmd.owner {
        body["owner"] = json!(o);
    }
    Ok(body)
}

pub async fn effect(cmd: EffectCmd) -> Result<u8, CliError> {
    let c = Client::new(&cmd.server, cmd.token.clone())?;
    let body = effect_body(&cmd)?;
    // The server may wait for the destination the whole timeout_ms, then reconcile.
    let wait = std::time::Duration::from_millis(cmd.timeout_ms.unwrap_or(30_000) * 2 + 30_000);
    let ans = c.effect(&cmd.ns, &cmd.key, &body, wait).await?;
    let outcome = ans.body["outcome"].as_str().unwrap_or_default().to_owned();
    let code = effect_exit(&outcome).ok_or_else(|| {
        crate::client::ApiError::Protocol(format!("unknown outcome: {}", ans.text))
    })?;
    if cmd.json {
        print_raw(&ans);
    } else {
        let response = &ans.body["response"];
        if !response.is_null() {
            println!("{response}");
        }
        let mut line = format!("idem: {outcome}");
        if let Some(ms) = ans.body["retry_after_ms"].as_i64() {
            line.push_str(&format!(" (retry after {ms} ms)"));
        }
        if ans.replayed {
            line.push_str(" (replayed)");
        }
        eprintln!("{line}");
    }
    Ok(code)
}

/// Prints a `{state, record}` answer.
/// Sends `body` as the key action `action` on `target` and prints the state answered.
async fn state_action(target: &KeyTarget, action: &str, body: &Value) -> Result<u8, CliError> {
    let ans = client(&target.conn.server)?
        .key_action(&target.ns, &target.key, action, body)
        .await?;
    print_state_answer(&ans, target.conn.json);
    Ok(exit::OK)
}

fn print_state_answer(ans: &Answer, json: bool) {
    if json {
        print_raw(ans);
    } else if ans.body["record"].is_object() {
        print_record(&ans.body["record"]);
    } else {
        print_raw(ans);
    }
}

pub async fn prepare(cmd: PrepareCmd) -> Result<u8, CliError> {
    let p = payload(cmd.payload.as_deref(), cmd.payload_file.as_deref())?
        .ok_or_else(|| CliError::input("give --payload or --payload-file"))?;
    let body = json!({
        "token": cmd.lease.lease_token,
        "payload": p,
        "approval_required": cmd.approval_required,
    });
    state_action(&cmd.target, "prepare", &body).await
}

pub async fn heartbeat(cmd: HeartbeatCmd) -> Result<u8, CliError> {
    let mut body = json!({ "token": cmd.lease.lease_token });
    if let Some(l) = opt_duration_ms("--lease-for", cmd.lease_for.as_deref())? {
        body["lease_ms"] = json!(l);
    }
    state_action(&cmd.target, "heartbeat", &body).await
}

pub async fn complete(cmd: CompleteCmd) -> Result<u8, CliError> {
    let mut body = json!({ "token": cmd.lease.lease_token });
    if let Some(r) = &cmd.result {
        body["result"] = json_arg("--result", r)?;
    }
    if let Some(e) = &cmd.external_ref {
        body["external_ref"] = json!(e);
    }
    if let Some(c) = cmd.cost.to_json() {
        body["cost"] = c;
    }
    state_action(&cmd.target, "complete", &body).await
}

pub async fn fail(cmd: FailCmd) -> Result<u8, CliError> {
    let KeyTarget { ns, key, conn } = &cmd.target;
    let mut body = json!({ "token": cmd.lease.lease_token });
    if let Some(k) = &cmd.kind {
        body["kind"] = json!(k);
    }
    if let Some(s) = cmd.http_status {
        body["http_status"] = json!(s);
    }
    if let Some(s) = cmd.sent {
        body["sent"] = json!(s);
    }
    if let Some(r) = &cmd.retry_after {
        // Seconds go as an integer, an HTTP-date as a string (the API takes both).
        body["retry_after"] = match r.trim().parse::<u64>() {
            Ok(n) => json!(n),
            Err(_) => json!(r),
        };
    }
    if cmd.category.is_some() || cmd.message.is_some() {
        body["error"] = json!({
            "category": cmd.category.as_deref().unwrap_or("other"),
            "message": cmd.message.as_deref().unwrap_or(""),
        });
    }
    if let Some(c) = cmd.cost.to_json() {
        body["cost"] = c;
    }
    let ans = client(&conn.server)?
        .key_action(ns, key, "fail", &body)
        .await?;
    if conn.json {
        print_raw(&ans);
    } else {
        let retry = &ans.body["retry"];
        print!(
            "{}",
            pairs(&[
                ("class", cell(&ans.body["class"])),
                ("retry_allowed", cell(&retry["allowed"])),
                ("attempt", cell(&retry["attempt"])),
                ("max_attempts", cell(&retry["max_attempts"])),
                ("not_before", cell(&retry["not_before"])),
            ])
        );
        print_record(&ans.body["record"]);
    }
    Ok(exit::OK)
}

pub async fn get(t: KeyTarget) -> Result<u8, CliError> {
    let c = client(&t.conn.server)?;
    let ans = c.get(c.key_url(&t.ns, &t.key, None)).await?.ok()?;
    if t.conn.json {
        print_raw(&ans);
        return Ok(exit::OK);
    }
    print_record(&ans.body["record"]);
    let events = ans.body["events"].as_array().cloned().unwrap_or_default();
    if !events.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = events
            .iter()
            .map(|e| {
                let from = cell(&e["from_state"]);
                let to = cell(&e["to_state"]);
                vec![
                    cell(&e["seq"]),
                    cell(&e["at"]),
                    cell(&e["type"]),
                    format!("{from} → {to}"),
                    cell(&e["attempt"]),
                    cell(&e["owner"]),
                    cell(&e["note"]),
                ]
            })
            .collect();
        print!(
            "{}",
            render(
                &["SEQ", "AT", "EVENT", "STATE", "ATTEMPT", "OWNER", "NOTE"],
                &rows
            )
        );
    }
    Ok(exit::OK)
}

pub async fn ls(cmd: LsCmd) -> Result<u8, CliError> {
    let NsTarget { ns, conn } = &cmd.target;
    let limit = cmd.limit.map(|l| l.to_string());
    let query = [
        ("state", cmd.state.as_deref()),
        ("limit", limit.as_deref()),
        ("cursor", cmd.cursor.as_deref()),
        ("owner", cmd.owner.as_deref()),
        ("correlation_id", cmd.correlation_id.as_deref()),
    ];
    let headers = ["KEY", "STATE", "ATTEMPT", "UPDATED", "OWNER", "LAST ERROR"];
    list_records(conn, &["v1", "namespaces", ns, "keys"], &query, &headers).await
}

pub async fn review(cmd: ReviewCmd) -> Result<u8, CliError> {
    let limit = cmd.limit.map(|l| l.to_string());
    let query = [
        ("namespace", cmd.namespace.as_deref()),
        ("state", cmd.state.as_deref()),
        ("owner", cmd.owner.as_deref()),
        ("correlation_id", cmd.correlation_id.as_deref()),
        ("cursor", cmd.cursor.as_deref()),
        ("limit", limit.as_deref()),
    ];
    let headers = [
        "NAMESPACE",
        "KEY",
        "STATE",
        "ATTEMPT",
        "SINCE",
        "OWNER",
        "LAST ERROR",
    ];
    list_records(&cmd.conn, &["v1", "review"], &query, &headers).await
}

/// GETs the page of records at `path` with the `query` parameters that are given, and prints
/// it raw (`--json`) or as a table of `headers`.
async fn list_records(
    conn: &Conn,
    path: &[&str],
    query: &[(&str, Option<&str>)],
    headers: &[&str],
) -> Result<u8, CliError> {
    let c = client(&conn.server)?;
    let mut url = c.url(path);
    {
        let mut q = url.query_pairs_mut();
        for (name, v) in query {
            if let Some(v) = v {
                q.append_pair(name, v);
            }
        }
    }
    if url.query() == Some("") {
        url.set_query(None);
    }
    let ans = c.get(url).await?.ok()?;
    if conn.json {
        print_raw(&ans);
        return Ok(exit::OK);
    }
    print_records(&ans.body, headers);
    Ok(exit::OK)
}

/// A page of records as a table (with a namespace column first when `headers` starts with
/// one), and the cursor of the next page on stderr.
fn print_records(body: &Value, headers: &[&str]) {
    let with_namespace = headers.first() == Some(&"NAMESPACE");
    let items = body["items"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|r| {
            let mut row = Vec::with_capacity(headers.len());
            if with_namespace {
                row.push(cell(&r["namespace"]));
            }
            row.extend([
                cell(&r["key"]),
                cell(&r["state"]),
                cell(&r["attempt"]),
                cell(&r["updated_at"]),
                cell(&r["owner"]),
                r["last_error"]["category"]
                    .as_str()
                    .map_or("-".into(), str::to_owned),
            ]);
            row
        })
        .collect();
    print!("{}", render(headers, &rows));
    if let Some(next) = body["next_cursor"].as_str() {
        eprintln!("more: --cursor {next}");
    }
}

pub async fn resolve(cmd: ResolveCmd) -> Result<u8, CliError> {
    let mut body = json!({ "action": cmd.action, "note": cmd.note });
    if let Some(e) = &cmd.external_ref {
        body["external_ref"] = json!(e);
    }
    if let Some(r) = &cmd.result {
        body["result"] = json_arg("--result", r)?;
    }
    state_action(&cmd.target, "resolve", &body).await
}

/// approve / reject
pub async fn note_action(cmd: NoteCmd, action: &str) -> Result<u8, CliError> {
    let mut body = json!({});
    if let Some(n) = &cmd.note {
        body["note"] = json!(n);
    }
    state_action(&cmd.target, action, &body).await
}

/// A policy value; `*_ms` durations also in human form (`2592000000 (30days)`).
fn policy_cell(name: &str, v: &Value) -> String {
    match (name.ends_with("_ms"), v.as_u64()) {
        (true, Some(ms)) if ms > 0 => format!(
            "{ms} ({})",
            humantime::format_duration(std::time::Duration::from_millis(ms))
        ),
        _ => cell(v),
    }
}

fn print_namespace(ans: &Answer, json: bool) {
    if json {
        print_raw(ans);
        return;
    }
    let b = &ans.body;
    let mut items = vec![
        ("namespace", cell(&b["namespace"])),
        ("paused", cell(&b["paused"])),
    ];
    let mut policy: Vec<(String, String)> = Vec::new();
    if let Some(p) = b["policy"].as_object() {
        for (k, v) in p {
            match v.as_object() {
                Some(inner) => {
                    for (ik, iv) in inner {
                        policy.push((format!("{k}.{ik}"), policy_cell(ik, iv)));
                    }
                }
                None => policy.push((k.clone(), policy_cell(k, v))),
            }
        }
    }
    let mut counts: Vec<(String, String)> = Vec::new();
    if let Some(c) = b["counts"].as_object() {
        for (k, v) in c {
            counts.push((format!("count.{k}"), cell(v)));
        }
    }
    let extra: Vec<(&str, String)> = policy
        .iter()
        .chain(counts.iter())
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    items.extend(extra);
    print!("{}", pairs(&items));
}

pub async fn pause_resume(t: NsTarget, action: &str) -> Result<u8, CliError> {
    let ans = client(&t.conn.server)?
        .switch_namespace(&t.ns, action)
        .await?;
    if t.conn.json {
        print_raw(&ans);
    } else if ans.body.get("namespace").is_some() {
        print_namespace(&ans, false);
    } else {
        eprintln!("namespace {}: {action}d", t.ns);
    }
    Ok(exit::OK)
}

pub async fn ns_get(t: NsTarget) -> Result<u8, CliError> {
    let ans = client(&t.conn.server)?.namespace(&t.ns).await?;
    print_namespace(&ans, t.conn.json);
    Ok(exit::OK)
}

pub async fn ns_set(cmd: NsSetCmd) -> Result<u8, CliError> {
    let patch = json_arg("--json", &cmd.patch)?;
    if !patch.is_object() {
        return Err(CliError::input(
            "--json: the policy patch must be a JSON object",
        ));
    }
    let ans = client(&cmd.server)?
        .patch_namespace(&cmd.ns, &patch)
        .await?;
    print_namespace(&ans, cmd.raw);
    Ok(exit::OK)
}
