#!/usr/bin/env bash
# PgBouncer in front of PostgreSQL, as Supabase, Neon and most hosted PostgreSQL run it:
# transaction pooling, startup `options` ignored. Starts a private PgBouncer (Debian's package,
# installed if missing) on a free loopback port with its own config and files in a temp dir,
# in front of the server of IDEM_TEST_PG (default 127.0.0.1:5432), and runs through it:
#   - the store contract suite (crates/idem-testkit/tests/contract_postgres.rs),
#   - the server's HTTP tests, PostgreSQL part only (crates/idem-server/tests/it),
#   - the statement wrappers that keep plans behind the pooler (crates/idem-postgres/tests/it),
#   - the `kill -9` fault run with the history checker (idem bench --kill9-rounds),
#   - the refusal of a pooler in statement mode, and of `statements=named`, at start;
# and through a PgBouncer that carries named prepared statements (1.24, built once from Debian's
# source package and cached outside the clone; Debian 12 ships 1.18, which cannot), where idem
# finds at start that it may name its statements: the contract suite, the server's HTTP tests
# and two instances at once (one told `statements=named`, one finding it), and the `kill -9`
# fault run with the history checker.
# Usage: .ci/pgbouncer.sh PATH/TO/idem     (the debug binary `cargo build -p idem-cli` made)
#        .ci/pgbouncer.sh --start DIR      (only start one; prints its port; for manual runs)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  echo "installing pgbouncer"
  (apt-get install -y pgbouncer >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y pgbouncer >/dev/null; })
fi
PGBOUNCER="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"

