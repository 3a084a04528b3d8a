//! `idem bench`: one command measures the bare store, the library and the HTTP server side
//! by side, prints the table and writes the JSON report; `--scale` does the ledger-size and
//! janitor runs. Short runs: these check the tool, not the figures.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::helpers::*;

/// Runs `idem bench ARGS --duration 300ms --concurrency 2 --json DIR/report.json`; the
/// output and the report.
fn bench(args: &[&str], dir: &std::path::Path) -> (Out, Value) {
    let json = dir.join("report.json");
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--duration",
        "300ms",
        "--concurrency",
        "2",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let out = run_with(&all, "", &[]);
    assert_eq!(out.code, 0, "{out:?}");
    let report = report(&json);
    (out, report)
}

fn report(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).expect("report written");
    serde_json::from_str(&text).expect("report is JSON")
}

/// Every row of a side-by-side report: all modes and workloads, real operations, no errors,
/// ordered latencies, ratios to the bare row (effect and intake rows: to the HTTP claim rows), server
/// figures on HTTP rows.
fn check_side_by_side(out: &Out, json: &Value, backend: &str) {
    assert!(
        json["machine"]["cpus"].as_u64().is_some_and(|n| n > 0),
        "{json}"
    );
    let rows = json["rows"].as_array().expect("rows");
    let mut seen = BTreeSet::new();
    for r in rows {
        assert_eq!(r["backend"], backend, "{r}");
        assert_eq!(r["concurrency"], 2, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        assert!(f("ops_per_s") > 0.0, "{r}");
        assert!(
            f("p50_ms") <= f("p99_ms") && f("p99_ms") <= f("max_ms"),
            "{r}"
        );
        let (mode, workload) = (
            r["mode"].as_str().expect("mode").to_owned(),
            r["workload"].as_str().expect("workload").to_owned(),
        );
        let effect = workload.starts_with("effect") || workload.starts_with("intake");
        match (mode.as_str(), effect) {
            ("bare", false) => assert_eq!(f("ratio_to_bare"), 1.0, "{r}"),
            ("library", false) => assert!(f("ratio_to_bare") > 0.0, "{r}"),
            ("http", false) => {
                assert!(f("ratio_to_bare") > 0.0, "{r}");
                assert!(f("server_peak_rss_mib") > 1.0, "{r}");
            }
            // Effects and intake are compared with the HTTP claim rows, not with a bare row.
            ("http", true) => {
                assert!(f("ratio_to_claims") > 0.0, "{r}");
                assert!(r.get("ratio_to_bare").is_none(), "{r}");
                assert!(f("server_peak_rss_mib") > 1.0, "{r}");
            }
            ("direct", true) => assert!(f("ratio_to_claims") > 0.0, "{r}"),
            other => panic!("no such row: {other:?} in {r}"),
        }
        // The printed table has the same row.
        let line = format!("{backend} {mode} {workload} 2 ");
        assert!(
            out.stdout.lines().any(|l| l
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .starts_with(&line)),
            "no table line for {line:?} in\n{}",
            out.stdout
        );
        seen.insert((mode, workload));
    }
    let pairs = |modes: &'static [&'static str], workloads: &'static [&'static str]| {
        modes.iter().flat_map(move |m| {
            workloads
                .iter()
                .map(move |w| ((*m).to_owned(), (*w).to_owned()))
        })
    };
    let want: BTreeSet<(String, String)> = pairs(
        &["bare", "library", "http"],
        &["first_time_pair", "duplicate"],
    )
    .chain(pairs(
        &["http", "direct"],
        &["effect", "effect_256k", "effect_tls"],
    ))
    .chain(pairs(&["http"], &["intake", "intake_duplicate"]))
    .collect();
    assert_eq!(seen, want);
    assert_eq!(rows.len(), 14);
}

#[test]
fn bench_prints_the_side_by_side_table_and_writes_the_json_report() {
    let dir = tempfile::tempdir().expect("tmp");
    let tmp = dir.path().to_str().expect("utf-8 path");
    let (out, json) = bench(&["--backend", "sqlite", "--tmp-dir", tmp], dir.path());
    check_side_by_side(&out, &json, "sqlite");
}

