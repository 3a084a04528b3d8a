#!/usr/bin/env bash
# The comparison, in a real n8n: what each means of deduplication an n8n user has lets through.
#
#   bash integrations/n8n/compare/run.sh [--reps N] [--out FILE.json] [--check]
#
# One workflow per means (workflows.js): Remove Duplicates across executions, a Data table
# lookup then insert, workflow static data, Redis (the Redis node against a private
# redis-server), Postgres INSERT … ON CONFLICT DO NOTHING with a branch on the returned row (a
# fresh database, dropped at the end), the idem gate node (claim/complete), an idem effect,
# and idem's intake in front of a gated workflow. Each repetition, per means:
#   burst   one new event delivered 5 times concurrently → side effects at the sink;
#   replay  the same event delivered once more afterwards → side effects in total;
#   crash   another new event whose first execution ends at the "Crash point" (between the
#           means' bookkeeping and the effect), then delivered again → side effects in total
#           (behind the intake the redelivery is idem's own forward retry).
# Once per means, the timeout probe: the sink acts but answers after the workflow's 2 s
# timeout; the event is delivered again; what is left for a person is read back.
#
# --check: exit 1 unless every idem row (gate, effect, intake) made exactly one side effect
# in every phase (CI runs a short form: --reps 2 --check). Every run writes its JSON (--out,
# default: a temp file, path printed). Only loopback traffic; every process it starts is
# stopped and the database dropped on exit.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N8N_INT="$(cd "$HERE/.." && pwd)"
REPO="$(cd "$N8N_INT/../.." && pwd)"
E2E="$N8N_INT/e2e"
N8N_VERSION="${IDEM_N8N_VERSION:-2.8.4}"
CACHE="${IDEM_N8N_CACHE:-$HOME/.cache/idem-n8n}"
N8N_HOME="$CACHE/n8n-$N8N_VERSION"
N8N_BIN="$N8N_HOME/node_modules/.bin/n8n"
PG_ADMIN_URL="${IDEM_TEST_PG:-postgres://postgres@127.0.0.1:5432/postgres}"
REPS=20
OUT=""
CHECK=0
while [[ $# -gt 0 ]]; do
	case "$1" in
	--reps) REPS="$2"; shift 2 ;;
	--out) OUT="$2"; shift 2 ;;
	--check) CHECK=1; shift ;;
	*) echo "usage: $0 [--reps N] [--out FILE.json] [--check]" >&2; exit 2 ;;
	esac
done

T0=$(date +%s)
declare -a PIDS=()
WORK=""
PG_DB=""
log() { printf '[compare %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }

stop_pid() {
	local pid="$1"
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
	if [[ -n "$PG_DB" ]]; then
		psql "$PG_ADMIN_URL" -qXc "DROP DATABASE IF EXISTS $PG_DB WITH (FORCE)" >/dev/null 2>&1 || true
	fi
	if [[ -n "$WORK" && -d "$WORK" ]]; then
		if [[ $rc -ne 0 || "${IDEM_E2E_KEEP:-0}" == 1 ]]; then echo "logs kept in $WORK"; else rm -rf "$WORK"; fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() {
	echo "compare: $*" >&2
	for f in idem.log n8n.log redis.log; do
		[[ -n "$WORK" && -s "$WORK/$f" ]] && { echo "---- last lines of $f"; tail -n 30 "$WORK/$f"; }
	done
	exit 1
}
start() {
	local name="$1" logf="$2"
	shift 2
	setsid "$@" >"$logf" 2>&1 </dev/null &
	local pid=$!
	PIDS+=("$pid")
	eval "${name}_PID=$pid"
}
wait_for() {
	local secs="$1" what="$2"
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		(($(date +%s) >= deadline)) && return 1
		sleep 0.5
	done
	log "$what: ready"
}
json() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));const v=('"$2"');process.stdout.write(typeof v==="string"?v:JSON.stringify(v))' "$1"; }

# redis-server from the distribution when it is missing (CI runs as root on Debian).
if ! command -v redis-server >/dev/null && command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
	log "installing redis-server (apt-get)"
	{ apt-get install -y -qq --no-install-recommends redis-server ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server; }; } >/dev/null 2>&1 || true
fi
for c in node npm curl setsid psql redis-server redis-cli; do command -v "$c" >/dev/null || die "$c is not installed"; done

