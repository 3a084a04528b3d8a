#!/usr/bin/env bash
# End-to-end test of the n8n integration against a REAL n8n and a real idem server.
#
#   bash integrations/n8n/e2e/run.sh
#
# 1. installs n8n (IDEM_N8N_VERSION, default 2.8.4) into ${IDEM_N8N_CACHE:-~/.cache/idem-n8n}
#    once (≈ 5–8 min); the newest 2.x needs Node 24 first on PATH (ci.sh takes it from
#    node24.sh: PATH="$(bash e2e/node24.sh):$PATH" IDEM_N8N_VERSION=2.41.1 bash e2e/run.sh);
# 2. builds the community node (integrations/n8n/node) and installs it into a temp n8n user folder;
# 3. starts idem (IDEM_BIN, default target/release/idem, then target/debug/idem) on a free
#    loopback port with a temp SQLite file and a worker token, and a counting sink;
# 4. imports + publishes the stock-node templates and the community-node examples, starts n8n
#    headless on loopback and waits until the production webhooks answer; checks that n8n lists
#    the node, its AI agent tool variant and its credential, and runs the credential's Test
#    (GET /v1/whoami) through n8n with a namespace-scoped worker token and with a wrong one;
# 5. per workflow: fires one event 5 times concurrently, then once more (a replay), and asserts
#    exactly one side effect per key at the sink and the duplicate branch for the other 5;
# 6. the intake in front of n8n: a Stripe source forwards to the intake template's webhook.
#    An event signed with Stripe's official library, posted 5 times concurrently to /in → five
#    200s, one n8n execution, each effect once; a bad signature → 401, nothing forwarded; n8n
#    stopped while events come in → all acked, the forwards back off, and after n8n is started
#    again every event arrives, each effect exactly once. Fan-out: a Stripe source with two
#    destinations (two copies of the fan-out destination template) → each workflow runs once,
#    each effect once; one destination replayed alone from idem's console → only that
#    workflow runs again and its gate answers "already done".
# 7. actions over MCP: n8n's MCP Client node calls an idem action from 5 concurrent executions
#    + 1 replay → one delivery; the AI-agent template, its chat model a scripted
#    OpenAI-compatible stub (model-stub.js) that writes a new draft each time → the first draft
#    waits for approval, the template's approve link → idem delivers it once.
#
# Prints `N passed, M failed` and exits non-zero on any failure. Every wait is bounded; every
# process it starts is stopped on exit. Only loopback traffic.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N8N_INT="$(cd "$HERE/.." && pwd)"
REPO="$(cd "$N8N_INT/../.." && pwd)"
N8N_VERSION="${IDEM_N8N_VERSION:-2.8.4}"
CACHE="${IDEM_N8N_CACHE:-$HOME/.cache/idem-n8n}"
N8N_HOME="$CACHE/n8n-$N8N_VERSION"
N8N_BIN="$N8N_HOME/node_modules/.bin/n8n"
KEEP="${IDEM_E2E_KEEP:-0}" # 1: keep the temp folder (logs, databases) for inspection

T0=$(date +%s)
PASSED=0
FAILED=0
declare -a PIDS=()
WORK=""

log() { printf '[e2e %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
pass() { PASSED=$((PASSED + 1)); printf 'PASS  %s\n' "$*"; }
fail() { FAILED=$((FAILED + 1)); printf 'FAIL  %s\n' "$*"; }
summary() { printf '%d passed, %d failed\n' "$PASSED" "$FAILED"; }

stop_pid() {
	local pid="$1"
	kill -0 "$pid" 2>/dev/null || return 0
	# Each service runs in its own process group (setsid): stop the group (n8n has a task-runner child).
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
	if [[ -n "$WORK" && -d "$WORK" ]]; then
		if [[ "$KEEP" == 1 || $FAILED -gt 0 || $rc -ne 0 ]]; then
			echo "logs kept in $WORK"
		else
			rm -rf "$WORK"
		fi
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# abort: a setup step failed; count it and stop (the summary line is still printed).
abort() {
	fail "$*"
	for f in idem.log n8n.log sink.log; do
		if [[ -n "$WORK" && -s "$WORK/$f" ]]; then
			echo "---- last lines of $f"
			tail -n 40 "$WORK/$f"
		fi
	done
	summary
	exit 1
}

# start NAME LOGFILE CMD…: run in the background in its own process group, remember its pid.
start() {
	local name="$1" logf="$2"
	shift 2
	setsid "$@" >"$logf" 2>&1 </dev/null &
	local pid=$!
	PIDS+=("$pid")
	eval "${name}_PID=$pid"
}

# wait_for SECONDS DESCRIPTION CMD…: poll CMD every 0.5 s until it succeeds or time runs out.
wait_for() {
	local secs="$1" what="$2"
	shift 2
	local deadline=$(($(date +%s) + secs))
	until "$@" >/dev/null 2>&1; do
		if (($(date +%s) >= deadline)); then
			return 1
		fi
		sleep 0.5
	done
	log "$what: ready"
}

# json FILE EXPR: evaluate a JS expression over the parsed JSON file (bound to `d`).
json() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));const v=('"$2"');process.stdout.write(typeof v==="string"?v:JSON.stringify(v))' "$1"; }

command -v node >/dev/null || abort "node is not installed"
command -v npm >/dev/null || abort "npm is not installed"
command -v curl >/dev/null || abort "curl is not installed"
command -v setsid >/dev/null || abort "setsid (util-linux) is not installed"

# ---------------------------------------------------------------- 1. n8n (cached) + idem binary
log "n8n $N8N_VERSION: installing into $CACHE if needed"
IDEM_N8N_VERSION="$N8N_VERSION" IDEM_N8N_CACHE="$CACHE" bash "$HERE/install-n8n.sh" || abort "n8n install failed"
[[ -x "$N8N_BIN" ]] || abort "n8n binary missing at $N8N_BIN"

if [[ -z "${IDEM_BIN:-}" ]]; then
	for cand in "$REPO/target/release/idem" "$REPO/target/debug/idem"; do
		if [[ -x "$cand" ]]; then IDEM_BIN="$cand"; break; fi
	done
fi
[[ -n "${IDEM_BIN:-}" && -x "$IDEM_BIN" ]] ||
	abort "idem binary not found: build it (cargo build --release -p idem-cli) or set IDEM_BIN"
log "idem binary: $IDEM_BIN"

# The intake's Stripe events are signed with Stripe's official library, the one the intake's
# cross tests use (.ci/signers.sh installs it outside the clone once; IDEM_TEST_SIGNERS names
# an existing install).
SIGNERS="${IDEM_TEST_SIGNERS:-}"
if [[ -z "$SIGNERS" ]]; then
	SIGNERS="$(bash "$REPO/.ci/signers.sh")" || abort "could not install the official webhook signers (.ci/signers.sh)"
fi
SIGN_PY="$REPO/crates/idem-intake/tests/official/sign.py"
"$SIGNERS/venv/bin/python" -c 'import stripe' 2>/dev/null ||
	abort "Stripe's official Python library is not in $SIGNERS/venv (run .ci/signers.sh)"
log "official signers: $SIGNERS"

# ---------------------------------------------------------------- 2. community node
log "building the community node"
(
	cd "$N8N_INT/node"
	if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
		npm ci --ignore-scripts --no-audit --no-fund --fetch-retries=5 --loglevel=error
	fi
	npm run build --silent
) || abort "community node build failed"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/idem-n8n-e2e.XXXXXX")"
read -r IDEM_PORT N8N_PORT BROKER_PORT < <(node "$HERE/free-ports.js" 3)
log "work dir $WORK; ports idem=$IDEM_PORT n8n=$N8N_PORT broker=$BROKER_PORT"

# ---------------------------------------------------------------- 3. idem + sink
IDEM_DB="sqlite://$WORK/idem.db"
IDEM_URL="http://127.0.0.1:$IDEM_PORT"
# A worker token makes the test go through auth as production would. If this build has no
# `token create`, the server runs open on loopback and the credentials carry a dummy token.
if TOKEN="$("$IDEM_BIN" token create --namespace '*' --role worker --db "$IDEM_DB" 2>"$WORK/token.err")" && [[ -n "$TOKEN" ]]; then
	TOKEN="$(printf '%s' "$TOKEN" | tail -n 1 | tr -d '[:space:]')"
	log "idem: worker token created"
else
	TOKEN="no-token-configured"
	log "idem: no token (token create failed: $(head -c 200 "$WORK/token.err")); server runs open on loopback"
fi
OPERATOR_TOKEN="no-token-configured"
if [[ "$TOKEN" != no-token-configured ]]; then
	OPERATOR_TOKEN="$("$IDEM_BIN" token create --namespace '*' --role operator --db "$IDEM_DB" 2>>"$WORK/token.err" | tail -n 1 | tr -d '[:space:]')" ||
		abort "idem token create --role operator failed: $(head -c 300 "$WORK/token.err")"
fi
ADMIN_TOKEN="no-token-configured"
if [[ "$TOKEN" != no-token-configured ]]; then
	ADMIN_TOKEN="$("$IDEM_BIN" token create --namespace '*' --role admin --db "$IDEM_DB" 2>>"$WORK/token.err" | tail -n 1 | tr -d '[:space:]')" ||
		abort "idem token create --role admin failed: $(head -c 300 "$WORK/token.err")"
fi
# A worker token scoped to one namespace: the credential's Test must accept it too.
SCOPED_TOKEN="no-token-configured"
if [[ "$TOKEN" != no-token-configured ]]; then
	SCOPED_TOKEN="$("$IDEM_BIN" token create --namespace refunds-node --role worker --db "$IDEM_DB" 2>>"$WORK/token.err" | tail -n 1 | tr -d '[:space:]')" ||
		abort "idem token create --namespace refunds-node failed: $(head -c 300 "$WORK/token.err")"
fi
start IDEM "$WORK/idem.log" "$IDEM_BIN" serve --listen "127.0.0.1:$IDEM_PORT" --db "$IDEM_DB"
wait_for 60 "idem on $IDEM_URL" curl -fsS "$IDEM_URL/healthz" || abort "idem did not become healthy within 60 s"

start SINK "$WORK/sink.log" node "$HERE/sink.js" --port-file "$WORK/sink.port"
wait_for 20 "sink" test -s "$WORK/sink.port" || abort "sink did not start"
SINK_URL="http://127.0.0.1:$(cat "$WORK/sink.port")"

