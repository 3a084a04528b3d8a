use super::*;
use std::collections::HashMap;
use std::path::Path;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

#[test]
fn defaults() {
    let c = Config::load(&ServeArgs::default(), &env(&[])).expect("ok");
    assert_eq!(c.listen.to_string(), "127.0.0.1:7780");
    assert_eq!(c.db, "sqlite://idem.db");
    assert_eq!(c.janitor_interval, Duration::from_secs(30));
    assert_eq!(c.body_limit, 1 << 20);
}

#[test]
fn actions_come_from_the_namespace_tables_with_header_values_from_the_environment() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    let doc = "[namespaces.shop]\nlease = \"45s\"\n\
         [namespaces.shop.actions.send_followup]\n\
         description = \"Sends the follow-up.\"\nkey = \"{order_id}:followup:v1\"\n\
         input_schema = { type = \"object\", required = [\"order_id\"], \
         properties = { order_id = { type = \"string\" } } }\n\
         [namespaces.shop.actions.send_followup.deliver.http]\n\
         method = \"POST\"\nurl = \"https://mail.example/send\"\n\
         headers_env = { Authorization = \"IDEM_TEST_ACTION_TOKEN_4711\" }\n";
    std::fs::write(&p, doc).expect("write");
    let args = ServeArgs {
        config: Some(p.clone()),
        ..Default::default()
    };
    let unset = Config::load(&args, &env(&[])).expect_err("the variable is not set");
    assert!(unset.to_string().contains("headers_env"), "{unset}");
    std::env::set_var("IDEM_TEST_ACTION_TOKEN_4711", "Bearer s3cr3t-from-env");
    let c = Config::load(&args, &env(&[])).expect("ok");
    let a = &c.actions.0[&("shop".to_owned(), "send_followup".to_owned())];
    assert_eq!(
        a["deliver"]["http"]["headers"]["Authorization"],
        "Bearer s3cr3t-from-env"
    );
    assert!(a["deliver"]["http"].get("headers_env").is_none());
    assert_eq!(
        c.namespaces.get("shop").map(|p| p["lease_ms"].clone()),
        Some(serde_json::json!(45000))
    );
    assert!(!format!("{c:?}").contains("s3cr3t"));
    // A bad action is refused at load, naming it.
    std::fs::write(&p, doc.replace("{order_id}:followup", "{nope}:followup")).expect("write");
    let e = Config::load(&args, &env(&[])).expect_err("bad key");
    assert!(
        e.to_string()
            .contains("namespaces.shop.actions.send_followup.key"),
        "{e}"
    );
}

#[test]
fn layers_override_in_order() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    std::fs::write(
        &p,
        "listen = \"127.0.0.1:1\"\ndb = \"sqlite://file.db\"\njanitor_interval = \"5m\"\n\
         [namespaces.pay]\nlease = \"45s\"\nlease_expiry = \"review\"\n\
         [namespaces.pay.retry]\nmax_attempts = 3\nwindow_ms = \"2h\"\n",
    )
    .expect("write");
    let args = ServeArgs {
        config: Some(p),
        listen: Some("127.0.0.1:3".into()),
        ..Default::default()
    };
    let c = Config::load(
        &args,
        &env(&[
            ("IDEM_LISTEN", "127.0.0.1:2"),
            ("IDEM_DB", "sqlite://env.db"),
        ]),
    )
    .expect("ok");
    assert_eq!(c.listen.to_string(), "127.0.0.1:3");
    assert_eq!(c.db, "sqlite://env.db");
    assert_eq!(c.janitor_interval, Duration::from_secs(300));
    assert_eq!(
        c.namespaces.get("pay"),
        Some(
            &serde_json::json!({"lease_ms": 45000, "lease_expiry": "review",
            "retry": {"max_attempts": 3, "window_ms": 7_200_000}})
        )
    );
}

#[test]
fn debug_never_shows_the_database_password() {
    let url = "postgres://idem:p@ss:w0rd%2F@db:5432/idem?sslmode=disable&PassWord=two";
    let c = Config::load(&ServeArgs::default(), &env(&[("IDEM_DB", url)])).expect("ok");
    assert_eq!(c.db, url, "the real URL is kept for connecting");
    let dbg = format!("{c:?}");
    assert!(dbg.contains("postgres://idem:***@db:5432/idem"), "{dbg}");
    for secret in ["p@ss", "w0rd", "two"] {
        assert!(!dbg.contains(secret), "{secret} in {dbg}");
    }
    assert!(!format!("{c:#?}").contains("w0rd"));
    assert!(
        dbg.contains("listen") && dbg.contains("body_limit"),
        "{dbg}"
    );
    let args = ServeArgs {
        db: Some(url.into()),
        ..Default::default()
    };
    let dbg = format!("{args:?}");
    assert!(!dbg.contains("w0rd") && !dbg.contains("two"), "{dbg}");
    assert_eq!(c.db_redacted(), idem::redact_db_url(url));
}

