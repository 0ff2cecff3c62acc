"""The HTTP boundary: what requests may carry and what responses promise.

Requests are strict (unknown fields are errors that name them). Response models are
documentation and a contract that the schema tests check; they allow extra fields
where the core will grow (per-property values, monitor states), so a newer core does
not break older clients.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..guard.spec import Action
from .settings import MODEL_NAME_PATTERN

ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class _In(BaseModel):
    # strict: a JSON true is not a threshold of 1.0, nor "1" a number; what is not what the schema
    # says is refused, naming the field
    model_config = ConfigDict(extra="forbid", strict=True)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# -- requests ---------------------------------------------------------------------------


class ThresholdsIn(_In):
    """Act when p_safe < θ. ``null`` switches an action off."""

    reflect: float | None = Field(default=None, ge=0.0, le=1.0)
    ask_human: float | None = Field(default=None, ge=0.0, le=1.0)
    stop: float | None = Field(default=None, ge=0.0, le=1.0)


class PolicyOverrides(_In):
    """Overrides of the model's policy for one session; what is left out stays as the spec says."""

    thresholds: ThresholdsIn | None = None
    unseen_state: Literal["allow", "reflect", "ask_human", "stop"] | None = Field(
        default=None, description="The action in a state the model never saw.")
    act_on: Literal["point", "upper"] | None = Field(
        default=None, description="Act on p_unsafe ('point') or on its confidence interval's upper end ('upper').")
    min_visits: int | None = Field(default=None, ge=0, description="A state left fewer times in the training "
                                                                     "runs is treated as unseen.")
    trigger: Literal["level", "increase"] | None = Field(
        default=None, description="increase: act only on a step that raises the session's risk by more than "
                                  "min_increase (docs/spec.md).")
    min_increase: float | None = Field(default=None, ge=0.0, le=1.0)


class SessionCreate(_In):
    model: str | None = Field(default=None, pattern=MODEL_NAME_PATTERN,
                              description="A model name; the server's default model when left out.")
    policy: PolicyOverrides | None = None
    metadata: dict[str, Any] | None = Field(default=None, description="Any JSON object, stored with the session.")


class StepIn(_In):
    state: dict[str, Any] = Field(description="The agent's concrete state: any JSON object.")
    action: str | dict[str, Any] | None = Field(default=None, description="What the agent did (string or object).")
    t: float | None = Field(default=None, allow_inf_nan=False, description="Time of the step, in seconds.")
    ask: bool = Field(default=True, description=(
        "Queue an approval when the decision is ask_human (the default). False when the caller asks its "
        "own human before the step runs (the LangChain middleware's interrupt): the step is recorded, "
        "no approval is queued."))
    proposal: str | None = Field(default=None, pattern=ID_PATTERN, description=(
        "The proposal this step ran (POST /v1/sessions/{id}/proposals): it must be allowed, approved or "
        "edited; the step is linked to it and queues no second approval."))


class ProposalIn(_In):
    tool: str = Field(min_length=1, max_length=200, description="The tool the agent wants to call.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    state: dict[str, Any] = Field(description="The concrete state the call would lead to.")
    tools: list[str] | None = Field(default=None, max_length=1000,
                                    description="The agent's tools: what a reviewer may edit the call to.")
    ask: bool | None = Field(default=None, description=(
        "The agent's own verdict, when its look-ahead has one: true — a human decides (pending, whatever the "
        "guard's decision); false — the call runs (allowed; the guard's decision is kept with it). Left out: "
        "the guard's decision sets the status."))
    edit_of: str | None = Field(default=None, pattern=ID_PATTERN, description=(
        "The edited proposal this one re-checks: the same session's, resolved as 'edited'; the agent "
        "re-proposes the edited call with the state it leads to."))
    timeout: float | None = Field(default=None, gt=0, le=7 * 86400, allow_inf_nan=False, description=(
        "Seconds the agent waits for a human before it gives up (withdraws the proposal: the call does not "
        "run). The approver is shown the deadline (review.deadline)."))
    request: str | None = Field(default=None, max_length=4000, description=(
        "The user's request this call serves, in their words: the approver reads it beside the session's "
        "metadata (review.request, review.metadata)."))


class ProposalResolve(_In):
    decision: Literal["approve", "reject", "edit"]
    reason: str | None = Field(default=None, max_length=2000)
    tool: str | None = Field(default=None, min_length=1, max_length=200, description="edit: the tool to call instead.")
    arguments: dict[str, Any] | None = Field(default=None, description="edit: the arguments to call it with.")
    state: dict[str, Any] | None = Field(default=None, description=(
        "edit: the state the edited call would lead to, re-checked (its decision is recorded with the edit)."))


class ProposalCancel(_In):
    reason: str | None = Field(default=None, max_length=2000, description="Why the agent withdrew the call.")


class BatchItem(StepIn):
    proposal: None = Field(default=None, description="Not in a batch: observe a proposal's step on its own.")
    session: str = Field(pattern=ID_PATTERN, description="The session the step belongs to.")
    op: Literal["observe", "preview"] = "observe"


class BatchIn(_In):
    steps: list[BatchItem] = Field(min_length=1, description="Steps, answered in order; all or none are committed.")


class ApprovalResolve(_In):
    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, max_length=4000)