# ---------------------------------------------------------------- n8n, the node, idem
IDEM_N8N_VERSION="$N8N_VERSION" IDEM_N8N_CACHE="$CACHE" bash "$E2E/install-n8n.sh" >/dev/null || die "n8n install failed"
if [[ -z "${IDEM_BIN:-}" ]]; then
	for cand in "$REPO/target/release/idem" "$REPO/target/debug/idem"; do
		[[ -x "$cand" ]] && { IDEM_BIN="$cand"; break; }
	done
fi
[[ -n "${IDEM_BIN:-}" && -x "$IDEM_BIN" ]] || die "idem binary not found: build it (cargo build --release -p idem-cli) or set IDEM_BIN"
(
	cd "$N8N_INT/node"
	if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
		npm ci --ignore-scripts --no-audit --no-fund --fetch-retries=5 --loglevel=error
	fi
	[[ -f dist/nodes/IdempotencyGate/IdempotencyGate.node.js ]] || npm run build --silent
) >/dev/null || die "community node build failed"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/idem-n8n-compare.XXXXXX")"
read -r IDEM_PORT N8N_PORT BROKER_PORT REDIS_PORT < <(node "$E2E/free-ports.js" 4)
log "n8n $N8N_VERSION, $REPS repetitions; work dir $WORK"

IDEM_DB="sqlite://$WORK/idem.db"
IDEM_URL="http://127.0.0.1:$IDEM_PORT"
mint() { "$IDEM_BIN" token create --namespace '*' --role "$1" --db "$IDEM_DB" 2>>"$WORK/token.err" | tail -n 1 | tr -d '[:space:]'; }
TOKEN="$(mint worker)" && ADMIN_TOKEN="$(mint admin)" && OPERATOR_TOKEN="$(mint operator)" ||
	die "idem token create failed: $(head -c 300 "$WORK/token.err")"
start IDEM "$WORK/idem.log" "$IDEM_BIN" serve --listen "127.0.0.1:$IDEM_PORT" --db "$IDEM_DB"
wait_for 60 "idem" curl -fsS "$IDEM_URL/healthz" || die "idem did not start"

start SINK "$WORK/sink.log" env SINK_DELAY_MS=300 SINK_SLOW_MS=4000 node "$E2E/sink.js" --port-file "$WORK/sink.port"
wait_for 20 "sink" test -s "$WORK/sink.port" || die "sink did not start"
SINK_URL="http://127.0.0.1:$(cat "$WORK/sink.port")"

# redis-server of its own: loopback, no persistence (as a cache is usually run).
start REDIS "$WORK/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
wait_for 20 "redis-server :$REDIS_PORT" redis-cli -p "$REDIS_PORT" ping || die "redis-server did not start"

PG_DB="idem_compare_$$_$RANDOM"
psql "$PG_ADMIN_URL" -qXc "CREATE DATABASE $PG_DB" >/dev/null || { PG_DB=""; die "cannot create the PostgreSQL database"; }
PG_URL="${PG_ADMIN_URL%/*}/$PG_DB"
psql "$PG_URL" -qXc 'CREATE TABLE processed_events (event_id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())' >/dev/null ||
	die "cannot create the processed_events table"
PG_HOST="$(node -e 'const u=new URL(process.argv[1]);console.log(u.hostname+" "+(u.port||5432)+" "+(decodeURIComponent(u.username)||"postgres")+" "+decodeURIComponent(u.password))' "$PG_ADMIN_URL")"
read -r PGH PGP PGU PGPW <<<"$PG_HOST"

# ---------------------------------------------------------------- n8n set-up (stopped)
export N8N_USER_FOLDER="$WORK/n8n"
export N8N_PORT N8N_LISTEN_ADDRESS=127.0.0.1 N8N_HOST=127.0.0.1 N8N_PROTOCOL=http
export WEBHOOK_URL="http://127.0.0.1:$N8N_PORT/"
export N8N_RUNNERS_BROKER_PORT="$BROKER_PORT" N8N_RUNNERS_BROKER_LISTEN_ADDRESS=127.0.0.1
export N8N_ENCRYPTION_KEY="idem-compare-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false
export N8N_VERSION_NOTIFICATIONS_WHATS_NEW_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_PERSONALIZATION_ENABLED=false N8N_VERIFIED_PACKAGES_ENABLED=false
export N8N_LICENSE_AUTO_RENEW_ENABLED=false N8N_DYNAMIC_BANNERS_ENABLED=false
export N8N_HIRING_BANNER_ENABLED=false N8N_COMMUNITY_PACKAGES_ENABLED=true
export N8N_PUBLIC_API_DISABLED=true N8N_SECURE_COOKIE=false N8N_LOG_LEVEL=info
export N8N_DIAGNOSTICS_CONFIG_FRONTEND="" N8N_DIAGNOSTICS_CONFIG_BACKEND=""
export EXECUTIONS_DATA_SAVE_ON_SUCCESS=all
unset N8N_CONFIG_FILES || true

