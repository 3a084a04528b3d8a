#!/usr/bin/env python3
"""A/B of two `idem` builds, row by row: each row of `idem bench` is run by both builds in
turn, several rounds, the order flipping every round (A B, B A, A B, …), so that a machine
whose speed drifts over minutes (a shared host) moves both sides of a row alike. Whole-table
runs in turn leave that drift between the two sides of every row.

Prints, per row: each build's ops/s per round, the median of the per-round ratios B ÷ A and
their range. `bare` rows run the bench's own SQL (no idem): their ratios show what the
machine alone does to a row. Not a timed test: a measurement to read.

Usage:
  bench/ab-rows.py A_BIN B_BIN [--rounds 3] [--duration 3s] [--backends sqlite,postgres]
      [--modes bare,library,http] [--workloads first_time_pair,duplicate]
      [--concurrency 1,16,64] [--db URL] [--json OUT --labels COMMIT_A,COMMIT_B]

`--db` is the PostgreSQL server both builds use (a fresh database per run, as `idem bench`
makes it); the default holds the transport equal across builds (`sslmode=disable`).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run_row(binary, backend, mode, workload, conc, duration, db):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        cmd = [
            binary, "bench", "--backend", backend, "--modes", mode, "--workloads", workload,
            "--concurrency", str(conc), "--duration", duration, "--json", out,
        ]
        if backend == "postgres":
            cmd += ["--db", db]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
        with open(out) as f:
            rows = json.load(f)["rows"]
        (row,) = [r for r in rows if r["mode"] == mode and r["workload"] == workload]
        return row["ops_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", default="3s")
    p.add_argument("--backends", default="sqlite,postgres")
    p.add_argument("--modes", default="bare,library,http")
    p.add_argument("--workloads", default="first_time_pair,duplicate")
    p.add_argument("--concurrency", default="1,16,64")
    p.add_argument(
        "--db", default="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
    )
    p.add_argument("--json")
    p.add_argument("--labels", default="A,B", help="names of the two builds in --json (commits)")
    args = p.parse_args()
    label_a, label_b = args.labels.split(",")

    results = []
    print("| backend | mode | workload | conc | A ops/s by round | B ops/s by round "
          "| B ÷ A median | B ÷ A range |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for backend in args.backends.split(","):
        for workload in args.workloads.split(","):
            for conc in [int(c) for c in args.concurrency.split(",")]:
                for mode in args.modes.split(","):
                    a, b = [], []
                    for r in range(args.rounds):
                        order = [("a", args.a), ("b", args.b)]
                        if r % 2 == 1:
                            order.reverse()
                        for side, binary in order:
                            ops = run_row(binary, backend, mode, workload, conc,
                                          args.duration, args.db)
                            (a if side == "a" else b).append(ops)
                    ratios = [y / x for x, y in zip(a, b) if x > 0]
                    med = statistics.median(ratios) if ratios else float("nan")
                    row = dict(backend=backend, mode=mode, workload=workload,
                               concurrency=conc, a=a, b=b, ratios=ratios, median=med)
                    results.append(row)
                    fmt = lambda xs: " / ".join(f"{x:,.0f}" for x in xs)
                    print(f"| {backend} | {mode} | {workload} | {conc} | {fmt(a)} | {fmt(b)} "
                          f"| {med:.2f} | {min(ratios):.2f}–{max(ratios):.2f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(a=label_a, b=label_b, rounds=args.rounds, duration=args.duration,
                           rows=results), f, indent=1)


if __name__ == "__main__":
    main()
