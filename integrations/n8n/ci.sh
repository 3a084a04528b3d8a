#!/usr/bin/env bash
# Everything the n8n integration tests: unit tests + lint of the community node, static checks
# of the templates, then the real-n8n end-to-end test (which prints the final
# `N passed, M failed` line and sets the exit code).
#   bash integrations/n8n/ci.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
(
	cd "$HERE/node"
	if [[ ! -d node_modules || package-lock.json -nt node_modules/.package-lock.json ]]; then
		npm ci --ignore-scripts --no-audit --no-fund --fetch-retries=5 --loglevel=error
	fi
	npm test
	npm run lint --silent
)
node --test "$HERE/tools/"
exec bash "$HERE/e2e/run.sh"