# ---------------------------------------------------------------- 4. n8n: node, credentials, workflows
export N8N_USER_FOLDER="$WORK/n8n"
export N8N_PORT N8N_LISTEN_ADDRESS=127.0.0.1 N8N_HOST=127.0.0.1 N8N_PROTOCOL=http
export WEBHOOK_URL="http://127.0.0.1:$N8N_PORT/"
export N8N_RUNNERS_BROKER_PORT="$BROKER_PORT" N8N_RUNNERS_BROKER_LISTEN_ADDRESS=127.0.0.1
export N8N_ENCRYPTION_KEY="idem-e2e-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
export N8N_DIAGNOSTICS_ENABLED=false N8N_VERSION_NOTIFICATIONS_ENABLED=false
export N8N_VERSION_NOTIFICATIONS_WHATS_NEW_ENABLED=false N8N_TEMPLATES_ENABLED=false
export N8N_PERSONALIZATION_ENABLED=false N8N_VERIFIED_PACKAGES_ENABLED=false
export N8N_LICENSE_AUTO_RENEW_ENABLED=false N8N_DYNAMIC_BANNERS_ENABLED=false
export N8N_HIRING_BANNER_ENABLED=false N8N_COMMUNITY_PACKAGES_ENABLED=true
export N8N_PUBLIC_API_DISABLED=true N8N_SECURE_COOKIE=false N8N_LOG_LEVEL=info
export N8N_DIAGNOSTICS_CONFIG_FRONTEND="" N8N_DIAGNOSTICS_CONFIG_BACKEND=""
export EXECUTIONS_DATA_SAVE_ON_SUCCESS=all
# The intake template's Code node checks idem's forward signature with require('crypto').
export NODE_FUNCTION_ALLOW_BUILTIN=crypto
unset N8N_CONFIG_FILES || true

# The community node, installed the way n8n finds community packages: ~/.n8n/nodes/node_modules.
PKG_DIR="$N8N_USER_FOLDER/.n8n/nodes/node_modules/n8n-nodes-idem"
mkdir -p "$PKG_DIR"
cp "$N8N_INT/node/package.json" "$PKG_DIR/"
cp -R "$N8N_INT/node/dist" "$PKG_DIR/dist"
printf '{"name":"installed-nodes","private":true,"dependencies":{"n8n-nodes-idem":"file:./node_modules/n8n-nodes-idem"}}\n' \
	>"$N8N_USER_FOLDER/.n8n/nodes/package.json"

# The Idem Intake Trigger's forward secret (Standard Webhooks form), in the node's credential.
TRIGGER_SECRET="whsec_$(node -e 'process.stdout.write(require("crypto").randomBytes(32).toString("base64"))')"
# The chat model of the AI-agent template: a scripted OpenAI-compatible stub on loopback
# (model-stub.js), reached through the OpenAI credential's Base URL.
start MODEL "$WORK/model-stub.log" node "$HERE/model-stub.js" --port-file "$WORK/model-stub.port"
wait_for 20 "model stub" test -s "$WORK/model-stub.port" || abort "the model stub did not start"
MODEL_URL="http://127.0.0.1:$(cat "$WORK/model-stub.port")"
node -e '
const [url, token, operator, forwardSecret, modelUrl] = process.argv.slice(1);
console.log(JSON.stringify([
  { id: "idemWorkerToken1", name: "idem worker token", type: "httpHeaderAuth",
    data: { name: "Authorization", value: "Bearer " + token } },
  { id: "idemOperatorTok1", name: "idem operator token", type: "httpHeaderAuth",
    data: { name: "Authorization", value: "Bearer " + operator } },
  { id: "idemNodeCredent1", name: "idem", type: "idemApi",
    data: { baseUrl: url, token, forwardSecret } },
  { id: "idemOpenAiCred01", name: "OpenAI account", type: "openAiApi",
    data: { apiKey: "sk-e2e-model-stub", url: modelUrl + "/v1" } },
]));' "$IDEM_URL" "$TOKEN" "$OPERATOR_TOKEN" "$TRIGGER_SECRET" "$MODEL_URL" >"$WORK/credentials.json"

STOCK_WF="$N8N_INT/templates/stripe-webhook-crm-receipt.json"
ERR_WF="$N8N_INT/templates/error-branch-fail-classify.json"
AI_WF="$N8N_INT/templates/ai-draft-approval-deliver.json"
FAN_WF="$N8N_INT/templates/fan-out-one-key-per-effect.json"
CRON_WF="$N8N_INT/templates/cron-sweep-job-date.json" # imported only: its schedule is not run here
NODE_WF="$N8N_INT/node/examples/webhook-gate-node.json"
EFF_WF="$N8N_INT/templates/stripe-charge-via-effect.json"
NODE_EFF_WF="$N8N_INT/node/examples/stripe-charge-effect-node.json"
NODE_DERIVE_WF="$N8N_INT/node/examples/derive-key-single-output-node.json"
INTAKE_WF="$N8N_INT/templates/intake-forward-gate-effects.json"
NODE_INTAKE_WF="$N8N_INT/node/examples/intake-trigger-node.json"
STOCK_ID="$(json "$STOCK_WF" d.id)"
ERR_ID="$(json "$ERR_WF" d.id)"
AI_ID="$(json "$AI_WF" d.id)"
FAN_ID="$(json "$FAN_WF" d.id)"
NODE_ID="$(json "$NODE_WF" d.id)"
EFF_ID="$(json "$EFF_WF" d.id)"
NODE_EFF_ID="$(json "$NODE_EFF_WF" d.id)"
NODE_DERIVE_ID="$(json "$NODE_DERIVE_WF" d.id)"
NODE_INTAKE_ID="$(json "$NODE_INTAKE_WF" d.id)"
INTAKE_ID="$(json "$INTAKE_WF" d.id)"
AGENT_WF="$N8N_INT/templates/ai-agent-mcp-approval.json"
MCP_NODE_WF="$HERE/workflows/mcp-client-node.json"
AGENT_ID="$(json "$AGENT_WF" d.id)"
MCP_NODE_ID="$(json "$MCP_NODE_WF" d.id)"
# The fan-out destination template, imported twice as two destinations of one source (crm and
# receipt): each copy gets its own id, name, webhook path and webhook id, nothing else changes.
fan_copy() { # NAME → the copy's file
	node -e '
const fs = require("fs"), crypto = require("crypto");
const [src, name, out] = process.argv.slice(1);
const w = JSON.parse(fs.readFileSync(src, "utf8"));
w.id = ("idemE2eFan" + name + "000000").slice(0, 16);
w.name = w.name + " (" + name + ")";
for (const n of w.nodes) {
  if (n.type === "n8n-nodes-base.webhook") { n.parameters.path = "idem-fan-" + name; n.webhookId = crypto.randomUUID(); }
}
fs.writeFileSync(out, JSON.stringify(w));
console.log(w.id);' "$N8N_INT/templates/intake-fan-out-destinations.json" "$1" "$WORK/fan-$1.json"
}
FAN_CRM_ID="$(fan_copy crm)"
FAN_RECEIPT_ID="$(fan_copy receipt)"
# The intake source's secrets: the provider's (Stripe's form) and the forward's (Standard
# Webhooks: whsec_ + base64 of 32 random bytes), which the template checks.
STRIPE_WHSEC="whsec_$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')"
FORWARD_SECRET="whsec_$(node -e 'process.stdout.write(require("crypto").randomBytes(32).toString("base64"))')"

log "n8n: importing credentials and workflows (n8n stopped)"
"$N8N_BIN" import:credentials --input="$WORK/credentials.json" >>"$WORK/n8n-cli.log" 2>&1 ||
	abort "n8n import:credentials failed (see $WORK/n8n-cli.log)"
for wf in "$STOCK_WF" "$ERR_WF" "$AI_WF" "$FAN_WF" "$CRON_WF" "$NODE_WF" "$EFF_WF" "$NODE_EFF_WF" "$NODE_DERIVE_WF" "$INTAKE_WF" "$NODE_INTAKE_WF" "$AGENT_WF" "$MCP_NODE_WF" "$WORK/fan-crm.json" "$WORK/fan-receipt.json"; do
	"$N8N_BIN" import:workflow --input="$wf" >>"$WORK/n8n-cli.log" 2>&1 ||
		abort "n8n import:workflow $(basename "$wf") failed (see $WORK/n8n-cli.log)"
done
pass "workflows import (8 stock templates, the 4 community-node examples and the MCP Client node workflow without edits; the fan-out destination template twice, renamed)"
for id in "$STOCK_ID" "$ERR_ID" "$AI_ID" "$FAN_ID" "$NODE_ID" "$EFF_ID" "$NODE_EFF_ID" "$NODE_DERIVE_ID" "$INTAKE_ID" "$NODE_INTAKE_ID" "$AGENT_ID" "$MCP_NODE_ID" "$FAN_CRM_ID" "$FAN_RECEIPT_ID"; do
	"$N8N_BIN" publish:workflow --id="$id" >>"$WORK/n8n-cli.log" 2>&1 ||
		abort "n8n publish:workflow --id=$id failed (see $WORK/n8n-cli.log)"
done
node "$HERE/n8n-vars.js" "$N8N_HOME" "$N8N_USER_FOLDER/.n8n/database.sqlite" \
	"IDEM_URL=$IDEM_URL" "CRM_URL=$SINK_URL/crm" "MAIL_URL=$SINK_URL/mail" "EFFECT_URL=$SINK_URL/effect" "PAYMENT_URL=$SINK_URL/charges" \
	"APPROVAL_URL=$SINK_URL/approvals" "STRIPE_API_URL=$SINK_URL/stripe" "STRIPE_SECRET_KEY=sk_test_e2e_never_stored" "APPROVE_LINK=http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft-approve" \
	"NOTIFY_URL=$SINK_URL/notify" "IDEM_FORWARD_SECRET=$FORWARD_SECRET" ||
	abort "could not set the n8n variables"

log "n8n: starting on 127.0.0.1:$N8N_PORT"
start N8N "$WORK/n8n.log" "$N8N_BIN" start

# /healthz/readiness turns 200 before webhooks are registered: probe the production webhook
# with GET instead. "not registered for GET … Did you mean to make a POST request?" = live.
webhook_live() {
	curl -sS --max-time 5 "http://127.0.0.1:$N8N_PORT/webhook/$1" 2>/dev/null | grep -q 'Did you mean to make a POST request'
}
wait_for 240 "webhook idem-stripe-events" webhook_live idem-stripe-events ||
	abort "n8n did not register the stock template's webhook within 240 s"
wait_for 60 "webhook idem-node-events" webhook_live idem-node-events ||
	abort "n8n did not register the community-node workflow's webhook within 60 s (node not loaded?)"
wait_for 60 "webhook idem-charge" webhook_live idem-charge ||
	abort "n8n did not register the error-branch template's webhook within 60 s"
