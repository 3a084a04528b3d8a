//! `idem audit`: lint exported n8n workflows (files, directories searched recursively for
//! `*.json`, or `-` for stdin) with the rules of `idem-audit`, print a table, JSON or SARIF,
//! and exit 0 / 1 / 2.
//!
//! Invariant: one unreadable input never stops the others — it is reported by name (stderr,
//! and in the JSON / SARIF output) and makes the exit code 2 even when other files have
//! findings. A file is audited once per run however often it is named or reached (by its
//! canonical path), and a directory search does not follow links to directories (a link
//! back up the tree would make it endless).

use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use idem_audit::output::{self, FileError, FileReport, Report};
use idem_audit::{Options, Severity};

use crate::args::{AuditCmd, AuditFormat, FailOn};
use crate::exit::CliError;

/// No finding reaches `--fail-on`.
pub const CLEAN: u8 = 0;
/// A finding reaches `--fail-on`.
pub const FINDINGS: u8 = 1;
/// An input could not be read as an n8n workflow.
pub const UNREADABLE: u8 = 2;

/// The exit codes of `idem audit` (its `--help`).
pub const AUDIT_EXIT_HELP: &str = "\
Exit codes:
    0   no finding reaches --fail-on (default: error)
    1   at least one finding reaches --fail-on
    2   an input cannot be read as an n8n workflow (named on stderr; the other inputs
        are still audited)
";

/// Directories never searched: dependencies and tool folders, not exported workflows.
const SKIPPED_DIRS: &[&str] = &["node_modules", "target"];

/// Runs the command; prints the report on `out` and unreadable inputs on stderr.
pub fn run(cmd: &AuditCmd, stdin: &mut dyn Read, out: &mut dyn Write) -> Result<u8, CliError> {
    let opts = Options {
        side_effects: cmd.side_effects.clone(),
    };
    let report = audit_inputs(&cmd.inputs, &opts, stdin);
    for e in &report.errors {
        eprintln!("idem audit: {}: {}", e.file, e.message);
    }
    let text = match cmd.format {
        AuditFormat::Table => output::table(&report),
        AuditFormat::Json => pretty(&output::json(&report))?,
        AuditFormat::Sarif => pretty(&output::sarif(&report))?,
    };
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::Other(anyhow::anyhow!("cannot write the report: {e}")))?;
    Ok(exit_code(&report, cmd.fail_on))
}

fn pretty(v: &serde_json::Value) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| CliError::Other(e.into()))
}

/// 2 when an input was unreadable, else 1 when a finding reaches `fail_on`, else 0.
pub fn exit_code(report: &Report, fail_on: FailOn) -> u8 {
    if !report.errors.is_empty() {
        return UNREADABLE;
    }
    let threshold = match fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Info => Some(Severity::Info),
        FailOn::Never => None,
    };
    match (threshold, report.worst()) {
        (Some(t), Some(w)) if w >= t => FINDINGS,
        _ => CLEAN,
    }
}

/// Audits every input; directories are searched recursively for `*.json` (sorted). A file
/// reached twice (named twice, in two directories given, through a link) is audited once.
pub fn audit_inputs(inputs: &[PathBuf], opts: &Options, stdin: &mut dyn Read) -> Report {
    let mut report = Report::default();
    let mut seen = HashSet::new();
    let mut audit_once = |path: &Path, report: &mut Report| {
        // A path that cannot be resolved (not found) is reported by audit_file under its name.
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if seen.insert(key) {
            audit_file(path, opts, report);
        }
    };
    for input in inputs {
        if input.as_os_str() == "-" {
            let mut text = String::new();
            match stdin.read_to_string(&mut text) {
                Ok(_) => audit_text("-".into(), text, opts, &mut report),
                Err(e) => report.errors.push(FileError {
                    file: "-".into(),
                    message: format!("cannot read stdin: {e}"),
                }),
            }
            continue;
        }
        if input.is_dir() {
            let mut files = Vec::new();
            if let Err(e) = json_files(input, &mut files) {
                report.errors.push(FileError {
                    file: display(input),
                    message: format!("cannot search the directory: {e}"),
                });
            }
            if files.is_empty() {
                eprintln!("idem audit: {}: no *.json files found", display(input));
            }
            for f in files {
                audit_once(&f, &mut report);
            }
        } else {
            audit_once(input, &mut report);
        }
    }
    report
}

