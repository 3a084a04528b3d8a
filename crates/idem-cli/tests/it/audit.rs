//! `idem audit`: exit codes 0/1/2 and `--fail-on`, formats, directory search, stdin, arrays.

use std::path::{Path, PathBuf};

use crate::helpers::run_with;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../idem-audit/tests/fixtures")
}

fn fx(name: &str) -> String {
    fixtures().join(name).display().to_string()
}

fn audit(args: &[&str]) -> crate::helpers::Out {
    audit_stdin(args, "")
}

fn audit_stdin(args: &[&str], stdin: &str) -> crate::helpers::Out {
    let mut all = vec!["audit"];
    all.extend(args);
    run_with(&all, stdin, &[])
}

#[test]
fn clean_workflow_exits_0_with_a_summary_line() {
    let out = audit(&[&fx("good-webhook-claim-receipt.json")]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        out.stdout,
        "0 findings (0 errors, 0 warnings, 0 info) in 1 workflow from 1 file\n"
    );
}

#[test]
fn an_error_finding_exits_1_and_prints_one_line_per_finding() {
    let out = audit(&[&fx("idem001-ungated-gmail.json")]);
    assert_eq!(out.code, 1, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    // IDEM001 ×2, IDEM016, summary.
    assert_eq!(lines.len(), 4, "{}", out.stdout);
    assert!(lines[0].starts_with("error") && lines[0].contains("IDEM001"));
    assert!(lines[0].contains("Send receipt") && lines[0].contains("Fix:"));
    assert!(lines[2].starts_with("info") && lines[2].contains("IDEM016"));
    assert!(lines[3].starts_with("3 findings (2 errors, 0 warnings, 1 info)"));
}

#[test]
fn fail_on_sets_the_threshold() {
    // IDEM008 is a warning and the fixture has nothing else.
    let warn = fx("idem008-retry-on-claim.json");
    assert_eq!(audit(&[&warn]).code, 0);
    assert_eq!(audit(&["--fail-on", "warning", &warn]).code, 1);
    // IDEM016 is info: only --fail-on info fails on it.
    let info = fx("idem016-no-error-workflow.json");
    assert_eq!(audit(&["--fail-on", "warning", &info]).code, 0);
    assert_eq!(audit(&["--fail-on", "info", &info]).code, 1);
    assert_eq!(
        audit(&["--fail-on", "never", &fx("idem001-ungated-gmail.json")]).code,
        0
    );
}

#[test]
fn a_malformed_file_exits_2_by_name_and_the_others_are_still_audited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, "{\"nodes\": [").expect("write");
    let not_wf = dir.path().join("package.json");
    std::fs::write(&not_wf, "{\"name\": \"x\", \"version\": \"1.0.0\"}").expect("write");
    let bad_s = bad.display().to_string();
    let not_s = not_wf.display().to_string();
    let out = audit(&[
        "--format",
        "json",
        &bad_s,
        &fx("idem001-ungated-gmail.json"),
        &not_s,
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    out.assert_stderr_has("broken.json: not JSON");
    out.assert_stderr_has("package.json: not an n8n workflow: nodes");
    let j = out.json();
    assert_eq!(j["errors"].as_array().expect("errors").len(), 2);
    assert!(j["errors"][0]["file"]
        .as_str()
        .expect("file")
        .ends_with("broken.json"));
    let rules: Vec<&str> = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["rule"].as_str())
        .collect();
    assert_eq!(rules, ["IDEM001", "IDEM001", "IDEM016"]);
    // --fail-on never does not hide an unreadable input.
    assert_eq!(audit(&["--fail-on", "never", &bad_s]).code, 2);
}

#[test]
fn a_directory_is_searched_recursively_for_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nested = dir.path().join("team/payments");
    std::fs::create_dir_all(&nested).expect("mkdir");
    std::fs::create_dir_all(dir.path().join("node_modules/x")).expect("mkdir");
    for (name, to) in [
        (
            "good-webhook-claim-receipt.json",
            dir.path().join("good.json"),
        ),
        (
            "idem013-stripe-post-without-key.json",
            nested.join("refund.json"),
        ),
        (
            "idem001-ungated-gmail.json",
            dir.path().join("node_modules/x/skipped.json"),
        ),
    ] {
        std::fs::copy(fixtures().join(name), to).expect("copy");
    }
    std::fs::write(nested.join("README.md"), "not json").expect("write");
    let d = dir.path().display().to_string();
    let out = audit(&["--format", "json", "--fail-on", "warning", &d]);
    assert_eq!(out.code, 1, "{out:?}");
    let j = out.json();
    let files: Vec<&str> = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["file"].as_str())
        .collect();
    assert!(
        !files.is_empty()
            && files
                .iter()
                .all(|f| f.ends_with("team/payments/refund.json")),
        "{files:?}"
    );
    assert!(j["errors"].as_array().expect("errors").is_empty());
}

/// The files a JSON report names, in order, one entry per finding.
fn files_of(j: &serde_json::Value) -> Vec<String> {
    j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["file"].as_str().map(str::to_owned))
        .collect()
}

