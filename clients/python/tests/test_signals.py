"""The exception → fail-signal mapping on its own (no server): what each kind of error says."""

from __future__ import annotations

import email.utils
import socket
import time

import httpx
import pytest
import requests

from idem_ledger import AmbiguousFailure, Failure, PermanentFailure, RetryableFailure, fail_signals


def _status_error(status: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    req = httpx.Request("POST", "https://api.example/charge")
    headers = {"retry-after": retry_after} if retry_after is not None else {}
    resp = httpx.Response(status, request=req, headers=headers)
    return httpx.HTTPStatusError("status", request=req, response=resp)


def test_http_status_and_retry_after_seconds() -> None:
    s = fail_signals(_status_error(429, "17"))
    assert (s["http_status"], s["retry_after"], s["sent"]) == (429, 17, True)
    assert s["error"]["category"] == "http"
    assert "kind" not in s


def test_retry_after_as_http_date_becomes_seconds() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    s = fail_signals(_status_error(503, when))
    assert 115 <= s["retry_after"] <= 121


def test_unreadable_retry_after_is_left_out() -> None:
    assert "retry_after" not in fail_signals(_status_error(503, "soon"))


@pytest.mark.parametrize(
    ("exc", "category", "sent"),
    [
        (httpx.ConnectError("refused"), "connection", False),
        (httpx.ConnectTimeout("slow"), "timeout", False),
        (httpx.PoolTimeout("pool"), "timeout", False),
        (httpx.ReadTimeout("read"), "timeout", None),
        (httpx.WriteTimeout("write"), "timeout", None),
        (httpx.RemoteProtocolError("reset"), "connection", None),
        (httpx.ReadError("reset"), "connection", None),
        (requests.exceptions.ConnectTimeout("slow"), "timeout", False),
        (requests.exceptions.ReadTimeout("read"), "timeout", None),
        (requests.exceptions.ConnectionError("NewConnectionError: refused"), "connection", False),
        (requests.exceptions.ConnectionError("Connection aborted. RemoteDisconnected"),
         "connection", None),
        (ConnectionRefusedError(111, "refused"), "connection", False),
        (socket.gaierror(-2, "Name or service not known"), "connection", False),
        (ConnectionResetError(104, "reset"), "connection", None),
        (TimeoutError("timed out"), "timeout", None),
    ],
)
def test_transport_errors(exc: BaseException, category: str, sent: bool | None) -> None:
    s = fail_signals(exc)
    assert s["error"]["category"] == category
    assert s.get("sent") is sent
    assert "kind" not in s and "http_status" not in s


def test_the_cause_chain_is_searched() -> None:
    try:
        try:
            raise httpx.ReadTimeout("read")
        except httpx.ReadTimeout as e:
            raise RuntimeError("charge failed") from e
    except RuntimeError as outer:
        s = fail_signals(outer)
    assert s["error"]["category"] == "timeout"
    assert s["error"]["message"].startswith("RuntimeError: charge failed (caused by ReadTimeout")


def test_marker_exceptions_say_the_kind() -> None:
    assert fail_signals(RetryableFailure("x"))["kind"] == "retryable"
    assert fail_signals(PermanentFailure("x", category="business"))["kind"] == "permanent"
    assert fail_signals(AmbiguousFailure("x"))["kind"] == "ambiguous"
    s = fail_signals(Failure("upstream", http_status=502, retry_after=3))
    assert (s.get("kind"), s["http_status"], s["retry_after"]) == (None, 502, 3)
    # A category the server cannot classify on its own, without kind or status: ambiguous.
    assert fail_signals(Failure("odd", category="quota"))["kind"] == "ambiguous"


def test_anything_else_is_ambiguous_and_the_message_is_cut() -> None:
    s = fail_signals(ValueError("x" * 2000))
    assert s["kind"] == "ambiguous"
    assert s["error"]["category"] == "exception"
    assert len(s["error"]["message"]) == 500
