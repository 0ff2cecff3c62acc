"""A bundle at run time: the :class:`~guard.runtime.Guard` interface, one member per session.

A session's metadata picks its member once, when it opens: the model of its group, or
the pooled model when the metadata lacks the grouping key or the group has no model of
its own (too few runs, or never seen). Every decision names the member that took it
(``Decision.member``, ``.group``) and whether it was the fallback (``.fallback``, and a
sentence at the end of an alert's message). The hot path is the member's own: the
members share one compiled predicate set (and its memo); picking one is a dictionary
look-up per session, never per step.

Each member decides under its own policy: the spec's, with the member's entry of
``guard.member_thresholds`` (``forewarn tune --bundle-by`` writes them) where it has one;
the pooled model, standing in for any group, under the spec's ``guard.thresholds``. A
``policy`` given to the bundle overrides every member's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ._cel_cost import DEFAULT_CPU_BUDGET
from .bundle import POOLED, GuardBundle, group_path, group_value, load_model_or_bundle
from .model import GuardModel
from .policy import Policy
from .predicates import PredicateSet, PythonPredicate
from .runtime import Decision, Guard, Session

__all__ = ["BundleGuard", "load_guard"]

_FALLBACK_LIMIT = 4096  # fallback guards remembered per unknown group value (each keeps its decisions)


class BundleGuard:
    """Guard-like: ``session(metadata=...)``, ``decide``, ``predicates``, ``policy``, ``model`` (the pooled one).

    Args:
        bundle: a learned bundle.
        policy: overrides the spec's thresholds and unseen-state action for every member.
        python_predicates: predicates defined in code, by name.
        cpu_budget: as :class:`Guard`'s, for the members' shared predicates.
        adjust: applied to each member's own policy (:meth:`with_member_policies`).
    """

    def __init__(self, bundle: GuardBundle, *, policy: Policy | None = None,
                 python_predicates: Mapping[str, PythonPredicate] | None = None,
                 predicates: PredicateSet | None = None, cpu_budget: float | None = DEFAULT_CPU_BUDGET,
                 adjust: Callable[[Policy], Policy] | None = None) -> None:
        self.bundle = bundle
        if predicates is None:
            predicates = PredicateSet(bundle.spec, python_predicates)
            predicates.cpu_budget = cpu_budget
        self.predicates = predicates
        self._policy = policy
        self._adjust = adjust
        self._path = group_path(bundle.group_by)
        self.pooled = Guard(bundle.pooled, policy=self.member_policy(None), predicates=self.predicates)
        self._members: dict[str, Guard] = {}
        self._fallbacks: dict[str | None, Guard] = {}

    def member_policy(self, group: str | None) -> Policy:
        """The policy the member of ``group`` decides under (``None``, or a group without a model: the
        pooled one): the bundle's override when given, else the spec's with the member's own thresholds."""
        if self._policy is not None:
            policy = self._policy
        else:
            member = group if group is not None and group in self.bundle.members else None
            policy = Policy.from_settings(self.bundle.spec.guard, member)
        return policy if self._adjust is None else self._adjust(policy)

    @classmethod
    def load(cls, path: str | Path, **options: Any) -> BundleGuard:
        return cls(GuardBundle.load(path), **options)

    # Guard's attributes, from the pooled model (all members share spec, predicates and monitors)
    @property
    def model(self) -> GuardModel:
        return self.bundle.pooled

    @property
    def policy(self) -> Policy:
        return self.pooled.policy

    @property
    def policy_override(self) -> Policy | None:
        """The policy every member decides under, or None: each member's spec's."""
        return self._policy

    @property
    def monitors(self) -> list[Any]:
        return self.pooled.monitors

    @property
    def property(self) -> str:
        return self.pooled.property

    def member(self, group: str | None) -> Guard:
        """The guard deciding for runs of ``group`` (``None``: runs without the grouping key)."""
        if group is not None and group in self.bundle.members:
            guard = self._members.get(group)
            if guard is None:
                guard = self._members[group] = Guard(self.bundle.members[group], policy=self.member_policy(group),
                                                     predicates=self.predicates).with_origin(group, group, False)
            return guard
        guard = self._fallbacks.get(group)
        if guard is None:
            if len(self._fallbacks) >= _FALLBACK_LIMIT:
                self._fallbacks.clear()
            guard = self._fallbacks[group] = self.pooled.with_origin(POOLED, group, True, self._why_pooled(group))
        return guard

    def _why_pooled(self, group: str | None) -> str:
        key = self.bundle.group_by
        if group is None:
            return f"(The run's metadata has no {key}: the pooled model decided.)"
        runs = self.bundle.group_runs.get(group)
        if runs:
            return (f"({key} = {group!r} had {runs} run{'' if runs == 1 else 's'} in learning, fewer than "
                    f"{self.bundle.min_group_runs}: the pooled model decided.)")
        return f"({key} = {group!r} was never seen in learning: the pooled model decided.)"

    def member_name(self, metadata: Mapping[str, Any] | None) -> str | None:
        """The group whose member decides a run with this metadata; ``None`` when the pooled model does."""
        group = group_value(metadata, self._path)
        return group if group is not None and group in self.bundle.members else None

    def for_metadata(self, metadata: Mapping[str, Any] | None) -> Guard:
        """The member guard for a run with this metadata."""
        return self.member(group_value(metadata, self._path))

    def session(self, policy: Policy | None = None, *, metadata: Mapping[str, Any] | None = None) -> Session:
        """A session on the member its metadata picks (``policy`` overrides the bundle's for it alone)."""
        return self.for_metadata(metadata).session(policy, metadata=metadata)

    def with_policy(self, policy: Policy) -> BundleGuard:
        """The same bundle under another policy for every member (shares the models and the predicates)."""
        return BundleGuard(self.bundle, policy=policy, predicates=self.predicates)

    def with_member_policies(self, adjust: Callable[[Policy], Policy]) -> BundleGuard:
        """The same bundle with each member's own policy passed through ``adjust`` (the integrations'
        default trigger, say), so that members keep their own thresholds."""
        return BundleGuard(self.bundle, policy=self._policy, predicates=self.predicates, adjust=adjust)

    def decide(self, state: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, action: Any = None) -> Decision:
        """The decision for a concrete state taken as the first step of a run with this metadata."""
        return self.for_metadata(metadata).decide(state, metadata, action)


def load_guard(path: str | Path, **options: Any) -> Guard | BundleGuard:
    """A guard for a model file, or a bundle guard for a bundle file (options as for :class:`Guard`).

    A model's guard warns as :meth:`Guard.load`'s does (at its first session under the level trigger)
    when a threshold is crossed where runs start.
    """
    loaded = load_model_or_bundle(path)
    if isinstance(loaded, GuardBundle):
        return BundleGuard(loaded, **options)
    guard = Guard(loaded, **options)
    guard.start_warning = True
    return guard