# PgBouncer >= 1.21 carries named prepared statements across server connections
# (max_prepared_statements). Built from the source of Debian 13's package, checked by its hash.
MODERN_VERSION=1.24.1
MODERN_SHA256=da72a3aba13072876d055a3e58dd4aba4a5de4ed6148e73033185245598fd3e0
MODERN_DIR="${IDEM_PGBOUNCER_CACHE:-$HOME/.cache/idem/pgbouncer-$MODERN_VERSION}"
modern_pgbouncer() {
  if [ -x "$MODERN_DIR/bin/pgbouncer" ]; then
    echo "$MODERN_DIR/bin/pgbouncer"
    return
  fi
  local src
  src="$(mktemp -d)"
  echo "building PgBouncer $MODERN_VERSION from Debian's source package" >&2
  dpkg -s libevent-dev >/dev/null 2>&1 || apt-get install -y libevent-dev libssl-dev pkgconf >/dev/null 2>&1 ||
    { apt-get update >/dev/null && apt-get install -y libevent-dev libssl-dev pkgconf >/dev/null; }
  curl -fsS -o "$src/pgb.tar.gz" \
    "http://deb.debian.org/debian/pool/main/p/pgbouncer/pgbouncer_$MODERN_VERSION.orig.tar.gz"
  echo "$MODERN_SHA256  $src/pgb.tar.gz" | sha256sum -c --quiet - >&2
  tar -xzf "$src/pgb.tar.gz" -C "$src"
  (cd "$src/pgbouncer-$MODERN_VERSION" &&
    ./configure --prefix="$MODERN_DIR" --without-cares --without-systemd --without-pam >/dev/null &&
    make -j2 >/dev/null && make install >/dev/null) >&2
  rm -rf "$src"
  chmod -R a+rX "$MODERN_DIR"
  echo "$MODERN_DIR/bin/pgbouncer"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# start_pgbouncer DIR MODE UPSTREAM_HOST UPSTREAM_PORT [BINARY] -> prints the port it listens on
start_pgbouncer() {
  local dir="$1" mode="$2" host="$3" upstream="$4" binary="${5:-$PGBOUNCER}" port extra=""
  port="$(free_port)"
  mkdir -p "$dir"
  # 1.21 and later: carry named prepared statements (on by default since 1.22; said here).
  if [ "$binary" != "$PGBOUNCER" ]; then extra="max_prepared_statements = 200"; fi
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$upstream
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = $mode
ignore_startup_parameters = options,extra_float_digits
max_client_conn = 1000
default_pool_size = 20
max_db_connections = 60
server_lifetime = 3600
# Retry a failed server login after 1 s, not the default 15 s: after a database restart the
# pooler is then back within a second of it.
server_login_retry = 1
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
$extra
INI
  echo '"postgres" ""' >"$dir/userlist.txt"
  # PgBouncer refuses to run as root; the files are then the postgres user's (and a built
  # binary is copied beside them: the cache under root's home is not theirs to read).
  if [ "$(id -u)" = 0 ]; then
    if [ "$binary" != "$PGBOUNCER" ]; then
      cp "$binary" "$dir/pgbouncer"
      binary="$dir/pgbouncer"
    fi
    chown -R postgres "$dir"
    runuser -u postgres -- "$binary" -d "$dir/pgbouncer.ini"
  else
    "$binary" -d "$dir/pgbouncer.ini"
  fi
  for _ in $(seq 1 50); do
    pg_isready -h 127.0.0.1 -p "$port" -q 2>/dev/null && break
    sleep 0.1
  done
  echo "$port"
}

stop_pgbouncer() {
  local pid
  pid="$(cat "$1/pgbouncer.pid" 2>/dev/null || true)"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
}

upstream="${IDEM_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
up_host="$(python3 -c 'import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).hostname or "127.0.0.1")' "$upstream")"
up_port="$(python3 -c 'import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 5432)' "$upstream")"

if [ "${1:-}" = "--start" ]; then
  start_pgbouncer "$2" "${3:-transaction}" "$up_host" "$up_port"
  exit 0
fi
if [ "${1:-}" = "--start-modern" ]; then
  start_pgbouncer "$2" "${3:-transaction}" "$up_host" "$up_port" "$(modern_pgbouncer)"
  exit 0
fi

# check_kill9 REPORT.json WHERE: fails unless the history checker found nothing wrong.
check_kill9() {
  python3 - "$1" "$2" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["verdict"]
bad = {k: v[k] for k in ("lost", "double_acquired", "bad_state", "ambiguous_not_in_review") if v[k]}
print(f"kill -9 {sys.argv[2]}: {v['acknowledged']} acknowledged writes checked, {bad or 'nothing'} wrong")
sys.exit(1 if bad else 0)
PY
}

bin="$1"
work="$(mktemp -d)"
chmod 755 "$work"
cleanup() {
  stop_pgbouncer "$work/tx"
  stop_pgbouncer "$work/stmt"
  stop_pgbouncer "$work/named"
  rm -rf "$work"
}
trap cleanup EXIT
trap "exit 130" INT TERM

port="$(start_pgbouncer "$work/tx" transaction "$up_host" "$up_port")"
pooled="postgres://postgres@127.0.0.1:$port/postgres?pooler=transaction"
echo "PgBouncer $("$PGBOUNCER" --version | head -n1) in transaction mode on 127.0.0.1:$port"

export CARGO_TERM_COLOR=never
echo "--> store contract suite through PgBouncer"
IDEM_TEST_PG="$pooled" cargo test -q -p idem-testkit --test contract_postgres

echo "--> server HTTP tests (PostgreSQL part) through PgBouncer"
IDEM_TEST_PG="$pooled" IDEM_TEST_SKIP_SQLITE=1 cargo test -q -p idem-server --test it

echo "--> statements keep their plans in functions through PgBouncer"
IDEM_TEST_PG="$pooled" cargo test -q -p idem-postgres --test it -- \
  pooler::behind_a_transaction_pooler pooler::two_instances pooler::a_dropped_function \
  pooler::statements_named_is_refused

echo "--> kill -9 of idem under load through PgBouncer, history checker"
timeout 300 "$bin" bench --backend postgres --db "$pooled" --kill9-rounds "${IDEM_PGB_KILL9_ROUNDS:-5}" \
  --round-time 1s --concurrency 16 --json "$work/kill9.json"
check_kill9 "$work/kill9.json" "through PgBouncer"

echo "--> a pooler in statement mode is refused at start"
sport="$(start_pgbouncer "$work/stmt" statement "$up_host" "$up_port")"
probe_db="idem_t_stmt_$$"
psql -XAtq "$upstream" -c "CREATE DATABASE $probe_db"
set +e
out="$(timeout 30 "$bin" serve --listen 127.0.0.1:0 \
  --db "postgres://postgres@127.0.0.1:$sport/$probe_db?pooler=transaction" 2>&1)"
rc=$?
set -e
stop_pgbouncer "$work/stmt"
psql -XAtq "$upstream" -c "DROP DATABASE IF EXISTS $probe_db WITH (FORCE)"
if [ "$rc" = 0 ] || ! grep -q "a pooler in statement mode" <<<"$out"; then
  echo "expected a refusal naming statement mode, got exit $rc:" >&2
  echo "$out" | tail -n 20 >&2
  exit 1
fi
echo "refused: $(grep -o 'the database refused.*' <<<"$out" | head -n1)"
echo "--> named statements through a PgBouncer that carries them (found at start, or statements=named)"
modern="$(modern_pgbouncer)"
nport="$(start_pgbouncer "$work/named" transaction "$up_host" "$up_port" "$modern")"
found="postgres://postgres@127.0.0.1:$nport/postgres?pooler=transaction"
named="$found&statements=named"
echo "PgBouncer $("$modern" --version | head -n1) in transaction mode, max_prepared_statements = 200, on 127.0.0.1:$nport"
IDEM_TEST_PG="$found" cargo test -q -p idem-testkit --test contract_postgres
IDEM_TEST_PG="$named" IDEM_TEST_SKIP_SQLITE=1 cargo test -q -p idem-server --test it
IDEM_TEST_PG="$named" cargo test -q -p idem-postgres --test it -- pooler::a_pooler_that_carries
echo "--> kill -9 of idem under load through PgBouncer $MODERN_VERSION (named statements), history checker"
timeout 300 "$bin" bench --backend postgres --db "$found" --kill9-rounds "${IDEM_PGB_KILL9_ROUNDS_NAMED:-3}" \
  --round-time 1s --concurrency 16 --json "$work/kill9-named.json"
check_kill9 "$work/kill9-named.json" "through PgBouncer $MODERN_VERSION"
echo "pgbouncer: all passed"
