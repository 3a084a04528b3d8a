"""The v1 API's request and answer shapes as TypedDicts: what goes over the wire, member for member.

A ``Required`` member is one the schema requires (a body must send it, an answer always has
it); ``NotRequired`` members may be absent. Enumerations are ``Literal`` types. The test suite
compares every class here with the running server's ``/openapi.json`` (member names, required
sets, enum values), so a contract change fails the build instead of a user's call.
"""


from typing import Any, Literal, NotRequired, TypedDict

Outcome = Literal[
    "acquired",
    "completed",
    "failed_permanent",
    "conflict",
    "in_flight",
    "backoff",
    "needs_review",
    "awaiting_approval",
    "paused",
    "limited",
]
"""A claim's outcome. Only ``acquired`` means "run the side effect now"."""

EffectOutcome = Literal[
    "performed",
    "completed",
    "failed_permanent",
    "backoff",
    "needs_review",
    "in_flight",
    "awaiting_approval",
    "conflict",
    "paused",
    "limited",
]

State = Literal[
    "processing",
    "prepared",
    "awaiting_approval",
    "completed",
    "failed_retryable",
    "failed_permanent",
    "needs_review",
]

EventType = Literal[
    "acquired",
    "resumed",
    "duplicate_hit",
    "conflict",
    "in_flight",
    "prepared",
    "completed",
    "failed",
    "lease_lost",
    "moved_to_review",
    "resolved",
    "approved",
    "rejected",
    "result_expired",
    "alert_sent",
    "sent",
    "reconciled",
    "heartbeat",
]

FailClass = Literal["retryable", "permanent", "ambiguous"]
LeaseExpiry = Literal["reclaim", "review"]
Role = Literal["worker", "operator", "admin"]
ResolveAction = Literal["completed", "retry", "failed_permanent"]

ErrorCode = Literal[
    "invalid_json",
    "unknown_field",
    "invalid_key",
    "invalid_namespace",
    "body_too_large",
    "invalid_field",
    "missing_identity_field",
    "not_found",
    "lease_lost",
    "invalid_transition",
    "result_mismatch",
    "method_not_allowed",
    "unauthorized",
    "forbidden",
    "store_unavailable",
    "internal",
    "destination_forbidden",
    "request_timeout",
    "invalid_signature",
    "stale_signature",
]
"""The problem+json ``code`` values the server answers with."""


# --- answers -------------------------------------------------------------------------------


class LastError(TypedDict):
    category: str
    message: str
    http_status: int | None


class CostTotals(TypedDict):
    tokens: int
    usd: float
    retry_tokens: int
    retry_usd: float


class RecordRequest(TypedDict):
    """``record.request``: what an effect sent (never headers, query string or body)."""

    method: str
    url: str
    idempotency_header: str | None


class Record(TypedDict):
    namespace: str
    key: str
    state: State
    attempt: int
    fingerprint: str | None
    owner: str | None
    correlation_id: str | None
    lease_expires_at: str | None
    not_before: str | None
    prepared_payload: Any
    result: Any
    result_expired: bool
    external_ref: str | None
    last_error: LastError | None
    request: RecordRequest | None
    cost: CostTotals
    created_at: str
    updated_at: str


class EventCost(TypedDict):
    tokens: int
    usd: float


class Event(TypedDict):
    seq: int
    at: str
    type: EventType
    from_state: State | None
    to_state: State | None
    attempt: int
    owner: str | None
    correlation_id: str | None
    note: str | None
    actor: str | None
    cost: EventCost | None


class RecordWithEvents(TypedDict):
    record: Record
    events: list[Event]


class RecordPage(TypedDict):
    items: list[Record]
    next_cursor: str | None


class ClaimAnswer(TypedDict):
    outcome: Outcome
    record: Record | None
    token: NotRequired[str | None]
    resumed: NotRequired[bool | None]
    retry_after_ms: NotRequired[int | None]