#[test]
fn bench_runs_against_postgres() {
    let Ok(admin) = std::env::var("IDEM_TEST_PG") else {
        eprintln!("IDEM_TEST_PG not set: skipping the PostgreSQL bench run");
        return;
    };
    let dir = tempfile::tempdir().expect("tmp");
    let (out, json) = bench(&["--backend", "postgres", "--db", &admin], dir.path());
    check_side_by_side(&out, &json, "postgres");
}

#[test]
fn bench_scale_measures_ledger_sizes_and_the_janitor() {
    let dir = tempfile::tempdir().expect("tmp");
    let tmp = dir.path().to_str().expect("utf-8 path");
    let (_, r) = bench(
        &[
            "--scale",
            "--backend",
            "sqlite",
            "--sizes",
            "0,10000",
            "--janitor-records",
            "3000",
            "--tmp-dir",
            tmp,
        ],
        dir.path(),
    );
    let sizes: Vec<u64> = r["size_rows"]
        .as_array()
        .expect("size_rows")
        .iter()
        .map(|row| {
            assert!(row["ops_per_s"].as_f64().is_some_and(|v| v > 0.0), "{row}");
            let (p50, max) = (row["stats_p50_ms"].as_f64(), row["stats_max_ms"].as_f64());
            assert!(
                p50.zip(max).is_some_and(|(p, m)| 0.0 < p && p <= m),
                "the gauge read is timed: {row}"
            );
            row["records"].as_u64().expect("records")
        })
        .collect();
    assert_eq!(sizes, [0, 10_000]);
    let janitor = r["janitor_rows"].as_array().expect("janitor_rows");
    assert_eq!(janitor.len(), 1, "{r}");
    assert_eq!(
        janitor[0]["expired"], 3000,
        "every aged record expired: {r}"
    );
    assert!(janitor[0]["expiries_per_s"]
        .as_f64()
        .is_some_and(|v| v > 0.0));
}

#[test]
fn bench_backlog_drains_one_and_three_destinations_losing_and_doubling_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let tmp = dir.path().to_str().expect("utf-8 path");
    let (out, r) = bench(
        &[
            "--backlog",
            "300",
            "--destinations",
            "1,3",
            "--backend",
            "sqlite",
            "--tmp-dir",
            tmp,
        ],
        dir.path(),
    );
    assert!(out.stdout.contains("deliveries/s"), "{out:?}");
    let rows = r.as_array().expect("one row per destinations count");
    let dests: Vec<u64> = rows
        .iter()
        .map(|row| row["destinations"].as_u64().expect("destinations"))
        .collect();
    assert_eq!(dests, [1, 3], "{r}");
    for row in rows {
        assert_eq!(row["backlog"], 300, "{row}");
        assert_eq!(row["lost"], 0, "{row}");
        assert_eq!(row["doubled"], 0, "{row}");
        let d = row["destinations"].as_u64().expect("destinations");
        let accepted = row["accepted"].as_u64().expect("accepted");
        assert_eq!(
            row["delivered_distinct"].as_u64(),
            Some(accepted * d),
            "one delivery per event and destination: {row}"
        );
        let (per_event, per_delivery) = (
            row["drain_per_s"].as_f64().expect("drain_per_s"),
            row["deliveries_per_s"].as_f64().expect("deliveries_per_s"),
        );
        assert!(per_event > 0.0, "{row}");
        assert!(
            (per_delivery - per_event * d as f64).abs() < 1e-6 * per_delivery.max(1.0),
            "{row}"
        );
    }
}

#[test]
fn bench_backlog_refuses_a_destinations_count_a_source_cannot_have() {
    for bad in ["0", "17"] {
        let out = run_with(
            &["bench", "--backlog", "10", "--destinations", bad],
            "",
            &[],
        );
        assert_eq!(out.code, 1, "--destinations {bad}: {out:?}");
        assert!(out.stderr.contains("--destinations"), "{out:?}");
    }
}
