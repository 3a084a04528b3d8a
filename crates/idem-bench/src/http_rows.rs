//! The HTTP and direct rows: what each client of one row does (first-time pairs, duplicate
//! claims, effects, action calls and their duplicates, intake events and redeliveries, the
//! effect's request sent straight), the destinations and sinks a row needs, and the row's run
//! against a fresh `idem serve` with its CPU and memory readings.
//!
//! A row only talks to its own server, destination and sink on loopback, and checks that
//! every effect reached the destination exactly once; it must never compute ratios (that is
//! the report).

use std::time::Duration;

use anyhow::Context;

use crate::server::{cpu_time, us_per_op};
use crate::signed::{intake_body, stripe_headers, INTAKE_SECRET, INTAKE_SOURCE};
use crate::{
    dest, http, key_for, load, BenchOpts, HttpExtra, Measurement, ServerProcess, Workload,
};

/// First-time pairs over HTTP: each client claims and completes fresh keys.
struct HttpPairs {
    run_id: u64,
}

impl http::ClientOp for HttpPairs {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        http::pair(conn, &key_for(self.run_id, client, seq)).await
    }
}

/// Duplicate claims over HTTP of already completed keys (claim paths built once).
struct HttpDuplicates {
    claims: Vec<hyper::Uri>,
}

impl http::ClientOp for HttpDuplicates {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let uri = load::pick(&self.claims, client, seq).clone();
        http::duplicate(conn, uri).await
    }
}

/// Effects of fresh keys over HTTP, each a POST to the destination through idem.
struct HttpEffects {
    run_id: u64,
    body: bytes::Bytes,
}

impl http::ClientOp for HttpEffects {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let key = key_for(self.run_id, client, seq);
        http::effect(conn, &key, self.body.clone()).await
    }
}

/// Action calls with a fresh identity each (`tools/call` on `/mcp/bench`, delivered by HTTP).
struct ActionCalls {
    run_id: u64,
}

impl http::ClientOp for ActionCalls {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let body = http::action_call_body(&key_for(self.run_id, client, seq))?;
        http::action_call(conn, body, "performed").await
    }
}

/// Action calls of identities already delivered (answered `completed`, replayed; bodies
/// built once).
struct ActionDuplicates {
    bodies: Vec<bytes::Bytes>,
}

impl http::ClientOp for ActionDuplicates {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let body = load::pick(&self.bodies, client, seq).clone();
        http::action_call(conn, body, "completed").await
    }
}

/// Opens the effect rows' destination `d` in the bench namespace's egress on `server` (it is
/// on loopback: only an exact host:port entry opens it); returns the URL to send to.
async fn allow_destination(
    server: &ServerProcess,
    d: &dest::Destination,
) -> anyhow::Result<String> {
    let (url, entry) = effect_url(d);
    let allow = serde_json::json!({"egress": {"allow": [entry]}});
    http::patch(
        &server.target,
        "/v1/namespaces/bench",
        bytes::Bytes::from(serde_json::to_vec(&allow)?),
    )
    .await?;
    Ok(url)
}

/// Declares the bench's action on `server`, delivering to the effect rows' destination `d`
/// (its address opened in the namespace's egress, as for the effect rows).
async fn declare_action(server: &ServerProcess, d: &dest::Destination) -> anyhow::Result<()> {
    let url = allow_destination(server, d).await?;
    http::put(
        &server.target,
        &format!("/v1/namespaces/bench/actions/{}", http::ACTION),
        bytes::Bytes::from(serde_json::to_vec(&http::action_doc(&url))?),
    )
    .await
}

/// Calls every body once on `conns` connections (each takes every `conns`-th): the
/// identities a duplicate row repeats, each delivered once before the row starts.
async fn first_calls(
    target: &http::Target,
    conns: usize,
    bodies: &[bytes::Bytes],
) -> anyhow::Result<()> {
    let conns = conns.max(1);
    futures::future::try_join_all((0..conns).map(|i| async move {
        let (mut conn, driver) = http::connect(target).await?;
        http::on_conn(driver, async {
            for b in bodies.iter().skip(i).step_by(conns) {
                http::action_call(&mut conn, b.clone(), "performed").await?;
            }
            anyhow::Ok(())
        })
        .await
    }))
    .await?;
    Ok(())
}

/// The effect's request sent straight to the destination.
struct DirectPosts {
    uri: hyper::Uri,
    body: bytes::Bytes,
}

impl http::ClientOp for DirectPosts {
    async fn run(&self, conn: &mut http::Conn, _client: usize, _seq: u64) -> anyhow::Result<()> {
        http::direct(conn, self.uri.clone(), self.body.clone()).await
    }
}

/// First-time events: each client posts fresh event ids.
struct IntakeEvents {
    run_id: u64,
    uri: hyper::Uri,
}

impl http::ClientOp for IntakeEvents {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let body = intake_body(&format!("evt_{:x}_{client}_{seq}", self.run_id));
        let headers = stripe_headers(&body)?;
        http::intake(conn, self.uri.clone(), body, &headers, "accepted").await
    }
}

