#!/usr/bin/env bash
# The CI soak: 60 s of paced load (8 workers) on a fresh SQLite ledger with the history
# checker, then RSS, open files, p99 and janitor lag of the last window against the second
# one (the first is warm-up). Usage: .ci/soak.sh PATH/TO/idem. The 30-minute run: see docs/reliability.md.
set -euo pipefail
bin="$1"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
timeout 300 "$bin" bench --soak "${IDEM_SOAK:-60s}" --soak-window 10s --concurrency 8 \
  --json "$out/soak.json"
python3 - "$out/soak.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w = r["windows"]
assert len(w) >= 3, f"too few windows: {w}"
base, last = w[1], w[-1]
problems = []
if last["rss_mib"] > base["rss_mib"] * 1.5 + 16:
    problems.append(f"RSS grew {base['rss_mib']} -> {last['rss_mib']} MiB")
if last["open_files"] > base["open_files"] + 16:
    problems.append(f"open files grew {base['open_files']} -> {last['open_files']}")
if last["p99_ms"] > base["p99_ms"] * 3 + 50:
    problems.append(f"p99 grew {base['p99_ms']} -> {last['p99_ms']} ms")
lags = [x["janitor_lag_ms"] for x in w]
if any(l is None for l in lags):
    problems.append(f"a janitor-lag probe was not moved to review within its window: {lags}")
elif lags[-1] > max(lags[1], 200) * 3 + 1000:
    problems.append(f"janitor lag grew {lags[1]} -> {lags[-1]} ms")
v = r["verdict"]
for k in ("lost", "double_acquired", "bad_state", "ambiguous_not_in_review"):
    if v[k]:
        problems.append(f"{k}: {v[k]}")
print(f"soak: RSS {base['rss_mib']} -> {last['rss_mib']} MiB, open files "
      f"{base['open_files']} -> {last['open_files']}, p99 {base['p99_ms']} -> "
      f"{last['p99_ms']} ms, janitor lag {lags[1]} -> {lags[-1]} ms, "
      f"{v['acknowledged']} acknowledged writes checked")
if problems:
    sys.exit("soak failed: " + "; ".join(problems))
PY