PKG_DIR="$N8N_USER_FOLDER/.n8n/nodes/node_modules/n8n-nodes-idem"
mkdir -p "$PKG_DIR"
cp "$N8N_INT/node/package.json" "$PKG_DIR/"
cp -R "$N8N_INT/node/dist" "$PKG_DIR/dist"
printf '{"name":"installed-nodes","private":true,"dependencies":{"n8n-nodes-idem":"file:./node_modules/n8n-nodes-idem"}}\n' \
	>"$N8N_USER_FOLDER/.n8n/nodes/package.json"

node -e '
const [url, token, rport, pgh, pgp, pgu, pgpw, pgdb] = process.argv.slice(1);
console.log(JSON.stringify([
  { id: "cmpIdemCredent01", name: "idem (comparison)", type: "idemApi", data: { baseUrl: url, token } },
  { id: "cmpRedisCredent1", name: "redis (comparison)", type: "redis",
    data: { host: "127.0.0.1", port: Number(rport), database: 0, password: "" } },
  { id: "cmpPostgresCred1", name: "postgres (comparison)", type: "postgres",
    data: { host: pgh, port: Number(pgp), database: pgdb, user: pgu, password: pgpw, ssl: "disable", maxConnections: 100 } },
]));' "$IDEM_URL" "$TOKEN" "$REDIS_PORT" "$PGH" "$PGP" "$PGU" "${PGPW:-}" "$PG_DB" >"$WORK/credentials.json"

MEANS=($(node "$HERE/workflows.js" "$WORK/workflows"))
"$N8N_BIN" import:credentials --input="$WORK/credentials.json" >>"$WORK/n8n-cli.log" 2>&1 || die "n8n import:credentials failed"
# One import for all (each CLI call boots n8n for seconds), then one publish per workflow.
node -e 'const fs=require("fs"),p=require("path"),d=process.argv[1];
console.log(JSON.stringify(process.argv.slice(2).map(m=>JSON.parse(fs.readFileSync(p.join(d,m+".json"),"utf8")))))' \
	"$WORK/workflows" "${MEANS[@]}" >"$WORK/all-workflows.json"
"$N8N_BIN" import:workflow --input="$WORK/all-workflows.json" >>"$WORK/n8n-cli.log" 2>&1 || die "n8n import:workflow failed"
for m in "${MEANS[@]}"; do
	"$N8N_BIN" publish:workflow --id="$(json "$WORK/workflows/$m.json" d.id)" >>"$WORK/n8n-cli.log" 2>&1 || die "publish of $m failed"
done
node "$E2E/n8n-vars.js" "$N8N_HOME" "$N8N_USER_FOLDER/.n8n/database.sqlite" "SINK_URL=$SINK_URL" || die "could not set the n8n variables"

start N8N "$WORK/n8n.log" "$N8N_BIN" start
webhook_live() {
	curl -sS --max-time 5 "http://127.0.0.1:$N8N_PORT/webhook/$1" 2>/dev/null | grep -q 'Did you mean to make a POST request'
}
for m in "${MEANS[@]}"; do
	wait_for 240 "webhook cmp-$m" webhook_live "cmp-$m" || die "n8n did not register the webhook of $m"
done

# The Data table is made through n8n's UI API by the owner (the node finds it by name).
N8N_REST="http://127.0.0.1:$N8N_PORT/rest"
rest() { curl -sS --max-time 30 -b "$WORK/cookies" -c "$WORK/cookies" -H 'browser-id: idem-compare' -H 'Content-Type: application/json' "$@"; }
rest -o "$WORK/owner.json" -d '{"email":"compare@example.com","firstName":"Idem","lastName":"Compare","password":"Idem-compare-Passw0rd"}' \
	"$N8N_REST/owner/setup" || die "n8n owner setup failed"