/// Redeliveries of events already accepted (answered `duplicate`), re-signed each time as a
/// provider's retry is.
struct IntakeDuplicates {
    bodies: Vec<bytes::Bytes>,
    uri: hyper::Uri,
}

impl http::ClientOp for IntakeDuplicates {
    async fn run(&self, conn: &mut http::Conn, client: usize, seq: u64) -> anyhow::Result<()> {
        let body = load::pick(&self.bodies, client, seq).clone();
        let headers = stripe_headers(&body)?;
        http::intake(conn, self.uri.clone(), body, &headers, "duplicate").await
    }
}

/// Creates the intake source on `server`, forwarding to `sink`: `forward` alone, or with
/// `fanout` two more destinations on the same sink (three deliveries per event).
async fn intake_source(
    server: &ServerProcess,
    sink: &dest::Destination,
    fanout: bool,
) -> anyhow::Result<()> {
    let url = format!("http://{}/webhook", sink.addr);
    let mut source = serde_json::json!({
        "provider": "stripe",
        "secrets": [INTAKE_SECRET],
        "forward": {"url": url},
    });
    if fanout {
        source["forwards"] = serde_json::json!({"crm": {"url": url}, "slack": {"url": url}});
    }
    http::put(
        &server.target,
        &format!("/v1/sources/{INTAKE_SOURCE}"),
        bytes::Bytes::from(serde_json::to_vec(&source)?),
    )
    .await
}

/// The destination's charge path.
const CHARGE_PATH: &str = "/v1/charges";

/// An effect row's destination: every request gets `response_bytes` of JSON (over TLS for
/// `effect_tls`).
async fn destination(workload: Workload) -> anyhow::Result<dest::Destination> {
    let n = workload
        .response_bytes()
        .context("not an effect workload")?;
    if workload == Workload::EffectTls {
        dest::Destination::start_tls(dest::json_of_size(n)).await
    } else {
        dest::Destination::start(dest::json_of_size(n)).await
    }
}

/// The URL an effect row sends to, and the egress entry that opens it: the TLS destination
/// by the name its certificate holds (`localhost`, resolved by idem to loopback), the plain
/// one by its address.
fn effect_url(d: &dest::Destination) -> (String, String) {
    match d.ca_file() {
        Some(_) => {
            let host = format!("localhost:{}", d.addr.port());
            (format!("https://{host}{CHARGE_PATH}"), host)
        }
        None => (
            format!("http://{}{CHARGE_PATH}", d.addr),
            d.addr.to_string(),
        ),
    }
}

/// Every effect answered `performed` must have reached the destination exactly once.
/// Also says on stderr over how many connections the requests came (kept connections: a
/// handful per row; one per request means none was reused).
fn check_one_request_each(m: &Measurement, d: &dest::Destination) -> anyhow::Result<()> {
    eprintln!(
        "[destination] {} requests over {} connections",
        d.requests(),
        d.connections()
    );
    if m.errors == 0 {
        anyhow::ensure!(
            d.requests() == m.ops,
            "{} effects performed, {} requests at the destination",
            m.ops,
            d.requests()
        );
    }
    Ok(())
}