class ModelLoad(_In):
    name: str = Field(pattern=MODEL_NAME_PATTERN)
    path: str | None = Field(default=None, min_length=1, max_length=4096,
                             description="A model file inside one of the server's model_dirs.")
    document: dict[str, Any] | None = Field(default=None, description="The model file's JSON itself (an upload).")
    migrate_sessions: bool = Field(default=False, description="Move the open sessions of this name to the new "
                                                              "version too (their predicates must be the same).")
    allow_rollback: bool = Field(default=False, description="With trusted_keys: serve this model even though it "
                                 "was signed before the version served under this name (rollback protection).")

    @model_validator(mode="after")  # a plain ValueError, as pydantic requires: answered as 422
    def _one_source(self) -> ModelLoad:
        if (self.path is None) == (self.document is None):
            raise ValueError("give exactly one of 'path' (a file in model_dirs) or 'document' (the model itself)")
        return self


# -- responses --------------------------------------------------------------------------


class PropertyValue(_Out):
    name: str
    formula: str
    p_unsafe: float | None
    p_safe: float | None
    lower: float | None = None
    upper: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    threshold: float | None = None
    baseline_p_unsafe: float | None = None
    increase: float | None = None


class AlternativeOut(_Out):
    action_class: str
    risk: float = Field(description="The probability of a violation after this move, then the safest continuation.")
    ci_low: float | None = None
    ci_high: float | None = None
    visits: int = Field(default=0, description="The times the training runs made this move from the state.")


class ModelRef(_Out):
    name: str
    version: str


class DecisionOut(_Out):
    action: Action
    p_unsafe: float | None
    p_safe: float | None
    lower: float | None = Field(default=None, description="Storm's numerical lower bound on p_unsafe.")
    upper: float | None = Field(default=None, description="Storm's numerical upper bound on p_unsafe.")
    ci_low: float | None = Field(default=None, description="Confidence interval of p_unsafe (1 - learning.delta): "
                                                           "lower end; null for a model without intervals.")
    ci_high: float | None = Field(default=None, description="Confidence interval of p_unsafe: upper end.")
    visits: int | None = Field(default=None, description="Departures observed from this state in the training runs.")
    property: str
    threshold: float | None = None
    baseline_p_unsafe: float | None = None  # trigger increase: the session's risk this step was compared with
    increase: float | None = None
    known: bool
    unsafe_now: bool
    abstract_state: dict[str, bool]
    properties: list[PropertyValue]
    monitors: dict[str, Any]
    message: str
    approval_id: str | None = Field(description="Set when the action is ask_human and the step was committed.")
    session_id: str
    step: int | None = Field(description="The committed step's number; null for a preview.")
    committed: bool
    model: ModelRef
    at: float = Field(description="Unix time of the decision, in seconds.")
    member: str | None = Field(default=None, description="A bundle's member that decided: 'pooled' or a group.")
    group: str | None = Field(default=None, description="A bundle's group of the session (from its metadata).")
    fallback: bool = Field(default=False, description="True when the session's group has no model of its own "
                                                      "and the pooled model decided.")
    p_min: float | None = Field(default=None, description="With the model's MDP (docs/shield.md): the least risk "
                                                          "any continuation from the state reaches.")
    alternatives: list[AlternativeOut] = Field(default_factory=list, description=(
        "With the model's MDP: the next moves from the state, safest first (under the shield, those under "
        "its theta)."))
    action_risk: float | None = Field(default=None, description="A proposal with the model's MDP: the risk of the "
                                                                "call's move from where the session stands.")
    proposed: AlternativeOut | None = Field(default=None, description="A proposal with the model's MDP: the "
                                                                      "call's own move, with its interval.")


class SessionCreated(_Out):
    id: str
    model: ModelRef
    policy: dict[str, Any] = Field(description="The session's effective policy.")
    created_at: float


class StepOut(_Out):
    step: int
    at: float
    principal: str
    model_version: str
    input_hash: str
    action: Any = None
    t: float | None = None
    abstract_state: dict[str, bool]
    monitors: dict[str, Any] = Field(default_factory=dict, description="Each monitor's state, in words.")
    monitor_states: list[int] = Field(default_factory=list, description="Each monitor's automaton state.")
    approval_id: str | None = None
    state: dict[str, Any] | None = None
    decision: DecisionOut


