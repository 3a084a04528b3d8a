"""The official MCP Python SDK (`mcp` from PyPI) as a client of a running idem.

Usage: python_client.py BASE_URL

Starts a loopback destination that counts what it receives, declares an action in namespace
`agents` (egress allowed to the destination), then, as a client of each revision idem
serves (the stateless one found by `server/discover` or pinned, and the session revisions
through the initialize handshake), connects over Streamable HTTP, lists the tools and calls one:
first call delivered, a regenerated draft (same identity, other text) replayed with nothing
new sent, a missing identity refused as a tool error. Exits non-zero on the first mismatch and
prints one `N passed, N failed` line.
"""

import asyncio
import json
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mcp.client.session
from mcp import Client

BASE = sys.argv[1].rstrip("/")
RECEIVED = []


class Destination(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (the stdlib's name)
        length = int(self.headers.get("content-length", "0"))
        RECEIVED.append((self.path, json.loads(self.rfile.read(length) or b"null")))
        body = json.dumps({"id": f"msg_{len(RECEIVED)}"}).encode()
        self.send_response(201)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def admin(method, path, body):
    req = urllib.request.Request(
        BASE + path,
        method=method,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req) as r:
        return r.status


# (how the client connects, the handshake revision it offers, the revision expected)
CLIENTS = [
    ("auto", None, "2026-07-28"),  # server/discover probe, then the stateless revision
    ("2026-07-28", None, "2026-07-28"),  # pinned, no probe
    ("legacy", "2025-11-25", "2025-11-25"),  # initialize handshake, Mcp-Session-Id
    ("legacy", "2025-06-18", "2025-06-18"),
    ("legacy", "2025-03-26", "2025-03-26"),
]

passed, failed = 0, 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {what}: {detail}", flush=True)


async def run(mode, offer, want, order):
    label = f"{mode}/{want}"
    if offer:
        # The handshake offers the SDK's newest handshake revision; pointing it at another one
        # is how a client of that revision is played.
        mcp.client.session.LATEST_HANDSHAKE_VERSION = offer
    async with Client(f"{BASE}/mcp/agents", mode=mode) as client:
        check(f"{label} protocol version", client.protocol_version == want, client.protocol_version)
        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        check(f"{label} tools/list", names == ["send_followup"], names)
        if tools:
            a = tools[0].annotations
            check(
                f"{label} annotations",
                a is not None and a.destructive_hint and a.idempotent_hint and a.open_world_hint,
                a,
            )
        before = len(RECEIVED)
        args = {"order_id": order, "to": "ann@example.com", "text": "Hello Ann"}
        first = await client.call_tool("send_followup", args)
        sc = first.structured_content or {}
        check(f"{label} first call performed", sc.get("outcome") == "performed" and not first.is_error, first)
        check(f"{label} key", sc.get("key") == f"{order}:followup:v1", sc)
        check(f"{label} text", "Done" in first.content[0].text, first.content)
        again = await client.call_tool("send_followup", dict(args, text="Regenerated text"))
        sc = again.structured_content or {}
        check(f"{label} regenerated draft replayed", sc.get("outcome") == "completed" and sc.get("replayed") is True, again)
        check(f"{label} one delivery", len(RECEIVED) == before + 1, RECEIVED[before:])
        missing = await client.call_tool("send_followup", {"to": "ann@example.com", "text": "x"})
        sc = missing.structured_content or {}
        check(f"{label} missing identity", missing.is_error and sc.get("outcome") == "missing_identity_field", missing)
        check(f"{label} nothing more sent", len(RECEIVED) == before + 1, RECEIVED[before:])


def main():
    dest = ThreadingHTTPServer(("127.0.0.1", 0), Destination)
    threading.Thread(target=dest.serve_forever, daemon=True).start()
    port = dest.server_address[1]
    admin("PATCH", "/v1/namespaces/agents", {"egress": {"allow": [f"127.0.0.1:{port}"]}})
    admin(
        "PUT",
        "/v1/namespaces/agents/actions/send_followup",
        {
            "title": "Send the follow-up",
            "description": "Sends the follow-up e-mail of an order to its customer.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "to": {"type": "string"},
                    "text": {"type": "string"},
                },
                "required": ["order_id", "to", "text"],
            },
            "key": "{order_id}:followup:v1",
            "identity": ["order_id", "to"],
            "deliver": {
                "http": {
                    "method": "POST",
                    "url": f"http://127.0.0.1:{port}/send/{{{{order_id}}}}",
                    "body": {"to": "{{to}}", "text": "{{text}}"},
                }
            },
        },
    )
    for i, (mode, offer, want) in enumerate(CLIENTS):
        try:
            asyncio.run(run(mode, offer, want, f"ord-{i}"))
        except Exception as e:  # a client that cannot even connect is one failure, reported
            check(f"{mode}/{want} connects", False, repr(e))
    dest.shutdown()
    print(f"{passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
