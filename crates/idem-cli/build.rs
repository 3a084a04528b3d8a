//! Puts the git commit of the checkout into `idem --version` (`IDEM_GIT_COMMIT`).
//!
//! Cheap by design: the build script only reruns when the checked-out commit moves (it
//! watches HEAD, the branch ref HEAD points to and packed-refs, each only if it exists: a
//! missing watched file would rerun it on every build), or when `IDEM_GIT_COMMIT` changes.
//! A new commit so recompiles this crate (cargo reruns every target of a package whose build
//! script reran) and no other crate of the workspace. Outside a git checkout (a source tarball, `cargo install` from a
//! registry, an image build without `.git`) the commit is `IDEM_GIT_COMMIT` if set, else
//! `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=IDEM_GIT_COMMIT");
    let commit = match std::env::var("IDEM_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            // `--git-path` finds these files wherever the checkout keeps its git directory.
            for name in ["HEAD", "packed-refs"] {
                if let Some(p) = git(&["rev-parse", "--git-path", name]) {
                    watch(&PathBuf::from(p));
                }
            }
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
                    watch(&PathBuf::from(p));
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=IDEM_GIT_COMMIT={commit}");
}
