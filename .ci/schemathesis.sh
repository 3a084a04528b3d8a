#!/usr/bin/env bash
# Black-box check of the OpenAPI document against the server: the newest schemathesis from PyPI
# (upgraded on every run, its version printed), every check, every operation, positive and
# negative data (`--mode all`), on a fresh `idem serve` (SQLite in a temporary directory, no
# API tokens, a free loopback port), then the same on a fresh PostgreSQL database when
# IDEM_TEST_PG is set. Fails on any failure or error. Deterministic (fixed seed, one worker,
# no example database) and bounded (max examples per operation); about 1-2 minutes per store
# on 2 cores after the build.
#
# The server and schemathesis run in a network namespace of their own with only a loopback
# interface (`unshare -n`, which needs root or user namespaces): a generated effect makes idem
# call the URL in its body, and there nothing can leave the machine (no route, no DNS), so
# such an effect gets the contract's answer for an unreachable destination. PostgreSQL is
# reached from inside through a Unix-socket relay (.ci/pg-relay.py). Where `unshare -n` is
# not permitted the effect operation is skipped with the reason printed; under CI=1 that is
# a failure instead.
#
# Usage: .ci/schemathesis.sh [path/to/idem]   (default: builds the debug binary)
# Env:   SCHEMATHESIS_MAX_EXAMPLES (default 50), SCHEMATHESIS_SEED (default 1),
#        SCHEMATHESIS_CONFIG (default .ci/schemathesis.toml; an empty file shows every
#        refusal the configuration accepts as the contract)
set -euo pipefail
if [ -n "${SCHEMATHESIS_CONFIG:-}" ]; then
  CONFIG="$(cd "$(dirname "$SCHEMATHESIS_CONFIG")" && pwd)/$(basename "$SCHEMATHESIS_CONFIG")"
fi
cd "$(dirname "$0")/.."
ROOT="$PWD"
CONFIG="${CONFIG:-$ROOT/.ci/schemathesis.toml}"

VENV="${IDEM_VENV:-$HOME/.cache/idem/venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem/target}"

SERVER_PID=""
RELAY_PIDS=()
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
stop_relays() {
  local p
  for p in "${RELAY_PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  RELAY_PIDS=()
}

# wait_for WHAT CMD...: up to 10 s for CMD to succeed.
wait_for() {
  local what="$1"
  shift
  for _ in $(seq 1 100); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "$what did not come up" >&2
  return 1
}

# serve_and_check LABEL DB_URL [schemathesis args...]: a fresh server on DB_URL, schemathesis
# against it, the server stopped. Runs where it is called (inside the namespace, or not).
serve_and_check() {
  local label="$1" db="$2" port base status=0
  shift 2
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
  base="http://127.0.0.1:$port"
  echo "--- schemathesis against idem serve on $label ($base)"
  # A clean environment: no IDEM_* settings (config file, tokens, listen address) leak in.
  env -i PATH="$PATH" HOME="$HOME" "$IDEM" serve --listen "127.0.0.1:$port" --db "$db" \
    >"$WORK/server-$label.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if curl -fsS "$base/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "idem serve exited:" >&2
      cat "$WORK/server-$label.log" >&2
      return 1
    fi
    sleep 0.1
  done
  # --workers 1: deterministic order (and CPython 3.11's parser is not safe for hypothesis's
  # lambda descriptions from several threads: "AST constructor recursion depth mismatch").
  (cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$CONFIG" run \
    "$base/openapi.json" \
    --checks all \
    --mode all \
    --seed "${SCHEMATHESIS_SEED:-1}" \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-50}" \
    --workers 1 \
    --generation-database none \
    --request-timeout 40 \
    --no-color "$@") || status=$?
  stop_server
  if [ "$status" -ne 0 ]; then
    echo "schemathesis found failures on $label (exit $status); server log:" >&2
    tail -n 50 "$WORK/server-$label.log" >&2
  fi
  return "$status"
}

