#!/usr/bin/env bash
# The operator console in a real headless Chromium: Debian's `chromium` (installed with
# apt-get when missing) driven by playwright-core from npm (no browser download), against a
# real `idem serve` on a fresh SQLite ledger, then on a fresh PostgreSQL database when
# IDEM_TEST_PG is set. The suite is tests/console-browser/console.test.mjs (node --test).
#
# Usage: .ci/console-browser.sh [path/to/idem]   (default: builds the debug binary)
# Env:   IDEM_CONSOLE_SHOTS=DIR  write the screenshots there (docs/console/ refreshes the docs)
#        IDEM_NPM_CACHE          npm cache (default ~/.cache/idem/npm, outside the clone)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem/target}"

if [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium (Debian package)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v node >/dev/null; then
  echo "installing node and npm (Debian packages)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
(cd tests/console-browser && npm ci --silent --no-audit --no-fund \
  --cache "${IDEM_NPM_CACHE:-$HOME/.cache/idem/npm}")

if [ $# -ge 1 ]; then
  IDEM="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
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

# run_against LABEL DB_URL [SHOTS_DIR]: tokens, a fresh server on a free loopback port, the suite.
run_against() {
  local label="$1" db="$2" shots="${3:-}"
  echo "== console in Chromium on $label"
  export IDEM_ADMIN IDEM_OPERATOR IDEM_WORKER IDEM_SCOPED
  IDEM_ADMIN="$("$IDEM" token create --db "$db" --namespace '*' --role admin)"
  IDEM_OPERATOR="$("$IDEM" token create --db "$db" --namespace '*' --role operator)"
  IDEM_WORKER="$("$IDEM" token create --db "$db" --namespace '*' --role worker)"
  IDEM_SCOPED="$("$IDEM" token create --db "$db" --namespace pay --role operator)"
  local log="$WORK/serve-$label.log"
  "$IDEM" serve --listen 127.0.0.1:0 --db "$db" --log-format text >"$log" 2>&1 &
  SERVER_PID=$!
  local base=""
  for _ in $(seq 1 100); do
    base="$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n1 | sed 's/listening on //')" || true
    [ -n "$base" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
  done
  [ -n "$base" ] || { echo "the server did not start"; cat "$log"; exit 1; }
  if [ -n "$shots" ]; then mkdir -p "$shots"; fi
  (cd tests/console-browser && IDEM_BASE="$base" IDEM_SHOTS="$shots" CHROMIUM=/usr/bin/chromium \
    node --test --test-concurrency=1 console.test.mjs)
  # The session cookie and the tokens never reach the log.
  for secret in "$IDEM_ADMIN" "$IDEM_OPERATOR" "$IDEM_SCOPED"; do
    if grep -qF "$secret" "$log"; then echo "a token reached the log"; exit 1; fi
  done
  stop_server
}

SHOTS="${IDEM_CONSOLE_SHOTS:-}"
if [ -n "$SHOTS" ]; then SHOTS="$(mkdir -p "$SHOTS" && cd "$SHOTS" && pwd)"; fi
run_against sqlite "sqlite://$WORK/idem.db" "$SHOTS"

if [ -n "${IDEM_TEST_PG:-}" ]; then
  PG_DB="idem_console_$$"
  psql "$IDEM_TEST_PG" -q -c "CREATE DATABASE $PG_DB" >/dev/null
  PG_URL="$(python3 -c 'import sys,urllib.parse as u; p=u.urlparse(sys.argv[1]); print(p._replace(path="/"+sys.argv[2]).geturl())' "$IDEM_TEST_PG" "$PG_DB")"
  run_against postgres "$PG_URL"
else
  echo "PostgreSQL part skipped: IDEM_TEST_PG is not set"
fi
echo "console browser suite: passed"