class StateAnswer(TypedDict):
    """The answer to prepare, heartbeat, complete, resolve, approve and reject."""

    state: State
    record: Record


class RetryDecision(TypedDict):
    allowed: bool
    attempt: int
    max_attempts: int
    not_before: str | None


# ``class`` is a Python keyword, hence the functional form: read it as ``answer["class"]``.
FailAnswer = TypedDict(
    "FailAnswer",
    {"state": State, "class": FailClass, "retry": RetryDecision, "record": Record},
)
"""The answer to fail: the server's decision (``class``, ``retry``) and the record."""


class DeriveAnswer(TypedDict):
    key: str


class WhoAmI(TypedDict):
    role: Role
    namespace: str
    token_id: NotRequired[int | None]


class EffectHttpResponse(TypedDict):
    """A destination's response as idem stored it."""

    status: int
    headers: dict[str, str]
    body: NotRequired[Any]
    body_base64: NotRequired[str | None]
    truncated: bool


class EffectAnswer(TypedDict):
    outcome: EffectOutcome
    response: EffectHttpResponse | None
    record: Record | None
    retry_after_ms: NotRequired[int | None]
    reconciled: NotRequired[bool | None]


class Problem(TypedDict):
    """An RFC 9457 problem with idem's machine-readable ``code``."""

    type: str
    title: str
    status: int
    detail: str
    code: ErrorCode
    field: NotRequired[str | None]


# --- request bodies ------------------------------------------------------------------------


class Cost(TypedDict, total=False):
    """What one attempt spent: model tokens and/or US dollars."""

    tokens: int | None
    usd: float | None


class ClaimBody(TypedDict, total=False):
    payload: Any
    fingerprint: str | None
    owner: str | None
    lease_ms: int | None
    correlation_id: str | None
    lease_expiry: LeaseExpiry | None
    wait_ms: int | None


class PrepareBody(TypedDict):
    token: str
    payload: Any
    approval_required: NotRequired[bool | None]


class HeartbeatBody(TypedDict):
    token: str
    lease_ms: NotRequired[int | None]


class CompleteBody(TypedDict):
    token: str
    result: NotRequired[Any]
    external_ref: NotRequired[str | None]
    cost: NotRequired[Cost | None]


class FailError(TypedDict):
    category: str
    message: NotRequired[str | None]


class FailBody(TypedDict):
    token: str
    kind: NotRequired[FailClass | None]
    http_status: NotRequired[int | None]
    retry_after: NotRequired[int | str | None]
    sent: NotRequired[bool | None]
    error: NotRequired[FailError | None]
    cost: NotRequired[Cost | None]


class DeriveBody(TypedDict):
    event: Any
    fields: list[str]
    prefix: NotRequired[str | None]
    suffix: NotRequired[str | None]
    hash: NotRequired[bool | None]


class EffectRequest(TypedDict):
    """``request`` of an effect: what idem sends to the destination."""

    method: str
    url: str
    headers: NotRequired[dict[str, str] | None]
    body: NotRequired[Any]
    body_text: NotRequired[str | None]
    body_base64: NotRequired[str | None]


class Reconcile(TypedDict):
    url: str
    found: list[int]
    not_found: list[int]
    method: NotRequired[str | None]
    headers: NotRequired[dict[str, str] | None]


class EffectBody(TypedDict):
    request: EffectRequest
    idempotency_header: NotRequired[str | None]
    timeout_ms: NotRequired[int | None]
    success: NotRequired[Any]
    destination_idempotent: NotRequired[bool | None]
    reconcile: NotRequired[Reconcile | None]
    owner: NotRequired[str | None]
    correlation_id: NotRequired[str | None]
    wait_ms: NotRequired[int | None]
    lease_ms: NotRequired[int | None]
    cost: NotRequired[Cost | None]


class ResolveBody(TypedDict):
    action: ResolveAction
    note: str
    result: NotRequired[Any]
    external_ref: NotRequired[str | None]


class NoteBody(TypedDict, total=False):
    note: str | None
