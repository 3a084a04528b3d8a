"""Exceptions: a refusal by idem (problem+json, with its ``code``), idem out of reach, and the
claim outcomes that ``@once`` does not turn into a run.

Nothing here ever holds the bearer token; a problem's ``detail`` is the server's sentence,
which never repeats payloads or secrets.
"""

from __future__ import annotations

from typing import Any


class IdemError(Exception):
    """Base of every exception this library raises."""


class IdemUnavailable(IdemError):
    """idem could not be reached (connection refused, DNS, timeout talking to idem)."""


class ProtocolError(IdemError):
    """idem answered something the contract does not describe."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ApiError(IdemError):
    """idem refused the call with a problem+json answer.

    ``code`` is the machine-readable reason (``lease_lost``, ``invalid_key``, …), ``field``
    the request member it is about (where there is one).
    """

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.code: str = str(problem.get("code") or "unknown")
        self.title: str = str(problem.get("title") or "")
        self.detail: str = str(problem.get("detail") or self.title)
        field = problem.get("field")
        self.field: str | None = field if isinstance(field, str) else None
        self.problem = problem
        super().__init__(f"{status} {self.code}: {self.detail}")


class BadRequest(ApiError):
    """The request was refused as written (400, 413, 422): nothing was changed."""


class Unauthorized(ApiError):
    """401 ``unauthorized``: no token, or an unknown, expired or revoked one."""


class Forbidden(ApiError):
    """403 ``forbidden``: the token's role or namespace scope does not allow the call."""


class NotFound(ApiError):
    """404 ``not_found``: unknown record (or route)."""


class LeaseLost(ApiError):
    """409 ``lease_lost``: someone else holds the key now; this worker's token is fenced."""


class InvalidTransition(ApiError):
    """409 ``invalid_transition``: the record's state does not allow this write."""


class ResultMismatch(ApiError):
    """409 ``result_mismatch``: completed already, with a different result or external_ref."""


class StoreUnavailable(ApiError):
    """503 ``store_unavailable``: idem's database did not answer; try again later."""


_BY_CODE: dict[str, type[ApiError]] = {
    "invalid_json": BadRequest,
    "unknown_field": BadRequest,
    "invalid_key": BadRequest,
    "invalid_namespace": BadRequest,
    "body_too_large": BadRequest,
    "invalid_field": BadRequest,
    "missing_identity_field": BadRequest,
    "destination_forbidden": BadRequest,
    "method_not_allowed": BadRequest,
    "request_timeout": BadRequest,
    "unauthorized": Unauthorized,
    "invalid_signature": Unauthorized,
    "stale_signature": Unauthorized,
    "forbidden": Forbidden,
    "not_found": NotFound,
    "lease_lost": LeaseLost,
    "invalid_transition": InvalidTransition,
    "result_mismatch": ResultMismatch,
    "store_unavailable": StoreUnavailable,
}


def api_error(status: int, problem: dict[str, Any]) -> ApiError:
    """The exception type for a problem's ``code`` (``ApiError`` itself for unknown codes)."""
    cls = _BY_CODE.get(str(problem.get("code")), ApiError)
    return cls(status, problem)


# --- claim outcomes that do not run the function ----------------------------------------------


class NotRun(IdemError):
    """A claim answered something other than ``acquired`` or a replayable ``completed``: the
    function did not run. ``answer`` is the claim answer (outcome, record, retry_after_ms)."""

    def __init__(self, namespace: str, key: str, answer: dict[str, Any]) -> None:
        self.namespace = namespace
        self.key = key
        self.answer = answer
        self.outcome: str = str(answer.get("outcome"))
        self.record: dict[str, Any] | None = answer.get("record")
        ms = answer.get("retry_after_ms")
        self.retry_after_ms: int | None = ms if isinstance(ms, int) else None
        super().__init__(self._message())

    def _message(self) -> str:
        tail = f", retry after {self.retry_after_ms} ms" if self.retry_after_ms is not None else ""
        return f"{self.namespace}/{self.key}: {self.outcome}{tail}"


class InProgress(NotRun):
    """Not now: another worker holds the lease (``in_flight``), a retry is backing off
    (``backoff``), it waits for a person's approval, the namespace is paused, or its daily
    limit is reached. Call again later (``retry_after_ms`` says when, where idem knows)."""


class NeedsReview(NotRun):
    """The effect may or may not have happened: a person decides (``idem review``)."""


class Blocked(NotRun):
    """Never run automatically: ``conflict`` (same key, different payload),
    ``failed_permanent`` (the stored error is in ``record.last_error``), or an outcome this
    version does not know."""


class ResultExpired(NotRun):
    """Completed before, but retention has dropped the stored result: the operation must not
    run again, and there is nothing to replay."""