/// The `*.json` files below `dir`, sorted. Dot-folders and [`SKIPPED_DIRS`] are skipped, and
/// so are symbolic links to directories: following them could loop (`ln -s .. up`) or leave
/// the tree. A link to a file is read like the file.
fn json_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<(PathBuf, std::fs::FileType)> = std::fs::read_dir(dir)?
        .filter_map(|e| {
            e.ok()
                .and_then(|e| e.file_type().ok().map(|t| (e.path(), t)))
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (p, kind) in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if kind.is_dir() {
            if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name) {
                json_files(&p, out)?;
            }
        } else if kind.is_symlink() && p.is_dir() {
            // Not followed (see above).
        } else if name.ends_with(".json") {
            out.push(p);
        }
    }
    Ok(())
}

fn audit_file(path: &Path, opts: &Options, report: &mut Report) {
    let file = display(path);
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => audit_text(file, text, opts, report),
            Err(_) => report.errors.push(FileError {
                file,
                message: "not UTF-8 text, so not an n8n workflow export".into(),
            }),
        },
        Err(e) => report.errors.push(FileError {
            file,
            message: format!("cannot read: {e}"),
        }),
    }
}

fn audit_text(file: String, text: String, opts: &Options, report: &mut Report) {
    // A byte order mark (some Windows editors write one) is not part of the JSON.
    let text = match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    };
    let doc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(d) => d,
        Err(e) => {
            report.errors.push(FileError {
                file,
                message: format!("not JSON ({e}), so not an n8n workflow export"),
            });
            return;
        }
    };
    match idem_audit::parse_document(&doc) {
        Ok(workflows) => {
            let findings = workflows
                .iter()
                .flat_map(|wf| idem_audit::audit_workflow(wf, opts))
                .collect();
            report.files.push(FileReport {
                file,
                source: Some(text),
                workflows: workflows.len(),
                findings,
            });
        }
        Err(e) => report.errors.push(FileError {
            file,
            message: format!("not an n8n workflow: {e}"),
        }),
    }
}

/// The path as given, relative to the current directory when it is under it (SARIF wants
/// relative URIs).
fn display(p: &Path) -> String {
    let rel = std::env::current_dir()
        .ok()
        .and_then(|cwd| p.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| p.to_path_buf());
    rel.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_audit::Finding;

    fn report_with(sev: Option<Severity>, unreadable: bool) -> Report {
        let findings = sev
            .map(|severity| Finding {
                rule: "IDEM016",
                severity,
                workflow: "w".into(),
                workflow_id: None,
                node: None,
                message: "m".into(),
                fix: "f".into(),
            })
            .into_iter()
            .collect();
        Report {
            files: vec![FileReport {
                file: "a.json".into(),
                source: None,
                workflows: 1,
                findings,
            }],
            errors: if unreadable {
                vec![FileError {
                    file: "b.json".into(),
                    message: "x".into(),
                }]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn exit_codes_follow_fail_on() {
        let warn = report_with(Some(Severity::Warning), false);
        assert_eq!(exit_code(&warn, FailOn::Error), CLEAN);
        assert_eq!(exit_code(&warn, FailOn::Warning), FINDINGS);
        assert_eq!(exit_code(&warn, FailOn::Info), FINDINGS);
        assert_eq!(exit_code(&warn, FailOn::Never), CLEAN);
        assert_eq!(exit_code(&report_with(None, false), FailOn::Info), CLEAN);
        // An unreadable input wins over findings and over --fail-on never.
        assert_eq!(
            exit_code(&report_with(Some(Severity::Error), true), FailOn::Never),
            UNREADABLE
        );
    }
}
