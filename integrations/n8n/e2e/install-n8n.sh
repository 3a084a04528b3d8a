#!/usr/bin/env bash
# Installs n8n (pinned) from npm into a cache folder OUTSIDE the clone, once.
# Later runs find the stamp file and return at once.
#
# Facts this follows: with Node 20 the newest n8n that runs is 2.8.4; the newest 2.x needs
# Node 24 (put node24.sh's folder first on PATH; the Node headers then come from that package);
# n8n-nodes-base's xlsx dependency points at an unreachable CDN (override to 0.18.5 from npm);
# several install scripts download from the internet, so install with --ignore-scripts and
# build the one native module n8n needs (sqlite3) with npm's own node-gyp afterwards.
set -euo pipefail

N8N_VERSION="${IDEM_N8N_VERSION:-2.8.4}"
CACHE="${IDEM_N8N_CACHE:-$HOME/.cache/idem-n8n}"
DIR="$CACHE/n8n-$N8N_VERSION"
STAMP="$DIR/.installed"

if [[ -f "$STAMP" && -x "$DIR/node_modules/.bin/n8n" ]]; then
  echo "n8n $N8N_VERSION already installed in $DIR"
  exit 0
fi

mkdir -p "$DIR"
cd "$DIR"
# One installer at a time (CI and a developer may race on the same cache).
exec 9>"$CACHE/.install.lock"
if ! flock -w 1800 9; then
  echo "install-n8n: timed out waiting for another installer" >&2
  exit 1
fi
if [[ -f "$STAMP" && -x "$DIR/node_modules/.bin/n8n" ]]; then
  echo "n8n $N8N_VERSION already installed in $DIR"
  exit 0
fi

cat > package.json <<JSON
{
  "name": "idem-n8n-e2e-runtime",
  "private": true,
  "version": "0.0.0",
  "dependencies": { "n8n": "$N8N_VERSION" },
  "overrides": { "xlsx": "0.18.5" }
}
JSON

echo "install-n8n: npm install n8n@$N8N_VERSION into $DIR (first run only, ~5 min, ~2.3 GB)"
start=$(date +%s)
npm install --ignore-scripts --no-audit --no-fund --loglevel=error \
  --fetch-retries=5 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=60000 \
  --fetch-timeout=300000

# Build sqlite3 (the only native module n8n needs here) with npm's bundled node-gyp.
NODE_GYP=""
for cand in \
  "$(dirname "$(readlink -f "$(command -v npm)")")/../node_modules/node-gyp/bin/node-gyp.js" \
  /usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js \
  /usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js; do
  if [[ -f "$cand" ]]; then NODE_GYP="$cand"; break; fi
done
if [[ -z "$NODE_GYP" ]]; then
  echo "install-n8n: npm's node-gyp not found" >&2
  exit 1
fi
# Node headers: the distro's /usr/include/node (nodedir=/usr) or a local Node's own prefix.
NODEDIR="${IDEM_NODEDIR:-}"
if [[ -z "$NODEDIR" ]]; then
  prefix="$(dirname "$(dirname "$(readlink -f "$(command -v node)")")")"
  for d in "$prefix" /usr /usr/local; do
    if [[ -f "$d/include/node/node.h" ]]; then NODEDIR="$d"; break; fi
  done
fi
if [[ -z "$NODEDIR" ]]; then
  echo "install-n8n: Node headers (include/node/node.h) not found; set IDEM_NODEDIR" >&2
  exit 1
fi

mapfile -t SQLITE_DIRS < <(find node_modules -type d -name sqlite3 -path '*node_modules/sqlite3' \
  -exec test -f '{}/binding.gyp' ';' -print)
if [[ ${#SQLITE_DIRS[@]} -eq 0 ]]; then
  echo "install-n8n: sqlite3 module not found in the install" >&2
  exit 1
fi
for d in "${SQLITE_DIRS[@]}"; do
  echo "install-n8n: building $d (nodedir $NODEDIR)"
  (cd "$d" && node "$NODE_GYP" rebuild --release --nodedir="$NODEDIR" -j 2 >/dev/null)
done

# Sanity: n8n starts far enough to print its version.
./node_modules/.bin/n8n --version
touch "$STAMP"
echo "install-n8n: done in $(( $(date +%s) - start ))s"