wait_for 60 "webhook idem-ai-draft" webhook_live idem-ai-draft ||
	abort "n8n did not register the AI-draft template's webhooks within 60 s"
wait_for 60 "webhook idem-order-fanout" webhook_live idem-order-fanout ||
	abort "n8n did not register the fan-out template's webhook within 60 s"
wait_for 60 "webhook idem-effect-charge" webhook_live idem-effect-charge ||
	abort "n8n did not register the effect template's webhook within 60 s"
wait_for 60 "webhook idem-node-effect-charge" webhook_live idem-node-effect-charge ||
	abort "n8n did not register the Effect-operation example's webhook within 60 s"
wait_for 60 "webhook idem-node-derive-refund" webhook_live idem-node-derive-refund ||
	abort "n8n did not register the Derive Key example's webhook within 60 s"
wait_for 60 "webhook idem-intake-events" webhook_live idem-intake-events ||
	abort "n8n did not register the intake template's webhook within 60 s"
wait_for 60 "webhook idem-node-intake" webhook_live idem-node-intake ||
	abort "n8n did not register the Idem Intake Trigger example's webhook within 60 s"
wait_for 60 "webhook idem-fan-crm" webhook_live idem-fan-crm && wait_for 60 "webhook idem-fan-receipt" webhook_live idem-fan-receipt ||
	abort "n8n did not register the fan-out destinations' webhooks within 60 s"
wait_for 60 "webhook idem-agent-followup" webhook_live idem-agent-followup ||
	abort "n8n did not register the AI-agent template's webhook within 60 s"
wait_for 60 "webhook idem-e2e-mcp-client" webhook_live idem-e2e-mcp-client ||
	abort "n8n did not register the MCP Client node workflow's webhook within 60 s"
pass "n8n $N8N_VERSION started headless; the production webhooks are registered"

if grep -q 'n8n-nodes-idem' "$WORK/n8n.log" && grep -qiE 'error.*n8n-nodes-idem|n8n-nodes-idem.*error' "$WORK/n8n.log"; then
	fail "n8n logged an error while loading n8n-nodes-idem"
fi
# The node panel is fed from the node-types file n8n writes at start (its HTTP route needs a login).
TYPES="$N8N_USER_FOLDER/.cache/n8n/public/types/nodes.json"
if [[ -s "$TYPES" ]] && grep -q '"n8n-nodes-idem.idempotencyGate"' "$TYPES" &&
	grep -q '"idemApi"' "$N8N_USER_FOLDER/.cache/n8n/public/types/credentials.json"; then
	pass "community node: Idempotency Gate + Idem API credential are in n8n's node/credential types (node panel)"
else
	fail "community node: n8n-nodes-idem.idempotencyGate missing from $TYPES"
fi
# usableAsTool: n8n derives an AI agent tool variant of the node (…Tool, output ai_tool).
if [[ -s "$TYPES" ]] && grep -q '"n8n-nodes-idem.idempotencyGateTool"' "$TYPES"; then
	pass "community node: n8n offers it as an AI agent tool (n8n-nodes-idem.idempotencyGateTool)"
else
	fail "community node: no AI agent tool variant n8n-nodes-idem.idempotencyGateTool in $TYPES"
fi
if curl -fsS --max-time 10 -o /dev/null \
	"http://127.0.0.1:$N8N_PORT/icons/n8n-nodes-idem/dist/nodes/IdempotencyGate/idem.svg"; then
	pass "community node: its icon is served"
else
	fail "community node: icon not served"
fi

# The credential's Test button, run by n8n itself (its UI API, after the owner account is set
# up): GET /v1/whoami through the credential's authentication.
N8N_REST="http://127.0.0.1:$N8N_PORT/rest"
rest() { curl -sS --max-time 30 -b "$WORK/cookies" -c "$WORK/cookies" -H 'browser-id: idem-e2e' -H 'Content-Type: application/json' "$@"; }
if rest -o "$WORK/owner.json" -d '{"email":"e2e@example.com","firstName":"Idem","lastName":"Test","password":"Idem-e2e-Passw0rd"}' \
	"$N8N_REST/owner/setup"; then
	cred_test() { # TOKEN → n8n's status ("OK" or "Error") and message
		local body
		# The stored credential's id with the data to test in its place (n8n 2.41 requires the
		# id; 2.8.4 looks the stored credential up by it too).
		body="$(node -e 'console.log(JSON.stringify({ credentials: { id: "idemNodeCredent1", name: "idem test", type: "idemApi", data: { baseUrl: process.argv[1], token: process.argv[2] } } }))' "$IDEM_URL" "$1")"
		rest -d "$body" "$N8N_REST/credentials/test" >"$WORK/credtest.json" || true
		json "$WORK/credtest.json" '(d.data ? d.data.status + ": " + d.data.message : JSON.stringify(d))'
	}
	got="$(cred_test "$SCOPED_TOKEN")"
	if [[ "$got" == OK:* ]]; then
		pass "credential test (GET /v1/whoami) passes with a worker token scoped to one namespace"
	else
		fail "credential test with the scoped worker token answered [$got]"
	fi
	if [[ "$TOKEN" != no-token-configured ]]; then
		got="$(cred_test "idem_wrong_token")"
		if [[ "$got" == Error:* ]]; then
			pass "credential test fails with a wrong token ($got)"
		else
			fail "credential test with a wrong token answered [$got] (want Error)"
		fi
	fi
else
	fail "n8n owner setup for the credential test failed: $(head -c 300 "$WORK/owner.json")"
fi

# ---------------------------------------------------------------- 5. scenarios
# scenario NAME WEBHOOK_PATH EVENT_ID KEYS…: 5 concurrent deliveries + 1 replay of one event.
scenario() {
	local name="$1" path="$2" evt="$3"
	shift 3
	local keys=("$@")
	local url="http://127.0.0.1:$N8N_PORT/webhook/$path"
	local body
	body="$(node -e '
const id = process.argv[1];
console.log(JSON.stringify({ id, object: "event", type: "checkout.session.completed",
  data: { object: { id: "cs_" + id, amount_total: 4200, currency: "eur",
    customer_details: { email: "ada@example.com", name: "Ada Lovelace" } } } }));' "$evt")"

	log "$name: 5 concurrent deliveries of $evt"
	node "$HERE/fire.js" "$url" "$body" 5 120000 >"$WORK/$name.burst.json"
	sleep 2
	log "$name: replay of $evt"
	node "$HERE/fire.js" "$url" "$body" 1 120000 >"$WORK/$name.replay.json"
	curl -fsS --max-time 10 "$SINK_URL/counts" >"$WORK/$name.counts.json" || echo '{}' >"$WORK/$name.counts.json"

	local statuses replay
	statuses="$(json "$WORK/$name.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).sort().join(" ")')"
	replay="$(json "$WORK/$name.replay.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).join(" ")')"
	log "$name: burst answers [$statuses]; replay [$replay]; sink $(cat "$WORK/$name.counts.json")"

	local k n
	for k in "${keys[@]}"; do
		n="$(json "$WORK/$name.counts.json" "d[$(node -e 'console.log(JSON.stringify(process.argv[1]))' "$k")] || 0")"
		if [[ "$n" == 1 ]]; then
			pass "$name: exactly one side effect for $k (6 deliveries)"
		else
			fail "$name: $n side effects for $k (want 1)"
		fi
	done
	local processed dup
	processed="$(json "$WORK/$name.burst.json" 'd.filter(r => r.status === 200 && r.body && r.body.status === "processed").length')"
	dup="$(json "$WORK/$name.burst.json" 'd.filter(r => r.status === 200 && r.body && r.body.status === "duplicate").length')"
	if [[ "$processed" == 1 && "$dup" == 4 ]]; then
		pass "$name: 1 delivery processed, 4 concurrent duplicates answered 200 by the duplicate branch"
	else
		fail "$name: burst answers [$statuses] (want 1× 200:processed, 4× 200:duplicate)"
	fi
	if [[ "$replay" == "200:duplicate" ]]; then
		pass "$name: the later replay took the duplicate branch (200)"
	else
		fail "$name: replay answered [$replay] (want 200:duplicate)"
	fi
}

# ledger NS KEY [STATE]: the record idem holds for KEY is in STATE (default completed).
ledger() {
	local ns="$1" key="$2" want="${3:-completed}" enc
	enc="$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$key")"
	if ! curl -sS --max-time 10 -H "Authorization: Bearer $TOKEN" \
		"$IDEM_URL/v1/namespaces/$ns/keys/$enc" -o "$WORK/record.json"; then
		fail "ledger: GET $ns/$key failed"
		return
	fi
	local state dups
	state="$(json "$WORK/record.json" 'd.record ? d.record.state : "?"')"
	dups="$(json "$WORK/record.json" '(d.events || []).filter(e => e.type === "duplicate_hit").length')"
	if [[ "$state" == "$want" ]]; then
		pass "ledger: $ns/$key is $want ($dups duplicate hits recorded)"
	else
		fail "ledger: $ns/$key is in state $state (want $want): $(head -c 300 "$WORK/record.json")"
	fi
}

EVT="evt_e2e_stock_$(date +%s)_$RANDOM"
scenario stock-template idem-stripe-events "$EVT" "$EVT:crm" "$EVT:receipt"
ledger stripe "$EVT:crm"
ledger stripe "$EVT:receipt"

EVT="evt_e2e_node_$(date +%s)_$RANDOM"
scenario community-node idem-node-events "$EVT" "$EVT:effect"
ledger n8n-node "$EVT:effect"

# Effects: idem makes the Stripe-style call itself. The sink stands in for Stripe on loopback,
# which the egress guard refuses unless the namespace lists it: the policy allows exactly the
# sink's address. 5 concurrent deliveries + 1 replay → one call at the sink; the stored answer
# comes back to every duplicate; the secret header never reaches the ledger.
SINK_HOSTPORT="${SINK_URL#http://}"
for ns in charges charges-node refunds-node; do
	code="$(curl -sS --max-time 10 -o "$WORK/policy.json" -w '%{http_code}' -X PATCH \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
		-d "{\"egress\":{\"allow\":[\"$SINK_HOSTPORT\"]}}" "$IDEM_URL/v1/namespaces/$ns")"
	[[ "$code" == 200 ]] || fail "effects: PATCH egress policy of $ns answered $code: $(head -c 300 "$WORK/policy.json")"