pub(crate) async fn run_direct(
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<Measurement> {
    let d = destination(workload).await?;
    let target = match d.client_tls() {
        Some(tls) => http::Target::tls(d.addr, tls)?,
        None => http::Target::new(d.addr)?,
    };
    let body = bytes::Bytes::from_static(br#"{"amount":1000,"currency":"eur"}"#);
    let op = DirectPosts {
        uri: hyper::Uri::from_static(CHARGE_PATH),
        body,
    };
    let m = http::drive(c, opts.duration, &target, op).await?;
    check_one_request_each(&m, &d)?;
    Ok(m)
}

/// What one HTTP row's clients do (a destination or sink lives as long as the row).
enum HttpOp {
    Pairs(HttpPairs),
    Duplicates(HttpDuplicates),
    Effects(HttpEffects, dest::Destination),
    Actions(ActionCalls, dest::Destination),
    /// The calls, the destination, and how many requests it had before the row.
    ActionDuplicates(ActionDuplicates, dest::Destination, u64),
    Intake(IntakeEvents, dest::Destination),
    IntakeDuplicates(IntakeDuplicates, dest::Destination),
}

pub(crate) async fn run_http(
    url: &str,
    workload: Workload,
    c: usize,
    opts: &BenchOpts,
) -> anyhow::Result<(Measurement, HttpExtra)> {
    // An effect row's destination first: a TLS one gives the server its CA.
    let effect_dest = match workload {
        Workload::Effect
        | Workload::Effect256k
        | Workload::EffectTls
        | Workload::Action
        | Workload::ActionDuplicate => Some(destination(workload).await?),
        _ => None,
    };
    let mut extra: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(ca) = effect_dest.as_ref().and_then(|d| d.ca_file()) {
        extra.push("--extra-ca".as_ref());
        extra.push(ca.as_os_str());
    }
    let server = ServerProcess::start_with(&opts.idem_bin, url, &extra).await?;
    let run_id: u64 = rand::random();
    let result = async {
        let op = match workload {
            Workload::FirstTimePair => HttpOp::Pairs(HttpPairs { run_id }),
            Workload::Duplicate => {
                let keys: Vec<String> = (0..opts.duplicate_keys.max(1))
                    .map(|i| format!("dup-{run_id:x}-{i}"))
                    .collect();
                // 16 at a time: fast with group commit, and independent of the concurrency.
                http::pairs(&server.target, 16, &keys).await?;
                let claims = keys
                    .iter()
                    .map(|k| http::key_uri(k, "claim"))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                HttpOp::Duplicates(HttpDuplicates { claims })
            }
            Workload::Effect | Workload::Effect256k | Workload::EffectTls => {
                let d = effect_dest.context("no destination")?;
                let url = allow_destination(&server, &d).await?;
                let body = http::effect_body(&url)?;
                HttpOp::Effects(HttpEffects { run_id, body }, d)
            }
            Workload::Action => {
                let d = effect_dest.context("no destination")?;
                declare_action(&server, &d).await?;
                HttpOp::Actions(ActionCalls { run_id }, d)
            }
            Workload::ActionDuplicate => {
                let d = effect_dest.context("no destination")?;
                declare_action(&server, &d).await?;
                let bodies = (0..opts.duplicate_keys.max(1))
                    .map(|i| http::action_call_body(&format!("dup-{run_id:x}-{i}")))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                // 16 at a time, as the duplicate claims' keys are prepared.
                first_calls(&server.target, 16, &bodies).await?;
                let before = d.requests();
                anyhow::ensure!(
                    before == bodies.len() as u64,
                    "{} first calls, {before} requests at the destination",
                    bodies.len()
                );
                HttpOp::ActionDuplicates(ActionDuplicates { bodies }, d, before)
            }
            Workload::Intake | Workload::IntakeFanout3 | Workload::IntakeDuplicate => {
                let sink = dest::Destination::start(dest::json_of_size(24)).await?;
                intake_source(&server, &sink, workload == Workload::IntakeFanout3).await?;
                let uri = hyper::Uri::try_from(format!("/in/{INTAKE_SOURCE}"))?;
                if workload != Workload::IntakeDuplicate {
                    HttpOp::Intake(IntakeEvents { run_id, uri }, sink)
                } else {
                    let bodies: Vec<bytes::Bytes> = (0..opts.duplicate_keys.max(1))
                        .map(|i| intake_body(&format!("evt_dup_{run_id:x}_{i}")))
                        .collect();
                    let (mut conn, driver) = http::connect(&server.target).await?;
                    http::on_conn(driver, async {
                        for b in &bodies {
                            let headers = stripe_headers(b)?;
                            http::intake(&mut conn, uri.clone(), b.clone(), &headers, "accepted")
                                .await?;
                        }
                        anyhow::Ok(())
                    })
                    .await?;
                    HttpOp::IntakeDuplicates(IntakeDuplicates { bodies, uri }, sink)
                }
            }
        };
        let (srv0, gen0) = (server.cpu_time(), cpu_time("/proc/self/stat"));
        let threads0 = server.threads_cpu_time();
        let m = match op {
            HttpOp::Pairs(p) => http::drive(c, opts.duration, &server.target, p).await?,
            HttpOp::Duplicates(d) => http::drive(c, opts.duration, &server.target, d).await?,
            HttpOp::Effects(e, d) => {
                let m = http::drive(c, opts.duration, &server.target, e).await?;
                check_one_request_each(&m, &d)?;
                m
            }
            HttpOp::Actions(a, d) => {
                let m = http::drive(c, opts.duration, &server.target, a).await?;
                check_one_request_each(&m, &d)?;
                m
            }
            // A replayed call sends nothing: the destination's count does not move.
            HttpOp::ActionDuplicates(a, d, before) => {
                let m = http::drive(c, opts.duration, &server.target, a).await?;
                anyhow::ensure!(
                    d.requests() == before,
                    "{} requests at the destination during duplicate calls",
                    d.requests() - before
                );
                m
            }
            // The sink keeps receiving forwards during the row: the forwarder shares the
            // server's cores with the intake, as in production.
            HttpOp::Intake(op, _sink) => http::drive(c, opts.duration, &server.target, op).await?,
            HttpOp::IntakeDuplicates(op, _sink) => {
                http::drive(c, opts.duration, &server.target, op).await?
            }
        };
        let (srv1, gen1) = (server.cpu_time(), cpu_time("/proc/self/stat"));
        let threads = server
            .threads_cpu_time()
            .zip(threads0)
            .map(|(after, before)| {
                after
                    .into_iter()
                    .filter_map(|(name, a)| {
                        let b = before.get(&name).copied().unwrap_or(Duration::ZERO);
                        Some((name, us_per_op(Some(b), Some(a), m.ops)?))
                    })
                    .collect()
            });
        let extra = HttpExtra {
            rss_mib: server.peak_rss_mib(),
            server_cpu_us_per_op: us_per_op(srv0, srv1, m.ops),
            loadgen_cpu_us_per_op: us_per_op(gen0, gen1, m.ops),
            server_threads_cpu_us_per_op: threads,
        };
        anyhow::Ok((m, extra))
    }
    .await;
    server.stop().await;
    result
}
