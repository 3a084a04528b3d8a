//! `POST /in/{source}`: the provider-facing endpoint, the only write path without a bearer
//! token (the signature is the credential).
//!
//! Order of refusals, each with nothing written: unknown source 404 → method 405 → size 413
//! → signature 401 `invalid_signature` → timestamp 401 `stale_signature`; a store that does
//! not answer is 503 `store_unavailable` (the provider retries; nothing was acknowledged).
//! Then each event (one, or one per `split` element) is stored durably — its row and forward
//! item, then its record — and only then is the 200 `{source, events: [{key, status}]}`
//! sent. Every answer is counted in `idem_intake_requests_total{source,result}`; the log
//! line names the source, the masked keys and the result, never a body or a signature.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem::{
    IntakeReceiveRequest, IntakeReply, Key, Namespace, NewDelivery, NewIntakeEvent, NewOutboxItem,
    Op, OpError, OutboxKind, Reply, Rider,
};
use idem_intake::fanout::{delivery_key, DEFAULT};
use idem_intake::{IncomingEvent, Provider, VerifyConfig};
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

use super::LoadedSource;
use crate::error::{ApiError, ApiResult};
use crate::input::{path_params, RawBody};
use crate::state::AppState;
use crate::telemetry::TraceHeaders;

/// The payload of a forward outbox item: which source and destination deliver it (no
/// destination: `default`, as in every item queued before fan-out), and the W3C trace context
/// of the request that queued it (`POST /in/…`, or a redeliver), so the delivery continues
/// that trace however much later it runs (absent in items queued before it was kept, and
/// when that request had none).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct ForwardItem {
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// For the first item of a delivery to a named destination: the event's key and id, so
    /// the delivery worker can tell its delivery's record from another record holding the
    /// key (absent in items queued before, and in redeliveries, which act on a record the
    /// operator read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
}

impl ForwardItem {
    /// The item of the delivery under `key` to `destination` of `source`.
    pub fn item(
        source: &str,
        destination: &str,
        ns: &str,
        key: &str,
        dedupe: String,
        due: idem::Timestamp,
        trace: Option<TraceHeaders>,
    ) -> NewOutboxItem {
        Self::queued(source, destination, trace, None).outbox(ns, key, dedupe, due)
    }

    /// This item's payload, for `destination` of `source` (`event`: the event's key and id,
    /// for the first item of a named destination's delivery).
    fn queued(
        source: &str,
        destination: &str,
        trace: Option<TraceHeaders>,
        event: Option<(&str, Option<&str>)>,
    ) -> ForwardItem {
        let (traceparent, tracestate) = match trace {
            Some(t) => (Some(t.traceparent), t.tracestate),
            None => (None, None),
        };
        ForwardItem {
            source: source.to_owned(),
            destination: (destination != DEFAULT).then(|| destination.to_owned()),
            traceparent,
            tracestate,
            event_key: event.map(|(k, _)| k.to_owned()),
            event_id: event.and_then(|(_, id)| id.map(str::to_owned)),
        }
    }

    fn outbox(&self, ns: &str, key: &str, dedupe: String, due: idem::Timestamp) -> NewOutboxItem {
        NewOutboxItem {
            kind: OutboxKind::Forward,
            namespace: ns.to_owned(),
            key: key.to_owned(),
            dedupe,
            payload: serde_json::to_vec(self).unwrap_or_default(),
            due_at: due,
        }
    }

    /// The delivery this item was queued for, when it names one (see [`idem::DeliveryOf`]).
    pub fn expects(&self) -> Option<idem::DeliveryOf> {
        self.event_key.as_ref()?;
        Some(idem::DeliveryOf {
            source: self.source.clone(),
            event_id: self.event_id.clone(),
            destination: self.destination.clone()?,
        })
    }
}

/// `{source, events: [{key, status}]}`.
#[derive(Serialize, ToSchema)]
pub struct IntakeResponse {
    pub source: String,
    pub events: Vec<IntakeEventStatus>,
}

#[derive(Serialize, ToSchema)]
pub struct IntakeEventStatus {
    pub key: String,
    /// accepted | duplicate | held
    pub status: &'static str,
}

fn count(source: &str, result: &'static str) {
    metrics::counter!("idem_intake_requests_total", "source" => source.to_owned(), "result" => result)
        .increment(1);
}

