"""``Client`` and ``AsyncClient``: the v1 API over httpx, one method per operation.

Both are written once: each operation is a small pure step that builds ``(method, path,
body)`` and a pure step that reads the answer; only sending differs. Keys and namespaces are
percent-encoded as path segments (a key may hold ``/``, ``?``, ``#`` or ``%``). Claim and
effect answers are answers in every status the contract lists (201, 200, 409, 422, 429,
503 with an ``outcome``); anything else that is not a 2xx is an ``ApiError`` of the
problem's ``code``. The token is sent as a bearer header and never appears in an exception.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import httpx

from .errors import IdemUnavailable, ProtocolError, api_error
from .types import (
    ClaimAnswer,
    ClaimBody,
    CompleteBody,
    Cost,
    DeriveBody,
    DeriveAnswer,
    EffectAnswer,
    EffectBody,
    EffectRequest,
    FailAnswer,
    FailBody,
    FailClass,
    FailError,
    HeartbeatBody,
    LeaseExpiry,
    NoteBody,
    PrepareBody,
    Reconcile,
    RecordPage,
    RecordWithEvents,
    ResolveAction,
    ResolveBody,
    StateAnswer,
    WhoAmI,
)

DEFAULT_URL = "http://127.0.0.1:7780"
DEFAULT_TIMEOUT = 40.0  # above the server's 30 s cap on wait_ms


def _seg(s: str) -> str:
    return quote(s, safe="")


def _key_path(ns: str, key: str, verb: str | None = None) -> str:
    p = f"/v1/namespaces/{_seg(ns)}/keys/{_seg(key)}"
    return f"{p}/{verb}" if verb else p


def _put(body: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        body[name] = value


def _compact(body: Mapping[str, Any]) -> dict[str, Any]:
    """A body without its ``None`` members (the API reads a null member as absent anyway).
    Bodies are built as the TypedDicts of ``types`` first, so mypy checks every member name
    against the models the tests check against ``/openapi.json``."""
    return {k: v for k, v in body.items() if v is not None}


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    body: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    #: Claim and effect: an answer with an ``outcome`` is not an error, whatever its status.
    outcome_answer: bool = False


def _read(call: _Call, resp: httpx.Response) -> Any:
    status = resp.status_code
    try:
        data = resp.json() if resp.content else None
    except ValueError:
        data = None
    if call.outcome_answer and isinstance(data, dict) and "outcome" in data:
        return data
    if 200 <= status < 300:
        if data is None and resp.content:
            raise ProtocolError(f"idem answered {status} with a body that is not JSON", status)
        return data
    if isinstance(data, dict) and "code" in data:
        raise api_error(status, data)
    raise ProtocolError(f"idem answered {status} without a problem+json body", status)


class _Ops:
    """The operations as ``_Call`` builders (shared by both clients)."""

    @staticmethod
    def claim(
        namespace: str,
        key: str,
        *,
        payload: Any = None,
        fingerprint: str | None = None,
        owner: str | None = None,
        lease_ms: int | None = None,
        correlation_id: str | None = None,
        lease_expiry: LeaseExpiry | None = None,
        wait_ms: int | None = None,
    ) -> _Call:
        body = ClaimBody(
            payload=payload,
            fingerprint=fingerprint,
            owner=owner,
            lease_ms=lease_ms,
            correlation_id=correlation_id,
            lease_expiry=lease_expiry,
            wait_ms=wait_ms,
        )
        path = _key_path(namespace, key, "claim")
        return _Call("POST", path, _compact(body), outcome_answer=True)

    @staticmethod
    def heartbeat(namespace: str, key: str, token: str, lease_ms: int | None) -> _Call:
        body = HeartbeatBody(token=token, lease_ms=lease_ms)
        return _Call("POST", _key_path(namespace, key, "heartbeat"), _compact(body))

    @staticmethod
    def complete(
        namespace: str,
        key: str,
        token: str,
        result: Any,
        external_ref: str | None,
        cost: Cost | None,
    ) -> _Call:
        body = CompleteBody(token=token, result=result, external_ref=external_ref, cost=cost)
        return _Call("POST", _key_path(namespace, key, "complete"), _compact(body))

    @staticmethod
    def fail(
        namespace: str,
        key: str,
        token: str,
        *,
        kind: FailClass | None,
        http_status: int | None,
        retry_after: int | str | None,
        sent: bool | None,
        category: str | None,
        message: str | None,
        cost: Cost | None,
    ) -> _Call:
        error = None
        if category is not None:
            error = FailError(category=category, message=message)
        body = FailBody(
            token=token,
            kind=kind,
            http_status=http_status,
            retry_after=retry_after,
            sent=sent,
            error=error,
            cost=cost,
        )
        out = _compact(body)
        if error is not None:
            out["error"] = _compact(error)
        return _Call("POST", _key_path(namespace, key, "fail"), out)

    @staticmethod
    def prepare(
        namespace: str, key: str, token: str, payload: Any, approval_required: bool
    ) -> _Call:
        body = PrepareBody(token=token, payload=payload)
        if approval_required:
            body["approval_required"] = True
        return _Call("POST", _key_path(namespace, key, "prepare"), _compact(body))

    @staticmethod
    def effect(
        namespace: str,
        key: str,
        request: EffectRequest,
        body: EffectBody,
        idempotency_header: str | None,
    ) -> _Call:
        out = _compact(body)
        out["request"] = _compact(request)
        # None is meaningful here (send no header): only the sentinel means "the default".
        if idempotency_header is not _DEFAULT:
            out["idempotency_header"] = idempotency_header
        path = _key_path(namespace, key, "effect")
        return _Call("POST", path, out, outcome_answer=True)

    @staticmethod
    def resolve(
        namespace: str,
        key: str,
        action: ResolveAction,
        note: str,
        result: Any,
        external_ref: str | None,
    ) -> _Call:
        body = ResolveBody(action=action, note=note, result=result, external_ref=external_ref)
        return _Call("POST", _key_path(namespace, key, "resolve"), _compact(body))

    @staticmethod
    def note(path: str, note: str | None) -> _Call:
        return _Call("POST", path, _compact(NoteBody(note=note)))

    @staticmethod
    def derive(
        event: Any,
        fields: list[str],
        prefix: str | None,
        suffix: str | None,
        hash: bool | None,
    ) -> _Call:
        body = DeriveBody(event=event, fields=list(fields), prefix=prefix, suffix=suffix, hash=hash)
        return _Call("POST", "/v1/keys/derive", _compact(body))

    @staticmethod
    def list(namespace: str, state: str | None, limit: int | None, cursor: str | None) -> _Call:
        params: dict[str, Any] = {}
        _put(params, "state", state)
        _put(params, "limit", limit)
        _put(params, "cursor", cursor)
        return _Call("GET", f"/v1/namespaces/{_seg(namespace)}/keys", params=params)


def _stale_connection(e: httpx.TransportError) -> bool:
    """A pooled keep-alive connection the server had already closed: not one byte of an
    answer came back, so the request was not processed and is sent once more on a fresh
    connection. (idem closes a connection after refusing a request whose body it did not
    read, e.g. a bad key, without saying ``Connection: close``; the client may reuse it in
    that instant.)"""
    return isinstance(e, httpx.RemoteProtocolError) and "without sending a response" in str(e)


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


_DEFAULT: Any = _Default()


class _Base:
    def __init__(
        self,
        url: str | None,
        token: str | None,
        timeout: float,
    ) -> None:
        self.url = (url or os.environ.get("IDEM_URL") or DEFAULT_URL).rstrip("/")
        tok = token if token is not None else os.environ.get("IDEM_TOKEN")
        self._token = tok or None
        self.timeout = timeout

    def _headers(self) -> dict[str, str]:
        h = {"accept": "application/json", "user-agent": "idem-ledger-python/0.1.0"}
        if self._token:
            h["authorization"] = f"Bearer {self._token}"
        return h

    def __repr__(self) -> str:
        # Never the token.
        auth = "token" if self._token else "no token"
        return f"{type(self).__name__}(url={self.url!r}, {auth})"


class Client(_Base):
    """A synchronous idem client. ``url`` and ``token`` default to ``IDEM_URL`` and
    ``IDEM_TOKEN`` (and ``http://127.0.0.1:7780``, no token). Thread-safe; use it as a
    context manager or call ``close()``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers(), timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _Call) -> Any:
        for attempt in (1, 2):
            try:
                resp = self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
                break
            except httpx.TransportError as e:
                if attempt == 1 and _stale_connection(e):
                    continue
                raise IdemUnavailable(f"cannot reach idem at {self.url}: {type(e).__name__}") from e
        return _read(call, resp)

    # Worker operations.
    def claim(
        self,
        namespace: str,
        key: str,
        *,
        payload: Any = None,
        fingerprint: str | None = None,
        owner: str | None = None,
        lease_ms: int | None = None,
        correlation_id: str | None = None,
        lease_expiry: LeaseExpiry | None = None,
        wait_ms: int | None = None,
    ) -> ClaimAnswer:
        """``POST …/claim`` (``payload`` or ``fingerprint``, not both). Every outcome is an
        answer, not an exception: only ``acquired`` means "run the side effect now"."""
        call = _Ops.claim(
            namespace,
            key,
            payload=payload,
            fingerprint=fingerprint,
            owner=owner,
            lease_ms=lease_ms,
            correlation_id=correlation_id,
            lease_expiry=lease_expiry,
            wait_ms=wait_ms,
        )
        return cast(ClaimAnswer, self._send(call))

    def heartbeat(
        self, namespace: str, key: str, token: str, lease_ms: int | None = None
    ) -> StateAnswer:
        return cast(StateAnswer, self._send(_Ops.heartbeat(namespace, key, token, lease_ms)))

    def complete(
        self,
        namespace: str,
        key: str,
        token: str,
        result: Any = None,
        *,
        external_ref: str | None = None,
        cost: Cost | None = None,
    ) -> StateAnswer:
        call = _Ops.complete(namespace, key, token, result, external_ref, cost)
        return cast(StateAnswer, self._send(call))

    def fail(
        self,
        namespace: str,
        key: str,
        token: str,
        *,
        kind: FailClass | None = None,
        http_status: int | None = None,
        retry_after: int | str | None = None,
        sent: bool | None = None,
        category: str | None = None,
        message: str | None = None,
        cost: Cost | None = None,
    ) -> FailAnswer:
        call = _Ops.fail(
            namespace,
            key,
            token,
            kind=kind,
            http_status=http_status,
            retry_after=retry_after,
            sent=sent,
            category=category,
            message=message,
            cost=cost,
        )
        return cast(FailAnswer, self._send(call))

    def prepare(
        self, namespace: str, key: str, token: str, payload: Any, *, approval_required: bool = False
    ) -> StateAnswer:
        call = _Ops.prepare(namespace, key, token, payload, approval_required)
        return cast(StateAnswer, self._send(call))

    def effect(
        self,
        namespace: str,
        key: str,
        request: EffectRequest,
        *,
        idempotency_header: str | None = _DEFAULT,
        timeout_ms: int | None = None,
        success: str | list[int] | None = None,
        destination_idempotent: bool | None = None,
        reconcile: Reconcile | None = None,
        owner: str | None = None,
        correlation_id: str | None = None,
        wait_ms: int | None = None,
        lease_ms: int | None = None,
        cost: Cost | None = None,
    ) -> EffectAnswer:
        """``POST …/effect``: idem sends ``request`` under the key and stores the response.
        ``idempotency_header=None`` sends no idempotency header."""
        body = EffectBody(
            request=request,
            timeout_ms=timeout_ms,
            success=success,
            destination_idempotent=destination_idempotent,
            reconcile=reconcile,
            owner=owner,
            correlation_id=correlation_id,
            wait_ms=wait_ms,
            lease_ms=lease_ms,
            cost=cost,
        )
        call = _Ops.effect(namespace, key, request, body, idempotency_header)
        return cast(EffectAnswer, self._send(call))

    def get(self, namespace: str, key: str) -> RecordWithEvents:
        """``GET …``: the record and its events (``NotFound`` when unknown)."""
        return cast(RecordWithEvents, self._send(_Call("GET", _key_path(namespace, key))))

    def derive_key(
        self,
        event: Any,
        fields: list[str],
        *,
        prefix: str | None = None,
        suffix: str | None = None,
        hash: bool | None = None,
    ) -> str:
        """``POST /v1/keys/derive``: the stable key from the event's identity fields."""
        ans = cast(DeriveAnswer, self._send(_Ops.derive(event, fields, prefix, suffix, hash)))
        return ans["key"]

    def whoami(self) -> WhoAmI:
        return cast(WhoAmI, self._send(_Call("GET", "/v1/whoami")))

    # Operator operations.
    def list(
        self,
        namespace: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecordPage:
        return cast(RecordPage, self._send(_Ops.list(namespace, state, limit, cursor)))

    def resolve(
        self,
        namespace: str,
        key: str,
        action: ResolveAction,
        note: str,
        *,
        result: Any = None,
        external_ref: str | None = None,
    ) -> StateAnswer:
        call = _Ops.resolve(namespace, key, action, note, result, external_ref)
        return cast(StateAnswer, self._send(call))

    def approve(self, namespace: str, key: str, note: str | None = None) -> StateAnswer:
        call = _Ops.note(_key_path(namespace, key, "approve"), note)
        return cast(StateAnswer, self._send(call))

    def reject(self, namespace: str, key: str, note: str | None = None) -> StateAnswer:
        call = _Ops.note(_key_path(namespace, key, "reject"), note)
        return cast(StateAnswer, self._send(call))

    def namespace(self, namespace: str) -> dict[str, Any]:
        return cast(dict[str, Any], self._send(_Call("GET", f"/v1/namespaces/{_seg(namespace)}")))

    def patch_namespace(self, namespace: str, policy: dict[str, Any]) -> dict[str, Any]:
        call = _Call("PATCH", f"/v1/namespaces/{_seg(namespace)}", dict(policy))
        return cast(dict[str, Any], self._send(call))

    def pause(self, namespace: str, note: str | None = None) -> dict[str, Any]:
        call = _Ops.note(f"/v1/namespaces/{_seg(namespace)}/pause", note)
        return cast(dict[str, Any], self._send(call))

    def resume(self, namespace: str, note: str | None = None) -> dict[str, Any]:
        call = _Ops.note(f"/v1/namespaces/{_seg(namespace)}/resume", note)
        return cast(dict[str, Any], self._send(call))


class AsyncClient(_Base):
    """The asyncio twin of ``Client`` (same methods, awaitable). Use it within one event
    loop; ``async with`` or ``await aclose()``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers(), timeout=timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        for attempt in (1, 2):
            try:
                resp = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
                break
            except httpx.TransportError as e:
                if attempt == 1 and _stale_connection(e):
                    continue
                raise IdemUnavailable(f"cannot reach idem at {self.url}: {type(e).__name__}") from e
        return _read(call, resp)

    async def claim(
        self,
        namespace: str,
        key: str,
        *,
        payload: Any = None,
        fingerprint: str | None = None,
        owner: str | None = None,
        lease_ms: int | None = None,
        correlation_id: str | None = None,
        lease_expiry: LeaseExpiry | None = None,
        wait_ms: int | None = None,
    ) -> ClaimAnswer:
        call = _Ops.claim(
            namespace,
            key,
            payload=payload,
            fingerprint=fingerprint,
            owner=owner,
            lease_ms=lease_ms,
            correlation_id=correlation_id,
            lease_expiry=lease_expiry,
            wait_ms=wait_ms,
        )
        return cast(ClaimAnswer, await self._send(call))

    async def heartbeat(
        self, namespace: str, key: str, token: str, lease_ms: int | None = None
    ) -> StateAnswer:
        return cast(StateAnswer, await self._send(_Ops.heartbeat(namespace, key, token, lease_ms)))

    async def complete(
        self,
        namespace: str,
        key: str,
        token: str,
        result: Any = None,
        *,
        external_ref: str | None = None,
        cost: Cost | None = None,
    ) -> StateAnswer:
        call = _Ops.complete(namespace, key, token, result, external_ref, cost)
        return cast(StateAnswer, await self._send(call))

    async def fail(
        self,
        namespace: str,
        key: str,
        token: str,
        *,
        kind: FailClass | None = None,
        http_status: int | None = None,
        retry_after: int | str | None = None,
        sent: bool | None = None,
        category: str | None = None,
        message: str | None = None,
        cost: Cost | None = None,
    ) -> FailAnswer:
        call = _Ops.fail(
            namespace,
            key,
            token,
            kind=kind,
            http_status=http_status,
            retry_after=retry_after,
            sent=sent,
            category=category,
            message=message,
            cost=cost,
        )
        return cast(FailAnswer, await self._send(call))

    async def prepare(
        self, namespace: str, key: str, token: str, payload: Any, *, approval_required: bool = False
    ) -> StateAnswer:
        call = _Ops.prepare(namespace, key, token, payload, approval_required)
        return cast(StateAnswer, await self._send(call))

    async def effect(
        self,
        namespace: str,
        key: str,
        request: EffectRequest,
        *,
        idempotency_header: str | None = _DEFAULT,
        timeout_ms: int | None = None,
        success: str | list[int] | None = None,
        destination_idempotent: bool | None = None,
        reconcile: Reconcile | None = None,
        owner: str | None = None,
        correlation_id: str | None = None,
        wait_ms: int | None = None,
        lease_ms: int | None = None,
        cost: Cost | None = None,
    ) -> EffectAnswer:
        body = EffectBody(
            request=request,
            timeout_ms=timeout_ms,
            success=success,
            destination_idempotent=destination_idempotent,
            reconcile=reconcile,
            owner=owner,
            correlation_id=correlation_id,
            wait_ms=wait_ms,
            lease_ms=lease_ms,
            cost=cost,
        )
        call = _Ops.effect(namespace, key, request, body, idempotency_header)
        return cast(EffectAnswer, await self._send(call))

    async def get(self, namespace: str, key: str) -> RecordWithEvents:
        return cast(RecordWithEvents, await self._send(_Call("GET", _key_path(namespace, key))))

    async def derive_key(
        self,
        event: Any,
        fields: list[str],
        *,
        prefix: str | None = None,
        suffix: str | None = None,
        hash: bool | None = None,
    ) -> str:
        call = _Ops.derive(event, fields, prefix, suffix, hash)
        ans = cast(DeriveAnswer, await self._send(call))
        return ans["key"]

    async def whoami(self) -> WhoAmI:
        return cast(WhoAmI, await self._send(_Call("GET", "/v1/whoami")))

    async def list(
        self,
        namespace: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RecordPage:
        return cast(RecordPage, await self._send(_Ops.list(namespace, state, limit, cursor)))

    async def resolve(
        self,
        namespace: str,
        key: str,
        action: ResolveAction,
        note: str,
        *,
        result: Any = None,
        external_ref: str | None = None,
    ) -> StateAnswer:
        call = _Ops.resolve(namespace, key, action, note, result, external_ref)
        return cast(StateAnswer, await self._send(call))

    async def approve(self, namespace: str, key: str, note: str | None = None) -> StateAnswer:
        call = _Ops.note(_key_path(namespace, key, "approve"), note)
        return cast(StateAnswer, await self._send(call))

    async def reject(self, namespace: str, key: str, note: str | None = None) -> StateAnswer:
        call = _Ops.note(_key_path(namespace, key, "reject"), note)
        return cast(StateAnswer, await self._send(call))

    async def namespace(self, namespace: str) -> dict[str, Any]:
        call = _Call("GET", f"/v1/namespaces/{_seg(namespace)}")
        return cast(dict[str, Any], await self._send(call))

    async def patch_namespace(self, namespace: str, policy: dict[str, Any]) -> dict[str, Any]:
        call = _Call("PATCH", f"/v1/namespaces/{_seg(namespace)}", dict(policy))
        return cast(dict[str, Any], await self._send(call))

    async def pause(self, namespace: str, note: str | None = None) -> dict[str, Any]:
        call = _Ops.note(f"/v1/namespaces/{_seg(namespace)}/pause", note)
        return cast(dict[str, Any], await self._send(call))

    async def resume(self, namespace: str, note: str | None = None) -> dict[str, Any]:
        call = _Ops.note(f"/v1/namespaces/{_seg(namespace)}/resume", note)
        return cast(dict[str, Any], await self._send(call))
