#!/usr/bin/env bash
# The client libraries against a real idem serve: the Python package (installed from
# clients/python into a venv, pytest) and the TypeScript package (npm ci, tsc, node --test),
# then both contract checks against the server's /openapi.json (the Python suite compares its
# TypedDicts itself; for TypeScript, types are generated with openapi-typescript from a fresh
# server and the client's types are type-checked against them).
#
# Idempotent and quiet: the venv and the npm cache live outside the clone and are reused;
# only failures print more than the summary lines.
#
# Usage: .ci/clients.sh [path/to/idem]   (default: builds the debug binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

VENV="${IDEM_CLIENTS_VENV:-$HOME/.cache/idem/clients-venv}"
NPM_CACHE="${IDEM_NPM_CACHE:-$HOME/.cache/idem/npm}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem/target}"
PY_PINS=(httpx==0.28.1 pytest==9.2.0 requests==2.34.2 hatchling==1.33.0 mypy==2.4.1)

if [ $# -ge 1 ]; then
  IDEM="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
else
  cargo build --quiet -p idem-cli
  IDEM="$CARGO_TARGET_DIR/debug/idem"
fi
[ -x "$IDEM" ] || { echo "no idem binary at $IDEM" >&2; exit 1; }
export IDEM_BIN="$IDEM"

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

# --- Python -------------------------------------------------------------------------------
echo "--- python: idem-ledger (pytest against idem serve)"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
STAMP="$VENV/.idem-pins"
if [ "$(cat "$STAMP" 2>/dev/null)" != "${PY_PINS[*]}" ]; then
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PINS[@]}"
  echo "${PY_PINS[*]}" >"$STAMP"
fi
# The package as a user gets it (a wheel built by hatchling), not the source tree.
"$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  --force-reinstall "$ROOT/clients/python"
export IDEM_TEST_LOG_DIR="$WORK/logs"
if ! (cd "$ROOT/clients/python" && "$VENV/bin/python" -m pytest -p no:cacheprovider tests); then
  for f in "$IDEM_TEST_LOG_DIR"/*.log; do
    [ -f "$f" ] && { echo "--- $(basename "$f") (last 40 lines)"; tail -n 40 "$f"; } >&2
  done
  exit 1
fi
# The package is typed (py.typed): its own annotations must hold.
if ! "$VENV/bin/python" -m mypy --strict --cache-dir "$WORK/mypy-cache" \
  "$ROOT/clients/python/src/idem_ledger" >"$WORK/mypy.log" 2>&1; then
  cat "$WORK/mypy.log" >&2
  exit 1
fi
tail -n 1 "$WORK/mypy.log"

# --- TypeScript ---------------------------------------------------------------------------
echo "--- typescript: idem-ledger (tsc, node --test against idem serve)"
cd "$ROOT/clients/typescript"
if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --cache "$NPM_CACHE" --prefer-offline --ignore-scripts --no-audit --no-fund \
    --fetch-retries=5 --loglevel=error >/dev/null
fi
npm run --silent build
if ! node --test --test-reporter=tap test/ >"$WORK/node-test.tap" 2>&1; then
  grep -v '^ *\(duration_ms\|\.\.\.\|---\)' "$WORK/node-test.tap" | tail -n 80 >&2
  exit 1
fi
grep -E '^# (tests|pass|fail) ' "$WORK/node-test.tap" | tr '\n' ' ' && echo
# The published files: the ESM entry and its declarations, nothing else of the tree.
npm pack --dry-run --json --cache "$NPM_CACHE" 2>/dev/null | node -e '
  const files = JSON.parse(require("fs").readFileSync(0, "utf8"))[0].files.map((f) => f.path);
  for (const need of ["dist/index.js", "dist/index.d.ts", "package.json", "README.md"]) {
    if (!files.includes(need)) { console.error(`npm pack is missing ${need}`); process.exit(1); }
  }
  const stray = files.filter((f) => !/^(dist\/|package\.json$|README\.md$)/.test(f));
  if (stray.length) { console.error(`npm pack would publish ${stray.join(", ")}`); process.exit(1); }'

# --- TypeScript types against /openapi.json -----------------------------------------------
echo "--- typescript: client types against the server's /openapi.json"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
env -i PATH="$PATH" HOME="$HOME" "$IDEM" serve --listen "127.0.0.1:$port" --db "sqlite://$WORK/openapi.db" \
  >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$WORK/serve.log" >&2; exit 1; fi
  sleep 0.1
done
IDEM_URL="http://127.0.0.1:$port" npm run --silent contract:generate >/dev/null 2>"$WORK/generate.log" ||
  { cat "$WORK/generate.log" >&2; exit 1; }
npm run --silent contract:check
echo "client types match /openapi.json"
