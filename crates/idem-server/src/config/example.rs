//! The commented example configuration printed by `idem default-config`.
//!
//! Text only: it must never be read to set a default (the defaults live in `Config`'s
//! `Default`), and every setting it shows must be one the file layer accepts.

/// A commented example configuration (`idem default-config`).
pub fn default_config_toml() -> &'static str {
    r#"# idem server configuration.
# Layers: defaults -> this file (--config / IDEM_CONFIG) -> IDEM_* environment -> flags.
# Durations are human: 300ms, 30s, 15m, 30d.

# Address to listen on (IDEM_LISTEN, --listen). Without any API token the server only
# accepts a loopback address; create one with `idem token create` to listen elsewhere.
listen = "127.0.0.1:7780"

# Ledger database (IDEM_DB, --db): sqlite://PATH (embedded, default) or
# postgres://user:password@host/db (shared by several instances).
db = "sqlite://idem.db"

# How often the janitor expires leases, detects stuck work and applies retention
# (IDEM_JANITOR_INTERVAL, --janitor-interval), and how many records it handles per batch
# (IDEM_JANITOR_BATCH). Batches run back to back while there is a backlog. Unset, it is
# the backend's measured default: 100 on SQLite (claim p99 under 2x of idle while expiring
# about 80,000 records/s), 1000 on PostgreSQL (docs/performance.md).
janitor_interval = "30s"
# janitor_batch = 100

# The store gauges (idem_records, idem_review_queue_depth, idem_oldest_processing_seconds)
# are read at every scrape from counters the store keeps exact; one read is reused by the
# scrapes of the next stats_interval (IDEM_STATS_INTERVAL), so a scrape storm is no query
# storm. From 0 (default: every scrape reads; concurrent scrapes still share one read) to 1s.
stats_interval = "0s"

# PostgreSQL connections per instance (IDEM_PG_POOL). Size the sum over all instances
# against the server's max_connections (docs/deployment.md).
pg_pool = 16

# How often pending alerts are delivered to namespace alert_urls (IDEM_ALERT_INTERVAL).
alert_interval = "2s"

# Logs: "text" or "json" (IDEM_LOG_FORMAT, --log-format); filter (IDEM_LOG), e.g. "info".
log_format = "text"
log_level = "info"

# Largest accepted request body (IDEM_BODY_LIMIT): bytes, or e.g. "512KiB", "1MiB".
body_limit = "1MiB"

# HTTPS (IDEM_TLS_CERT / IDEM_TLS_KEY, --tls-cert / --tls-key): PEM certificate chain (leaf
# first) and its private key. SIGHUP re-reads both; a bad new file keeps the old certificate.
# tls_cert = "/etc/idem/tls/cert.pem"
# tls_key = "/etc/idem/tls/key.pem"

# OpenTelemetry traces over OTLP/HTTP (IDEM_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT,
# --otlp-endpoint): the collector's base URL; spans go to <url>/v1/traces. Off when unset.
# otlp_endpoint = "http://127.0.0.1:4318"

# Effects (POST .../effect, idem sends the request itself): the most bytes of a destination's
# response body kept (IDEM_MAX_RESPONSE_BYTES, --max-response-bytes; longer ones are cut and
# marked truncated) and a PEM file of extra CA certificates for outbound HTTPS
# (IDEM_EXTRA_CA, --extra-ca).
# [effects]
# max_response_bytes = "256KiB"
# extra_ca = "/etc/idem/private-ca.pem"

# Connection limits (docs/reliability.md). A request head must arrive within
# header_read_timeout, which also closes a keep-alive connection idle that long
# (IDEM_HEADER_READ_TIMEOUT); its body within body_read_timeout, else 408
# (IDEM_BODY_READ_TIMEOUT); a head over max_header_bytes gets 431 (IDEM_MAX_HEADER_BYTES);
# at most max_connections are served at once, the next ones wait in the listen backlog
# (IDEM_MAX_CONNECTIONS; keep it under the process's open-files limit, `ulimit -n`).
# [http]
# header_read_timeout = "20s"
# body_read_timeout = "30s"
# max_header_bytes = "64KiB"
# max_connections = 10000

# Per-namespace policy applied at start (same fields as PATCH /v1/namespaces/{ns};
# durations may be written "30s" or as integer milliseconds in the *_ms fields).
# [namespaces.payments]
# lease_ms = "30s"
# lease_expiry = "review"          # money paths: an expired lease goes to a person
# retention_ms = "30d"
# audit_retention_ms = "400d"
# stuck_after_ms = "15m"
# daily_limit = 10000
# alert_url = "https://alerts.example.com/idem"
# Signs every alert the Standard Webhooks way (webhook-signature): "whsec_" + base64 of
# 24-64 random bytes, e.g. from `echo "whsec_$(openssl rand -base64 32)"`. Keep this file
# private; the API never shows the value (only alert_secret_set).
# alert_secret = "whsec_..."
# destination_idempotent = false
# Where effects may send requests: host names (exact or "*.suffix"), "host:port", CIDR.
# Loopback, private, link-local and metadata addresses are refused unless listed.
# [namespaces.payments.egress]
# allow = ["api.stripe.com"]
# allow_private = false
# [namespaces.payments.retry]
# max_attempts = 5
# base_ms = "1s"
# max_ms = "5m"
# window_ms = "24h"
"#
}