class SessionOut(_Out):
    id: str
    status: Literal["open", "closed"]
    model: ModelRef
    policy: dict[str, Any] | None = None
    effective_policy: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    created_at: float
    created_by: str
    closed_at: float | None = None
    closed_by: str | None = None
    steps_total: int
    offset: int
    limit: int
    steps: list[StepOut]


class SessionSummary(_Out):
    id: str
    status: Literal["open", "closed"]
    model: ModelRef
    metadata: dict[str, Any] | None = None
    created_at: float
    closed_at: float | None = None
    steps_total: int


class SessionList(_Out):
    sessions: list[SessionSummary]
    offset: int
    limit: int


class TrailEvent(_Out):
    """One thing that happened in a session, as its trail lists them (``GET /v1/sessions/{id}/trail``)."""

    at: float = Field(description="When (epoch seconds).")
    kind: Literal["opened", "proposed", "step", "approval_requested", "approved", "rejected", "edited",
                  "cancelled", "closed"] = Field(description=(
        "opened/closed: the session; proposed: the agent asked about a call before running it; step: a "
        "committed step (the guard's decision on it); approval_requested: a step's ask_human queued an "
        "approval; approved, rejected, edited, cancelled: the answer to a proposal or approval."))
    by: str | None = Field(default=None, description="Who: the key's name that posted it, or that answered.")
    tool: str | None = Field(default=None, description="The call's tool (a proposal, or a step's action).")
    arguments: Any = Field(default=None, description="A proposal's arguments; an edit's new ones.")
    action: str | None = Field(default=None, description="The guard's action (proposed, step).")
    p_unsafe: float | None = Field(default=None, description="The guard's risk (proposed, step).")
    step: int | None = Field(default=None, description="The committed step it is, or that ran the proposal.")
    proposal: str | None = Field(default=None, description="The proposal it concerns.")
    approval: str | None = Field(default=None, description="The approval it concerns.")
    reason: str | None = Field(default=None, description="An answer's reason.")
    waited: bool | None = Field(default=None, description="proposed: whether it waited for a human.")


class Trail(_Out):
    session: SessionSummary
    events: list[TrailEvent]
    events_total: int
    offset: int
    limit: int


class ApprovalOut(_Out):
    id: str
    session_id: str
    step: int
    status: Literal["pending", "approved", "rejected", "cancelled"]
    created_at: float
    requested_by: str | None = None
    resolved_at: float | None = None
    resolved_by: str | None = None
    reason: str | None = None
    decision: DecisionOut | None = None


class ApprovalList(_Out):
    approvals: list[ApprovalOut]
    offset: int
    limit: int


class PACOut(_Out):
    epsilon: float
    delta: float
    delta_per_state: float
    amplification: float | None
    satisfied: bool
    states_total: int
    states_satisfied: int
    worst: dict[str, Any] | None = None
    states: list[dict[str, Any]] | None = None


class ModelOut(_Out):
    name: str
    version: str
    default: bool
    source: str | None = Field(description="The file or upload it came from; admins only (null for other keys).")
    loaded_at: float
    loaded_by: str | None = Field(description="Who loaded it; admins only (null for other keys).")
    spec: str
    predicates: list[str]
    unsafe: str | None
    property: str
    states: int
    policy: dict[str, Any]
    intervals: dict[str, Any] | None = Field(default=None, description="How the model's confidence intervals were "
                                             "made (method, delta, ...); null for a model without them.")
    provenance: dict[str, Any]
    pac: PACOut
    bundle: dict[str, Any] | None = Field(default=None, description="For a bundle: its grouping key and members; "
                                          "states, property and pac are the pooled model's.")
    signed_at: float | None = Field(default=None, description="When the model file was signed (Unix seconds), as "
                                    "its signature says; null for an unsigned file (or one signed by Forewarn 0.1).")


class RefusedModel(_Out):
    name: str
    version: str
    reason: str = Field(description="Why this server does not serve it (one line).")


class ModelList(_Out):
    models: list[ModelOut]
    default: str
    refused: list[RefusedModel] = Field(
        default_factory=list, description="Admins only: models current in the database that this server refused "
                                          "to serve (e.g. naming a Python predicate nobody registered).")


class ModelLoaded(ModelOut):
    replaced: str | None = Field(description="The version it replaced, if any.")
    migrated_sessions: int


class BatchOut(_Out):
    results: list[DecisionOut]


class ErrorInfo(_Out):
    code: str
    message: str
    field: str | None = None
    predicate: str | None = None


class ErrorBody(_Out):
    error: ErrorInfo
    detail: list[dict[str, Any]] | None = None


class Health(_Out):
    status: Literal["ok"]


class Ready(_Out):
    status: Literal["ready", "not ready"]
    checks: dict[str, bool]