/// Receive a provider's webhook (no token: the provider's signature is the credential).
///
/// Answers 200 once every event of the request is stored durably; a duplicate (the key was
/// seen, in any state) is answered 200 too, so the provider stops retrying, with
/// `Idempotent-Replayed: true` when every event is one. Slack's `url_verification` answers
/// `{"challenge": …}` and stores nothing.
#[utoipa::path(post, path = "/in/{source}", tag = "intake",
    params(("source" = String, Path, description = "The source name")),
    request_body(content = Vec<u8>, description = "The provider's webhook, exactly as sent", content_type = "*/*"),
    responses((status = 200, description = "stored (or already known)", body = IntakeResponse)))]
pub async fn receive(State(st): State<AppState>, req: Request) -> Response {
    match run(&st, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(st: &AppState, req: Request) -> ApiResult<Response> {
    let (mut parts, body) = req.into_parts();
    let name = path_params(&mut parts)
        .await
        .ok()
        .and_then(|p| p.into_iter().find(|(k, _)| k == "source").map(|(_, v)| v))
        .filter(|n| Namespace::try_from(n.as_str()).is_ok())
        .ok_or_else(|| ApiError::NotFound("no such source".into()))?;
    let now = st.ledger.now();
    let loaded = match st.sources.get(&name, now).await {
        Ok(Some(l)) => l,
        Ok(None) => return Err(ApiError::NotFound("no such source".into())),
        Err(e) => {
            count(&name, "unavailable");
            return Err(e.into());
        }
    };
    if parts.method != Method::POST {
        let mut resp = ApiError::MethodNotAllowed.into_response();
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return Ok(resp);
    }
    let limit = loaded.source.max_body_bytes;
    let raw = match RawBody::read(Request::from_parts(parts, body), limit).await {
        Ok(r) => r,
        Err(e) => {
            count(&name, "too_large");
            return Err(e);
        }
    };
    let secrets: Vec<String> = loaded
        .secrets
        .iter()
        .map(|s| s.expose().to_owned())
        .collect();
    let cfg = VerifyConfig {
        provider: loaded.source.provider,
        secrets: &secrets,
        tolerance_ms: loaded.source.tolerance_ms,
        hmac: loaded.source.hmac.as_ref(),
        public_url: loaded.source.public_url.as_deref(),
    };
    if let Err(refusal) = idem_intake::verify(&cfg, "POST", &raw.headers, &raw.bytes, now.0) {
        let result = match refusal {
            idem_intake::Refusal::InvalidSignature => "invalid_signature",
            idem_intake::Refusal::StaleSignature => "stale_signature",
        };
        count(&name, result);
        tracing::info!(source = %name, result, "intake refused");
        return Err(refusal.into());
    }
    if loaded.source.provider == Provider::Slack {
        if let Some(challenge) = idem_intake::slack_challenge(&raw.bytes) {
            count(&name, "accepted");
            return Ok(Json(json!({ "challenge": challenge })).into_response());
        }
    }
    let mut events = idem_intake::read_events(
        loaded.source.provider,
        loaded.source.event_id.as_ref(),
        loaded.source.split(),
        &raw.headers,
        &raw.bytes,
    );
    if events.is_empty() {
        // Nothing the id rules could read (an empty batch, a split target that is not an
        // array): the signed request is kept whole and held, never dropped.
        events.push(IncomingEvent {
            event_id: None,
            key: idem_intake::held_key(&raw.bytes),
            body: raw.bytes.to_vec(),
        });
    }
    let mut out = Vec::with_capacity(events.len());
    for ev in events {
        let (key, status) = match store_event(st, &loaded, &raw.headers, ev, now).await {
            Ok(s) => s,
            Err(e) => {
                count(&name, "unavailable");
                return Err(e);
            }
        };
        count(&name, status);
        tracing::info!(source = %name, key = %idem::mask_key(&key), result = status, "intake");
        out.push(IntakeEventStatus { key, status });
    }
    let all_duplicate = out.iter().all(|e| e.status == "duplicate");
    let mut resp = (
        StatusCode::OK,
        Json(IntakeResponse {
            source: name,
            events: out,
        }),
    )
        .into_response();
    if all_duplicate {
        resp.headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(resp)
}

/// The forwarded headers of a request: a JSON object of the source's names, lowercase, with
/// their values, in the order of `names` (a name repeated in another case is kept once: it
/// reads the same header). Written straight from the header map, without a `Value`.
pub fn forwarded_headers(names: &[String], headers: &HeaderMap) -> String {
    struct Forwarded<'a>(&'a [String], &'a HeaderMap);
    impl Serialize for Forwarded<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let Forwarded(names, headers) = *self;
            s.collect_map(names.iter().enumerate().filter_map(|(i, n)| {
                let again = names[..i].iter().any(|m| m.eq_ignore_ascii_case(n));
                let v = headers.get(n.as_str()).and_then(|v| v.to_str().ok())?;
                (!again).then(|| (n.to_ascii_lowercase(), v))
            }))
        }
    }
    // Serializing strings into a `String` cannot fail.
    serde_json::to_string(&Forwarded(names, headers)).unwrap_or_else(|_| "{}".to_owned())
}

/// Stores one event (row + forward item, then the record) and says under which key and how
/// it was taken. An event whose key another record holds (a delivery of another event,
/// another source's event, a claim: see [`idem::IntakeReceiveRequest::stands_for`]) is no
/// duplicate: it is held for review under the key of its bytes, like an event without an id
/// (`needs_review`, alert `key_collision`, answered `held`). When another record holds that
/// key too (the same bytes held for another source, or under another id), it is held under
/// [`second_held_key`] instead. Each key is tried in that order, so a redelivery of it finds
/// its record (a duplicate).
async fn store_event(
    st: &AppState,
    loaded: &LoadedSource,
    headers: &HeaderMap,
    ev: IncomingEvent,
    now: idem::Timestamp,
) -> ApiResult<(String, &'static str)> {
    let src = &loaded.source;
    let ns = Namespace::try_from(src.namespace())
        .map_err(|e| ApiError::internal(format!("source namespace: {e}")))?;
    let key = Key::try_from(ev.key.as_str())
        .map_err(|e| ApiError::internal(format!("intake key: {e}")))?;
    let IncomingEvent { event_id, body, .. } = ev;
    let own = Receive {
        ns: &ns,
        key: &key,
        event_id: event_id.clone(),
        body,
        collides_with: None,
        now,
    };
    let mut body = match receive_one(st, loaded, headers, own).await? {
        Received::Stored(status) => return Ok((key.as_str().to_owned(), status)),
        Received::KeyTaken(body) => body,
    };
    // An event without an id already tried the key of its bytes as its own.
    let mut tried = vec![key.as_str().to_owned()];
    for held in [
        idem_intake::held_key(&body),
        second_held_key(&src.name, key.as_str(), &body),
    ] {
        if tried.contains(&held) {
            continue;
        }
        let held_key = Key::try_from(held.as_str())
            .map_err(|e| ApiError::internal(format!("held key: {e}")))?;
        let r = Receive {
            ns: &ns,
            key: &held_key,
            event_id: event_id.clone(),
            body,
            collides_with: Some(key.as_str()),
            now,
        };
        match receive_one(st, loaded, headers, r).await? {
            Received::Stored(status) => {
                tracing::warn!(source = %src.name, key = %idem::mask_key(key.as_str()),
                    held = %idem::mask_key(&held),
                    "intake: the event's key is another record's; held for review");
                return Ok((held, status));
            }
            Received::KeyTaken(b) => body = b,
        }
        tried.push(held);
    }
    // Only records made under these very keys on purpose could get here. Nothing was
    // written: the 500 (its cause logged) has the provider retry.
    Err(ApiError::internal(format!(
        "intake: source {}: the key {} of an event and both of its held keys are other \
         records'; not stored",
        src.name,
        idem::mask_key(key.as_str())
    )))
}

/// The key an event is held under when its own key and the key of its bytes
/// ([`idem_intake::held_key`]) are both other records': `body-sha256:{hex}` of
/// `held event\n{source}\n{own key}\n` followed by the bytes. Stable, so a redelivery of the
/// event by the same source lands on it; distinct per source and own key, so the same bytes
/// held for several sources or ids never meet. No event id is ever kept under a
/// `body-sha256:` key (`idem_intake::key_for_event_id` hashes such an id to `sha256:…`), and
/// neither a source name nor a key holds a line break: only bytes whose own hash is this one
/// could share it.
fn second_held_key(source: &str, key: &str, body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(format!("held event\n{source}\n{key}\n").as_bytes());
    h.update(body);
    format!("body-sha256:{:x}", h.finalize())
}

/// One receive of an event under `key` (its own, or the key it is held under when its own
/// is another record's: `collides_with`).
struct Receive<'a> {
    ns: &'a Namespace,
    key: &'a Key,
    event_id: Option<String>,
    body: Vec<u8>,
    collides_with: Option<&'a str>,
    now: idem::Timestamp,
}

