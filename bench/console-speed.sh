#!/usr/bin/env bash
# How fast the console's pages answer with 1,000,000 records in the ledger, on SQLite and
# (when IDEM_TEST_PG is set) PostgreSQL. Fills a fresh ledger with SQL (900k records in
# `shop`, 90k in `mail`, 10k in `crm`; ~0.5 % needs_review, 0.1 % awaiting_approval, 0.2 %
# stuck processing, the rest final), starts `idem serve` on it (no tokens: the console is
# open, each request still reads its session) and times each page with curl: median and max
# of 20 requests after one warm-up. Not a timed test: a measurement to read.
#
# Usage: bench/console-speed.sh [path/to/idem] [records]   (default: release build, 1000000)
# Env:   CONSOLE_SPEED_SKIP_SQLITE=1 measures PostgreSQL only
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/idem/target}"
IDEM="${1:-}"
N="${2:-1000000}"
if [ -z "$IDEM" ]; then
  cargo build --quiet --release -p idem-cli
  IDEM="$CARGO_TARGET_DIR/release/idem"
fi
WORK="$(mktemp -d)"
SERVER_PID=""
PG_DB=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  if [ -n "$PG_DB" ]; then psql "$IDEM_TEST_PG" -q -c "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

NOW_MS="$(($(date +%s) * 1000))"
# One row per i: the namespace, key, state and times follow from i (the same on both stores).
select_rows() {
  local t="$1" f="$2" # SQL spellings of true/false
  cat <<SQL
  CASE WHEN i <= $N * 9 / 10 THEN 'shop' WHEN i <= $N * 99 / 100 THEN 'mail' ELSE 'crm' END,
  'evt_' || i || ':charge',
  CASE WHEN i % 1000 < 5 THEN 'needs_review' WHEN i % 1000 = 5 THEN 'awaiting_approval'
       WHEN i % 1000 IN (6, 7) THEN 'processing' WHEN i % 1000 < 20 THEN 'failed_permanent'
       ELSE 'completed' END,
  1, 'exec-' || (i % 5000), 'corr-' || (i % 20000),
  CASE WHEN i % 1000 IN (6, 7) THEN $NOW_MS - 3600000 ELSE NULL END,
  CASE WHEN i % 1000 < 5 OR i % 1000 >= 20 THEN '{"charge": "ch_' || i || '"}' ELSE NULL END,
  $NOW_MS - 86400000 + i * 50, $NOW_MS - 86400000 + i * 50 + 10,
  'reclaim', $f, 0, $NOW_MS - 86400000, 
  CASE WHEN i % 1000 >= 8 THEN $NOW_MS - 86400000 + i * 50 + 10 ELSE NULL END,
  CASE WHEN i % 1000 IN (6, 7) THEN $NOW_MS - 3600000 ELSE $NOW_MS - 86400000 + i * 50 END,
  $f, 1
SQL
}
COLS="namespace, key, state, attempt, owner, correlation_id, lease_expires_at, result,
      created_at, updated_at, lease_expiry, reported, budget_base, window_start, final_at,
      active_at, stuck_alerted, version"

# measure LABEL DB_URL
measure() {
  local label="$1" db="$2"
  local log="$WORK/serve-$label.log"
  "$IDEM" serve --listen 127.0.0.1:0 --db "$db" >"$log" 2>&1 &
  SERVER_PID=$!
  local base=""
  for _ in $(seq 1 300); do
    base="$(grep -o 'listening on http://[0-9.:]*' "$log" | head -n1 | sed 's/listening on //')" || true
    [ -n "$base" ] && break
    sleep 0.1
  done
  [ -n "$base" ] || { cat "$log"; exit 1; }
  local jar="$WORK/jar-$label"
  curl -s -o /dev/null -c "$jar" "$base/console"
  local next
  next="$(curl -s "$base/v1/review?limit=50" | python3 -c 'import json,sys; print(json.load(sys.stdin)["next_cursor"])')"
  printf '%-10s %-58s %8s %8s\n' "$label" "page" "p50 ms" "max ms"
  for p in "/console" "/console/review" "/console/review?namespace=shop&state=needs_review" \
           "/console/review?owner=exec-7" "/v1/review?limit=50&cursor=$next" "/console/ns/shop" \
           "/console/ns/shop?state=completed" "/console/ns/shop/keys/evt_5:charge" \
           "/v1/namespaces"; do
    curl -s -o /dev/null -b "$jar" "$base$p"
    local times=()
    for _ in $(seq 1 20); do
      times+=("$(curl -s -o /dev/null -b "$jar" -w '%{time_total}' "$base$p")")
    done
    printf '%s\n' "${times[@]}" | python3 -c "
import sys, statistics
t = sorted(float(x) * 1000 for x in sys.stdin.read().split())
print('%-10s %-58s %8.1f %8.1f' % ('$label', '${p:0:58}', statistics.median(t), t[-1]))"
  done
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
}

if [ -z "${CONSOLE_SPEED_SKIP_SQLITE:-}" ]; then
echo "filling SQLite with $N records"
SQ="$WORK/idem.db"
"$IDEM" token create --db "sqlite://$SQ" --namespace '*' --role admin >/dev/null 2>&1 || true
sqlite3 "$SQ" "DELETE FROM api_tokens;" # the fill only needed the migrations
sqlite3 "$SQ" "INSERT INTO records ($COLS) WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $N) SELECT $(select_rows 1 0) FROM s; ANALYZE;"
measure sqlite "sqlite://$SQ"
fi

if [ -n "${IDEM_TEST_PG:-}" ]; then
  PG_DB="idem_console_speed_$$"
  psql "$IDEM_TEST_PG" -q -c "CREATE DATABASE $PG_DB" >/dev/null
  PG_URL="$(python3 -c 'import sys,urllib.parse as u; p=u.urlparse(sys.argv[1]); print(p._replace(path="/"+sys.argv[2]).geturl())' "$IDEM_TEST_PG" "$PG_DB")"
  echo "filling PostgreSQL with $N records"
  "$IDEM" token create --db "$PG_URL" --namespace '*' --role admin >/dev/null 2>&1 || true
  psql "$PG_URL" -q -c "DELETE FROM api_tokens" >/dev/null
  psql "$PG_URL" -q -c "INSERT INTO records ($COLS) SELECT $(select_rows true false) FROM generate_series(1, $N) AS s(i)" >/dev/null
  psql "$PG_URL" -q -c "VACUUM (ANALYZE) records" >/dev/null
  measure postgres "$PG_URL"
fi
