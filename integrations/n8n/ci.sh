#!/usr/bin/env bash
# Everything the n8n integration tests: the community node's build (n8n-node build), unit
# tests and lint (n8n-node lint: n8n's community-node rules, strict mode, no warnings allowed),
# static checks of the templates, then the real-n8n end-to-end test (which prints the final
# `N passed, M failed` line and sets the exit code).
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
node --test "$HERE/tools/"
exec bash "$HERE/e2e/run.sh"
