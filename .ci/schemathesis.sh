#!/usr/bin/env bash
# Black-box check of the OpenAPI document against the server: schemathesis, every check, on a
# fresh `idem serve` (SQLite in a temporary directory, no API tokens, a free loopback port),
# then the same on a fresh PostgreSQL database when IDEM_TEST_PG is set. Fails on any failure
# or error. Deterministic (fixed seed, one worker, no example database) and bounded (max
# examples per operation); about 1-2 minutes per store on 2 cores after the build.
#
# Usage: .ci/schemathesis.sh [path/to/idem]   (default: builds the debug binary)
# Env:   SCHEMATHESIS_MAX_EXAMPLES (default 50), SCHEMATHESIS_SEED (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
VENV="${IDEM_VENV:-$HOME/.cache/idem/venv}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem/target}"

if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  echo "installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
fi

if [ $# -ge 1 ]; then
  IDEM="$1"
else
  cargo build --quiet -p idem-cli
  IDEM="$CARGO_TARGET_DIR/debug/idem"
fi

WORK="$(mktemp -d)"
SERVER_PID=""
PG_DB=""
stop_server() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
cleanup() {
  stop_server
  if [ -n "$PG_DB" ]; then
    psql "$IDEM_TEST_PG" -q -c "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# run_against LABEL DB_URL: a fresh server on DB_URL, schemathesis against it, server stopped.
run_against() {
  local label="$1" db="$2" port base status=0
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
  (cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$ROOT/.ci/schemathesis.toml" run \
    "$base/openapi.json" \
    --checks all \
    --seed "${SCHEMATHESIS_SEED:-1}" \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-50}" \
    --workers 1 \
    --generation-database none \
    --request-timeout 40 \
    --no-color) || status=$?
  stop_server
  if [ "$status" -ne 0 ]; then
    echo "schemathesis found failures on $label (exit $status); server log:" >&2
    tail -n 50 "$WORK/server-$label.log" >&2
  fi
  return "$status"
}

ROOT="$PWD"
run_against sqlite "sqlite://$WORK/idem.db"
# PostgreSQL too when the machine has it (CI sets IDEM_TEST_PG): some inputs only fail there.
if [ -n "${IDEM_TEST_PG:-}" ] && command -v psql >/dev/null 2>&1; then
  PG_DB="idem_schemathesis_$$"
  psql "$IDEM_TEST_PG" -q -c "CREATE DATABASE $PG_DB" >/dev/null
  run_against postgres "${IDEM_TEST_PG%/*}/$PG_DB"
fi