rest "$N8N_REST/projects/personal" >"$WORK/project.json" || die "cannot read the owner's project"
PROJECT="$(json "$WORK/project.json" 'd.data.id')"
rest -d '{"name":"processed_events","columns":[{"name":"event_id","type":"string"}]}' \
	"$N8N_REST/projects/$PROJECT/data-tables" >"$WORK/table.json" || die "cannot create the data table"
[[ "$(json "$WORK/table.json" 'd.data && d.data.name')" == processed_events ]] ||
	die "data table not created: $(head -c 300 "$WORK/table.json")"

# idem's side: the effect may call the sink (loopback needs an egress allow), and the intake
# source for the last row: a generic HMAC-signed provider, event id at /id, forwarded to the
# gated workflow with short retries.
curl -fsS --max-time 10 -o /dev/null -X PATCH -H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
	-d "{\"egress\":{\"allow\":[\"${SINK_URL#http://}\"]}}" "$IDEM_URL/v1/namespaces/compare-effect" ||
	die "cannot allow the sink as an effect destination"
INTAKE_SECRET="cmp-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
SRC_DOC="$(node -e 'console.log(JSON.stringify({ provider: "hmac", namespace: "compare-intake",
  hmac: { header: "X-Signature", algorithm: "sha256", encoding: "hex" }, event_id: { pointer: "/id" },
  forward: { url: process.argv[1], timeout_ms: 20000, retry: { max_attempts: 50, base_ms: 250, max_ms: 1000 } } }))' \
	"http://127.0.0.1:$N8N_PORT/webhook/cmp-intake")"
INTAKE_SECRET="$INTAKE_SECRET" "$IDEM_BIN" source put cmp-intake --url "$IDEM_URL" --token "$ADMIN_TOKEN" \
	--json "$SRC_DOC" --secret-env INTAKE_SECRET >"$WORK/source.out" 2>&1 || die "idem source put failed: $(head -c 300 "$WORK/source.out")"

# ---------------------------------------------------------------- the phases
count() { # KEY → side effects the sink counted for KEY
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]||0))' "$1"
}
# deliver MEANS BODY N [HEADERS_JSON]: N concurrent deliveries, as the provider would make them.
deliver() {
	local m="$1" body="$2" n="$3" hdrs="${4:-[]}"
	if [[ "$m" == intake ]]; then
		hdrs="$(node -e 'const c=require("crypto");console.log(JSON.stringify([["x-signature",c.createHmac("sha256",process.argv[1]).update(process.argv[2]).digest("hex")]]))' "$INTAKE_SECRET" "$body")"
		node "$E2E/fire.js" "$IDEM_URL/in/cmp-intake" "$body" "$n" 60000 "$hdrs"
	else
		node "$E2E/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/cmp-$m" "$body" "$n" 60000 "$hdrs"
	fi
}
# settle MEANS EVT: behind the intake, wait until idem has delivered the event (or 30 s).
settle() {
	[[ "$1" == intake ]] || return 0
	local enc deadline=$(($(date +%s) + 30))
	enc="$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$2")"
	while (($(date +%s) < deadline)); do
		curl -sS --max-time 10 -H "Authorization: Bearer $OPERATOR_TOKEN" "$IDEM_URL/v1/sources/cmp-intake/events/$enc" 2>/dev/null |
			grep -q '"state":"completed"' && return 0
		sleep 0.3
	done
}
record_state() { # NAMESPACE KEY → the idem record's state (or "none")
	local enc
	enc="$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$2")"
	curl -sS --max-time 10 -H "Authorization: Bearer $OPERATOR_TOKEN" "$IDEM_URL/v1/namespaces/$1/keys/$enc" |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{try{const d=JSON.parse(s);console.log(d.record?d.record.state:"none")}catch{console.log("none")}})'
}