/// How [`receive_one`] went.
enum Received {
    /// Taken as this status (`accepted`, `held`, `duplicate`).
    Stored(&'static str),
    /// The key is another record's (its record, or its row); nothing was written. The body
    /// comes back for the hold.
    KeyTaken(Vec<u8>),
}

/// Stores one event under `r.key`: its row and forward items ride on its record's creation.
async fn receive_one(
    st: &AppState,
    loaded: &LoadedSource,
    headers: &HeaderMap,
    r: Receive<'_>,
) -> ApiResult<Received> {
    let src = &loaded.source;
    let Receive {
        ns,
        key,
        event_id,
        body,
        collides_with,
        now,
    } = r;
    let held = event_id.is_none() || collides_with.is_some();
    // Fan-out is decided here, once, on the stored bytes: the destinations whose filter the
    // event passes. `default` delivers under the event's own key; each other one gets its
    // delivery row and first item in the same step as the event.
    // A held event waits for an operator, who redelivers it to `default` (when the source
    // has it).
    let matched = if held {
        src.forward
            .iter()
            .map(|_| DEFAULT.to_owned())
            .collect::<Vec<_>>()
    } else {
        src.matching(&body, headers)
    };
    let delivers = matched.iter().any(|n| n == DEFAULT);
    let trace = crate::telemetry::operation_trace();
    let deliveries: Vec<NewDelivery> = if held {
        vec![]
    } else {
        matched
            .iter()
            .filter(|n| n.as_str() != DEFAULT)
            .map(|n| {
                let k = delivery_key(key.as_str(), n);
                let event = Some((key.as_str(), event_id.as_deref()));
                // Its own dedupe: the key may be an event's too, whose first item is "0".
                NewDelivery {
                    item: ForwardItem::queued(&src.name, n, trace.clone(), event).outbox(
                        ns.as_str(),
                        &k,
                        format!("0:{n}"),
                        now,
                    ),
                    key: k,
                    destination: n.clone(),
                }
            })
            .collect()
    };
    let row = NewIntakeEvent {
        namespace: ns.as_str().to_owned(),
        key: key.as_str().to_owned(),
        source: src.name.clone(),
        event_id: event_id.clone(),
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        headers: forwarded_headers(&src.forward_headers(), headers),
        // Kept here too: a key found taken holds the event under the key of these bytes.
        body: body.clone(),
        received_at: now,
        destinations: Some(Value::from(matched.clone()).to_string()),
        delivered_at: (!delivers && !held).then_some(now),
        event_key: None,
        destination: None,
    };
    // The event's row and its first forward item ride on the record's creation: stored in
    // the step that inserts the record, never by a delivery that finds it (a duplicate costs
    // its audit event, not a row). Of two first deliveries at once, one inserts.
    let forward = (!held && delivers).then(|| {
        ForwardItem::item(
            &src.name,
            DEFAULT,
            ns.as_str(),
            key.as_str(),
            "0".into(),
            now,
            trace,
        )
    });
    let rider = Rider {
        intake: row,
        forward,
        deliveries,
    };
    let ex = st
        .ledger
        .execute_riding(
            ns,
            key,
            Op::IntakeReceive(IntakeReceiveRequest {
                source: src.name.clone(),
                event_id: event_id.clone(),
                delivers,
                destination: None,
                collides_with: collides_with.map(str::to_owned),
            }),
            rider,
        )
        .await?;
    let stored = ex.rider_stored;
    let inserted = matches!(
        ex.reply,
        Ok(Reply::Intake(
            IntakeReply::Accepted { .. } | IntakeReply::Held { .. }
        ))
    );
    let (collision, tombstone) = match &ex.reply {
        Ok(Reply::Intake(IntakeReply::Collision { record })) => (true, is_tombstone(record)),
        _ => (false, false),
    };
    if collision && !tombstone {
        return Ok(Received::KeyTaken(body));
    }
    if tombstone || (inserted && !stored) {
        // The key's row says whose it is. Inserted but not stored: this event's (left without
        // its record) — else the store wrote nothing (see `idem::Rider`). A tombstone (its
        // payload went with the body at retention): this event's when its row is, and then
        // a duplicate, as a tombstone always answers.
        let row = st
            .ledger
            .store()
            .intake_event(ns.as_str(), key.as_str())
            .await?;
        let taken = match &row {
            Some(row) => !is_event(row, &src.name, event_id.as_deref()),
            None => collision,
        };
        if taken {
            return Ok(Received::KeyTaken(body));
        }
    }
    let reply = match ex.reply {
        Ok(Reply::Intake(IntakeReply::Collision { record })) => {
            Ok(Reply::Intake(IntakeReply::Duplicate { record }))
        }
        other => other,
    };
    match receive_status(stored, held, reply)? {
        "duplicate" => {
            metrics::counter!("idem_duplicate_hits_total").increment(1);
            Ok(Received::Stored("duplicate"))
        }
        status => Ok(Received::Stored(status)),
    }
}

/// Whether `rec` is a tombstone: retention dropped its payload (what it stood for) with its
/// result; its row, kept as long as it is, tells.
pub fn is_tombstone(rec: &idem::Record) -> bool {
    rec.result_expired && rec.prepared_payload.is_none()
}

/// Whether `row` is the row of the event `event_id` of `source` (not a delivery's, not
/// another source's event's).
fn is_event(row: &idem::IntakeEventRow, source: &str, event_id: Option<&str>) -> bool {
    row.source == source
        && row.event_id.as_deref() == event_id
        && row.event_key.is_none()
        && row.destination.is_none()
}

/// The status of one delivery. The event's row rides on its record's creation and is kept
/// once (`ON CONFLICT DO NOTHING`): the request that stored the row is the event's first
/// delivery, and it alone answers `accepted` (or `held`); every other delivery answers
/// `duplicate`, whatever the record says. The record's reply alone cannot decide it: a row
/// may be there without a record (written by an earlier version, which stored the row and the
/// record in two steps, by a receive that died between them), and the forwarder makes the
/// record of such a row itself (`forward.rs`); a delivery that then makes the record stored no
/// row, and the key was seen: `duplicate`.
fn receive_status(
    stored: bool,
    held: bool,
    reply: Result<Reply, OpError>,
) -> ApiResult<&'static str> {
    match reply {
        Ok(Reply::Intake(
            IntakeReply::Accepted { .. } | IntakeReply::Held { .. } | IntakeReply::Duplicate { .. },
        )) => Ok(match (stored, held) {
            (true, false) => "accepted",
            (true, true) => "held",
            (false, _) => "duplicate",
        }),
        Ok(_) => Err(ApiError::internal("intake: unexpected reply")),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem::{apply, Ctx, LeaseId, Policy, Timestamp};
    use serde_json::Map;

    /// The forwarded headers as a JSON object built member by member (insertion-ordered, a
    /// later member of the same name replacing the earlier one's value in place).
    fn forwarded_by_value(names: &[String], headers: &HeaderMap) -> String {
        let mut m = Map::new();
        for n in names {
            if let Some(v) = headers.get(n.as_str()).and_then(|v| v.to_str().ok()) {
                m.insert(n.to_ascii_lowercase(), Value::String(v.to_owned()));
            }
        }
        Value::Object(m).to_string()
    }

    #[test]
    fn the_second_held_key_is_a_stable_key_of_its_own_per_source_and_key() {
        let body = br#"{"id":"evt_1"}"#;
        let k = second_held_key("c", "evt_1", body);
        assert!(Key::try_from(k.as_str()).is_ok(), "{k}");
        assert_eq!(k.len(), "body-sha256:".len() + 64);
        assert_eq!(k, second_held_key("c", "evt_1", body));
        let others = [
            idem_intake::held_key(body),
            second_held_key("b", "evt_1", body),
            second_held_key("c", "evt_2", body),
            second_held_key("c", "evt_1", br#"{"id":"evt_2"}"#),
        ];
        assert!(others.iter().all(|o| *o != k), "{others:?}");
        // No event id is kept under it: an id that reads as it is hashed.
        assert_ne!(idem_intake::key_for_event_id(&k), k);
    }

    #[test]
    fn forwarded_headers_are_the_object_of_the_named_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            "stripe-signature",
            HeaderValue::from_static("t=1,v1=ab\\cd"),
        );
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("x-quote", HeaderValue::from_static("say \"hi\"\t"));
        h.append("x-twice", HeaderValue::from_static("one"));
        h.append("x-twice", HeaderValue::from_static("two"));
        h.insert(
            "x-latin",
            HeaderValue::from_bytes(b"caf\xe9").expect("an obs-text header value"),
        );
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for list in [
            names(&[]),
            names(&["Stripe-Signature"]),
            names(&["Content-Type", "Stripe-Signature", "x-missing"]),
            names(&["x-quote", "X-QUOTE", "content-type", "x-quote"]),
            names(&["x-twice", "x-latin", "stripe-signature"]),
            names(&["x-missing", "X-Missing"]),
        ] {
            assert_eq!(
                forwarded_headers(&list, &h),
                forwarded_by_value(&list, &h),
                "names {list:?}"
            );
        }
        assert_eq!(
            forwarded_headers(&names(&["Content-Type", "x-quote"]), &h),
            r#"{"content-type":"application/json","x-quote":"say \"hi\"\t"}"#
        );
    }

