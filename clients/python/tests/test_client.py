"""The client's operations against a real idem serve, and the errors it raises (with the
problem+json ``code``)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from idem_ledger import (
    ApiError,
    AsyncClient,
    BadRequest,
    Client,
    Forbidden,
    IdemUnavailable,
    InvalidTransition,
    LeaseLost,
    NotFound,
    ResultMismatch,
    Unauthorized,
)


def test_claim_complete_replay(server: Any, ns: str) -> None:
    with Client(server.url) as c:
        first = c.claim(ns, "evt_1:charge", payload={"amount": 5}, owner="exec-1")
        assert first["outcome"] == "acquired"
        assert first["resumed"] is False
        assert first["record"] is not None and first["record"]["state"] == "processing"
        token = first["token"]
        assert isinstance(token, str)
        assert c.heartbeat(ns, "evt_1:charge", token, lease_ms=60_000)["state"] == "processing"
        done = c.complete(ns, "evt_1:charge", token, {"charge": "ch_1"}, external_ref="ch_1")
        assert done["state"] == "completed"
        again = c.claim(ns, "evt_1:charge", payload={"amount": 5})
        assert again["outcome"] == "completed"
        assert again["record"] is not None
        assert again["record"]["result"] == {"charge": "ch_1"}
        assert again["record"]["external_ref"] == "ch_1"
        assert "token" not in again
        conflict = c.claim(ns, "evt_1:charge", payload={"amount": 6})
        assert conflict["outcome"] == "conflict"
        got = c.get(ns, "evt_1:charge")
        types = [e["type"] for e in got["events"]]
        assert types[0] == "acquired"
        assert "completed" in types and "duplicate_hit" in types


def test_keys_with_reserved_characters_are_encoded(server: Any, ns: str) -> None:
    key = "a/b?c#d%e:f"
    with Client(server.url) as c:
        ans = c.claim(ns, key)
        assert ans["outcome"] == "acquired"
        assert ans["record"] is not None and ans["record"]["key"] == key
        assert c.get(ns, key)["record"]["key"] == key


def test_fail_answers_the_decision(server: Any, ns: str) -> None:
    with Client(server.url) as c:
        token = str(c.claim(ns, "k")["token"])
        ans = c.fail(ns, "k", token, http_status=503, retry_after=30, category="http",
                     message="busy")
        assert ans["state"] == "failed_retryable"
        assert ans["class"] == "retryable"
        assert ans["retry"]["allowed"] is True
        assert ans["retry"]["attempt"] == 1


def test_prepare_then_resume_returns_the_prepared_payload(server: Any, ns: str) -> None:
    with Client(server.url) as c:
        token = str(c.claim(ns, "draft", lease_ms=200)["token"])
        assert c.prepare(ns, "draft", token, {"text": "hello"})["state"] == "prepared"
        import time

        time.sleep(0.4)
        again = c.claim(ns, "draft")
        assert again["outcome"] == "acquired" and again["resumed"] is True
        assert again["record"] is not None
        assert again["record"]["prepared_payload"] == {"text": "hello"}


def test_derive_key_and_whoami_open(server: Any) -> None:
    with Client(server.url) as c:
        key = c.derive_key({"id": "evt_9", "type": "charge"}, ["/id", "/type"], prefix="stripe")
        assert key == "stripe:evt_9:charge"
        who = c.whoami()
        assert who["role"] == "admin" and who["namespace"] == "*"


@pytest.fixture
def destination() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A destination for effects: records what it got, answers 201 with JSON."""
    got: list[dict[str, Any]] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length", "0"))
            got.append(
                {
                    "body": json.loads(self.rfile.read(n) or b"null"),
                    "key": self.headers.get("Idempotency-Key"),
                }
            )
            out = json.dumps({"id": f"obj_{len(got)}"}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"127.0.0.1:{srv.server_address[1]}", got
    srv.shutdown()
    srv.server_close()


def test_effect_sends_once_and_replays(
    server: Any, ns: str, destination: tuple[str, list[dict[str, Any]]]
) -> None:
    host, got = destination
    with Client(server.url) as c:
        c.patch_namespace(ns, {"egress": {"allow": [host]}})
        req = {"method": "POST", "url": f"http://{host}/v1/orders", "body": {"sku": "A1"}}
        first = c.effect(ns, "order-1", req)  # type: ignore[arg-type]
        assert first["outcome"] == "performed"
        assert first["response"] is not None and first["response"]["status"] == 201
        assert first["response"]["body"] == {"id": "obj_1"}
        second = c.effect(ns, "order-1", req)  # type: ignore[arg-type]
        assert second["outcome"] == "completed"
        assert second["response"] is not None and second["response"]["body"] == {"id": "obj_1"}
    assert got == [{"body": {"sku": "A1"}, "key": "order-1"}]


def test_async_client_operations(server: Any, ns: str) -> None:
    async def main() -> tuple[str, str, str]:
        async with AsyncClient(server.url) as c:
            a = await c.claim(ns, "x")
            token = str(a["token"])
            await c.heartbeat(ns, "x", token)
            done = await c.complete(ns, "x", token, [1, 2])
            rec = await c.get(ns, "x")
            return a["outcome"], done["state"], json.dumps(rec["record"]["result"])

    assert asyncio.run(main()) == ("acquired", "completed", "[1, 2]")


# --- errors carry codes -------------------------------------------------------------------


def test_errors_carry_the_problem_code(server: Any, ns: str) -> None:
    with Client(server.url) as c:
        with pytest.raises(BadRequest) as e:
            c.claim(ns, "has space")
        assert (e.value.status, e.value.code) == (400, "invalid_key")

        with pytest.raises(BadRequest) as e:
            c.claim("bad namespace!", "k")
        assert e.value.code == "invalid_namespace"

        with pytest.raises(BadRequest) as e:
            c.claim(ns, "both", payload={"a": 1}, fingerprint="0" * 64)
        assert (e.value.status, e.value.code) == (422, "invalid_field")

        with pytest.raises(NotFound) as e:
            c.get(ns, "never-seen")
        assert (e.value.status, e.value.code) == (404, "not_found")

        with pytest.raises(BadRequest) as e:
            c.derive_key({"id": 1}, ["/missing"])
        assert e.value.code == "missing_identity_field"
        assert e.value.field is not None and "missing" in (e.value.field + e.value.detail)

        token = str(c.claim(ns, "k", lease_ms=100)["token"])
        with pytest.raises(LeaseLost) as e:
            c.complete(ns, "k", "made-up-token")
        assert (e.value.status, e.value.code) == (409, "lease_lost")

        c.complete(ns, "k", token, {"v": 1})
        c.complete(ns, "k", token, {"v": 1})  # the same complete again: a no-op
        with pytest.raises(ResultMismatch) as e:
            c.complete(ns, "k", token, {"v": 2})
        assert e.value.code == "result_mismatch"

        t2 = str(c.claim(ns, "k2")["token"])
        c.fail(ns, "k2", t2, kind="permanent", category="business", message="no")
        with pytest.raises(InvalidTransition) as e:
            c.fail(ns, "k2", t2, kind="permanent", category="business")
        assert e.value.code == "invalid_transition"

        t3 = str(c.claim(ns, "k3")["token"])
        with pytest.raises(BadRequest) as e:
            c.fail(ns, "k3", t3, category="mystery")
        assert e.value.code == "invalid_field"
        assert isinstance(e.value, ApiError)


def test_auth_errors_and_whoami(auth_server: Any) -> None:
    worker = auth_server.token("shop", "worker")
    import time

    time.sleep(1.2)  # the server notices the first token within a second
    with Client(auth_server.url) as anon:
        with pytest.raises(Unauthorized) as e:
            anon.claim("shop", "k")
        assert (e.value.status, e.value.code) == (401, "unauthorized")
    with Client(auth_server.url, token="not-a-token") as bad:
        with pytest.raises(Unauthorized):
            bad.whoami()
    with Client(auth_server.url, token=worker) as c:
        who = c.whoami()
        assert who["role"] == "worker" and who["namespace"] == "shop"
        assert isinstance(who.get("token_id"), int)
        assert c.claim("shop", "k")["outcome"] == "acquired"
        with pytest.raises(Forbidden) as e:
            c.claim("other", "k")
        assert (e.value.status, e.value.code) == (403, "forbidden")
        with pytest.raises(Forbidden):
            c.list("shop")  # operator only
        assert worker not in repr(c)


def test_token_from_the_environment(auth_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    op = auth_server.token("*", "operator")
    monkeypatch.setenv("IDEM_URL", auth_server.url)
    monkeypatch.setenv("IDEM_TOKEN", op)
    import time

    for _ in range(30):
        try:
            with Client() as c:
                assert c.whoami()["role"] == "operator"
            break
        except Unauthorized:
            time.sleep(0.1)
    else:
        pytest.fail("the new token was never accepted")


def test_unreachable_server_is_idem_unavailable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", timeout=2) as c:
        with pytest.raises(IdemUnavailable):
            c.whoami()


def test_a_refused_request_does_not_break_the_next_one_on_the_same_connection(
    server: Any, ns: str
) -> None:
    """idem closes a keep-alive connection after refusing a request whose body it did not
    read (a bad key): the next call on the pooled connection must still get its answer."""
    with Client(server.url) as c:
        for i in range(100):
            with pytest.raises(BadRequest):
                c.claim(ns, "has space", payload={"n": i})
            assert c.claim(ns, f"ok-{i}")["outcome"] == "acquired"


def test_every_claim_and_effect_option_is_accepted(
    server: Any, ns: str, destination: tuple[str, list[dict[str, Any]]]
) -> None:
    host, got = destination
    with Client(server.url) as c:
        ans = c.claim(ns, "opts", fingerprint="ab" * 32, owner="o", lease_ms=5000,
                      correlation_id="corr-1", lease_expiry="review", wait_ms=0)
        assert ans["outcome"] == "acquired"
        assert ans["record"] is not None
        assert ans["record"]["correlation_id"] == "corr-1"
        assert ans["record"]["fingerprint"] == "ab" * 32
        token = str(ans["token"])
        c.fail(ns, "opts", token, kind="retryable", http_status=503, retry_after="5", sent=False,
               category="http", message="m", cost={"tokens": 10, "usd": 0.5})
        assert c.get(ns, "opts")["record"]["cost"]["tokens"] == 10

        c.patch_namespace(ns, {"egress": {"allow": [host]}})
        eff = c.effect(ns, "eff-opts", {"method": "POST", "url": f"http://{host}/x", "body": [1]},
                       idempotency_header=None, timeout_ms=5000, success=[201],
                       destination_idempotent=False, owner="o", correlation_id="c",
                       wait_ms=0, lease_ms=10_000, cost={"tokens": 1})
        assert eff["outcome"] == "performed"
    assert got == [{"body": [1], "key": None}]


def test_both_clients_have_the_same_operations() -> None:
    def ops(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("_")}

    assert ops(Client) - {"close"} == ops(AsyncClient) - {"aclose"}


def test_paused_namespace_answers_paused_and_resume_lifts_it(server: Any, ns: str) -> None:
    async def main() -> tuple[str, str]:
        async with AsyncClient(server.url) as c:
            await c.pause(ns, "maintenance")
            paused = (await c.claim(ns, "k"))["outcome"]
            await c.resume(ns)
            return paused, (await c.claim(ns, "k"))["outcome"]

    assert asyncio.run(main()) == ("paused", "acquired")
