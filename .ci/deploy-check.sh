#!/usr/bin/env bash
# Checks the files under deploy/ that no Rust test reads as a whole:
# - the Prometheus rules: `promtool check rules` and the rule unit tests (alerts_test.yml);
# - the Grafana dashboard: valid JSON, and every panel query parses as PromQL (promtool
#   checks them as recording rules after the dashboard variables are filled in);
# - the systemd unit: `systemd-analyze verify` with no warning, and its exposure score;
# - the compose file: `docker compose config` (or docker-compose) when available, else a
#   YAML parse.
# promtool comes from Debian's `prometheus` package, installed when missing.
# (That every idem_* name in the dashboard and rules is exported, and that every exported
# metric has a panel, is a Rust test: crates/idem-server/tests/it/deploy.rs.)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  echo "promtool missing: installing Debian's prometheus package"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q prometheus >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q prometheus >/dev/null; }
fi

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "-- promtool check rules"
promtool check rules deploy/prometheus/alerts.yml
echo "-- promtool test rules"
promtool test rules deploy/prometheus/alerts_test.yml

echo "-- dashboard queries"
python3 - deploy/grafana/idem.json "$TMP/dashboard-rules.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
exprs = []
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            if "expr" in t:
                exprs.append((p["title"], t["expr"]))
        walk(p.get("panels", []))
walk(dash["panels"])
assert len(exprs) >= 15, exprs
ids = [p["id"] for p in dash["panels"]]
assert len(ids) == len(set(ids)), "panel ids are unique"
fill = {"$__rate_interval": "5m", "$job": ".*", "$instance": ".*", "$route": ".*", "$source": ".*"}
rules = []
for i, (title, e) in enumerate(exprs):
    for k, v in fill.items():
        e = e.replace(k, v)
    assert "$" not in e, f"unknown variable in {title}: {e}"
    rules.append({"record": f"dashboard:panel_{i}", "expr": e})
json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[2], "w"))
print(f"{len(exprs)} panel queries")
PY
promtool check rules "$TMP/dashboard-rules.yml"

echo "-- systemd unit"
if command -v systemd-analyze >/dev/null; then
  # (--threshold is in tenths: 20 = an exposure of 2.0.)
  # Verified with a stand-in for the binary (the unit names /usr/local/bin/idem, which need
  # not exist here); any warning about the unit fails the check.
  sed 's|/usr/local/bin/idem|/bin/true|' deploy/systemd/idem.service >"$TMP/idem.service"
  systemd-analyze verify "$TMP/idem.service" >"$TMP/verify.log" 2>&1 || { cat "$TMP/verify.log"; exit 1; }
  if grep -q 'idem.service' "$TMP/verify.log"; then
    cat "$TMP/verify.log"
    echo "FAIL: systemd-analyze verify warns about the unit" >&2
    exit 1
  fi
  systemd-analyze security --offline=yes --threshold=20 "$TMP/idem.service" | tail -n 1
else
  echo "skipped: no systemd-analyze on this machine"
fi

echo "-- compose file"
# Checked with the example settings; without them compose must refuse (the passwords are
# mandatory, never defaulted).
COMPOSE=""
if docker compose version >/dev/null 2>&1; then
  COMPOSE="docker compose"
elif command -v docker-compose >/dev/null; then
  COMPOSE="docker-compose"
fi
if [ -n "$COMPOSE" ]; then
  $COMPOSE --env-file deploy/compose/example.env -f deploy/compose/compose.yml config -q
  if env -u POSTGRES_PASSWORD -u IDEM_DB_PASSWORD -u N8N_ENCRYPTION_KEY \
    $COMPOSE --env-file /dev/null -f deploy/compose/compose.yml config -q >/dev/null 2>&1; then
    echo "FAIL: compose.yml accepts missing passwords" >&2
    exit 1
  fi
  echo "$COMPOSE config: ok"
else
  python3 - deploy/compose/compose.yml <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
services = c["services"]
assert {"idem", "postgres", "n8n"} <= set(services), services
for name, s in services.items():
    assert "image" in s or "build" in s, name
print("compose.yml parses (no docker compose here for `docker compose config`):", ", ".join(services))
PY
fi
