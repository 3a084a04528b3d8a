"""From an exception to the signals of a ``fail`` report, so that idem classifies it.

The server decides (``kind`` > ``http_status`` > ``error.category``, see the contract's
table); this module only says what the exception shows: the destination's HTTP status and
``Retry-After``, whether it was a timeout or a connection failure, and whether the request
certainly never left (``sent: false``: connection refused, DNS failure, a connect timeout).
A timeout or a reset after sending stays ambiguous — idem moves it to ``needs_review`` unless
the destination is idempotent. With nothing to go on the report says ``kind: ambiguous``: a
person decides, nothing is retried blindly.

The exception's cause chain is searched too, so ``raise ChargeFailed() from http_error`` is
classified by the HTTP error. ``requests`` is recognised without being imported by this
library (only when the application imported it).
"""

from __future__ import annotations

import email.utils
import socket
import sys
import time
from typing import Any

import httpx

from .types import FailClass

MAX_MESSAGE = 500


class Failure(Exception):
    """Raise (or subclass) to tell idem how a failure is to be treated.

    ``kind`` (``retryable``, ``permanent``, ``ambiguous``) overrides classification;
    ``http_status`` / ``retry_after`` / ``category`` / ``sent`` are passed on as signals.
    """

    kind: FailClass | None = None

    def __init__(
        self,
        message: str = "",
        *,
        kind: FailClass | None = None,
        http_status: int | None = None,
        retry_after: int | str | None = None,
        category: str | None = None,
        sent: bool | None = None,
    ) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.http_status = http_status
        self.retry_after = retry_after
        self.category = category
        self.sent = sent


class RetryableFailure(Failure):
    """Nothing happened at the destination; another attempt is fine (after backoff)."""

    kind: FailClass | None = "retryable"


class PermanentFailure(Failure):
    """Will never succeed as is (invalid input, a business rule): no automatic retry."""

    kind: FailClass | None = "permanent"


class AmbiguousFailure(Failure):
    """The effect may have happened: a person decides."""

    kind: FailClass | None = "ambiguous"


def _retry_after_seconds(value: str | None) -> int | None:
    """``Retry-After`` as whole seconds from now (it may be seconds or an HTTP-date)."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return min(int(v), 316_224_000)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0, int(when.timestamp() - time.time() + 0.999))


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out and len(out) < 10:
        out.append(cur)
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return out


def _message(exc: BaseException) -> str:
    text = str(exc)
    m = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return m[:MAX_MESSAGE]


def _http(status: int, retry_after: str | None, exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"http_status": status, "sent": True}
    secs = _retry_after_seconds(retry_after)
    if secs is not None:
        out["retry_after"] = secs
    out["error"] = {"category": "http", "message": _message(exc)}
    return out


def _signal(category: str, sent: bool | None, exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if sent is not None:
        out["sent"] = sent
    out["error"] = {"category": category, "message": _message(exc)}
    return out


def _from_httpx(exc: BaseException) -> dict[str, Any] | None:
    if isinstance(exc, httpx.HTTPStatusError):
        return _http(exc.response.status_code, exc.response.headers.get("retry-after"), exc)
    # A connect or pool timeout: the request never left.
    if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
        return _signal("timeout", False, exc)
    if isinstance(exc, httpx.TimeoutException):
        return _signal("timeout", None, exc)
    if isinstance(exc, (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.LocalProtocolError)):
        return _signal("connection", False, exc)
    if isinstance(exc, (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError)):
        return _signal("connection", None, exc)
    return None


_NOT_SENT_TEXT = (
    "NewConnectionError",
    "NameResolutionError",
    "Failed to establish a new connection",
    "Failed to resolve",
    "Name or service not known",
    "Connection refused",
)


def _from_requests(exc: BaseException) -> dict[str, Any] | None:
    requests = sys.modules.get("requests")
    if requests is None:
        return None
    rexc = requests.exceptions
    if isinstance(exc, rexc.HTTPError) and getattr(exc, "response", None) is not None:
        resp = exc.response
        return _http(int(resp.status_code), resp.headers.get("Retry-After"), exc)
    if isinstance(exc, rexc.ConnectTimeout):
        return _signal("timeout", False, exc)
    if isinstance(exc, rexc.Timeout):
        return _signal("timeout", None, exc)
    if isinstance(exc, rexc.ConnectionError):
        text = repr(exc)
        sent = False if any(t in text for t in _NOT_SENT_TEXT) else None
        return _signal("connection", sent, exc)
    if isinstance(exc, (rexc.InvalidURL, rexc.MissingSchema, rexc.InvalidSchema)):
        return _signal("connection", False, exc)
    return None


def _from_builtin(exc: BaseException) -> dict[str, Any] | None:
    if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
        return _signal("connection", False, exc)
    if isinstance(exc, TimeoutError):
        return _signal("timeout", None, exc)
    if isinstance(exc, ConnectionError):
        return _signal("connection", None, exc)
    return None


def fail_signals(exc: BaseException) -> dict[str, Any]:
    """The members of a ``fail`` body (all but ``token``) that describe ``exc``."""
    for e in _chain(exc):
        if isinstance(e, Failure):
            out: dict[str, Any] = {}
            if e.kind is not None:
                out["kind"] = e.kind
            if e.http_status is not None:
                out["http_status"] = e.http_status
            if e.retry_after is not None:
                out["retry_after"] = e.retry_after
            if e.sent is not None:
                out["sent"] = e.sent
            category = e.category or ("http" if e.http_status else "failure")
            out["error"] = {"category": category, "message": _message(e)}
            if "kind" not in out and "http_status" not in out and category not in _KNOWN:
                out["kind"] = "ambiguous"
            return out
        for probe in (_from_httpx, _from_requests, _from_builtin):
            found = probe(e)
            if found is not None:
                if e is not exc:
                    found["error"]["message"] = f"{_message(exc)} (caused by {_message(e)})"[
                        :MAX_MESSAGE
                    ]
                return found
    return {"kind": "ambiguous", "error": {"category": "exception", "message": _message(exc)}}


# The categories the server classifies on their own (without kind or http_status).
_KNOWN = frozenset({"timeout", "connection", "validation", "auth", "business"})
