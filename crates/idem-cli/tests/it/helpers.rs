//! Running the binary and a throwaway server.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_testkit::process::clean_command;
pub use idem_testkit::process::free_port;

/// The binary under test, with none of the idem variables of the developer's shell.
pub fn idem() -> Command {
    clean_command(env!("CARGO_BIN_EXE_idem"))
}

#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Asserts that stderr holds `text` (showing stderr if not).
    pub fn assert_stderr_has(&self, text: &str) {
        assert!(self.stderr.contains(text), "{}", self.stderr);
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// Runs `idem ARGS` with `stdin`, waits, captures.
pub fn run_with(args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Out {
    let mut cmd = idem();
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn idem");
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("wait idem");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn run(args: &[&str]) -> Out {
    run_with(args, "", &[])
}

/// `idem token create --namespace NS --role ROLE EXTRA… --db DB`.
pub fn token_create(ns: &str, role: &str, extra: &[&str], db: &str) -> Out {
    let mut args = vec!["token", "create", "--namespace", ns, "--role", role];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--db", db]);
    run(&args)
}

/// Runs `sh -c SCRIPT` with `$IDEM` naming the binary under test (and no idem variables of
/// the developer's shell), as a user's script would call it.
pub fn shell(script: &str, env: &[(&str, &str)]) -> Out {
    let mut cmd = clean_command("sh");
    cmd.args(["-c", script])
        .env("IDEM", env!("CARGO_BIN_EXE_idem"))
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run sh");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// One HTTP/1.0 GET; answers the status code.
pub fn http_status(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

/// `idem serve` on a free port with a fresh SQLite file; killed on drop.
pub struct Server {
    pub url: String,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// The exit status if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn start() -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("idem.db");
        let mut s = Server::start_on(&db);
        s._dir = Some(dir);
        s
    }

    /// On an existing database file (e.g. one that holds tokens).
    pub fn start_on(db: &Path) -> Server {
        Server::start_url(
            &format!("sqlite://{}", db.display()),
            &db.with_extension("log"),
        )
    }

    /// On any database URL; the server's stderr goes to `log`.
    pub fn start_url(db_url: &str, log: &Path) -> Server {
        Server::spawn(&["--db", db_url, "--janitor-interval", "200ms"], &[], log)
    }

    /// On a fresh SQLite file in `dir` with `--config CONFIG` and the environment `env`; the
    /// server's stderr goes to `dir/log`.
    pub fn start_config(dir: &Path, config: &Path, env: &[(&str, &str)]) -> Server {
        let db_url = format!("sqlite://{}", dir.join("idem.db").display());
        let config = config.display().to_string();
        let args = ["--db", db_url.as_str(), "--config", config.as_str()];
        Server::spawn(&args, env, &dir.join("log"))
    }

    /// `idem serve --listen <free port> ARGS` with the environment `env`, once it answers
    /// `/healthz`; its stderr goes to `log`.
    fn spawn(args: &[&str], env: &[(&str, &str)], log: &Path) -> Server {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let log_file = std::fs::File::create(log).expect("log file");
        let child = idem()
            .args(["serve", "--listen", &addr])
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("spawn idem serve");
        let mut server = Server {
            url: format!("http://{addr}"),
            child,
            _dir: None,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_status(&addr, "/healthz") == Some(200) {
                return server;
            }
            if let Ok(Some(st)) = server.child.try_wait() {
                let log = std::fs::read_to_string(log).unwrap_or_default();
                panic!("idem serve exited with {st} before listening:\n{log}");
            }
            if Instant::now() > deadline {
                let _ = server.child.kill();
                let log = std::fs::read_to_string(log).unwrap_or_default();
                panic!("idem serve did not answer /healthz within 30s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `idem ARGS --url <this server>` (the flag goes before a `--`, if any).
    pub fn idem(&self, args: &[&str]) -> Out {
        self.idem_with(args, &[])
    }

    /// `idem ARGS --url <this server>` with the environment `env`.
    pub fn idem_with(&self, args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut all: Vec<&str> = args.to_vec();
        let at = all.iter().position(|a| *a == "--").unwrap_or(all.len());
        all.splice(at..at, ["--url", self.url.as_str()]);
        run_with(&all, "", env)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A temp dir holding a ledger file for `idem run --db`.
pub struct LocalDb {
    pub dir: tempfile::TempDir,
}

impl LocalDb {
    pub fn new() -> LocalDb {
        LocalDb {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }
    /// A bare path: `--db` takes it as a SQLite file.
    pub fn path(&self) -> String {
        self.dir.path().join("ledger.db").display().to_string()
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// `idem run --db <file> --ns NS --key KEY EXTRA… -- COMMAND…`
    pub fn run(&self, key: &str, extra: &[&str], command: &[&str]) -> Out {
        let db = self.path();
        let mut args = vec!["run", "--db", &db, "--ns", "cron", "--key", key];
        args.extend(extra);
        args.push("--");
        args.extend(command);
        run(&args)
    }
    /// The record state of `cron/key`, read from the file with the library.
    pub fn state(&self, key: &str) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let ledger = idem::open(&self.path()).await.expect("open ledger");
            let ns = idem::Namespace::try_from("cron").expect("ns");
            let k = idem::Key::try_from(key).expect("key");
            let rec = ledger.store().get(&ns, &k).await.expect("get");
            rec.map_or("-".into(), |r| r.record.state.as_str().to_owned())
        })
    }
}

/// A blocking HTTP client whose requests give up after 30 s.
pub fn http_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

/// POSTs to `url` the Stripe event `id` (`invoice.paid`) signed now with `secret`, with the
/// `extra` headers; asserts the one event was accepted.
pub fn post_stripe_event(
    http: &reqwest::blocking::Client,
    url: &str,
    secret: &str,
    id: &str,
    extra: &[(&str, &str)],
) {
    use idem_intake::sign::{now_ms, sign, Delivery};
    let body = format!(r#"{{"id":"{id}","type":"invoice.paid"}}"#);
    let delivery = Delivery::json_post(
        idem_intake::Provider::Stripe,
        secret,
        body.as_bytes(),
        now_ms(),
    );
    let headers = sign(&delivery).expect("signed");
    let mut req = http
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let r = req.send().expect("post event");
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = r.json().expect("json");
    assert_eq!(v["events"][0]["status"], "accepted", "{v}");
}