# Inside the namespace (the script calls itself so): loopback up, the PostgreSQL relay if
# asked for (IDEM_SCHEMATHESIS_PG_RELAY="HOST:PORT SOCKET"), then the run.
if [ "${1:-}" = "--in-netns" ]; then
  trap 'stop_server; stop_relays' EXIT
  ip link set lo up
  if [ -n "${IDEM_SCHEMATHESIS_PG_RELAY:-}" ]; then
    read -r listen sock <<<"$IDEM_SCHEMATHESIS_PG_RELAY"
    python3 "$ROOT/.ci/pg-relay.py" tcp-to-unix "$listen" "$sock" &
    RELAY_PIDS+=($!)
    wait_for "the PostgreSQL relay on $listen" \
      python3 -c 'import socket, sys; h, p = sys.argv[1].rsplit(":", 1); socket.create_connection((h, int(p)), 1).close()' "$listen"
  fi
  shift
  serve_and_check "$@"
  exit $?
fi

# The newest release, not a pin: its new checks and generators are the point of this run.
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade schemathesis
echo "using $("$VENV/bin/schemathesis" --version)"

if [ $# -ge 1 ]; then
  IDEM="$1"
else
  cargo build --quiet -p idem-cli
  IDEM="$CARGO_TARGET_DIR/debug/idem"
fi
IDEM="$(cd "$(dirname "$IDEM")" && pwd)/$(basename "$IDEM")"

WORK="$(mktemp -d)"
PG_DB=""
cleanup() {
  stop_server
  stop_relays
  if [ -n "$PG_DB" ]; then
    psql "$IDEM_TEST_PG" -q -c "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# Effects: only where nothing can leave the machine (see the top of this file).
NETNS=0
if unshare -n sh -c 'ip link set lo up' 2>"$WORK/unshare.err"; then
  NETNS=1
  echo "server and schemathesis run in a network namespace with only loopback; the effect operation is generated"
else
  reason="$(head -n 1 "$WORK/unshare.err")"
  if [ "${CI:-}" = "1" ]; then
    echo "FAIL: cannot make a network namespace (unshare -n: ${reason:-refused}); under CI the effect operation must be generated, and only in one" >&2
    exit 1
  fi
  echo "NOTE: cannot make a network namespace (unshare -n: ${reason:-refused}); the effect operation is skipped (a generated effect would call its URL)"
fi

# run_against LABEL DB_URL: serve_and_check, in the namespace when there is one. A PostgreSQL
# URL is reached there through the relay: the URL's host:port becomes 127.0.0.1:PORT inside.
run_against() {
  local label="$1" db="$2" status=0
  if [ "$NETNS" -ne 1 ]; then
    serve_and_check "$label" "$db" --exclude-operation-id effect
    return
  fi
  local relay="" inner_db="$db"
  if [[ "$db" == postgres://* || "$db" == postgresql://* ]]; then
    local sock="$WORK/pg-$label.sock" hp port
    hp="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print("%s:%s" % (p.hostname or "127.0.0.1", p.port or 5432))' "$db")"
    port="${hp##*:}"
    inner_db="$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); user = p.netloc.rpartition("@")[0]; print(u.urlunsplit((p.scheme, (user + "@" if user else "") + "127.0.0.1:" + sys.argv[2], p.path, p.query, "")))' "$db" "$port")"
    python3 "$ROOT/.ci/pg-relay.py" unix-to-tcp "$sock" "$hp" &
    RELAY_PIDS+=($!)
    wait_for "the PostgreSQL relay on $sock" test -S "$sock"
    relay="127.0.0.1:$port $sock"
  fi
  IDEM="$IDEM" WORK="$WORK" VENV="$VENV" SCHEMATHESIS_CONFIG="$CONFIG" IDEM_SCHEMATHESIS_PG_RELAY="$relay" \
    unshare -n bash "$ROOT/.ci/schemathesis.sh" --in-netns "$label" "$inner_db" || status=$?
  stop_relays
  return "$status"
}

run_against sqlite "sqlite://$WORK/idem.db"
# PostgreSQL too when the machine has it (CI sets IDEM_TEST_PG): some inputs only fail there.
if [ -n "${IDEM_TEST_PG:-}" ] && command -v psql >/dev/null 2>&1; then
  PG_DB="idem_schemathesis_$$"
  psql "$IDEM_TEST_PG" -q -c "CREATE DATABASE $PG_DB" >/dev/null
  run_against postgres "${IDEM_TEST_PG%/*}/$PG_DB"
fi