RESULTS="$WORK/results.jsonl"
: >"$RESULTS"
for m in "${MEANS[@]}"; do
	log "$m: $REPS repetitions"
	for rep in $(seq 1 "$REPS"); do
		evt="cmp_${m}_${rep}_$(date +%s%N | tail -c 9)$RANDOM"
		body="{\"id\":\"$evt\"}"
		deliver "$m" "$body" 5 >"$WORK/burst.json"
		settle "$m" "$evt"
		burst="$(count "$m:$evt")"
		deliver "$m" "$body" 1 >"$WORK/replay.json"
		settle "$m" "$evt"
		replay="$(count "$m:$evt")"
		# The crash: the first execution ends at the crash point; the provider delivers again.
		cevt="${evt}_crash"
		if [[ "$m" == intake ]]; then
			deliver "$m" "{\"id\":\"$cevt\",\"crash\":true}" 1 >"$WORK/crash1.json"
			settle "$m" "$cevt"
		else
			deliver "$m" "{\"id\":\"$cevt\"}" 1 '[["x-crash","1"]]' >"$WORK/crash1.json"
			deliver "$m" "{\"id\":\"$cevt\"}" 1 >"$WORK/crash2.json"
		fi
		crash="$(count "$m:$cevt")"
		case "$m" in # what the ledger holds for the crashed event (idem rows)
		gate) crash_left="$(record_state compare-gate "gate:$cevt")" ;;
		effect) crash_left="$(record_state compare-effect "effect:$cevt")" ;;
		intake) crash_left="$(record_state compare-intake-fx "intake:$cevt")" ;;
		*) crash_left="" ;;
		esac
		printf '{"means":"%s","rep":%d,"burst":%d,"replay":%d,"crash":%d,"crash_left":"%s","answers":%s}\n' "$m" "$rep" "$burst" "$replay" "$crash" \
			"$crash_left" "$(json "$WORK/burst.json" 'd.map(r => r.status)')" >>"$RESULTS"
		log "$m #$rep: burst $burst, after replay $replay, crash then redelivery $crash${crash_left:+ ($crash_left)}"
	done
	# The timeout probe: the effect acts but answers after the 2 s timeout; then one redelivery.
	tevt="cmp_${m}_timeout_$(date +%s%N | tail -c 9)$RANDOM"
	deliver "$m" "{\"id\":\"$tevt\",\"slow\":true}" 1 >"$WORK/timeout1.json"
	settle "$m" "$tevt"
	[[ "$m" == intake ]] || deliver "$m" "{\"id\":\"$tevt\",\"slow\":true}" 1 >"$WORK/timeout2.json"
	[[ "$m" == intake ]] && deliver "$m" "{\"id\":\"$tevt\",\"slow\":true}" 1 >"$WORK/timeout2.json"
	sleep 4.5 # a second effect (if any) has reached the sink and timed out by now
	tcount="$(count "$m:$tevt")"
	case "$m" in
	gate) left="idem record $(record_state compare-gate "gate:$tevt")" ;;
	effect) left="idem record $(record_state compare-effect "effect:$tevt")" ;;
	intake) left="idem record $(record_state compare-intake-fx "intake:$tevt")" ;;
	redis) left="redis key seen:$tevt = $(redis-cli -p "$REDIS_PORT" get "seen:$tevt")" ;;
	postgres) left="$(psql "$PG_URL" -qtAXc "SELECT count(*) FROM processed_events WHERE event_id = '$tevt'") row(s) in processed_events" ;;
	*) left="a mark in n8n's own store (a redelivery $([[ "$tcount" == 1 ]] && echo "was dropped" || echo "acted again"))" ;;
	esac
	printf '{"means":"%s","timeout_probe":{"effects":%d,"left":%s}}\n' "$m" "$tcount" "$(node -e 'console.log(JSON.stringify(process.argv[1]))' "$left")" >>"$RESULTS"
	log "$m timeout probe: $tcount effect(s) after a timeout and a redelivery; left: $left"
done

# ---------------------------------------------------------------- the summary
[[ -n "$OUT" ]] || OUT="$WORK/compare.json"
node "$HERE/summarize.js" "$RESULTS" "$OUT" \
	"n8n=$N8N_VERSION" "node=$(node --version)" "idem=$("$IDEM_BIN" --version | head -n1)" \
	"redis=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')" \
	"postgresql=$(psql "$PG_URL" -qtAXc 'SHOW server_version')" "reps=$REPS" ||
	die "summary failed"
[[ "$OUT" == "$WORK"/* ]] && cp "$OUT" "${TMPDIR:-/tmp}/idem-n8n-compare-last.json" && OUT="${TMPDIR:-/tmp}/idem-n8n-compare-last.json"
log "results in $OUT"
if [[ $CHECK == 1 ]]; then
	node "$HERE/summarize.js" --check "$OUT" || exit 1
fi
log "done in $(($(date +%s) - T0)) s"
