//! The shipped templates and the fixtures, audited end to end.

use std::path::{Path, PathBuf};

use idem_audit::{audit_str, Finding, Options, Severity};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn audit_file(p: &Path) -> Vec<Finding> {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    audit_str(&text, &Options::default()).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

#[test]
fn shipped_templates_have_no_error_or_warning() {
    let files = json_files(&repo().join("integrations/n8n/templates"));
    assert!(files.len() >= 5, "templates not found");
    for p in files {
        let bad: Vec<Finding> = audit_file(&p)
            .into_iter()
            .filter(|f| f.severity > Severity::Info)
            .collect();
        assert!(bad.is_empty(), "{}: {bad:#?}", p.display());
    }
}

#[test]
fn shipped_templates_only_lack_an_error_workflow() {
    // The templates leave Settings → Error Workflow to the installer (an id of their own
    // instance), so IDEM016 is the one (info) finding each of them has — except a template
    // whose only outbound calls are made by idem: an effect, or an action an agent calls
    // through the MCP Client Tool. idem performs and records those calls itself, so the
    // workflow has no side effect of its own to lose between the call and a report.
    let mut idem_performs = 0;
    for p in json_files(&repo().join("integrations/n8n/templates")) {
        let rules: Vec<&str> = audit_file(&p).iter().map(|f| f.rule).collect();
        let text = std::fs::read_to_string(&p).expect("template readable");
        let effect_only = text.contains("}}/effect\"") && !text.contains("}}/claim\"");
        let agent_via_mcp = text.contains("\"@n8n/n8n-nodes-langchain.mcpClientTool\"")
            && !text.contains("}}/claim\"");
        if effect_only || agent_via_mcp {
            idem_performs += 1;
            assert!(rules.is_empty(), "{}: {rules:?}", p.display());
        } else {
            assert_eq!(rules, ["IDEM016"], "{}", p.display());
        }
    }
    assert_eq!(
        idem_performs, 2,
        "the Stripe-charge-via-effect and the AI-agent-over-MCP templates are audited"
    );
}

#[test]
fn community_node_example_is_clean_but_for_its_missing_fail_route() {
    let p = repo().join("integrations/n8n/node/examples/webhook-gate-node.json");
    let rules: Vec<&str> = audit_file(&p).iter().map(|f| f.rule).collect();
    assert_eq!(rules, ["IDEM007", "IDEM016"], "{p:?}");
}

#[test]
fn effect_node_example_is_clean() {
    // The Effect operation is the gate and performs the call: nothing is ungated.
    let p = repo().join("integrations/n8n/node/examples/stripe-charge-effect-node.json");
    let f = audit_file(&p);
    assert!(f.is_empty(), "{f:#?}");
}

#[test]
fn the_good_fixture_audits_clean() {
    let f = audit_str(
        &fixture("good-webhook-claim-receipt.json"),
        &Options::default(),
    )
    .unwrap();
    assert!(f.is_empty(), "{f:#?}");
}

/// Every `idemNNN-*.json` fixture raises its rule; every `idemNNN-near-miss-*` does not.
#[test]
fn every_fixture_raises_its_rule_and_every_near_miss_does_not() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seen_rules = std::collections::BTreeSet::new();
    for p in json_files(&dir) {
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let Some(num) = name.strip_prefix("idem").and_then(|r| r.get(..3)) else {
            continue;
        };
        let rule = format!("IDEM{num}");
        let findings = audit_file(&p);
        let hits = findings.iter().filter(|f| f.rule == rule).count();
        if name.contains("near-miss") {
            assert_eq!(hits, 0, "{name}: {findings:#?}");
        } else {
            assert!(hits > 0, "{name} does not raise {rule}: {findings:#?}");
            seen_rules.insert(rule);
        }
    }
    assert_eq!(seen_rules.len(), 17, "{seen_rules:?}");
}

#[test]
fn gate_after_effect_replaces_ungated_for_the_same_node() {
    let f = audit_str(
        &fixture("idem002-gate-after-email.json"),
        &Options::default(),
    )
    .unwrap();
    let on_send: Vec<&str> = f
        .iter()
        .filter(|x| x.node.as_deref() == Some("Send receipt"))
        .map(|x| x.rule)
        .collect();
    assert!(
        on_send.contains(&"IDEM002") && !on_send.contains(&"IDEM001"),
        "{f:#?}"
    );
}

#[test]
fn extra_side_effect_types_count() {
    let wf = r#"{"name": "w", "nodes": [
        {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
        {"name": "Add subscriber", "type": "n8n-nodes-base.mailchimp", "typeVersion": 1, "parameters": {}}],
      "connections": {"Hook": {"main": [[{"node": "Add subscriber", "type": "main", "index": 0}]]}}}"#;
    assert!(audit_str(wf, &Options::default()).unwrap().is_empty());
    let opts = Options {
        side_effects: vec!["n8n-nodes-base.mailchimp".into()],
    };
    let rules: Vec<&str> = audit_str(wf, &opts)
        .unwrap()
        .iter()
        .map(|f| f.rule)
        .collect();
    assert_eq!(rules, ["IDEM001", "IDEM016"]);
}

/// An export saved with a byte order mark (some Windows editors write one) audits like the
/// same export without it; an IMAP Email Trigger starts executions like any trigger.
#[test]
fn a_byte_order_mark_is_skipped_and_an_imap_trigger_is_a_trigger() {
    let text = fixture("idem001-ungated-gmail.json");
    let plain = audit_str(&text, &Options::default()).expect("fixture audits");
    assert_eq!(
        audit_str(&format!("\u{feff}{text}"), &Options::default()).expect("BOM is skipped"),
        plain
    );
    let wf = r#"{"name": "w", "nodes": [
        {"name": "Mail in", "type": "n8n-nodes-base.emailReadImap", "typeVersion": 2, "parameters": {}},
        {"name": "Reply", "type": "n8n-nodes-base.gmail", "typeVersion": 2.1, "parameters": {}}],
      "connections": {"Mail in": {"main": [[{"node": "Reply", "type": "main", "index": 0}]]}}}"#;
    let rules: Vec<&str> = audit_str(wf, &Options::default())
        .expect("audits")
        .iter()
        .map(|f| f.rule)
        .collect();
    assert_eq!(rules, ["IDEM001", "IDEM016"]);
}

/// `n8n-2.8.4-export-all.json` is what `n8n export:workflow --all` (n8n 2.8.4) wrote after
/// `n8n import:workflow` of seven fixtures: the real export shape (an array, with `shared`,
/// `staticData`, `versionCounter`…). It must audit exactly like the fixtures it came from.
#[test]
fn a_real_n8n_export_all_array_audits_like_its_sources() {
    type Key = (Option<String>, &'static str, Option<String>);
    let keys = |f: Vec<Finding>| -> Vec<Key> {
        let mut k: Vec<Key> = f
            .into_iter()
            .map(|f| (f.workflow_id, f.rule, f.node))
            .collect();
        k.sort();
        k
    };
    let exported = audit_str(&fixture("n8n-2.8.4-export-all.json"), &Options::default())
        .expect("the real export parses");
    let mut sources = Vec::new();
    for name in [
        "good-webhook-claim-receipt.json",
        "idem001-ungated-gmail.json",
        "idem003-unstable-keys.json",
        "idem005-near-miss-gate-node-and-boolean-if.json",
        "idem013-stripe-post-without-key.json",
    ] {
        sources.extend(audit_str(&fixture(name), &Options::default()).expect("fixture"));
    }
    let (exported, sources) = (keys(exported), keys(sources));
    assert!(!exported.is_empty());
    assert_eq!(exported, sources);
}
