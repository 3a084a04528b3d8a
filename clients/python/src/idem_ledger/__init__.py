"""idem-ledger: the Python client of idem, the idempotency gate and side-effect ledger.

``Client`` / ``AsyncClient`` speak the v1 API (claim, heartbeat, prepare, complete, fail,
effect, get, derive_key, whoami, and the operator calls); ``@once`` runs a function at most
once per key. Refusals are ``ApiError`` subclasses carrying the problem+json ``code``.
"""

from .client import DEFAULT_URL, AsyncClient, Client
from .errors import (
    ApiError,
    BadRequest,
    Blocked,
    Forbidden,
    IdemError,
    IdemUnavailable,
    InProgress,
    InvalidTransition,
    LeaseLost,
    NeedsReview,
    NotFound,
    NotRun,
    ProtocolError,
    ResultExpired,
    ResultMismatch,
    StoreUnavailable,
    Unauthorized,
)
from .once import Attempt, current_attempt, once
from .signals import AmbiguousFailure, Failure, PermanentFailure, RetryableFailure, fail_signals

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "AmbiguousFailure",
    "Attempt",
    "ApiError",
    "AsyncClient",
    "BadRequest",
    "Blocked",
    "Client",
    "Failure",
    "Forbidden",
    "IdemError",
    "IdemUnavailable",
    "InProgress",
    "InvalidTransition",
    "LeaseLost",
    "NeedsReview",
    "NotFound",
    "NotRun",
    "PermanentFailure",
    "ProtocolError",
    "ResultExpired",
    "ResultMismatch",
    "RetryableFailure",
    "StoreUnavailable",
    "Unauthorized",
    "current_attempt",
    "fail_signals",
    "once",
]