/// A link back up the tree (`up -> ..`) or to itself (`self -> .`) is not followed: the
/// search ends and each file is audited once; a link to a file is read like the file,
/// once, and a file named twice on the command line is audited once too.
#[cfg(unix)]
#[test]
fn directory_search_does_not_follow_linked_folders_and_audits_each_file_once() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("L/sub");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::copy(
        fixtures().join("idem001-ungated-gmail.json"),
        sub.join("bad.json"),
    )
    .expect("copy");
    symlink("..", sub.join("up")).expect("symlink");
    symlink(".", sub.join("self")).expect("symlink");
    let other = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        fixtures().join("idem013-stripe-post-without-key.json"),
        other.path().join("refund.json"),
    )
    .expect("copy");
    symlink(other.path(), sub.join("elsewhere")).expect("symlink");
    symlink(sub.join("bad.json"), dir.path().join("L/again.json")).expect("symlink");
    let top = dir.path().join("L").display().to_string();
    let out = audit(&["--format", "json", &top]);
    assert_eq!(out.code, 1, "{out:?}");
    let j = out.json();
    // idem001-ungated-gmail.json: IDEM001 ×2 and IDEM016, from one file, once.
    let files = files_of(&j);
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(files.iter().all(|f| f.ends_with("again.json")), "{files:?}");
    assert!(j["errors"].as_array().expect("errors").is_empty());
    // Named twice, and once more through a directory: still once.
    let bad = sub.join("bad.json").display().to_string();
    let out = audit(&["--format", "json", &bad, &bad, &top]);
    let files = files_of(&out.json());
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        files.iter().all(|f| f.ends_with("sub/bad.json")),
        "{files:?}"
    );
    // A linked directory given on the command line is searched: the user chose it.
    let linked = sub.join("elsewhere").display().to_string();
    let files = files_of(&audit(&["--format", "json", &linked]).json());
    assert!(
        !files.is_empty() && files.iter().all(|f| f.ends_with("elsewhere/refund.json")),
        "{files:?}"
    );
}

#[test]
fn a_byte_order_mark_before_the_json_is_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text =
        std::fs::read_to_string(fixtures().join("idem001-ungated-gmail.json")).expect("read");
    let bom = dir.path().join("bom.json");
    std::fs::write(&bom, format!("\u{feff}{text}")).expect("write");
    let out = audit(&["--format", "sarif", &bom.display().to_string()]);
    assert_eq!(out.code, 1, "{out:?}");
    let plain = audit(&["--format", "sarif", &fx("idem001-ungated-gmail.json")]);
    let (a, b) = (out.json(), plain.json());
    let results = |s: &serde_json::Value| s["runs"][0]["results"].clone();
    let lines = |s: &serde_json::Value| {
        results(s)
            .as_array()
            .expect("results")
            .iter()
            .map(|r| r["locations"][0]["physicalLocation"]["region"]["startLine"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(results(&a).as_array().expect("results").len(), 3);
    assert_eq!(lines(&a), lines(&b));
    let stdin = audit_stdin(&["-"], &format!("\u{feff}{text}"));
    assert_eq!(stdin.code, 1, "{stdin:?}");
}

#[test]
fn stdin_and_array_documents() {
    let text =
        std::fs::read_to_string(fixtures().join("idem003-unstable-keys.json")).expect("read");
    let out = audit_stdin(&["--format", "json", "-"], &text);
    assert_eq!(out.code, 1, "{out:?}");
    let j = out.json();
    let idem003: Vec<(&str, &str)> = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["rule"] == "IDEM003")
        .map(|f| {
            (
                f["file"].as_str().unwrap_or(""),
                f["workflow"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(idem003.len(), 3, "{idem003:?}");
    assert!(idem003.iter().all(|(file, _)| *file == "-"));
    assert_eq!(idem003[0].1, "Receipt keyed on the execution id");
    assert_eq!(j["findings"][0]["workflow_id"], "fxIdem003a");
}

#[test]
fn sarif_output_names_rules_files_and_nodes() {
    let out = audit(&[
        "--format",
        "sarif",
        &fx("idem013-stripe-post-without-key.json"),
    ]);
    // The Stripe node after the complete is also unreported (IDEM006, an error).
    assert_eq!(out.code, 1, "{}", out.stderr);
    let s = out.json();
    assert_eq!(s["version"], "2.1.0");
    let run = &s["runs"][0];
    assert_eq!(
        run["tool"]["driver"]["rules"]
            .as_array()
            .expect("rules")
            .len(),
        17
    );
    let results = run["results"].as_array().expect("results");
    let res = results
        .iter()
        .find(|r| r["ruleId"] == "IDEM013")
        .expect("an IDEM013 result");
    assert_eq!(res["level"], "warning");
    assert_eq!(
        res["locations"][0]["logicalLocations"][0]["name"],
        "Refund payment"
    );
    let uri = res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        .as_str()
        .expect("uri");
    assert!(
        uri.ends_with("idem013-stripe-post-without-key.json"),
        "{uri}"
    );
}

#[test]
fn side_effect_flag_adds_node_types() {
    let wf = r#"{"name": "w", "settings": {"errorWorkflow": "9"}, "nodes": [
        {"name": "Hook", "type": "n8n-nodes-base.webhook", "typeVersion": 2, "parameters": {}},
        {"name": "Add subscriber", "type": "n8n-nodes-base.mailchimp", "typeVersion": 1, "parameters": {}}],
      "connections": {"Hook": {"main": [[{"node": "Add subscriber", "type": "main", "index": 0}]]}}}"#;
    assert_eq!(audit_stdin(&["-"], wf).code, 0);
    let out = audit_stdin(&["--side-effect", "mailchimp", "-"], wf);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains("Add subscriber"));
}

#[test]
fn no_input_is_a_usage_error() {
    let out = audit(&[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("FILE|DIR|-"), "{}", out.stderr);
}