done
effect_scenario() {
	local name="$1" path="$2" ns="$3" order body statuses replay n
	order="ord_eff_$(date +%s)_$RANDOM"
	body="$(node -e 'console.log(JSON.stringify({ order_id: process.argv[1], amount: 4200, currency: "eur", customer: "cus_e2e", payment_method: "pm_card_visa" }))' "$order")"
	node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/$path" "$body" 5 120000 >"$WORK/$name.burst.json"
	sleep 1
	node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/$path" "$body" 1 120000 >"$WORK/$name.replay.json"
	statuses="$(json "$WORK/$name.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).sort().join(" ")')"
	replay="$(json "$WORK/$name.replay.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).join(" ")')"
	n="$(curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);console.log(d[process.argv[1]]||0)})' "order-$order:charge")"
	log "$name: burst [$statuses]; replay [$replay]; calls at the stand-in: $n"
	if [[ "$n" == 1 ]]; then
		pass "$name: exactly one call reached the destination for 6 deliveries (key sent as Idempotency-Key)"
	else
		fail "$name: $n calls reached the destination (want 1)"
	fi
	if [[ "$statuses" == "200:already_charged 200:already_charged 200:already_charged 200:already_charged 200:charged" ]]; then
		pass "$name: 1 delivery charged, 4 concurrent duplicates got the stored answer (200)"
	else
		fail "$name: burst answers [$statuses] (want 1× 200:charged, 4× 200:already_charged)"
	fi
	if [[ "$replay" == "200:already_charged" ]]; then
		pass "$name: the later replay got the stored answer"
	else
		fail "$name: replay answered [$replay] (want 200:already_charged)"
	fi
	ledger "$ns" "order-$order:charge"
	local auth
	auth="$(curl -fsS --max-time 10 "$SINK_URL/auth?key=$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "order-$order:charge")")"
	if [[ "$auth" == *'Bearer sk_test_e2e_never_stored'* ]]; then
		pass "$name: the Authorization header reached the destination"
	else
		fail "$name: the destination saw Authorization [$auth] (want the Stripe key)"
	fi
	if grep -q 'sk_test_e2e_never_stored' "$WORK/record.json" "$WORK/idem.log"; then
		fail "$name: the Authorization header reached idem's record or log"
	else
		pass "$name: the secret header is in neither the record nor idem's log"
	fi
}
effect_scenario effect-template idem-effect-charge charges
effect_scenario effect-node idem-node-effect-charge charges-node

# Derive Key → Effect with a single output (what an AI agent tool answers): the key comes from
# the order id, so 6 deliveries of one refund request make one call; the route says which.
ORDER="ord_drv_$(date +%s)_$RANDOM"
BODY="$(node -e 'console.log(JSON.stringify({ order_id: process.argv[1], amount: 1200 }))' "$ORDER")"
node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/idem-node-derive-refund" "$BODY" 5 120000 >"$WORK/derive.burst.json"
sleep 1
node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/idem-node-derive-refund" "$BODY" 1 120000 >"$WORK/derive.replay.json"
statuses="$(json "$WORK/derive.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.status) + ":" + (r.body && r.body.key)).sort().join(" ")')"
replay="$(json "$WORK/derive.replay.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).join(" ")')"
n="$(curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);console.log(d[process.argv[1]]||0)})' "refund:$ORDER")"
log "derive-single: burst [$statuses]; replay [$replay]; calls at the stand-in: $n"
if [[ "$n" == 1 ]]; then
	pass "derive-single: the derived key refund:$ORDER made exactly one call for 6 deliveries"
else
	fail "derive-single: $n calls for refund:$ORDER (want 1)"
fi
want="200:duplicate:refund:$ORDER 200:duplicate:refund:$ORDER 200:duplicate:refund:$ORDER 200:duplicate:refund:$ORDER 200:performed:refund:$ORDER"
if [[ "$statuses" == "$want" ]]; then
	pass "derive-single: one output, idem.route performed once and duplicate for the 4 concurrent others"
else
	fail "derive-single: burst answers [$statuses] (want 1× performed, 4× duplicate, key refund:$ORDER)"
fi
if [[ "$replay" == "200:duplicate" ]]; then
	pass "derive-single: the later replay is a duplicate"
else
	fail "derive-single: replay answered [$replay] (want 200:duplicate)"
fi
ledger refunds-node "refund:$ORDER"

# The error branch (stock template): the payment stand-in answers 201, 503 or 500; the workflow
# reports it with `fail` + the HTTP status and acts on idem's classification.
# charge ORDER_ID WANT_HTTP WANT_STATUS: one delivery; the answer's HTTP status and body.status.
charge() {
	local order="$1" want_http="$2" want_status="$3" body got
	body="$(node -e 'console.log(JSON.stringify({ order_id: process.argv[1], amount: 4200, currency: "eur", customer: "cus_e2e" }))' "$order")"
	node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/idem-charge" "$body" 1 120000 >"$WORK/charge.json"
	got="$(json "$WORK/charge.json" 'd.map(r => r.status + ":" + (r.body && r.body.status) + (r.body && r.body.duplicate ? ":duplicate" : "")).join(" ")')"
	if [[ "$got" == "$want_http:$want_status" ]]; then
		pass "error branch: order $order answered $got"
	else
		fail "error branch: order $order answered [$got] (want $want_http:$want_status) $(head -c 300 "$WORK/charge.json")"
	fi
}
ORD="ord_$(date +%s)_$RANDOM"
charge "${ORD}_ok" 200 charged
charge "${ORD}_ok" 200 "charged:duplicate"
ledger payments "order-${ORD}_ok:charge"
charge "${ORD}@503" 503 retry_later
ledger payments "order-${ORD}@503:charge" failed_retryable
charge "${ORD}@500" 202 needs_review
ledger payments "order-${ORD}@500:charge" needs_review
charge "${ORD}@400" 422 failed_permanent
ledger payments "order-${ORD}@400:charge" failed_permanent
n="$(curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);console.log(Object.keys(d).filter(k=>k.includes(process.argv[1])).map(k=>d[k]).join(","))})' "$ORD")"
if [[ "$n" == "1,1,1,1" ]]; then
	pass "error branch: one charge attempt per order at the payment stand-in"
else
	fail "error branch: charge attempts per order [$n] (want 1,1,1,1)"
fi

# AI draft → prepare (approval required) → approve → the resumed claim delivers the saved draft.
# ai STEP METHOD URL BODY WANT: one request; WANT = "HTTP:body.status".
ai() {
	local step="$1" method="$2" url="$3" body="$4" want="$5" got
	if [[ "$method" == POST ]]; then
		node "$HERE/fire.js" "$url" "$body" 1 120000 >"$WORK/ai.json"
	else
		curl -sS --max-time 120 -w '\n%{http_code}' "$url" | node -e '
let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const i=s.lastIndexOf("\n");let b=s.slice(0,i);
try{b=JSON.parse(b)}catch{};console.log(JSON.stringify([{status:Number(s.slice(i+1)),body:b}]))})' >"$WORK/ai.json"
	fi
	got="$(json "$WORK/ai.json" 'd.map(r => r.status + ":" + (r.body && r.body.status)).join(" ")')"
	if [[ "$got" == "$want" ]]; then
		pass "ai draft: $step answered $got"
	else
		fail "ai draft: $step answered [$got] (want $want) $(head -c 300 "$WORK/ai.json")"
	fi
}
AIO="o$(date +%s)$RANDOM"
AI_KEY="order-$AIO:draft-followup:v1"
AI_BODY="{\"order_id\":\"$AIO\",\"customer_email\":\"ada@example.com\"}"
ai "new order" POST "http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft" "$AI_BODY" "202:awaiting_approval"
ledger followups "$AI_KEY" awaiting_approval
ai "redelivered order while waiting" POST "http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft" "$AI_BODY" "202:awaiting_approval"
ai "approve link" GET "http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft-approve?order=$AIO" "" "200:sent"
ai "approve link clicked again" GET "http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft-approve?order=$AIO" "" "200:duplicate"
ai "redelivered order after delivery" POST "http://127.0.0.1:$N8N_PORT/webhook/idem-ai-draft" "$AI_BODY" "200:duplicate"
ledger followups "$AI_KEY" completed
n="$(curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);const k=process.argv[1];console.log((d[k]||0)+","+(d[k+":ask"]||0))})' "$AI_KEY")"
if [[ "$n" == "1,1" ]]; then
	pass "ai draft: one approval request and one delivery of the saved draft"
else
	fail "ai draft: deliveries,approval requests = [$n] (want 1,1)"
fi

# Fan-out: one order → charge, email, ship×2, each under its own key; the webhook answers at
# once, so the sink is polled. A replay of the order must add nothing.
FO="$(date +%s)$RANDOM"
FO_BODY="{\"id\":\"$FO\",\"amount\":4200,\"currency\":\"eur\",\"email\":\"ada@example.com\",\"items\":[{\"sku\":\"A1\",\"qty\":1},{\"sku\":\"B2\",\"qty\":2}]}"
fan_counts() {
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e '
let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);const p="order-"+process.argv[1]+":";
console.log(["charge","email","ship:A1","ship:B2"].map(k=>d[p+k]||0).join(","))})' "$FO"
}
node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/idem-order-fanout" "$FO_BODY" 1 60000 >"$WORK/fan.json"
# Re-read the sink on every poll (a `$(fan_counts)` argument would be evaluated only once).
fan_done() { [[ "$(fan_counts)" == "1,1,1,1" ]]; }
if wait_for 60 "fan-out effects" fan_done; then
	node "$HERE/fire.js" "http://127.0.0.1:$N8N_PORT/webhook/idem-order-fanout" "$FO_BODY" 2 60000 >"$WORK/fan.json"
	sleep 6
	n="$(fan_counts)"
	if [[ "$n" == "1,1,1,1" ]]; then
		pass "fan-out: 4 effects under 4 keys, each exactly once after 3 deliveries"
	else
		fail "fan-out: effects after replays [$n] (want 1,1,1,1)"
	fi
	for k in charge email ship:A1 ship:B2; do ledger orders "order-$FO:$k"; done
else
	fail "fan-out: effects after the first delivery [$(fan_counts)] (want 1,1,1,1)"
fi

# ---------------------------------------------------------------- 6. the intake in front of n8n
# A Stripe source in idem forwards each event, signed the Standard Webhooks way, to the intake
# template's webhook (verify idem's signature → Respond 200 → gate each effect: idem's 2xx comes
# only from an execution that runs, so an n8n that is starting cannot ack an event it drops).
# The events are signed with Stripe's official library. The forward retries are kept short
# (forward.retry: 250 ms base, 2 s cap) so the outage below stays brief.
T_INTAKE=$(date +%s)
INTAKE_SRC=stripe-intake
INTAKE_IN="$IDEM_URL/in/$INTAKE_SRC"
INTAKE_FWD="http://127.0.0.1:$N8N_PORT/webhook/idem-intake-events"
SRC_DOC="$(node -e 'console.log(JSON.stringify({ provider: "stripe", namespace: process.argv[1],
  forward: { url: process.argv[2], timeout_ms: 5000, retry: { max_attempts: 200, base_ms: 250, max_ms: 2000 } } }))' \
	"$INTAKE_SRC" "$INTAKE_FWD")"
