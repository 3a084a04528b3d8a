//! PostgreSQL over TLS: `sslmode` and `sslrootcert` of the URL against a real server.
//!
//! Runs its own throw-away cluster (initdb + pg_ctl in a temp dir, on a free port), first
//! with `ssl=off` and then with `ssl=on` and a certificate for `localhost` issued by a CA
//! the test makes, so the shared server is never reconfigured. Self-contained on purpose
//! (the outage test has a similar cluster harness). Skipped without the PostgreSQL 15
//! binaries.

use std::path::{Path, PathBuf};
use std::process::Command;

use idem_postgres::{PgOptions, PgStore};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

const BIN: &str = "/usr/lib/postgresql/15/bin";

fn pg_tool(as_root: bool, tool: &str, args: &[&str]) -> Result<(), String> {
    let path = format!("{BIN}/{tool}");
    let mut cmd = Command::new(if as_root { "runuser" } else { path.as_str() });
    if as_root {
        cmd.args(["-u", "postgres", "--", &path]);
    }
    let out = cmd
        .args(args)
        .output()
        .map_err(|e| format!("{tool}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{tool}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A CA, and a server certificate for `localhost` it issued, written as PEM files.
struct Pki {
    ca: PathBuf,
    other_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    let ca_of = |name: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        CertifiedIssuer::self_signed(p, KeyPair::generate().expect("ca key")).expect("ca")
    };
    let ca = ca_of("idem pg test CA");
    let other = ca_of("someone else's CA");
    let key = KeyPair::generate().expect("key");
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("server cert");
    let pki = Pki {
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
    };
    for (path, pem) in [
        (&pki.ca, ca.pem()),
        (&pki.other_ca, other.pem()),
        (&pki.cert, cert.pem()),
        (&pki.key, key.serialize_pem()),
    ] {
        std::fs::write(path, pem).expect("write pem");
    }
    // PostgreSQL refuses a key file others can read.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pki.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    pki
}

struct TlsCluster {
    dir: PathBuf,
    port: u16,
    as_root: bool,
    pki: Pki,
}

impl TlsCluster {
    fn create() -> Option<TlsCluster> {
        if !Path::new(BIN).join("pg_ctl").exists() {
            eprintln!("skipping TLS test: no PostgreSQL binaries under {BIN}");
            return None;
        }
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = std::env::temp_dir().join(format!("idem-pg-tls-{:08x}", rand::random::<u32>()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pki = make_pki(&dir);
        if as_root {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown the temp dir to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let c = TlsCluster {
            dir,
            port,
            as_root,
            pki,
        };
        let data = c.data();
        pg_tool(
            as_root,
            "initdb",
            &["-D", &data, "-A", "trust", "-U", "postgres", "--no-sync"],
        )
        .expect("initdb");
        Some(c)
    }

    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    fn start(&self, ssl: bool) {
        let mut opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        if ssl {
            opts += &format!(
                " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                self.pki.cert.display(),
                self.pki.key.display()
            );
        } else {
            opts += " -c ssl=off";
        }
        let log = self.dir.join("log").to_string_lossy().into_owned();
        let data = self.data();
        let args = [
            "-D", &data, "-o", &opts, "-l", &log, "-w", "-t", "30", "start",
        ];
        if let Err(e) = pg_tool(self.as_root, "pg_ctl", &args) {
            let log = std::fs::read_to_string(self.dir.join("log")).unwrap_or_default();
            panic!("{e}\n{log}");
        }
    }

    fn stop(&self) {
        let data = self.data();
        let _ = pg_tool(
            self.as_root,
            "pg_ctl",
            &["-D", &data, "-m", "fast", "-w", "stop"],
        );
    }

    fn url(&self, host: &str, query: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{query}", self.port)
    }

    /// Whether every connection of application `app` is encrypted (asked over a plain
    /// connection of its own), and how many there are.
    async fn ssl_of(&self, app: &str) -> (bool, i64) {
        let url = self.url("127.0.0.1", "sslmode=disable");
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("admin connection");
        tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT coalesce(bool_and(s.ssl), false), count(*) FROM pg_stat_ssl s \
                 JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
                &[&app],
            )
            .await
            .expect("pg_stat_ssl");
        (row.get(0), row.get(1))
    }
}

impl TlsCluster {
    /// Opens a store on 127.0.0.1 with `query` and says whether its connections are
    /// encrypted.
    async fn encrypted(&self, query: &str, app: &str) -> bool {
        let url = self.url("127.0.0.1", &format!("{query}&application_name={app}"));
        let store = open(&url).await.unwrap_or_else(|e| panic!("{app}: {e}"));
        let (ssl, n) = self.ssl_of(app).await;
        assert!(n >= 1, "{app}: no connection seen");
        drop(store);
        ssl
    }
}

impl Drop for TlsCluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn open(url: &str) -> Result<PgStore, String> {
    let opts = PgOptions {
        max_connections: 2,
        ..PgOptions::default()
    };
    PgStore::connect_with(url, opts)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn sslmode_and_sslrootcert_are_honoured_against_a_real_server() {
    let Some(cluster) = TlsCluster::create() else {
        return;
    };
    let ca = cluster.pki.ca.display().to_string();
    let other_ca = cluster.pki.other_ca.display().to_string();

    // A server without TLS: `require` (and stronger) is refused, `prefer` falls back.
    cluster.start(false);
    for mode in ["require", "verify-full"] {
        let url = cluster.url(
            "localhost",
            &format!(
                "sslmode={mode}&sslrootcert={ca}&application_name=plain_{}",
                mode.len()
            ),
        );
        let e = open(&url)
            .await
            .expect_err("a server without TLS must be refused");
        assert!(
            e.contains("TLS") || e.contains("SSL") || e.contains("ssl"),
            "{mode}: {e}"
        );
    }
    let plain = !cluster.encrypted("sslmode=prefer", "fallback").await;
    assert!(plain, "prefer falls back to plain text");
    cluster.stop();

    // The same server with TLS on.
    cluster.start(true);
    let cases = [
        // (host, query, expected to connect)
        ("127.0.0.1", "sslmode=require".to_owned(), true),
        (
            "127.0.0.1",
            format!("sslmode=verify-ca&sslrootcert={ca}"),
            true,
        ),
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            true,
        ),
        // The certificate names localhost, not 127.0.0.1.
        (
            "127.0.0.1",
            format!("sslmode=verify-full&sslrootcert={ca}"),
            false,
        ),
        // Signed by a CA we do not trust, in every checking mode.
        (
            "localhost",
            format!("sslmode=verify-full&sslrootcert={other_ca}"),
            false,
        ),
        (
            "localhost",
            format!("sslmode=verify-ca&sslrootcert={other_ca}"),
            false,
        ),
        (
            "localhost",
            format!("sslmode=require&sslrootcert={other_ca}"),
            false,
        ),
        // Not a public CA either.
        ("localhost", "sslmode=verify-full".to_owned(), false),
    ];
    for (i, (host, query, ok)) in cases.iter().enumerate() {
        let app = format!("tls_case_{i}");
        let url = cluster.url(host, &format!("{query}&application_name={app}"));
        match open(&url).await {
            Ok(store) => {
                assert!(
                    ok,
                    "case {i} ({host} {query}) connected but must be refused"
                );
                let (ssl, n) = cluster.ssl_of(&app).await;
                assert!(
                    ssl && n >= 1,
                    "case {i}: connection not encrypted ({n} seen)"
                );
                drop(store);
            }
            Err(e) => {
                assert!(!ok, "case {i} ({host} {query}) refused: {e}");
                assert!(!e.contains(&ca) || e.contains("sslrootcert"), "{e}");
            }
        }
    }

    // The default (no sslmode) is libpq's `prefer`: encrypted when the server can.
    assert!(cluster.encrypted("", "default_mode").await);

    // `disable` stays in plain text even though the server offers TLS.
    assert!(!cluster.encrypted("sslmode=disable", "off").await);

    // A CA file that does not exist is named in the error.
    let missing = cluster.dir.join("missing.pem").display().to_string();
    let e = open(&cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={missing}"),
    ))
    .await
    .expect_err("missing CA file");
    assert!(e.contains("missing.pem"), "{e}");
}
