"""``@once``: run a function at most once per key, across processes, through the ledger.

One call of the decorated function is one claim:

- ``acquired`` (fresh or resumed): the function runs while the lease is kept alive in the
  background (a thread for a plain function, a task for a coroutine) at a third of the lease;
  its return value is stored with ``complete`` and returned.
- ``completed``: the function does not run; the stored result is returned (a duplicate).
- an exception from the function is reported with ``fail`` — its signals (HTTP status,
  ``Retry-After``, timeout, connection refused) mapped so idem classifies it, see
  ``signals`` — and then re-raised unchanged.
- every other outcome raises without running: ``InProgress`` (in flight, backing off,
  awaiting approval, paused, limited), ``NeedsReview``, ``Blocked`` (conflict,
  failed_permanent), ``ResultExpired``.

What it must never do: run the function on any outcome but ``acquired``, or swallow the
function's exception. A ``BaseException`` that is not an ``Exception`` (cancellation,
``KeyboardInterrupt``) is not reported: the attempt is left to the lease's expiry, which the
namespace policy turns into a reclaim or a review — the same as a crashed worker.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import threading
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ParamSpec, TypeVar, cast

from .client import AsyncClient, Client
from .errors import Blocked, IdemError, InProgress, LeaseLost, NeedsReview, NotRun, ResultExpired
from .signals import fail_signals
from .types import ClaimAnswer, LeaseExpiry

P = ParamSpec("P")
R = TypeVar("R")

KeyFn = Callable[..., str]
DEFAULT_LEASE_MS = 30_000
MIN_BEAT_S = 0.05

_BUSY = frozenset({"in_flight", "backoff", "awaiting_approval", "paused", "limited"})


@dataclass(frozen=True)
class Attempt:
    """The attempt a ``@once`` function is running in (see ``current_attempt``)."""

    namespace: str
    key: str
    #: 1 for a fresh key, +1 for every resume.
    attempt: int
    resumed: bool
    #: A payload an earlier attempt saved with ``prepare`` (reuse it), else None.
    prepared_payload: Any
    #: The fencing token, e.g. for ``client.prepare(namespace, key, token, payload)``.
    token: str
    #: Set when a heartbeat finds the lease lost: someone else holds the key now; stop early.
    lease_lost: threading.Event = field(default_factory=threading.Event, repr=False)

    def __repr__(self) -> str:
        # Never the token.
        return f"Attempt({self.namespace}/{self.key}, attempt={self.attempt}, resumed={self.resumed})"


_CURRENT: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "idem_attempt", default=None
)


def current_attempt() -> Attempt | None:
    """Inside a ``@once`` function: its attempt (number, resumed, prepared payload, token,
    the lease-lost flag). Elsewhere: None."""
    return _CURRENT.get()


def _attempt(namespace: str, key: str, answer: ClaimAnswer, token: str) -> Attempt:
    rec: dict[str, Any] = dict(answer.get("record") or {})
    n = rec.get("attempt")
    return Attempt(
        namespace=namespace,
        key=key,
        attempt=n if isinstance(n, int) else 1,
        resumed=answer.get("resumed") is True,
        prepared_payload=rec.get("prepared_payload"),
        token=token,
    )


def _lease_seconds(answer: ClaimAnswer, lease_ms: int | None) -> float:
    """The lease just granted, in seconds: the one asked for, else what the record shows."""
    if lease_ms:
        return lease_ms / 1000
    rec: dict[str, Any] = dict(answer.get("record") or {})
    try:
        until = datetime.fromisoformat(str(rec.get("lease_expires_at")).replace("Z", "+00:00"))
        since = datetime.fromisoformat(str(rec.get("updated_at")).replace("Z", "+00:00"))
        secs = (until - since).total_seconds()
        if secs > 0:
            return secs
    except ValueError:
        pass
    return DEFAULT_LEASE_MS / 1000


def _not_run(namespace: str, key: str, answer: ClaimAnswer) -> NotRun:
    outcome = answer.get("outcome")
    a = cast(dict[str, Any], answer)
    if outcome in _BUSY:
        return InProgress(namespace, key, a)
    if outcome == "needs_review":
        return NeedsReview(namespace, key, a)
    return Blocked(namespace, key, a)


def _replay(namespace: str, key: str, answer: ClaimAnswer) -> Any:
    rec: dict[str, Any] = dict(answer.get("record") or {})
    if rec.get("result_expired"):
        raise ResultExpired(namespace, key, cast(dict[str, Any], answer))
    return rec.get("result")


def _json_checked(value: Any) -> Any:
    json.dumps(value, allow_nan=False)
    return value


class _Once:
    """The decorator's settings and its lazily made default clients."""

    def __init__(
        self,
        namespace: str,
        key: str | KeyFn,
        payload: Callable[..., Any] | None,
        client: Client | AsyncClient | None,
        lease_ms: int | None,
        wait_ms: int | None,
        owner: str | None,
        lease_expiry: LeaseExpiry | None,
        to_json: Callable[[Any], Any],
        from_json: Callable[[Any], Any],
        classify: Callable[[BaseException], dict[str, Any] | None] | None,
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.payload = payload
        self.client = client
        self.lease_ms = lease_ms
        self.wait_ms = wait_ms
        self.owner = owner
        self.lease_expiry = lease_expiry
        self.to_json = to_json
        self.from_json = from_json
        self.classify = classify
        self._sync: Client | None = None
        self._lock = threading.Lock()
        # An httpx.AsyncClient belongs to one event loop: one default client per loop.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def sync_client(self) -> Client:
        if isinstance(self.client, Client):
            return self.client
        with self._lock:
            if self._sync is None:
                c = self.client
                self._sync = Client(c.url, c._token) if c is not None else Client()
            return self._sync

    def async_client(self) -> AsyncClient:
        if isinstance(self.client, AsyncClient):
            return self.client
        loop = asyncio.get_running_loop()
        found = self._async.get(loop)
        if found is None:
            c = self.client
            found = AsyncClient(c.url, c._token) if c is not None else AsyncClient()
            self._async[loop] = found
        return found

    def key_for(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        if callable(self.key):
            k = self.key(*args, **kwargs)
        else:
            bound = inspect.signature(fn).bind(*args, **kwargs)
            bound.apply_defaults()
            k = self.key.format(**bound.arguments)
        if not isinstance(k, str):
            raise TypeError(f"the key function returned {type(k).__name__}, not a str")
        return k

    def claim_opts(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "owner": self.owner,
            "lease_ms": self.lease_ms,
            "wait_ms": self.wait_ms,
            "lease_expiry": self.lease_expiry,
        }
        if self.payload is not None:
            opts["payload"] = self.payload(*args, **kwargs)
        return opts

    def signals(self, exc: BaseException) -> dict[str, Any]:
        if self.classify is not None:
            found = self.classify(exc)
            if found is not None:
                return found
        return fail_signals(exc)


def _fail_kwargs(signals: dict[str, Any]) -> dict[str, Any]:
    err = signals.get("error") or {}
    return {
        "kind": signals.get("kind"),
        "http_status": signals.get("http_status"),
        "retry_after": signals.get("retry_after"),
        "sent": signals.get("sent"),
        "category": err.get("category"),
        "message": err.get("message"),
    }


def _run_sync(o: _Once, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    client = o.sync_client()
    key = o.key_for(fn, args, kwargs)
    answer = client.claim(o.namespace, key, **o.claim_opts(args, kwargs))
    outcome = answer.get("outcome")
    if outcome == "completed":
        return o.from_json(_replay(o.namespace, key, answer))
    if outcome != "acquired":
        raise _not_run(o.namespace, key, answer)
    token = answer.get("token")
    if not isinstance(token, str):
        raise IdemError("idem answered acquired without a token")
    interval = max(MIN_BEAT_S, _lease_seconds(answer, o.lease_ms) / 3)
    stop = threading.Event()
    attempt = _attempt(o.namespace, key, answer, token)

    def beat() -> None:
        while not stop.wait(interval):
            try:
                client.heartbeat(o.namespace, key, token, o.lease_ms)
            except LeaseLost:
                attempt.lease_lost.set()
                return  # fenced: the report at the end will say so
            except IdemError:
                continue  # idem briefly out of reach: the next beat may land

    beater = threading.Thread(target=beat, name=f"idem-heartbeat:{o.namespace}", daemon=True)
    beater.start()
    ctx_token = _CURRENT.set(attempt)
    try:
        value = fn(*args, **kwargs)
    except Exception as exc:
        stop.set()
        beater.join()
        try:
            client.fail(o.namespace, key, token, **_fail_kwargs(o.signals(exc)))
        except IdemError as report:
            exc.add_note(f"idem: this failure could not be reported ({report})")
        raise
    finally:
        stop.set()
        _CURRENT.reset(ctx_token)
    beater.join()
    _complete_sync(client, o, key, token, value)
    return value


def _complete_sync(client: Client, o: _Once, key: str, token: str, value: Any) -> None:
    try:
        stored = _json_checked(o.to_json(value))
    except (TypeError, ValueError) as e:
        # The effect happened: the ledger must say so even though the value cannot be kept.
        client.complete(o.namespace, key, token, None)
        raise TypeError(
            f"completed {o.namespace}/{key} without a stored result: the return value is not "
            f"JSON-serializable ({e}); give @once a to_json"
        ) from e
    client.complete(o.namespace, key, token, stored)


async def _run_async(
    o: _Once, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    client = o.async_client()
    key = o.key_for(fn, args, kwargs)
    answer = await client.claim(o.namespace, key, **o.claim_opts(args, kwargs))
    outcome = answer.get("outcome")
    if outcome == "completed":
        return o.from_json(_replay(o.namespace, key, answer))
    if outcome != "acquired":
        raise _not_run(o.namespace, key, answer)
    token = answer.get("token")
    if not isinstance(token, str):
        raise IdemError("idem answered acquired without a token")
    interval = max(MIN_BEAT_S, _lease_seconds(answer, o.lease_ms) / 3)
    attempt = _attempt(o.namespace, key, answer, token)

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await client.heartbeat(o.namespace, key, token, o.lease_ms)
            except LeaseLost:
                attempt.lease_lost.set()
                return
            except IdemError:
                continue

    beater = asyncio.create_task(beat())

    async def stop_beating() -> None:
        beater.cancel()
        try:
            await beater
        except asyncio.CancelledError:
            pass

    ctx_token = _CURRENT.set(attempt)
    try:
        value = await fn(*args, **kwargs)
    except Exception as exc:
        await stop_beating()
        try:
            await client.fail(o.namespace, key, token, **_fail_kwargs(o.signals(exc)))
        except IdemError as report:
            exc.add_note(f"idem: this failure could not be reported ({report})")
        raise
    finally:
        beater.cancel()
        _CURRENT.reset(ctx_token)
    await stop_beating()
    try:
        stored = _json_checked(o.to_json(value))
    except (TypeError, ValueError) as e:
        await client.complete(o.namespace, key, token, None)
        raise TypeError(
            f"completed {o.namespace}/{key} without a stored result: the return value is not "
            f"JSON-serializable ({e}); give @once a to_json"
        ) from e
    await client.complete(o.namespace, key, token, stored)
    return value


def once(
    namespace: str,
    key: str | KeyFn,
    *,
    payload: Callable[..., Any] | None = None,
    client: Client | AsyncClient | None = None,
    lease_ms: int | None = None,
    wait_ms: int | None = None,
    owner: str | None = None,
    lease_expiry: LeaseExpiry | None = None,
    to_json: Callable[[Any], Any] = lambda v: v,
    from_json: Callable[[Any], Any] = lambda v: v,
    classify: Callable[[BaseException], dict[str, Any] | None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function (plain or ``async``) so it runs at most once per key.

    ``key``: a function of the call's arguments returning the key, or a format string over
    the parameter names (``"order-{order_id}:charge"``). ``payload``: a function of the
    arguments whose value is fingerprinted (same key + different payload is refused as
    ``conflict``); default none. ``wait_ms``: a concurrent caller waits up to this long for the
    holder and then returns its result instead of raising ``InProgress``. ``client``: a
    ``Client`` / ``AsyncClient`` (default: one from ``IDEM_URL`` / ``IDEM_TOKEN``).
    ``to_json`` / ``from_json``: how the return value is stored and replayed. ``classify``:
    return the ``fail`` signals for an exception yourself (``None`` falls back to the built-in
    mapping).
    """
    o = _Once(
        namespace,
        key,
        payload,
        client,
        lease_ms,
        wait_ms,
        owner,
        lease_expiry,
        to_json,
        from_json,
        classify,
    )

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn):
            afn = cast(Callable[..., Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await _run_async(o, afn, args, kwargs)

            return cast(Callable[P, R], run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            return _run_sync(o, fn, args, kwargs)

        return cast(Callable[P, R], run)

    return decorate
