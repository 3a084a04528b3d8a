#!/usr/bin/env bash
# The official MCP SDKs as clients of a real `idem serve`, tools listed and called, one
# delivery per identity at a loopback destination:
# - Python (`mcp` from PyPI, pinned below): every protocol revision idem serves (the stateless
#   one through `server/discover` and pinned, the session ones through the initialize
#   handshake) — .ci/mcp/python_client.py;
# - TypeScript (`@modelcontextprotocol/sdk` from npm, pinned below): the revision it speaks
#   (its initialize handshake, a session) — .ci/mcp/ts_client.mjs.
# On SQLite, then on a fresh PostgreSQL database when IDEM_TEST_PG is set. The venv, the npm
# cache and the installed SDK live outside the clone (~/.cache/idem/) and are reused.
#
# Usage: .ci/mcp-clients.sh path/to/idem
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
IDEM="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
VENV="${IDEM_MCP_VENV:-$HOME/.cache/idem/mcp-venv}"
MCP_PIN="mcp==2.3.0"
TS_DIR="${IDEM_MCP_TS_DIR:-$HOME/.cache/idem/mcp-ts}"
TS_PIN="@modelcontextprotocol/sdk@1.32.2"
NPM_CACHE="${IDEM_NPM_CACHE:-$HOME/.cache/idem/npm}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if [ "$(cat "$VENV/.idem-pins" 2>/dev/null)" != "$MCP_PIN" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MCP_PIN"
  echo "$MCP_PIN" >"$VENV/.idem-pins"
fi

mkdir -p "$TS_DIR"
if [ "$(cat "$TS_DIR/.idem-pins" 2>/dev/null)" != "$TS_PIN" ]; then
  [ -f "$TS_DIR/package.json" ] ||
    echo '{"name": "idem-mcp-ts-client", "private": true, "type": "module"}' >"$TS_DIR/package.json"
  (cd "$TS_DIR" && npm install --cache "$NPM_CACHE" --no-audit --no-fund --loglevel=error \
    --fetch-retries=5 "$TS_PIN" >/dev/null)
  echo "$TS_PIN" >"$TS_DIR/.idem-pins"
fi

WORK="$(mktemp -d)"
SERVER_PID=""
PG_DB=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  if [ -n "$PG_DB" ]; then
    psql "$IDEM_TEST_PG" -q -c "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# check LABEL DB_URL: a fresh server on DB_URL, the SDK against it, the server stopped.
check() {
  local label="$1" db="$2" port
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
  echo "--- mcp (Python SDK) against idem serve on $label"
  env -i PATH="$PATH" HOME="$HOME" "$IDEM" serve --listen "127.0.0.1:$port" --db "$db" \
    >"$WORK/serve-$label.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$WORK/serve-$label.log" >&2; exit 1; fi
    sleep 0.1
  done
  if ! "$VENV/bin/python" "$ROOT/.ci/mcp/python_client.py" "http://127.0.0.1:$port"; then
    tail -n 40 "$WORK/serve-$label.log" >&2
    exit 1
  fi
  echo "--- mcp (TypeScript SDK) against idem serve on $label"
  if ! IDEM_MCP_TS_MODULES="$TS_DIR/node_modules" node "$ROOT/.ci/mcp/ts_client.mjs" \
    "http://127.0.0.1:$port"; then
    tail -n 40 "$WORK/serve-$label.log" >&2
    exit 1
  fi
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}

check sqlite "sqlite://$WORK/idem.db"
if [ -n "${IDEM_TEST_PG:-}" ] && command -v psql >/dev/null 2>&1; then
  PG_DB="idem_mcp_$$"
  psql "$IDEM_TEST_PG" -q -c "CREATE DATABASE $PG_DB" >/dev/null
  check postgres "${IDEM_TEST_PG%/*}/$PG_DB"
fi