if STRIPE_WHSEC="$STRIPE_WHSEC" IDEM_FORWARD_SECRET="$FORWARD_SECRET" "$IDEM_BIN" source put "$INTAKE_SRC" \
	--url "$IDEM_URL" --token "$ADMIN_TOKEN" --json "$SRC_DOC" \
	--secret-env STRIPE_WHSEC --forward-secret-env IDEM_FORWARD_SECRET --raw >"$WORK/source.json" 2>"$WORK/source.err" &&
	[[ "$(json "$WORK/source.json" 'd.provider + " " + d.forward.url + " " + (d.forward.secret_hint ? "signed" : "unsigned")')" == "stripe $INTAKE_FWD signed" ]]; then
	pass "intake: idem source put $INTAKE_SRC (stripe, forward to the template's production webhook, signed)"
else
	fail "intake: idem source put $INTAKE_SRC failed: $(head -c 300 "$WORK/source.err") $(head -c 300 "$WORK/source.json")"
fi
if grep -qF -e "$STRIPE_WHSEC" -e "$FORWARD_SECRET" "$WORK/source.json" "$WORK/source.err"; then
	fail "intake: the source's answer contains a secret"
fi

# stripe_event ID: a Stripe-shaped event body. stripe_headers SECRET BODY: the Stripe-Signature
# header that Stripe's official Python library makes for BODY now ([[name, value]]).
stripe_event() {
	node -e 'const id = process.argv[1];
console.log(JSON.stringify({ id, object: "event", type: "checkout.session.completed", created: Math.floor(Date.now() / 1000),
  livemode: false, data: { object: { id: "cs_" + id, object: "checkout.session", amount_total: 4200, currency: "eur",
    customer_details: { email: "ada@example.com", name: "Ada Lovelace" } } } }));' "$1"
}
stripe_headers() {
	printf '%s' "$2" | "$SIGNERS/venv/bin/python" "$SIGN_PY" \
		"$(node -e 'console.log(JSON.stringify({ provider: "stripe", secret: process.argv[1], timestamp_ms: Date.now() }))' "$1")"
}
# executions STATUS [WORKFLOW_ID]: how many executions of the intake template (or the given
# workflow) n8n holds (STATUS: all, success,
# error), read through n8n's UI API with the owner's session (at most 100, the newest n8n's
# limit; the test makes fewer); -999 when it cannot be read.
executions() {
	rest -G --data-urlencode "filter={\"workflowId\":\"${2:-$INTAKE_ID}\"}" --data-urlencode limit=100 \
		"$N8N_REST/executions" >"$WORK/executions.json" 2>/dev/null || {
		echo -999
		return
	}
	json "$WORK/executions.json" '(d.data && Array.isArray(d.data.results)) ? d.data.results.filter(e => "'"$1"'" === "all" || e.status === "'"$1"'").length : -999' 2>/dev/null || echo -999
}
# effect_counts EVT: "<crm>,<notify>" POSTs at the sink for the event's two effect keys.
effect_counts() {
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e '
let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);const k=process.argv[1];
console.log((d[k+":crm"]||0)+","+(d[k+":notify"]||0))})' "$1"
}
# source_event KEY EXPR: EXPR over idem's read of the event (operator), bound to `d`.
source_event() {
	curl -sS --max-time 10 -H "Authorization: Bearer $OPERATOR_TOKEN" \
		"$IDEM_URL/v1/sources/$INTAKE_SRC/events/$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$1")" \
		-o "$WORK/event.json" -w '%{http_code}' >"$WORK/event.code" 2>/dev/null || echo 000 >"$WORK/event.code"
	if [[ "$(cat "$WORK/event.code")" == 200 ]]; then
		json "$WORK/event.json" "$2" 2>/dev/null || echo "unexpected: $(head -c 300 "$WORK/event.json")"
	else
		echo "http $(cat "$WORK/event.code")"
	fi
}

# 6a. one event, 5 concurrent deliveries to idem → five 200s (one accepted), one forward, one
#     n8n execution, each effect once.
EXEC0="$(executions all)"
EVT="evt_e2e_intake_$(date +%s)_$RANDOM"
BODY="$(stripe_event "$EVT")"
HDRS="$(stripe_headers "$STRIPE_WHSEC" "$BODY")" || HDRS='[]'
node "$HERE/fire.js" "$INTAKE_IN" "$BODY" 5 30000 "$HDRS" >"$WORK/intake.burst.json"
statuses="$(json "$WORK/intake.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.events ? r.body.events.map(e => e.status).join("+") : r.body && r.body.code)).sort().join(" ")')"
slowest="$(json "$WORK/intake.burst.json" 'Math.max(...d.map(r => r.ms || 0))')"
log "intake burst: answers [$statuses] (slowest $slowest ms)"
if [[ "$statuses" == "200:accepted 200:duplicate 200:duplicate 200:duplicate 200:duplicate" ]]; then
	pass "intake: 5 concurrent deliveries of one Stripe-signed event → 5× 200 (1 accepted, 4 duplicate)"
else
	fail "intake: 5 concurrent deliveries answered [$statuses] (want 1× 200:accepted, 4× 200:duplicate)"
fi
one_event_done() { [[ "$(effect_counts "$EVT")" == "1,1" ]]; }
if wait_for 60 "intake effects of $EVT" one_event_done; then
	sleep 3 # a second forward or execution would show by now
	n="$(effect_counts "$EVT")"
	if [[ "$n" == "1,1" ]]; then
		pass "intake: each effect of the event happened once ($EVT:crm, $EVT:notify)"
	else
		fail "intake: effects crm,notify = [$n] (want 1,1)"
	fi
else
	fail "intake: effects crm,notify after 60 s = [$(effect_counts "$EVT")] (want 1,1); $(tail -n 5 "$WORK/idem.log" | tr '\n' ' ' | head -c 600)"
fi
got="$(source_event "$EVT" 'd.record.state + " " + d.attempts.map(a => a.attempt + ":" + a.status).join(",")')"
if [[ "$got" == "completed 1:200" ]]; then
	pass "intake: idem forwarded the event once and n8n answered it 2xx ($(source_event "$EVT" 'd.attempts[0].duration_ms') ms)"
else
	fail "intake: idem's event is [$got] (want completed, one attempt answered 200)"
fi
exec1="$(executions all)"
ok1="$(executions success)"
err1="$(executions error)"
if [[ "$EXEC0" -ge 0 && "$exec1" == "$((EXEC0 + 1))" && "$ok1" == "$exec1" ]]; then
	pass "intake: n8n ran the workflow exactly once for the 5 deliveries (and it succeeded)"
else
	fail "intake: n8n executions of the intake template went $EXEC0 → $exec1 ($ok1 successful; want one more, all successful)"
fi
ledger intake-effects "$EVT:crm"
ledger intake-effects "$EVT:notify"

# 6b. a bad signature (signed with another secret by the same official library) → 401
#     invalid_signature; nothing is stored, nothing forwarded, no execution.
EVT_BAD="evt_e2e_forged_$(date +%s)_$RANDOM"
BODY="$(stripe_event "$EVT_BAD")"
HDRS="$(stripe_headers "whsec_not_the_source_secret_$RANDOM" "$BODY")" || HDRS='[]'
node "$HERE/fire.js" "$INTAKE_IN" "$BODY" 1 30000 "$HDRS" >"$WORK/intake.bad.json"
got="$(json "$WORK/intake.bad.json" 'd.map(r => r.status + ":" + (r.body && r.body.code)).join(" ")')"
if [[ "$got" == "401:invalid_signature" ]]; then
	pass "intake: a bad Stripe signature is refused 401 invalid_signature"
else
	fail "intake: a bad Stripe signature answered [$got] (want 401:invalid_signature)"
fi
# A forward that idem did not sign, sent straight to n8n: the template's Code node stops it.
FORGED="$(stripe_event "evt_e2e_direct_$RANDOM")"
FORGED_HDRS="$(node -e 'const c = require("crypto"); const id = process.argv[1], ts = Math.floor(Date.now() / 1000);
const mac = c.createHmac("sha256", c.randomBytes(32)).update(id + "." + ts + "." + process.argv[2]).digest("base64");
console.log(JSON.stringify([["webhook-id", id], ["webhook-timestamp", String(ts)], ["webhook-signature", "v1," + mac],
  ["idem-key", id], ["idem-source", "stripe-intake"]]))' "evt_e2e_direct" "$FORGED")"
node "$HERE/fire.js" "$INTAKE_FWD" "$FORGED" 1 30000 "$FORGED_HDRS" >"$WORK/intake.forged.json"
sleep 3
got="$(json "$WORK/intake.forged.json" 'd.map(r => r.status).join(" ")')"
bad="$(source_event "$EVT_BAD" 'd.record.state')"
exec2="$(executions all)"
ok2="$(executions success)"
err2="$(executions error)"
n="$(effect_counts "$EVT_BAD"),$(effect_counts evt_e2e_direct)"
# What the newest execution (the forgery's) holds: the Code node's own refusal, on its error
# output, answered by the template's Respond 401 (not a failed execution: n8n 2.8.4 answers a
# failed execution 200 with an empty body when no Respond node ran, n8n issues #21827/#25340).
why="none"
last="$(json "$WORK/executions.json" '((d.data && d.data.results) || []).map(e => Number(e.id)).sort((a, b) => b - a)[0] || ""' 2>/dev/null || true)"
if [[ -n "$last" ]] && rest "$N8N_REST/executions/$last" 2>/dev/null | grep -q 'invalid idem forward signature'; then
	why="invalid idem forward signature"
fi
if [[ "$bad" == "http 404" && "$n" == "0,0,0,0" && "$exec2" == "$((exec1 + 1))" && "$err2" == "$err1" && "$why" != none && "$got" == 401 ]]; then
	pass "intake: nothing kept or forwarded for the bad signature; a forward idem did not sign, sent to n8n directly, was refused in the Code node ($why) before any claim and answered 401"
else
	fail "intake: after the bad signature idem holds [$bad] (want http 404), effects [$n] (want 0,0,0,0), executions $exec1 → $exec2 (want one more: the direct forgery, refused for an invalid idem forward signature: [$why]), failed $err1 → $err2 (want no more), n8n answered the forgery [$got] (want 401)"
fi

