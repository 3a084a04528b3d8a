"""``@once`` against a real idem serve: one execution under concurrency, duplicates replay,
failures are reported with signals idem classifies, refusals raise the right exception."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import requests

import idem_ledger
from idem_ledger import (
    AsyncClient,
    Blocked,
    Client,
    InProgress,
    NeedsReview,
    PermanentFailure,
    once,
)

# --- destinations that misbehave ----------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a destination that hangs)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        s.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = s.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(s.getsockname()[1])
    stop.set()
    t.join()
    for c in held:
        c.close()
    s.close()


@pytest.fixture
def status_server() -> Iterator[str]:
    """Answers GET /<status>?retry_after=N with that status (and Retry-After when given)."""

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path, _, query = self.path.partition("?")
            self.send_response(int(path.strip("/")))
            if query.startswith("retry_after="):
                self.send_header("Retry-After", query.split("=", 1)[1])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: connecting is refused


def _record(server: Any, ns: str, key: str) -> dict[str, Any]:
    with Client(server.url) as c:
        return dict(c.get(ns, key)["record"])


# --- exactly once -------------------------------------------------------------------------


def test_twenty_concurrent_threads_run_the_function_once(server: Any, ns: str) -> None:
    runs: list[int] = []
    lock = threading.Lock()
    client = Client(server.url)

    @once(ns, key=lambda order: f"order-{order}:charge", client=client, wait_ms=10_000)
    def charge(order: int) -> dict[str, Any]:
        with lock:
            runs.append(order)
        time.sleep(0.5)
        return {"charge_id": f"ch_{order}"}

    results: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(20)

    def call() -> None:
        start.wait()
        try:
            r = charge(847)
            with lock:
                results.append(r)
        except BaseException as e:  # noqa: BLE001
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert runs == [847]
    assert results == [{"charge_id": "ch_847"}] * 20
    rec = _record(server, ns, "order-847:charge")
    assert rec["state"] == "completed"
    assert rec["attempt"] == 1
    client.close()


def test_twenty_concurrent_threads_without_waiting_get_in_progress(server: Any, ns: str) -> None:
    runs: list[int] = []
    client = Client(server.url)

    @once(ns, key="job-{n}", client=client)
    def job(n: int) -> int:
        runs.append(n)
        time.sleep(1.0)
        return n * 2

    outcomes: list[Any] = []
    start = threading.Barrier(20)
    lock = threading.Lock()

    def call() -> None:
        start.wait()
        try:
            r: Any = job(1)
        except InProgress as e:
            r = e.outcome
        with lock:
            outcomes.append(r)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs == [1]
    assert sorted(outcomes, key=str) == sorted([2] + ["in_flight"] * 19, key=str)
    client.close()


def test_twenty_concurrent_tasks_run_the_coroutine_once(server: Any, ns: str) -> None:
    runs: list[str] = []

    async def main() -> list[Any]:
        async with AsyncClient(server.url) as client:

            @once(ns, key=lambda msg: f"email:{msg}", client=client, wait_ms=10_000)
            async def send(msg: str) -> dict[str, str]:
                runs.append(msg)
                await asyncio.sleep(0.5)
                return {"message_id": f"m-{msg}"}

            return await asyncio.gather(*(send("welcome-42") for _ in range(20)))

    results = asyncio.run(main())
    assert runs == ["welcome-42"]
    assert results == [{"message_id": "m-welcome-42"}] * 20
    assert _record(server, ns, "email:welcome-42")["state"] == "completed"


def test_heartbeats_keep_a_long_run_past_its_lease(server: Any, ns: str) -> None:
    """A 300 ms lease, a 1.2 s function: without heartbeats a second caller would acquire."""
    client = Client(server.url)
    runs: list[int] = []

    @once(ns, key="long", client=client, lease_ms=300)
    def long_job() -> str:
        runs.append(1)
        time.sleep(1.2)
        return "done"

    t = threading.Thread(target=long_job)
    t.start()
    time.sleep(0.7)
    with pytest.raises(InProgress) as busy:
        long_job()
    assert busy.value.outcome == "in_flight"
    t.join()
    assert runs == [1]
    rec = _record(server, ns, "long")
    assert rec["state"] == "completed" and rec["attempt"] == 1
    client.close()


def test_async_heartbeats_keep_a_long_run_past_its_lease(server: Any, ns: str) -> None:
    runs: list[int] = []

    async def main() -> tuple[Any, str]:
        async with AsyncClient(server.url) as client:

            @once(ns, key="long-async", client=client, lease_ms=300)
            async def long_job() -> str:
                runs.append(1)
                await asyncio.sleep(1.2)
                return "done"

            first = asyncio.create_task(long_job())
            await asyncio.sleep(0.7)
            try:
                await long_job()
                second = "ran"
            except InProgress as e:
                second = e.outcome
            return await first, second

    assert asyncio.run(main()) == ("done", "in_flight")
    assert runs == [1]


# --- duplicates -------------------------------------------------------------------------


def test_duplicate_returns_the_stored_result_without_running(server: Any, ns: str) -> None:
    runs: list[int] = []

    @once(ns, key=lambda n: f"invoice-{n}", client=Client(server.url))
    def invoice(n: int) -> dict[str, Any]:
        runs.append(n)
        return {"invoice": n, "at": "now"}

    assert invoice(7) == {"invoice": 7, "at": "now"}
    assert invoice(7) == {"invoice": 7, "at": "now"}
    assert invoice(7) == {"invoice": 7, "at": "now"}
    assert runs == [7]
    with Client(server.url) as c:
        events = [e["type"] for e in c.get(ns, "invoice-7")["events"]]
    assert events.count("duplicate_hit") == 2


def test_async_duplicate_returns_the_stored_result(server: Any, ns: str) -> None:
    runs: list[int] = []

    async def main() -> list[Any]:
        async with AsyncClient(server.url) as client:

            @once(ns, key="a-{n}", client=client)
            async def f(n: int) -> list[int]:
                runs.append(n)
                return [n, n]

            return [await f(3), await f(3)]

    assert asyncio.run(main()) == [[3, 3], [3, 3]]
    assert runs == [3]


def test_default_client_comes_from_the_environment(
    server: Any, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEM_URL", server.url)
    monkeypatch.delenv("IDEM_TOKEN", raising=False)

    @once(ns, key="env")
    def f() -> str:
        return "from env"

    assert f() == "from env"
    assert _record(server, ns, "env")["result"] == "from env"


def test_changed_payload_is_blocked_as_conflict(server: Any, ns: str) -> None:
    @once(ns, key="o-{order}", payload=lambda order, amount: {"amount": amount},
          client=Client(server.url))
    def charge(order: int, amount: int) -> int:
        return amount

    assert charge(1, 100) == 100
    assert charge(1, 100) == 100
    with pytest.raises(Blocked) as e:
        charge(1, 250)
    assert e.value.outcome == "conflict"


# --- failures ---------------------------------------------------------------------------


def test_timeout_after_sending_goes_to_review(server: Any, ns: str, silent_port: int) -> None:
    runs: list[int] = []

    @once(ns, key="pay-1", client=Client(server.url))
    def pay() -> int:
        runs.append(1)
        httpx.post(f"http://127.0.0.1:{silent_port}/charge", json={"amount": 5}, timeout=0.3)
        return 1

    with pytest.raises(httpx.ReadTimeout):
        pay()
    rec = _record(server, ns, "pay-1")
    assert rec["state"] == "needs_review"
    assert rec["last_error"]["category"] == "timeout"
    with pytest.raises(NeedsReview) as e:
        pay()
    assert e.value.outcome == "needs_review"
    assert runs == [1]


def test_async_timeout_after_sending_goes_to_review(
    server: Any, ns: str, silent_port: int
) -> None:
    async def main() -> str:
        async with AsyncClient(server.url) as client:

            @once(ns, key="apay", client=client)
            async def pay() -> None:
                async with httpx.AsyncClient(timeout=0.3) as h:
                    await h.post(f"http://127.0.0.1:{silent_port}/charge", json={})

            try:
                await pay()
            except httpx.ReadTimeout:
                pass
            try:
                await pay()
            except NeedsReview as e:
                return e.outcome
            return "ran again"

    assert asyncio.run(main()) == "needs_review"
    assert _record(server, ns, "apay")["state"] == "needs_review"


def test_requests_read_timeout_goes_to_review(server: Any, ns: str, silent_port: int) -> None:
    @once(ns, key="rq", client=Client(server.url))
    def call() -> None:
        requests.post(f"http://127.0.0.1:{silent_port}/", timeout=0.3)

    with pytest.raises(requests.exceptions.ReadTimeout):
        call()
    assert _record(server, ns, "rq")["state"] == "needs_review"


def test_connection_refused_is_retryable(server: Any, ns: str) -> None:
    port = _refused_port()
    # A long backoff, so the next call certainly falls before not_before (full jitter).
    with Client(server.url) as c:
        c.patch_namespace(ns, {"retry": {"base_ms": 3_600_000, "max_ms": 3_600_000}})

    @once(ns, key="refused", client=Client(server.url))
    def call() -> None:
        httpx.post(f"http://127.0.0.1:{port}/", timeout=2)

    with pytest.raises(httpx.ConnectError):
        call()
    rec = _record(server, ns, "refused")
    assert rec["state"] == "failed_retryable"
    assert rec["last_error"]["category"] == "connection"
    # Before not_before the next call is told to back off, and does not run.
    with pytest.raises(InProgress) as e:
        call()
    assert e.value.outcome == "backoff"
    assert e.value.retry_after_ms is not None and e.value.retry_after_ms > 0


def test_requests_connection_refused_is_retryable(server: Any, ns: str) -> None:
    port = _refused_port()

    @once(ns, key="rq-refused", client=Client(server.url))
    def call() -> None:
        requests.get(f"http://127.0.0.1:{port}/", timeout=2)

    with pytest.raises(requests.exceptions.ConnectionError):
        call()
    assert _record(server, ns, "rq-refused")["state"] == "failed_retryable"


def test_http_503_with_retry_after_backs_off_at_least_that_long(
    server: Any, ns: str, status_server: str
) -> None:
    @once(ns, key="busy-dest", client=Client(server.url))
    def call() -> None:
        httpx.get(f"{status_server}/503?retry_after=120").raise_for_status()

    before = datetime.now(timezone.utc)
    with pytest.raises(httpx.HTTPStatusError):
        call()
    rec = _record(server, ns, "busy-dest")
    assert rec["state"] == "failed_retryable"
    assert rec["last_error"]["http_status"] == 503
    not_before = datetime.fromisoformat(rec["not_before"].replace("Z", "+00:00"))
    assert (not_before - before).total_seconds() >= 119


def test_http_500_is_ambiguous_and_400_permanent(
    server: Any, ns: str, status_server: str
) -> None:
    @once(ns, key="s-{status}", client=Client(server.url))
    def call(status: int) -> None:
        requests.get(f"{status_server}/{status}", timeout=5).raise_for_status()

    for status in (500, 400):
        with pytest.raises(requests.exceptions.HTTPError):
            call(status)
    assert _record(server, ns, "s-500")["state"] == "needs_review"
    assert _record(server, ns, "s-400")["state"] == "failed_permanent"
    with pytest.raises(Blocked) as e:
        call(400)
    assert e.value.outcome == "failed_permanent"


def test_wrapped_http_error_is_classified_by_its_cause(
    server: Any, ns: str, status_server: str
) -> None:
    class ChargeFailed(Exception):
        pass

    @once(ns, key="wrapped", client=Client(server.url))
    def call() -> None:
        try:
            httpx.get(f"{status_server}/429").raise_for_status()
        except httpx.HTTPStatusError as e:
            raise ChargeFailed("card service said no") from e

    with pytest.raises(ChargeFailed):
        call()
    rec = _record(server, ns, "wrapped")
    assert rec["state"] == "failed_retryable"
    assert rec["last_error"]["http_status"] == 429


def test_unknown_exception_goes_to_review_and_marker_exceptions_decide(
    server: Any, ns: str
) -> None:
    @once(ns, key="k-{what}", client=Client(server.url))
    def call(what: str) -> None:
        if what == "plain":
            raise RuntimeError("something odd")
        raise PermanentFailure("customer has no card on file", category="business")

    with pytest.raises(RuntimeError):
        call("plain")
    with pytest.raises(PermanentFailure):
        call("marked")
    assert _record(server, ns, "k-plain")["state"] == "needs_review"
    rec = _record(server, ns, "k-marked")
    assert rec["state"] == "failed_permanent"
    assert rec["last_error"]["category"] == "business"


def test_non_json_result_completes_and_says_so(server: Any, ns: str) -> None:
    runs: list[int] = []

    @once(ns, key="obj", client=Client(server.url))
    def call() -> object:
        runs.append(1)
        return object()

    with pytest.raises(TypeError, match="JSON-serializable"):
        call()
    assert _record(server, ns, "obj")["state"] == "completed"
    assert call() is None  # completed: never run again
    assert runs == [1]


def test_exports_are_importable() -> None:
    for name in idem_ledger.__all__:
        assert getattr(idem_ledger, name) is not None


def test_a_resumed_attempt_reuses_the_prepared_payload(server: Any, ns: str) -> None:
    """The AI-draft pattern: attempt 1 saves its draft with prepare and fails before sending;
    attempt 2 is resumed with the saved draft instead of writing a new one."""
    client = Client(server.url)
    client.patch_namespace(ns, {"retry": {"base_ms": 1, "max_ms": 1}})
    drafts: list[str] = []
    seen: list[tuple[int, bool, Any]] = []

    @once(ns, key="followup-{lead}", client=client)
    def follow_up(lead: int) -> str:
        a = idem_ledger.current_attempt()
        assert a is not None
        seen.append((a.attempt, a.resumed, a.prepared_payload))
        draft = a.prepared_payload
        if draft is None:
            draft = {"text": f"draft {len(drafts) + 1}"}
            drafts.append(draft["text"])
            client.prepare(ns, f"followup-{lead}", a.token, draft)
            raise idem_ledger.RetryableFailure("mail server not reachable", category="connection",
                                               sent=False)
        return f"sent {draft['text']}"

    with pytest.raises(idem_ledger.RetryableFailure):
        follow_up(5)
    time.sleep(0.05)
    assert follow_up(5) == "sent draft 1"
    assert drafts == ["draft 1"]
    assert seen == [(1, False, None), (2, True, {"text": "draft 1"})]
    assert idem_ledger.current_attempt() is None
    client.close()