#[test]
fn a_refused_database_url_is_named_without_its_password() {
    let args = ServeArgs {
        db: Some("mysql://root:hunter2@h/db".into()),
        ..Default::default()
    };
    let e = Config::load(&args, &env(&[])).expect_err("unsupported");
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(e.to_string().contains("mysql://root:***@h/db"), "{e}");
}

#[test]
fn file_alert_secret_is_a_policy_field_that_debug_hides() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    std::fs::write(
        &p,
        format!(
            "[namespaces.pay]\nalert_url = \"http://127.0.0.1:9/a\"\nalert_secret = \"{secret}\"\n"
        ),
    )
    .expect("write");
    let args = ServeArgs {
        config: Some(p.clone()),
        ..Default::default()
    };
    let c = Config::load(&args, &env(&[])).expect("ok");
    assert_eq!(
        c.namespaces.get("pay").and_then(|v| v.get("alert_secret")),
        Some(&serde_json::json!(secret))
    );
    let shown = format!("{c:?}");
    assert!(
        shown.contains("alert_secret") && !shown.contains("MfKQ9r8G"),
        "{shown}"
    );

    std::fs::write(&p, "[namespaces.pay]\nalert_secret = \"whsec_MfKQ9r8G\"\n").expect("write");
    let e = Config::load(&args, &env(&[])).expect_err("bad secret");
    let text = e.to_string();
    assert!(
        text.contains("namespaces.pay") && text.contains("alert_secret"),
        "{text}"
    );
    assert!(!text.contains("MfKQ9r8G"), "{text}");
}

#[test]
fn errors_name_the_setting() {
    let e = Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_JANITOR_INTERVAL", "soon")]),
    )
    .expect_err("bad");
    assert!(e.to_string().contains("IDEM_JANITOR_INTERVAL"), "{e}");
    let args = ServeArgs {
        listen: Some("nope".into()),
        ..Default::default()
    };
    let e = Config::load(&args, &env(&[])).expect_err("bad");
    assert!(e.to_string().contains("--listen"), "{e}");
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    std::fs::write(&p, "[namespaces.pay]\nbogus = 1\n").expect("write");
    let args = ServeArgs {
        config: Some(p),
        ..Default::default()
    };
    let e = Config::load(&args, &env(&[])).expect_err("bad");
    assert!(e.to_string().contains("bogus"), "{e}");
}

#[test]
fn janitor_batch_defaults_per_backend_and_pool_and_gauges_settings() {
    let c = Config::load(&ServeArgs::default(), &env(&[])).expect("ok");
    assert_eq!(c.janitor_batch_for(), SQLITE_JANITOR_BATCH);
    assert_eq!(c.stats_interval, Duration::ZERO);
    assert_eq!(c.pg_pool, 16);
    let c = Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_DB", "postgres://u@h/db")]),
    )
    .expect("ok");
    assert_eq!(c.janitor_batch_for(), POSTGRES_JANITOR_BATCH);
    let c = Config::load(
        &ServeArgs::default(),
        &env(&[
            ("IDEM_DB", "postgres://u@h/db"),
            ("IDEM_JANITOR_BATCH", "77"),
            ("IDEM_PG_POOL", "40"),
            ("IDEM_STATS_INTERVAL", "250ms"),
        ]),
    )
    .expect("ok");
    assert_eq!(c.janitor_batch_for(), 77);
    assert_eq!(c.pg_pool, 40);
    assert_eq!(c.stats_interval, Duration::from_millis(250));
    for (var, v) in [
        ("IDEM_PG_POOL", "0"),
        ("IDEM_PG_POOL", "many"),
        ("IDEM_JANITOR_BATCH", "0"),
    ] {
        let e = Config::load(&ServeArgs::default(), &env(&[(var, v)])).expect_err(v);
        let setting = var.trim_start_matches("IDEM_").to_ascii_lowercase();
        let text = e.to_string();
        assert!(text.contains(var) || text.contains(&setting), "{text}");
    }
}