# 6d. The Idem Intake Trigger (community node) as the receiving end: a second source forwards,
#     signed with the credential's Forward Secret, to the node example (trigger → claim →
#     effect → complete). The provider side is a generic HMAC (the event id at /id).
NODE_SRC=node-intake
NODE_IN="$IDEM_URL/in/$NODE_SRC"
NODE_FWD="http://127.0.0.1:$N8N_PORT/webhook/idem-node-intake"
NODE_HMAC="hmac-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
SRC_DOC="$(node -e 'console.log(JSON.stringify({ provider: "hmac", namespace: process.argv[1],
  hmac: { header: "X-Signature", algorithm: "sha256", encoding: "hex" }, event_id: { pointer: "/id" },
  forward: { url: process.argv[2], timeout_ms: 15000, retry: { max_attempts: 200, base_ms: 250, max_ms: 2000 } } }))' \
	"$NODE_SRC" "$NODE_FWD")"
if NODE_HMAC="$NODE_HMAC" TRIGGER_SECRET="$TRIGGER_SECRET" "$IDEM_BIN" source put "$NODE_SRC" \
	--url "$IDEM_URL" --token "$ADMIN_TOKEN" --json "$SRC_DOC" \
	--secret-env NODE_HMAC --forward-secret-env TRIGGER_SECRET --raw >"$WORK/node-source.json" 2>"$WORK/node-source.err"; then
	pass "trigger: idem source put $NODE_SRC (forward to the Idem Intake Trigger's production webhook, signed)"
else
	fail "trigger: idem source put $NODE_SRC failed: $(head -c 300 "$WORK/node-source.err")"
fi
# node_post ID: the event {id} posted to the source, signed the provider's way, 1 time or $2.
node_post() {
	local body hdrs
	body="{\"id\":\"$1\",\"type\":\"invoice.paid\",\"amount\":4200}"
	hdrs="$(node -e 'const c=require("crypto");console.log(JSON.stringify([["x-signature",c.createHmac("sha256",process.argv[1]).update(process.argv[2]).digest("hex")]]))' "$NODE_HMAC" "$body")"
	node "$HERE/fire.js" "$NODE_IN" "$body" "${2:-1}" 30000 "$hdrs"
}
node_effects() { # ID → POSTs at the sink under the example's key {event key}:effect
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s)[process.argv[1]+":effect"]||0))' "$1"
}
node_event() { # ID EXPR → EXPR over idem's read of the node-intake event
	curl -sS --max-time 10 -H "Authorization: Bearer $OPERATOR_TOKEN" "$IDEM_URL/v1/sources/$NODE_SRC/events/$1" -o "$WORK/node-event.json" 2>/dev/null &&
		json "$WORK/node-event.json" "$2" 2>/dev/null || echo "unreadable"
}
NX0="$(executions all "$NODE_INTAKE_ID")"
NEVT="evt_e2e_trigger_$(date +%s)_$RANDOM"
node_post "$NEVT" 5 >"$WORK/node.burst.json"
got="$(json "$WORK/node.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.events ? r.body.events.map(e => e.status).join("+") : r.body && r.body.code)).sort().join(" ")')"
node_done() { [[ "$(node_effects "$NEVT")" == 1 && "$(node_event "$NEVT" 'd.record.state')" == completed ]]; }
if [[ "$got" == "200:accepted 200:duplicate 200:duplicate 200:duplicate 200:duplicate" ]] && wait_for 60 "trigger: $NEVT delivered" node_done; then
	sleep 2
	n="$(node_effects "$NEVT")"
	st="$(node_event "$NEVT" 'd.record.state + " " + d.attempts.map(a => a.attempt + ":" + a.status).join(",")')"
	if [[ "$n" == 1 && "$st" == "completed 1:200" ]]; then
		pass "trigger: 5 concurrent deliveries → one forward, verified by the Idem Intake Trigger, answered 200 once the workflow ran; the effect once"
	else
		fail "trigger: effects [$n] (want 1), idem [$st] (want completed 1:200)"
	fi
else
	fail "trigger: deliveries answered [$got]; effects [$(node_effects "$NEVT")], idem [$(node_event "$NEVT" 'd.record.state + " " + JSON.stringify(d.attempts)')]"
fi
NX1="$(executions all "$NODE_INTAKE_ID")"
NOK1="$(executions success "$NODE_INTAKE_ID")"
if [[ "$NX0" -ge 0 && "$NX1" == "$((NX0 + 1))" && "$NOK1" == "$NX1" ]]; then
	pass "trigger: one successful n8n execution for the event"
else
	fail "trigger: executions of the trigger example went $NX0 → $NX1 ($NOK1 successful; want one more, successful)"
fi
# A forward idem did not sign (another secret), sent straight to the trigger: 401, no execution.
FBODY="{\"id\":\"evt_e2e_trigger_forged\",\"amount\":1}"
FHDRS="$(node -e 'const c=require("crypto");const id="evt_e2e_trigger_forged",ts=Math.floor(Date.now()/1000);
const mac=c.createHmac("sha256",c.randomBytes(32)).update(id+"."+ts+"."+process.argv[1]).digest("base64");
console.log(JSON.stringify([["webhook-id",id],["webhook-timestamp",String(ts)],["webhook-signature","v1,"+mac],["idem-key",id],["idem-attempt","1"]]))' "$FBODY")"
node "$HERE/fire.js" "$NODE_FWD" "$FBODY" 1 30000 "$FHDRS" >"$WORK/node.forged.json"
sleep 2
got="$(json "$WORK/node.forged.json" 'd.map(r => r.status + ":" + (r.body && r.body.code)).join(" ")')"
NX2="$(executions all "$NODE_INTAKE_ID")"
if [[ "$got" == "401:invalid_signature" && "$NX2" == "$NX1" && "$(node_effects evt_e2e_trigger_forged)" == 0 ]]; then
	pass "trigger: a forward signed with another secret is refused 401 by the node and starts no execution"
else
	fail "trigger: the forgery answered [$got] (want 401:invalid_signature), executions $NX1 → $NX2 (want no more), effects $(node_effects evt_e2e_trigger_forged)"
fi

# 6d. fan-out: one Stripe event, two destinations (two copies of the fan-out destination
#     template: crm and receipt). Each workflow runs once and does its one effect once, under
#     the event's key with the destination's name; then one destination is replayed alone from
#     idem's console (the form an operator's "Redeliver to receipt" posts): only that workflow
#     runs again, its gate answers "already done", and no effect is repeated.
FANSRC=stripe-fanout
FAN_IN="$IDEM_URL/in/$FANSRC"
FAN_DOC="$(node -e 'const [ns, crm, receipt, secret, whsec] = process.argv.slice(1);
const dest = (url) => ({ url, secret, timeout_ms: 15000, retry: { max_attempts: 50, base_ms: 250, max_ms: 2000 } });
console.log(JSON.stringify({ provider: "stripe", namespace: ns, secrets: [whsec],
  forwards: { crm: dest(crm), receipt: dest(receipt) } }));' \
	"$FANSRC" "http://127.0.0.1:$N8N_PORT/webhook/idem-fan-crm" "http://127.0.0.1:$N8N_PORT/webhook/idem-fan-receipt" \
	"$FORWARD_SECRET" "$STRIPE_WHSEC")"
code="$(curl -sS --max-time 10 -o "$WORK/fan-source.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $ADMIN_TOKEN" \
	-H 'Content-Type: application/json' --data-binary "$FAN_DOC" "$IDEM_URL/v1/sources/$FANSRC" 2>/dev/null || echo 000)"
if [[ "$code" == 201 ]] && [[ "$(json "$WORK/fan-source.json" 'Object.keys(d.forwards).sort().join(",")')" == "crm,receipt" ]] &&
	! grep -qF -e "$STRIPE_WHSEC" -e "$FORWARD_SECRET" "$WORK/fan-source.json"; then
	pass "fan-out: source $FANSRC with destinations crm and receipt (the two workflows' production webhooks), secrets not echoed"
else
	fail "fan-out: PUT /v1/sources/$FANSRC answered $code: $(head -c 300 "$WORK/fan-source.json")"
fi
fan_event() { # KEY EXPR → EXPR over idem's read of the fan-out event
	curl -sS --max-time 10 -H "Authorization: Bearer $OPERATOR_TOKEN" \
		"$IDEM_URL/v1/sources/$FANSRC/events/$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$1")" \
		-o "$WORK/fan-event.json" 2>/dev/null && json "$WORK/fan-event.json" "$2" 2>/dev/null || echo "unreadable"
}
fan_effects() { # EVT → "<crm>,<receipt>" effects at the sink under {EVT}:crm and {EVT}:receipt
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e '
let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);const k=process.argv[1];
console.log((d[k+":crm"]||0)+","+(d[k+":receipt"]||0))})' "$1"
}
# "<state>/<attempts>" per destination, in name order: "completed/1 completed/1".
fan_dests() { fan_event "$1" 'd.destinations.map(x => x.state + "/" + x.attempts.length).join(" ")'; }
FC0="$(executions all "$FAN_CRM_ID")"
FR0="$(executions all "$FAN_RECEIPT_ID")"
FEVT="evt_e2e_fanout_$(date +%s)_$RANDOM"
BODY="$(stripe_event "$FEVT")"
HDRS="$(stripe_headers "$STRIPE_WHSEC" "$BODY")" || HDRS='[]'
node "$HERE/fire.js" "$FAN_IN" "$BODY" 3 30000 "$HDRS" >"$WORK/fan.burst.json"
got="$(json "$WORK/fan.burst.json" 'd.map(r => r.status + ":" + (r.body && r.body.events ? r.body.events.map(e => e.status).join("+") : r.body && r.body.code)).sort().join(" ")')"
fan_done() { [[ "$(fan_effects "$FEVT")" == "1,1" && "$(fan_dests "$FEVT")" == "completed/1 completed/1" ]]; }
if [[ "$got" == "200:accepted 200:duplicate 200:duplicate" ]] && wait_for 60 "fan-out: $FEVT at both destinations" fan_done; then
	sleep 3 # a second forward or execution would show by now
	FC1="$(executions success "$FAN_CRM_ID")"
	FR1="$(executions success "$FAN_RECEIPT_ID")"
	if [[ "$(fan_effects "$FEVT")" == "1,1" && "$(fan_dests "$FEVT")" == "completed/1 completed/1" &&
		"$FC0" -ge 0 && "$FC1" == "$((FC0 + 1))" && "$FR1" == "$((FR0 + 1))" ]]; then
		pass "fan-out: 3 deliveries of one Stripe-signed event → each destination's workflow ran once, its effect once ($FEVT:crm, $FEVT:receipt)"
	else
		fail "fan-out: effects [$(fan_effects "$FEVT")] (want 1,1), destinations [$(fan_dests "$FEVT")], executions crm $FC0 → $FC1, receipt $FR0 → $FR1 (want one more each)"
	fi
	node "$HERE/console-redeliver.js" "$IDEM_URL" "$OPERATOR_TOKEN" "$FANSRC" "$FEVT" receipt "e2e: replay the receipt alone" \
		>"$WORK/fan-console.json" 2>&1 || true
	got="$(json "$WORK/fan-console.json" '[d.login, d.page, d.destination_row, d.redeliver, /done=redelivered/.test(d.location || "")].join(" ")' 2>/dev/null || head -c 200 "$WORK/fan-console.json")"
	replayed() { [[ "$(fan_dests "$FEVT")" == "completed/1 completed/2" ]]; }
	if [[ "$got" == "303 200 true 303 true" ]] && wait_for 60 "fan-out: receipt replayed" replayed; then
		sleep 3
		FC2="$(executions all "$FAN_CRM_ID")"
		FR2="$(executions success "$FAN_RECEIPT_ID")"
		if [[ "$(fan_effects "$FEVT")" == "1,1" && "$(fan_dests "$FEVT")" == "completed/1 completed/2" &&
			"$FC2" == "$(executions all "$FAN_CRM_ID")" && "$FC2" -ge "$FC1" && "$FC2" == "$((FC0 + 1))" && "$FR2" == "$((FR1 + 1))" ]]; then
			pass "fan-out: \"Redeliver to receipt\" in the console replayed that destination alone: the receipt workflow ran again and its gate answered already done; crm untouched; no effect repeated"
		else
			fail "fan-out: after the console's replay effects [$(fan_effects "$FEVT")] (want 1,1), destinations [$(fan_dests "$FEVT")] (want completed/1 completed/2), executions crm $FC0 → $FC2 (want +1 in all), receipt $FR1 → $FR2 (want one more)"
		fi
	else
		fail "fan-out: the console's redeliver answered [$got] (want login 303, page 200, the receipt row, redeliver 303 → done=redelivered); destinations [$(fan_dests "$FEVT")]"
	fi
