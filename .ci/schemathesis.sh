#!/usr/bin/env bash
# Black-box check of the OpenAPI document against the server: schemathesis, every check, on a
# fresh `idem serve` (SQLite in a temporary directory, no API tokens, a free loopback port).
# Fails on any failure or error. Deterministic (fixed seed, one worker, no example database)
# and bounded (max examples per operation); about a minute on 2 cores after the build.
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
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
BASE="http://127.0.0.1:$PORT"
env -i PATH="$PATH" HOME="$HOME" "$IDEM" serve --listen "127.0.0.1:$PORT" --db "sqlite://$WORK/idem.db" \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  if curl -fsS "$BASE/healthz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "idem serve exited:" >&2
    cat "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.1
done

# --workers 1: deterministic order (and CPython 3.11's parser is not safe for hypothesis's
# lambda descriptions from several threads: "AST constructor recursion depth mismatch").
status=0
(cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$OLDPWD/.ci/schemathesis.toml" run \
  "$BASE/openapi.json" \
  --checks all \
  --seed "${SCHEMATHESIS_SEED:-1}" \
  --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-50}" \
  --workers 1 \
  --generation-database none \
  --request-timeout 40 \
  --no-color) || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis found failures (exit $status); server log:" >&2
  tail -n 50 "$WORK/server.log" >&2
fi
exit "$status"
