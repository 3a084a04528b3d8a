//! A private PostgreSQL cluster for outage tests: `initdb` in a temp dir, served on a free
//! loopback port, stopped and started by the test, stopped and removed on drop.
//!
//! It exists so that a test can take its database away without disturbing the shared server
//! of `IDEM_TEST_PG`; it must never be pointed at an existing data directory. When the tests
//! run as root the tools run as `postgres` through `runuser` (PostgreSQL refuses root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::free_port;

/// Where Debian-style packages install the server binaries, one directory per version.
const PG_LIB: &str = "/usr/lib/postgresql";

/// A throw-away cluster; see the module docs.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    as_root: bool,
}

/// The `bin` directory of the newest installed PostgreSQL that has `pg_ctl` and `initdb`.
fn find_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(PG_LIB)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("pg_ctl").exists() && bin.join("initdb").exists()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Cluster {
    /// A new cluster, started; `None` (after printing why) when no PostgreSQL binaries are
    /// installed. Panics when the binaries exist but the cluster cannot be made.
    pub fn create() -> Option<Cluster> {
        let Some(bin) = find_bin() else {
            eprintln!("skipping the outage test: no PostgreSQL binaries under {PG_LIB}/*/bin");
            return None;
        };
        let as_root = running_as_root();
        let dir =
            std::env::temp_dir().join(format!("idem-pg-outage-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("cluster temp dir");
        let c = Cluster {
            bin,
            dir,
            port: free_port(),
            as_root,
        };
        if as_root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&c.dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown the cluster temp dir to postgres");
        }
        let data = c.data();
        assert!(
            c.run(
                "initdb",
                &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"]
            ),
            "initdb"
        );
        assert!(c.start(), "first start of the private cluster");
        Some(c)
    }

    fn run(&self, tool: &str, args: &[&str]) -> bool {
        let path = self.bin.join(tool);
        let mut cmd = if self.as_root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        match cmd.args(args).stdin(Stdio::null()).output() {
            Ok(out) => {
                if !out.status.success() {
                    eprintln!(
                        "{tool} failed: {}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                out.status.success()
            }
            Err(e) => {
                eprintln!("{tool}: {e}");
                false
            }
        }
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    /// Starts the server and waits until it accepts connections (at most 30 s).
    pub fn start(&self) -> bool {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.to_string_lossy()
        );
        let log = self.dir.join("log").to_string_lossy().into_owned();
        let data = self.data();
        self.run(
            "pg_ctl",
            &[
                "-D", &data, "-o", &opts, "-l", &log, "-w", "-t", "30", "start",
            ],
        )
    }

    /// Stops the server at once (`-m immediate`: as abrupt as a crash) and waits (at most 30 s).
    pub fn stop(&self) -> bool {
        let data = self.data();
        self.run(
            "pg_ctl",
            &["-D", &data, "-m", "immediate", "-w", "-t", "30", "stop"],
        )
    }

    /// The admin URL of the cluster's `postgres` database.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The directory holding the cluster (data and log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