else
	fail "fan-out: deliveries answered [$got] (want 200:accepted, 2× 200:duplicate); effects [$(fan_effects "$FEVT")], destinations [$(fan_dests "$FEVT")]"
fi

# 6c. n8n down: events keep being acked and kept; the forwards fail and back off; once n8n is
#     back every event arrives, each effect exactly once.
stop_pid "$N8N_PID"
log "intake outage: n8n stopped"
OUT_EVTS=()
got=""
for i in 1 2 3; do
	e="evt_e2e_outage_$(date +%s)_${RANDOM}_$i"
	OUT_EVTS+=("$e")
	BODY="$(stripe_event "$e")"
	HDRS="$(stripe_headers "$STRIPE_WHSEC" "$BODY")" || HDRS='[]'
	# Stripe's own retry of the first one while n8n is down: a duplicate, no second forward.
	reps=1
	[[ $i == 1 ]] && reps=2
	node "$HERE/fire.js" "$INTAKE_IN" "$BODY" "$reps" 30000 "$HDRS" >"$WORK/intake.outage.json"
	got+="$(json "$WORK/intake.outage.json" 'd.map(r => r.status + ":" + (r.body && r.body.events ? r.body.events.map(e => e.status).join("+") : r.body && r.body.code)).sort().join(" ")') "
done
# The trigger's source too: two events while n8n is down.
NODE_OUT=("evt_e2e_trigger_outage_$(date +%s)_${RANDOM}_1" "evt_e2e_trigger_outage_$(date +%s)_${RANDOM}_2")
for e in "${NODE_OUT[@]}"; do node_post "$e" >>"$WORK/node.outage.json"; done
if [[ "$got" == "200:accepted 200:duplicate 200:accepted 200:accepted " ]]; then
	pass "intake outage: 3 events (one sent twice) acked 200 while n8n is down"
else
	fail "intake outage: answers while n8n is down [$got] (want 200:accepted 200:duplicate, 200:accepted, 200:accepted)"
fi
backing_off() {
	local e
	for e in "${OUT_EVTS[@]}"; do
		[[ "$(source_event "$e" 'd.record.state !== "completed" && d.attempts.length >= 2 && d.attempts.every(a => a.status === null && a.error.category === "connection")')" == true ]] || return 1
	done
}
if wait_for 30 "intake outage: forwards failing" backing_off; then
	pass "intake outage: every forward fails (connection) and is retried after a backoff ($(source_event "${OUT_EVTS[0]}" 'd.attempts.length + " attempts of the first so far, state " + d.record.state'))"
else
	fail "intake outage: forwards while n8n is down: $(source_event "${OUT_EVTS[0]}" 'd.record.state + " " + JSON.stringify(d.attempts.slice(-2))')"
fi
# n8n acknowledges production webhooks for a moment after it starts, before it has
# activated its workflows, and then runs nothing (docs/n8n.md, "An n8n that is starting can
# answer 200 and run nothing"; seen on 2.8.4 and, on a loaded machine, on 2.41.1). The test
# therefore follows the recipe for a planned restart on every version: the sources'
# namespaces are paused (idem keeps accepting and holding events) until n8n is ready. 2.8.x
# logs "Activated workflow" for each; newer n8n logs no such line at the info level, so there
# the namespaces are resumed 10 s after its editor is up.
HOLD_RESTART=1
set_paused() { # pause|resume
	local ns
	for ns in "$INTAKE_SRC" "$NODE_SRC"; do
		curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -X POST \
			-H "Authorization: Bearer $OPERATOR_TOKEN" -H 'Content-Type: application/json' \
			-d '{"note":"n8n restart"}' "$IDEM_URL/v1/namespaces/$ns/$1" | grep -q '^2' ||
			fail "intake outage: could not $1 namespace $ns"
	done
}
workflows_active() {
	if [[ "$N8N_VERSION" != 2.8.* ]]; then
		grep -q "Editor is now accessible" "$WORK/n8n-restart.log" 2>/dev/null && sleep 10
		return
	fi
	grep -q "idemTplIntakeFwd" "$WORK/n8n-restart.log" 2>/dev/null &&
		grep -q "Activated workflow.*$NODE_INTAKE_ID" "$WORK/n8n-restart.log" 2>/dev/null &&
		grep -q "Activated workflow.*idemTplIntakeFwd" "$WORK/n8n-restart.log" 2>/dev/null
}
[[ $HOLD_RESTART == 1 ]] && set_paused pause && log "intake outage: namespaces paused across the restart (n8n $N8N_VERSION)"
sleep 2
start N8N "$WORK/n8n-restart.log" "$N8N_BIN" start
T_DOWN=$(date +%s)
if [[ $HOLD_RESTART == 1 ]]; then
	wait_for 240 "n8n restarted: intake workflows activated" workflows_active || true
	sleep 2
	set_paused resume
	log "intake outage: namespaces resumed"
fi
if wait_for 240 "n8n restarted: webhook idem-intake-events" webhook_live idem-intake-events; then
	all_arrived() {
		local e
		for e in "${OUT_EVTS[@]}"; do [[ "$(effect_counts "$e")" == "1,1" ]] || return 1; done
	}
	if wait_for 60 "intake outage: every event delivered" all_arrived; then
		log "intake outage: all delivered $(($(date +%s) - T_DOWN)) s after n8n was started again"
	fi
	sleep 3
	for e in "${OUT_EVTS[@]}"; do
		n="$(effect_counts "$e")"
		st="$(source_event "$e" 'd.record.state + " " + d.attempts.filter(a => a.status !== null && a.status >= 200 && a.status < 300).length')"
		if [[ "$n" == "1,1" && "$st" == "completed 1" ]]; then
			pass "intake outage: $e arrived after n8n was back, each effect once (delivered by attempt $(source_event "$e" 'd.attempts.length'))"
		else
			fail "intake outage: $e effects crm,notify [$n] (want 1,1), idem [$st] (want completed, one 2xx attempt)"
		fi
	done
	node_arrived() {
		local e
		for e in "${NODE_OUT[@]}"; do [[ "$(node_effects "$e")" == 1 && "$(node_event "$e" 'd.record.state')" == completed ]] || return 1; done
	}
	wait_for 60 "trigger outage: both events delivered" node_arrived || true
	for e in "${NODE_OUT[@]}"; do
		n="$(node_effects "$e")"
		st="$(node_event "$e" 'd.record.state + " " + d.attempts.filter(a => a.status !== null && a.status >= 200 && a.status < 300).length')"
		if [[ "$n" == 1 && "$st" == "completed 1" ]]; then
			pass "trigger outage: $e arrived through the Idem Intake Trigger after n8n was back, the effect once"
		else
			fail "trigger outage: $e effects [$n] (want 1), idem [$st] (want completed, one 2xx attempt)"
		fi
	done
	exec3="$(executions all)"
	ok3="$(executions success)"
	# One successful execution per event. An n8n that is starting may also lose an execution
	# it had begun (it then never answers, and idem's timeout sends the event again): such an
	# execution did not reach its first claim, so it shows as a failed or crashed one at most,
	# never as an effect (the effect counts above are exact).
	if [[ "$ok3" == "$((ok2 + 3))" && "$exec3" -ge "$((exec2 + 3))" ]]; then
		pass "intake outage: n8n ran the workflow successfully once per event (3 more successful executions; $((exec3 - exec2 - 3)) lost while starting)"
	else
		fail "intake outage: executions $exec2 → $exec3, successful $ok2 → $ok3 (want 3 more successful ones)"
	fi
else
	fail "intake outage: n8n did not register the intake webhook within 240 s of its restart"
	tail -n 40 "$WORK/n8n-restart.log"
fi
log "intake part took $(($(date +%s) - T_INTAKE)) s"

# ---------------------------------------------------------------- 7. actions: idem as the agent's tools (MCP)
# Two actions served at /mcp/{ns}, each delivering to the sink (which the namespaces' egress
# policy allows): mcp-e2e/send_receipt (no approval), called by n8n's MCP Client node; and
# shop/send_followup (approval required), called by the AI-agent template's agent through the
# MCP Client Tool, its chat model being the scripted stub (model-stub.js).
T_ACTIONS=$(date +%s)
action_put() { # NS NAME JSON
	local code
	code="$(curl -sS --max-time 10 -o "$WORK/action.json" -w '%{http_code}' -X PUT \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' -d "$3" \
		"$IDEM_URL/v1/namespaces/$1/actions/$2")"
	if [[ "$code" == 201 || "$code" == 200 ]]; then
		pass "actions: PUT $1/$2 answered $code"
	else
		fail "actions: PUT $1/$2 answered $code: $(head -c 300 "$WORK/action.json")"
	fi
}
for ns in mcp-e2e shop; do
	code="$(curl -sS --max-time 10 -o "$WORK/policy.json" -w '%{http_code}' -X PATCH \
		-H "Authorization: Bearer $ADMIN_TOKEN" -H 'Content-Type: application/json' \
		-d "{\"egress\":{\"allow\":[\"$SINK_HOSTPORT\"]}}" "$IDEM_URL/v1/namespaces/$ns")"
	[[ "$code" == 200 ]] || fail "actions: PATCH egress policy of $ns answered $code: $(head -c 300 "$WORK/policy.json")"
