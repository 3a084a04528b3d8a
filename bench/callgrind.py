#!/usr/bin/env python3
"""Instructions per request of `idem serve`, counted by callgrind (one client).

Wall-clock rows on a shared machine move by a third between runs of one binary; the
instructions a request costs do not. This runs `idem serve` under
`valgrind --tool=callgrind` on a fresh SQLite file (or, with `--db URL`, on the
PostgreSQL database the URL names: an empty one of its own), drives it with one keep-alive HTTP/1.1
client, and for each kind of request:

  warm up (`--warmup` requests), `callgrind_control -z`, `--count` requests,
  `callgrind_control -d`, and divides the whole process's instruction count by `--count`.

Kinds (`--kinds`, comma-separated, in that order):

  pair       claim + complete of a fresh key (two requests)
  duplicate  claim of a key completed before the window (a replay)
  effect     POST …/effect of a fresh key to a loopback destination this script serves
             (HTTP/1.1 keep-alive, 64 B JSON answers)

The count includes what the server's timers do during the window (the outbox's and the
janitor's passes), so compare builds with the same `--count`. Needs valgrind.

    bench/callgrind.py target/release/idem --kinds pair,duplicate,effect --count 300
    bench/callgrind.py target/release/idem --kinds pair,effect --count 300 \
        --db postgres://postgres@127.0.0.1:5432/cg_run1   # created empty beforehand

On PostgreSQL the count is idem's process only, not the database's.

Prints one line per kind: `kind  instructions/request  (total, requests)`.
"""

import argparse
import glob
import http.client
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ANSWER = json.dumps({"id": "ch_1", "status": "succeeded", "amount": 1000, "cur": "eur"}).encode()


class Destination(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def post(self, path, body, expect):
        data = json.dumps(body).encode()
        self.conn.request("POST", path, data, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        out = r.read()
        if r.status not in expect:
            sys.exit(f"{path}: {r.status} {out[:300]!r}")
        return json.loads(out) if out else None

    def patch(self, path, body):
        data = json.dumps(body).encode()
        self.conn.request("PATCH", path, data, {"Content-Type": "application/json"})
        r = self.conn.getresponse()
        out = r.read()
        if r.status != 200:
            sys.exit(f"PATCH {path}: {r.status} {out[:300]!r}")


def wait_healthy(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            sys.exit(f"idem serve exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("idem serve did not become healthy")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("idem", help="the idem binary (a release build)")
    ap.add_argument("--kinds", default="pair,duplicate,effect")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--label", default="", help="printed before each line")
    ap.add_argument("--db", help="the store `idem serve` runs on (default: a fresh SQLite file); "
                    "for PostgreSQL give the URL of an empty database of its own")
    ap.add_argument("--keep", help="a folder to copy each kind's dump to (KIND.callgrind), "
                    "for callgrind_annotate")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not on PATH")

    work = tempfile.mkdtemp(prefix="idem-callgrind-")
    dest = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Destination)
    threading.Thread(target=dest.serve_forever, daemon=True).start()
    dest_addr = f"127.0.0.1:{dest.server_address[1]}"

    port = free_port()
    out = os.path.join(work, "callgrind.out")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p",
         args.idem, "serve", "--listen", f"127.0.0.1:{port}",
         "--db", args.db or os.path.join(work, "idem.db")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(port, proc)
        c = Client(port)
        ns = "/v1/namespaces/cg"
        c.post(f"{ns}/keys/setup/claim", {}, {201})  # creates the namespace
        c.patch(ns, {"egress": {"allow": [dest_addr]}})
        seq = [0]

        def fresh():
            seq[0] += 1
            return f"k{seq[0]}"

        payload = {"amount": 1000, "currency": "eur"}

        def pair():
            k = fresh()
            tok = c.post(f"{ns}/keys/{k}/claim", {"payload": payload}, {201})["token"]
            c.post(f"{ns}/keys/{k}/complete", {"token": tok, "result": {"charge": "ch_1"}}, {200})

        tok = c.post(f"{ns}/keys/dup2/claim", {"payload": payload}, {201})["token"]
        c.post(f"{ns}/keys/dup2/complete", {"token": tok, "result": {"charge": "ch_1"}}, {200})

        def duplicate():
            c.post(f"{ns}/keys/dup2/claim", {"payload": payload}, {200})

        def effect():
            body = {"request": {"method": "POST", "url": f"http://{dest_addr}/charge",
                                "body": payload}}
            c.post(f"{ns}/keys/{fresh()}/effect", body, {200, 201})

        kinds = {"pair": pair, "duplicate": duplicate, "effect": effect}
        for kind in args.kinds.split(","):
            run = kinds[kind]
            for _ in range(args.warmup):
                run()
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                           capture_output=True)
            for _ in range(args.count):
                run()
            for f in glob.glob(out + ".*"):
                os.remove(f)
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                           capture_output=True)
            total = 0
            for f in glob.glob(out + ".*"):
                with open(f) as fh:
                    for line in fh:
                        if line.startswith("summary:") or line.startswith("totals:"):
                            total = max(total, int(line.split()[1]))
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                for f in glob.glob(out + ".*"):
                    shutil.copy(f, os.path.join(args.keep, f"{kind}.callgrind"))
            per = total / args.count
            print(f"{args.label}{kind:10} {per / 1000:8.1f} k  ({total} instructions, "
                  f"{args.count} requests)", flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        dest.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