#[test]
fn an_earlier_versions_config_starts_with_a_warning_for_what_changed() {
    let text = include_str!("../../tests/fixtures/earlier-default-config.toml");
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    std::fs::write(&p, text).expect("write");
    let args = ServeArgs {
        config: Some(p),
        ..Default::default()
    };
    let c = Config::load(&args, &env(&[])).expect("an earlier version's config loads");
    assert_eq!(c.stats_interval, MAX_STATS_INTERVAL);
    assert_eq!(c.upgrade_warnings.len(), 1, "{:?}", c.upgrade_warnings);
    let w = &c.upgrade_warnings[0];
    assert!(w.contains("stats_interval = \"30s\""), "{w}");
    assert!(w.contains("using 1s"), "{w}");
    // The same from the environment; a value within the range warns nothing.
    let c = Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_STATS_INTERVAL", "2s")]),
    )
    .expect("accepted");
    assert_eq!(c.stats_interval, MAX_STATS_INTERVAL);
    assert_eq!(c.upgrade_warnings.len(), 1);
    let c = Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_STATS_INTERVAL", "1s")]),
    )
    .expect("ok");
    assert!(c.upgrade_warnings.is_empty());
    // Today's template warns nothing.
    let mut c = Config::default();
    c.apply_file(default_config_toml()).expect("parses");
    assert!(c.upgrade_warnings.is_empty(), "{:?}", c.upgrade_warnings);
    // A value that is no duration is still refused.
    Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_STATS_INTERVAL", "soon")]),
    )
    .expect_err("not a duration");
}

#[test]
fn a_broken_config_line_is_located_but_never_quoted() {
    let mut c = Config::default();
    let text = "listen = \"127.0.0.1:7780\"\ndb = \"postgres://u:hunter2@h/db\n\
                [namespaces.pay]\nalert_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
    let e = c.apply_file(text).expect_err("broken");
    let shown = e.to_string();
    assert!(shown.contains("line 2"), "{shown}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("MfKQ9r8G"),
        "{shown}"
    );
    let text = "[namespaces.pay]\nalert_secret = whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n";
    let shown = c.apply_file(text).expect_err("broken").to_string();
    assert!(
        shown.contains("line 2") && !shown.contains("MfKQ9r8G"),
        "{shown}"
    );
}

#[test]
fn tls_and_otlp_settings_layer_and_are_checked() {
    let dir = tempfile::tempdir().expect("tmp");
    let p = dir.path().join("idem.toml");
    std::fs::write(
        &p,
        "tls_cert = \"/file/cert.pem\"\ntls_key = \"/file/key.pem\"\n\
         otlp_endpoint = \"http://file:4318\"\n",
    )
    .expect("write");
    let file_only = ServeArgs {
        config: Some(p.clone()),
        ..Default::default()
    };
    let c = Config::load(&file_only, &env(&[])).expect("ok");
    assert_eq!(c.tls_cert.as_deref(), Some(Path::new("/file/cert.pem")));
    assert_eq!(c.tls_key.as_deref(), Some(Path::new("/file/key.pem")));
    assert_eq!(c.otlp_endpoint.as_deref(), Some("http://file:4318"));
    // The standard variable overrides the file; idem's own one wins over it; flags win.
    let c = Config::load(
        &file_only,
        &env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318")]),
    )
    .expect("ok");
    assert_eq!(c.otlp_endpoint.as_deref(), Some("http://otel:4318"));
    let both = env(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
        ("IDEM_OTLP_ENDPOINT", "http://idem:4318"),
        ("IDEM_TLS_KEY", "/env/key.pem"),
    ]);
    let c = Config::load(&file_only, &both).expect("ok");
    assert_eq!(c.otlp_endpoint.as_deref(), Some("http://idem:4318"));
    assert_eq!(c.tls_key.as_deref(), Some(Path::new("/env/key.pem")));
    let flags = ServeArgs {
        config: Some(p),
        tls_cert: Some("/flag/cert.pem".into()),
        otlp_endpoint: Some("https://flag:4318".into()),
        ..Default::default()
    };
    let c = Config::load(&flags, &both).expect("ok");
    assert_eq!(c.tls_cert.as_deref(), Some(Path::new("/flag/cert.pem")));
    assert_eq!(c.otlp_endpoint.as_deref(), Some("https://flag:4318"));

    // Both or neither, and an endpoint must be an http(s) URL.
    let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_TLS_CERT", "/c.pem")]))
        .expect_err("no key");
    assert!(e.to_string().contains("tls_key"), "{e}");
    let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_TLS_KEY", "/k.pem")]))
        .expect_err("no cert");
    assert!(e.to_string().contains("tls_cert"), "{e}");
    for bad in ["localhost:4318", "grpc://c:4317"] {
        let e = Config::load(&ServeArgs::default(), &env(&[("IDEM_OTLP_ENDPOINT", bad)]))
            .expect_err(bad);
        assert!(e.to_string().contains("IDEM_OTLP_ENDPOINT"), "{e}");
    }
    // Credentials in a collector URL never print.
    let c = Config::load(
        &ServeArgs::default(),
        &env(&[("IDEM_OTLP_ENDPOINT", "https://u:hunter2@otel.example.com")]),
    )
    .expect("ok");
    assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
}

#[test]
fn example_config_parses() {
    let mut c = Config::default();
    c.apply_file(default_config_toml()).expect("example parses");
    c.validate().expect("example is valid");
    assert_eq!(parse_size("1MiB"), Ok(1 << 20));
    assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
}