done
action_doc() { # TOOL PATH APPROVAL KEY_SUFFIX
	node -e 'const [tool, url, approval, suffix] = process.argv.slice(1);
console.log(JSON.stringify({
  description: "Sends the " + tool + " e-mail of an order to its customer. One call per order is enough; the result text is authoritative.",
  input_schema: { type: "object", required: ["order_id", "to", "text"], properties: {
    order_id: { type: "string" }, to: { type: "string" }, text: { type: "string", maxLength: 4000 } } },
  key: "{order_id}:" + suffix + ":v1", identity: ["order_id", "to"],
  deliver: { http: { method: "POST", url, body: { to: "{{to}}", text: "{{text}}" }, timeout_ms: 10000 } },
  approval }));' "$1" "$SINK_URL/$2" "$3" "$4"
}
action_put mcp-e2e send_receipt "$(action_doc receipt mail/receipt none receipt)"
action_put shop send_followup "$(action_doc follow-up mail/followup required followup)"
for hook in idem-e2e-mcp-client idem-agent-followup; do
	wait_for 120 "webhook $hook" webhook_live "$hook" || fail "actions: webhook $hook is not live after the restart"
done
sink_count() { # KEY → POSTs at the sink under KEY (the action's key, sent as Idempotency-Key)
	curl -fsS --max-time 10 "$SINK_URL/counts" | node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>console.log(JSON.parse(s)[process.argv[1]]||0))' "$1"
}
sink_text() { # KEY → the text of the first body the sink received under KEY
	curl -fsS --max-time 10 "$SINK_URL/bodies?key=$(node -e 'console.log(encodeURIComponent(process.argv[1]))' "$1")" |
		node -e 'let s="";process.stdin.on("data",c=>s+=c).on("end",()=>{const d=JSON.parse(s);console.log(d.length?d[0].text:"(nothing)")})'
}
# idem's sentence → its outcome (n8n's MCP Client node passes on the result's text only).
OUTCOME_OF='t => !t ? "none" : /^Done:/.test(t) ? "performed" : /^Already done earlier/.test(t) ? "completed" : /^In progress/.test(t) ? "in_flight" : /^Saved for a person/.test(t) ? "awaiting_approval" : "other:" + String(t).slice(0, 80)'

# 7a. The MCP Client node: one order's receipt requested 5 times concurrently, then once more
#     with the same identity (a replayed execution) → one delivery at the sink.
ORD="ord_mcp_$(date +%s)_$RANDOM"
BODY="$(node -e 'console.log(JSON.stringify({ order_id: process.argv[1], to: "ada@example.com", text: "Your receipt for " + process.argv[1] }))' "$ORD")"
MCP_HOOK="http://127.0.0.1:$N8N_PORT/webhook/idem-e2e-mcp-client"
node "$HERE/fire.js" "$MCP_HOOK" "$BODY" 5 120000 >"$WORK/mcp.burst.json"
sleep 1
node "$HERE/fire.js" "$MCP_HOOK" "$BODY" 1 120000 >"$WORK/mcp.replay.json"
burst="$(json "$WORK/mcp.burst.json" 'd.map(r => r.status + ":" + ('"$OUTCOME_OF"')(r.body && r.body.text)).sort().join(" ")')"
replay="$(json "$WORK/mcp.replay.json" 'd.map(r => r.status + ":" + ('"$OUTCOME_OF"')(r.body && r.body.text)).join(" ")')"
sleep 1
n="$(sink_count "$ORD:receipt:v1")"
log "mcp client node: burst [$burst]; replay [$replay]; deliveries at the sink: $n"
if [[ "$n" == 1 ]]; then
	pass "mcp client node: 5 concurrent executions + 1 replay → exactly one delivery of $ORD:receipt:v1"
else
	fail "mcp client node: $n deliveries of $ORD:receipt:v1 (want 1); burst [$burst] $(head -c 400 "$WORK/mcp.burst.json")"
fi
performed="$(json "$WORK/mcp.burst.json" 'd.filter(r => r.status === 200 && ('"$OUTCOME_OF"')(r.body && r.body.text) === "performed").length')"
others="$(json "$WORK/mcp.burst.json" 'd.filter(r => r.status === 200 && ["completed", "in_flight"].includes(('"$OUTCOME_OF"')(r.body && r.body.text))).length')"
if [[ "$performed" == 1 && "$others" == 4 ]]; then
	pass "mcp client node: one execution was told performed, the 4 concurrent others completed or in_flight ([$burst])"
else
	fail "mcp client node: burst answers [$burst] (want 1× performed, 4× completed/in_flight)"
fi
if [[ "$replay" == "200:completed" ]]; then
	pass "mcp client node: the replayed execution was told completed (already done earlier, not repeated)"
else
	fail "mcp client node: the replay answered [$replay] (want 200:completed)"
fi
ledger mcp-e2e "$ORD:receipt:v1"

# 7b. The AI-agent template: the stub model asks for send_followup for one order with a new
#     text in every execution. The first execution's draft is saved and waits for approval;
#     later executions (one alone, then two at once) keep it; the approve link → idem delivers
#     the saved (first) draft itself, once; an execution after that is told completed.
AO="ord_agent_$(date +%s)_$RANDOM"
AKEY="$AO:followup:v1"
ABODY="$(node -e 'console.log(JSON.stringify({ order_id: process.argv[1], customer_email: "ada@example.com", items: [{ sku: "A1", qty: 1 }] }))' "$AO")"
AGENT_HOOK="http://127.0.0.1:$N8N_PORT/webhook/idem-agent-followup"
stub_calls() { curl -fsS --max-time 10 "$MODEL_URL/calls" >"$WORK/stub-calls.json" && json "$WORK/stub-calls.json" "$1"; }
agent_run() { # N FILE: N concurrent executions; prints "status:body.status …" (sorted)
	node "$HERE/fire.js" "$AGENT_HOOK" "$ABODY" "$1" 180000 >"$2"
	json "$2" 'd.map(r => r.status + ":" + (r.body && r.body.status)).sort().join(" ")'
}
got="$(agent_run 1 "$WORK/agent.1.json")"
FIRST_TEXT="$(stub_calls '(d.find(c => c.order_id === "'"$AO"'") || { text: "" }).text')"
draft="$(json "$WORK/agent.1.json" 'd[0].body && d[0].body.draft ? d[0].body.draft.text : ""')"
if [[ "$got" == "202:awaiting_approval" && -n "$FIRST_TEXT" && "$draft" == "$FIRST_TEXT" ]]; then
	pass "ai agent: the first execution's tool call was saved for approval (202 awaiting_approval), the saved draft is the model's text"
else
	fail "ai agent: first execution answered [$got] (want 202:awaiting_approval), saved draft [$draft], the model's text [$FIRST_TEXT]; $(head -c 600 "$WORK/agent.1.json")"
fi
got2="$(agent_run 1 "$WORK/agent.2.json")"
got3="$(agent_run 2 "$WORK/agent.3.json")"
texts="$(stub_calls 'd.filter(c => c.order_id === "'"$AO"'").length + " calls, " + new Set(d.filter(c => c.order_id === "'"$AO"'").map(c => c.text)).size + " texts"')"
kept() { json "$1" 'd.every(r => r.body && r.body.draft && r.body.draft.text === process.env.FIRST_TEXT)'; }
drafts="$(FIRST_TEXT="$FIRST_TEXT" kept "$WORK/agent.2.json"),$(FIRST_TEXT="$FIRST_TEXT" kept "$WORK/agent.3.json")"
if [[ "$got2 $got3" == "202:awaiting_approval 202:awaiting_approval 202:awaiting_approval" && "$texts" == "4 calls, 4 texts" && "$drafts" == "true,true" ]]; then
	pass "ai agent: 3 more executions asked for the tool with other texts ($texts): all still awaiting approval, the first draft kept"
else
	fail "ai agent: later executions answered [$got2 $got3] (want 3× 202:awaiting_approval); model asked [$texts] (want 4 calls, 4 texts); the first draft kept [$drafts] (want true,true)"
fi
n="$(sink_count "$AKEY")"
[[ "$n" == 0 ]] && pass "ai agent: nothing delivered before a person approved" ||
	fail "ai agent: $n deliveries of $AKEY before the approval (want 0)"
code="$(curl -sS --max-time 60 -o "$WORK/agent.approve.json" -w '%{http_code}' \
	"http://127.0.0.1:$N8N_PORT/webhook/idem-agent-approve?order=$AO")"
if [[ "$code" == 200 && "$(json "$WORK/agent.approve.json" 'd.status')" == approved ]]; then
	pass "ai agent: the template's approve link approved $AKEY in idem (200 approved)"
else
	fail "ai agent: the approve link answered $code $(head -c 300 "$WORK/agent.approve.json")"
fi
agent_delivered() { [[ "$(sink_count "$AKEY")" -ge 1 ]]; }
wait_for 60 "ai agent: idem delivers the approved draft" agent_delivered || true
sleep 2
n="$(sink_count "$AKEY")"
text="$(sink_text "$AKEY")"
if [[ "$n" == 1 && "$text" == "$FIRST_TEXT" ]]; then
	pass "ai agent: idem delivered the approved draft once, and it is the first execution's text"
else
	fail "ai agent: $n deliveries of $AKEY (want 1), text [$text] (want the first execution's [$FIRST_TEXT])"
fi
got="$(agent_run 1 "$WORK/agent.4.json")"
sleep 1
n="$(sink_count "$AKEY")"
if [[ "$got" == "200:completed" && "$n" == 1 ]]; then
	pass "ai agent: an execution after the delivery is told completed (replayed) and sends nothing ($n delivery)"
else
	fail "ai agent: the execution after delivery answered [$got] (want 200:completed), deliveries $n (want 1); $(head -c 400 "$WORK/agent.4.json")"
fi
ledger shop "$AKEY"
if grep -q 'sk-e2e-model-stub' "$WORK/idem.log" || grep -q "$TOKEN" "$WORK/model-stub.log"; then
	fail "ai agent: a credential reached a log it does not belong in"
fi
log "actions part took $(($(date +%s) - T_ACTIONS)) s"

log "done in $(($(date +%s) - T0)) s"
summary
[[ $FAILED -eq 0 ]]
