use super::{fill_ratios, plan, Backend, BenchOpts, Mode, Row, Workload};
use crate::report::{ratio, ratio_cell};

fn opts(workloads: Vec<Workload>) -> BenchOpts {
    BenchOpts {
        backends: vec![Backend::Sqlite, Backend::Postgres],
        pg_url: String::new(),
        pooler_url: None,
        duration: std::time::Duration::from_millis(1),
        concurrency: vec![4],
        modes: vec![Mode::Bare, Mode::Library, Mode::Http, Mode::Direct],
        workloads,
        idem_bin: "idem".into(),
        tmp_dir: None,
        duplicate_keys: 1,
        redis_server: "redis-server".into(),
        progress: false,
    }
}

fn row(backend: Backend, mode: Mode, workload: Workload, ops_per_s: f64) -> Row {
    Row {
        backend,
        mode,
        workload,
        concurrency: 4,
        ops_per_s,
        p50_ms: 1.0,
        p99_ms: 2.0,
        max_ms: 3.0,
        ratio_to_bare: None,
        ratio_to_claims: None,
        ratio_to_effect: None,
        ratio_to_direct: None,
        ratio_to_redis: None,
        errors: 0,
        server_peak_rss_mib: None,
        server_cpu_us_per_op: None,
        loadgen_cpu_us_per_op: None,
        server_threads_cpu_us_per_op: None,
    }
}

#[test]
fn action_rows_run_over_http_on_both_backends_beside_the_effect_and_duplicate_rows() {
    let specs = plan(
        &opts(vec![
            Workload::Duplicate,
            Workload::ActionDuplicate,
            Workload::Effect,
            Workload::Action,
        ]),
        false,
    );
    for w in [Workload::Action, Workload::ActionDuplicate] {
        let rows: Vec<(Backend, Mode)> = specs
            .iter()
            .filter(|s| s.2 == w)
            .map(|s| (s.0, s.1))
            .collect();
        assert_eq!(
            rows,
            [
                (Backend::Sqlite, Mode::Http),
                (Backend::Postgres, Mode::Http)
            ],
            "{w:?}"
        );
        assert!(w.runs_in(Mode::Http));
        for m in [Mode::Bare, Mode::Library, Mode::Direct, Mode::RedisAof] {
            assert!(!w.runs_in(m), "{w:?} in {m:?}");
        }
    }
    assert_eq!(Workload::Action.as_str(), "action");
    assert_eq!(Workload::ActionDuplicate.as_str(), "action_duplicate");
    // Each action row comes right after the row it is compared with.
    let sqlite: Vec<(Mode, Workload)> = specs
        .iter()
        .filter(|s| s.0 == Backend::Sqlite && s.1 == Mode::Http)
        .map(|s| (s.1, s.2))
        .collect();
    assert_eq!(
        sqlite.iter().map(|s| s.1).collect::<Vec<_>>(),
        [
            Workload::Duplicate,
            Workload::ActionDuplicate,
            Workload::Effect,
            Workload::Action
        ]
    );
}

#[test]
fn a_first_time_call_is_compared_with_the_effect_row_and_a_duplicate_with_duplicate_claims() {
    assert_eq!(Workload::Action.effect_row(), Some(Workload::Effect));
    assert_eq!(Workload::ActionDuplicate.effect_row(), None);
    assert_eq!(Workload::Action.claims_row(), Some(Workload::FirstTimePair));
    assert_eq!(
        Workload::ActionDuplicate.claims_row(),
        Some(Workload::Duplicate)
    );
    let mut rows = vec![
        row(Backend::Sqlite, Mode::Http, Workload::FirstTimePair, 1000.0),
        row(Backend::Sqlite, Mode::Http, Workload::Duplicate, 4000.0),
        row(Backend::Sqlite, Mode::Http, Workload::Effect, 800.0),
        row(Backend::Sqlite, Mode::Http, Workload::Action, 600.0),
        row(
            Backend::Sqlite,
            Mode::Http,
            Workload::ActionDuplicate,
            3000.0,
        ),
        row(Backend::Postgres, Mode::Http, Workload::Effect, 500.0),
        row(Backend::Postgres, Mode::Http, Workload::Action, 450.0),
    ];
    fill_ratios(&mut rows);
    let action = &rows[3];
    assert_eq!(action.ratio_to_effect, Some(0.75));
    assert_eq!(action.ratio_to_claims, Some(0.6));
    let dup = &rows[4];
    assert_eq!(dup.ratio_to_claims, Some(0.75));
    assert_eq!(dup.ratio_to_effect, None);
    // Same backend only: PostgreSQL's action row against PostgreSQL's effect row.
    assert_eq!(rows[6].ratio_to_effect, Some(0.9));
    assert_eq!(rows[6].ratio_to_claims, None, "no PostgreSQL claim row ran");
    assert_eq!(rows[2].ratio_to_effect, None);
    let table = super::render_table(&rows);
    assert!(table.contains("x effect"), "{table}");
    let line = table
        .lines()
        .find(|l| l.starts_with("sqlite") && l.contains(" action "))
        .unwrap_or_default();
    assert!(line.contains("0.75") && line.contains("0.60"), "{line}");
}

#[test]
fn an_action_call_is_a_stateless_tools_call_of_the_bench_action() {
    let body = super::http::action_call_body("k-1-0-7").expect("body");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(v["method"], "tools/call");
    assert_eq!(v["params"]["name"], super::http::ACTION);
    assert_eq!(v["params"]["arguments"]["order_id"], "k-1-0-7");
    assert_eq!(
        v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    let doc = super::http::action_doc("http://127.0.0.1:9/v1/charges");
    assert_eq!(doc["identity"], serde_json::json!(["order_id"]));
    assert_eq!(
        doc["deliver"]["http"]["url"],
        "http://127.0.0.1:9/v1/charges"
    );
}

#[test]
fn a_ratio_keeps_three_significant_figures_and_a_slow_row_never_reads_zero() {
    assert_eq!(ratio(1.0, 1.0), 1.0);
    assert_eq!(ratio(2_345.0, 1_000.0), 2.35);
    assert_eq!(ratio(876.0, 1_000.0), 0.876);
    // The CI flake: 7 ops/s HTTP claims against a bare store of ~3,000 ops/s.
    let slow = ratio(7.0, 3_125.0);
    assert!(slow > 0.0, "{slow}");
    assert_eq!(slow, 0.00224);
    assert_eq!(ratio_cell(slow), "0.00224");
    assert_eq!(ratio_cell(0.876), "0.88");
    assert_eq!(ratio_cell(12.3), "12.30");
    assert_eq!(ratio_cell(0.0531), "0.0531");
}
