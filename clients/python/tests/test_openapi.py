"""The TypedDicts in ``idem_ledger.types`` against the running server's ``/openapi.json``:
member names, required sets and enum values must be equal, so a contract change fails here
before it reaches a user."""

from __future__ import annotations

import types as pytypes
import typing
from typing import Any, Literal, NotRequired, Required, get_args, get_origin

import httpx
import pytest

from idem_ledger import types as t

# Schema name in /openapi.json -> the class that models it.
MODELS: dict[str, Any] = {
    "ClaimBody": t.ClaimBody,
    "ClaimResponse": t.ClaimAnswer,
    "RecordDoc": t.Record,
    "LastErrorDoc": t.LastError,
    "CostTotalsDoc": t.CostTotals,
    "RequestDoc": t.RecordRequest,
    "EventDoc": t.Event,
    "EventCostDoc": t.EventCost,
    "RecordWithEventsDoc": t.RecordWithEvents,
    "ListResponse": t.RecordPage,
    "StateResponse": t.StateAnswer,
    "RetryDoc": t.RetryDecision,
    "FailResponse": t.FailAnswer,
    "DeriveResponse": t.DeriveAnswer,
    "WhoAmI": t.WhoAmI,
    "ResponseDoc": t.EffectHttpResponse,
    "EffectResponse": t.EffectAnswer,
    "Problem": t.Problem,
    "CostBody": t.Cost,
    "PrepareBody": t.PrepareBody,
    "HeartbeatBody": t.HeartbeatBody,
    "CompleteBody": t.CompleteBody,
    "FailErrorBody": t.FailError,
    "FailBody": t.FailBody,
    "DeriveBody": t.DeriveBody,
    "EffectRequestBody": t.EffectRequest,
    "ReconcileBody": t.Reconcile,
    "EffectBody": t.EffectBody,
    "ResolveBody": t.ResolveBody,
    "NoteBody": t.NoteBody,
}

# Named enumerations -> the Literal that models them.
ENUMS: dict[str, Any] = {
    "ClassDoc": t.FailClass,
    "LeaseExpiryDoc": t.LeaseExpiry,
    "RoleDoc": t.Role,
    "ResolveActionDoc": t.ResolveAction,
}


@pytest.fixture(scope="module")
def spec(server: Any) -> dict[str, Any]:
    return dict(httpx.get(f"{server.url}/openapi.json", timeout=10).json())


def _enum_of(schema: dict[str, Any], schemas: dict[str, Any]) -> set[Any] | None:
    """The enum values a member schema allows (through $ref and null unions), or None."""
    if "$ref" in schema:
        return _enum_of(schemas[schema["$ref"].rsplit("/", 1)[1]], schemas)
    if "enum" in schema:
        return {v for v in schema["enum"] if v is not None}
    for union in ("oneOf", "anyOf", "allOf"):
        for sub in schema.get(union, []):
            found = _enum_of(sub, schemas)
            if found is not None:
                return found
    return None


def _literal_of(tp: Any) -> set[Any] | None:
    """The Literal values inside an annotation (through NotRequired, Optional, unions)."""
    origin = get_origin(tp)
    if origin is Literal:
        return set(get_args(tp))
    if origin in (NotRequired, Required, typing.Union, pytypes.UnionType):
        for a in get_args(tp):
            found = _literal_of(a)
            if found is not None:
                return found
    return None


def test_every_component_schema_with_properties_is_modelled_or_listed(
    spec: dict[str, Any],
) -> None:
    """A new request/answer schema of the worker API shows up here (and must be added)."""
    operator_only = {
        "AuditBody", "AuditFindingDoc", "AuditResponse", "EgressDoc", "EgressPatchBody",
        "NamespaceItem", "NamespaceList", "NamespaceResponse", "NamespaceStatsDoc",
        "PolicyDoc", "PolicyPatchBody", "RetryPatchBody", "RetryPolicyDoc", "ReviewResponse",
        "StatusResponse", "TokenBody", "TokenInfo", "TokenList", "TokenResponse",
        "JsonPointerDoc",
        # The webhook intake: sources are admin/operator resources, and /in/{source} is
        # called by the providers, not by a worker.
        "BulkRedeliverBody", "EventList", "EventSummaryDoc", "IntakeEventStatus",
        "IntakeResponse", "RedeliverBody", "RedeliverResponse", "Scheduled", "SourceDoc",
        "SourceList", "SourcePatch", "SourceWrite", "ScheduledDelivery",
        "RedeliverStateDoc",
        # Actions are declared by operators and called by AI agents over MCP (`/mcp/{ns}`,
        # JSON-RPC, spoken by the MCP SDKs), not by a worker.
        "ActionDoc", "ActionList", "ActionWriteDoc", "DeliverDoc", "HttpDeliverDoc",
        "McpAnswer", "McpDeliverDoc", "McpMessage",
    }
    names = set(spec["components"]["schemas"])
    unknown = names - set(MODELS) - set(ENUMS) - operator_only
    assert unknown == set(), f"schemas without a client model: {sorted(unknown)}"
    assert set(MODELS) <= names and set(ENUMS) <= names


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_schema(spec: dict[str, Any], name: str) -> None:
    schemas = spec["components"]["schemas"]
    schema = schemas[name]
    cls = MODELS[name]
    hints = typing.get_type_hints(cls, include_extras=True)
    assert set(hints) == set(schema.get("properties", {})), "member names"
    assert set(cls.__required_keys__) == set(schema.get("required", [])), "required members"
    for member, sub in schema.get("properties", {}).items():
        assert _literal_of(hints[member]) == _enum_of(sub, schemas), f"enum of {member}"


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enum_matches_schema(spec: dict[str, Any], name: str) -> None:
    assert set(get_args(ENUMS[name])) == set(spec["components"]["schemas"][name]["enum"])


def test_claim_outcomes_and_error_codes_are_those_of_the_paths(spec: dict[str, Any]) -> None:
    """Every problem code any path documents is one the client knows."""
    codes: set[str] = set()
    for ops in spec["paths"].values():
        for op in ops.values():
            for resp in op.get("responses", {}).values():
                for content in resp.get("content", {}).values():
                    enum = content.get("schema", {}).get("properties", {}).get("code", {})
                    codes |= set(enum.get("enum", []))
    assert codes <= set(get_args(t.ErrorCode))
