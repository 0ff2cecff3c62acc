"""Database rows as the API shows them, and policy overrides as the core takes them."""
from __future__ import annotations

from typing import Any

import orjson

from . import schemas as S


def policy_overrides(policy: S.PolicyOverrides | None) -> dict[str, Any] | None:
    """Policy overrides as ``Policy.with_overrides`` takes them. A null at the top means "as the spec
    says"; a null threshold switches that action off."""
    if policy is None:
        return None
    overrides: dict[str, Any] = {}
    if policy.thresholds is not None:
        overrides["thresholds"] = policy.thresholds.model_dump(mode="json", exclude_unset=True)
    if policy.unseen_state is not None:
        overrides["unseen_state"] = policy.unseen_state
    if policy.act_on is not None:
        overrides["act_on"] = policy.act_on
    if policy.min_visits is not None:
        overrides["min_visits"] = policy.min_visits
    if policy.trigger is not None:
        overrides["trigger"] = policy.trigger
    if policy.min_increase is not None:
        overrides["min_increase"] = policy.min_increase
    return overrides or None


def session_summary(row: Any, *, steps_total: int | None = None) -> dict[str, Any]:
    return {
        "id": row["id"], "status": "open" if row["closed_at"] is None else "closed",
        "model": {"name": row["model_name"], "version": row["model_version"]},
        "metadata": orjson.loads(row["metadata"]) if row["metadata"] else None,
        "created_at": row["created_at"], "closed_at": row["closed_at"],
        "steps_total": steps_total if steps_total is not None else row["steps"],
    }


def step_out(row: Any, names: list[str]) -> dict[str, Any]:
    decision = orjson.loads(row["decision"])
    abstract = decision.get("abstract_state") or {n: bool(row["abstract"] >> i & 1) for i, n in enumerate(names)}
    return {
        "step": row["step"], "at": row["at"], "principal": row["principal"], "model_version": row["model_version"],
        "input_hash": row["input_hash"], "action": orjson.loads(row["action_in"]) if row["action_in"] else None,
        "t": row["t"], "abstract_state": abstract, "monitors": decision.get("monitors") or {},
        "monitor_states": orjson.loads(row["monitors"]) if row["monitors"] else [],
        "approval_id": row["approval_id"], "state": orjson.loads(row["state"]) if row["state"] else None,
        "decision": decision,
    }


def approval_out(row: Any) -> dict[str, Any]:
    return {
        "id": row["id"], "session_id": row["session_id"], "step": row["step"], "status": row["status"],
        "created_at": row["created_at"], "requested_by": row["requested_by"], "resolved_at": row["resolved_at"],
        "resolved_by": row["resolved_by"], "reason": row["reason"],
        "decision": orjson.loads(row["decision"]) if row["decision"] else None,
    }
