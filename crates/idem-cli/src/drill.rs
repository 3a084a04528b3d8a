//! `idem drill`: failure drills against a running idem.
//!
//! The drills themselves (the stories, their checks, the namespaces they create) are the
//! `idem-drill` library; this module connects it to the server through the CLI's [`Client`],
//! shows progress and prints the report (a table, or JSON with `--json`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_drill::{Api, Drills, Reply};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use crate::args::DrillCmd;
use crate::client::{ApiError, Client};
use crate::exit::{self, CliError};
use crate::table::render;

/// The drills' calls through the CLI's client.
struct ClientApi(Client);

fn message(e: ApiError) -> String {
    e.to_string()
}

#[async_trait]
impl Api for ClientApi {
    async fn claim(&self, ns: &str, key: &str, body: &Value) -> Reply {
        self.0.claim(ns, key, body).await.map_err(message)
    }

    async fn post_key(&self, ns: &str, key: &str, action: &str, body: &Value) -> Reply {
        let url = self.0.key_url(ns, key, Some(action));
        self.0.post(url, body).await.map_err(message)
    }

    async fn complete(&self, ns: &str, key: &str, body: &Value) -> Reply {
        self.0
            .key_action(ns, key, "complete", body)
            .await
            .map_err(message)
    }

    async fn get_key(&self, ns: &str, key: &str) -> Reply {
        let url = self.0.key_url(ns, key, None);
        self.0.get(url).await.map_err(message)
    }

    async fn namespace(&self, ns: &str) -> Reply {
        self.0.namespace(ns).await.map_err(message)
    }

    async fn patch_namespace(&self, ns: &str, patch: &Value) -> Reply {
        self.0.patch_namespace(ns, patch).await.map_err(message)
    }

    async fn switch_namespace(&self, ns: &str, action: &str) -> Reply {
        self.0.switch_namespace(ns, action).await.map_err(message)
    }

    async fn metrics(&self) -> Reply<String> {
        let url = self.0.url(&["metrics"]);
        self.0.get_text(url).await.map_err(message)
    }
}

pub async fn run(cmd: DrillCmd) -> Result<u8, CliError> {
    let client = Client::new(&cmd.url, cmd.token.clone())?;
    // Fail fast (exit 21) when nothing listens there.
    client.get(client.url(&["healthz"])).await?;
    let run_id = format!("{:08x}", rand::random::<u32>());
    let drills = Drills::new(Arc::new(ClientApi(client)), cmd.ns.clone(), run_id);
    let specs = idem_drill::select(cmd.only.as_deref());
    if specs.is_empty() {
        return Err(CliError::input("--only matches no drill"));
    }
    let bar = ProgressBar::with_draw_target(Some(specs.len() as u64), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} drill {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    let started = Instant::now();
    let mut reports = Vec::new();
    for spec in specs {
        bar.set_message(spec.name);
        let r = drills.run_one(spec).await;
        bar.inc(1);
        reports.push(r);
    }
    bar.finish_and_clear();
    let passed = reports.iter().all(|r| r.pass);
    if cmd.json {
        let out = json!({
            "passed": passed,
            "run_id": drills.run_id(),
            "elapsed_ms": started.elapsed().as_millis() as u64,
            "drills": reports,
        });
        println!("{out}");
    } else {
        let rows: Vec<Vec<String>> = reports
            .iter()
            .map(|r| {
                vec![
                    r.drill.to_owned(),
                    r.expectation.to_owned(),
                    format!("{} (want {})", r.effects, r.expected_effects),
                    r.state.clone(),
                    if r.pass { "PASS" } else { "FAIL" }.to_owned(),
                ]
            })
            .collect();
        print!(
            "{}",
            render(
                &[
                    "DRILL",
                    "EXPECTATION",
                    "SIDE EFFECTS",
                    "LEDGER STATE",
                    "RESULT"
                ],
                &rows
            )
        );
        for r in reports.iter().filter(|r| !r.pass) {
            println!("FAIL {} ({}): {}", r.drill, r.namespace, r.detail);
        }
        let n_pass = reports.iter().filter(|r| r.pass).count();
        println!(
            "{n_pass}/{} drills passed in {:.1}s (namespaces {}-{}-*)",
            reports.len(),
            started.elapsed().as_secs_f64(),
            drills.prefix(),
            drills.run_id()
        );
    }
    Ok(if passed { exit::OK } else { exit::ERROR })
}