    /// The record's replies to the first and to a later receive of one event, from the pure
    /// decision (the way the store runs it).
    fn replies(event_id: Option<&str>) -> (Reply, Reply) {
        let ns = Namespace::try_from("hooks").expect("namespace");
        let key = Key::try_from("stripe:evt_1").expect("key");
        let policy = Policy::default();
        let ctx = Ctx {
            now: Timestamp(1_000),
            policy: &policy,
            paused: false,
            daily_count: 0,
            new_lease_id: LeaseId::from_stored(format!("{:032x}", 1)),
            jitter: 0.5,
            actor: None,
        };
        let op = Op::IntakeReceive(IntakeReceiveRequest {
            source: "stripe".into(),
            event_id: event_id.map(str::to_owned),
            delivers: true,
            destination: None,
            collides_with: None,
        });
        let first = apply(&ns, &key, None, &op, &ctx);
        let idem::Write::Insert(rec) = &first.write else {
            panic!("the first receive inserts: {:?}", first.write);
        };
        let again = apply(&ns, &key, Some(rec), &op, &ctx);
        (
            first.reply.expect("first reply"),
            again.reply.expect("second reply"),
        )
    }

    #[test]
    fn the_delivery_that_stored_the_row_is_accepted_whatever_the_record_says() {
        let (first, again) = replies(Some("evt_1"));
        assert!(matches!(first, Reply::Intake(IntakeReply::Accepted { .. })));
        assert!(matches!(
            again,
            Reply::Intake(IntakeReply::Duplicate { .. })
        ));
        // The usual first delivery.
        let status = |stored, reply: &Reply| receive_status(stored, false, Ok(reply.clone())).ok();
        assert_eq!(status(true, &first), Some("accepted"));
        // This request stored the row, then the forwarder made the record first.
        assert_eq!(status(true, &again), Some("accepted"));
        // Two first deliveries at once: the one that did not store the row reached the record
        // first; it is still the duplicate.
        assert_eq!(status(false, &first), Some("duplicate"));
        // A redelivery: the row was there already.
        assert_eq!(status(false, &again), Some("duplicate"));
    }

    #[test]
    fn held_events_and_errors_keep_their_answer() {
        let (first, again) = replies(None);
        assert!(matches!(first, Reply::Intake(IntakeReply::Held { .. })));
        assert_eq!(
            receive_status(true, true, Ok(first.clone())).ok(),
            Some("held")
        );
        assert_eq!(
            receive_status(true, true, Ok(again.clone())).ok(),
            Some("held")
        );
        assert_eq!(
            receive_status(false, true, Ok(first)).ok(),
            Some("duplicate")
        );
        assert_eq!(
            receive_status(false, true, Ok(again)).ok(),
            Some("duplicate")
        );
        assert!(receive_status(true, false, Err(OpError::NotFound)).is_err());
    }
}
