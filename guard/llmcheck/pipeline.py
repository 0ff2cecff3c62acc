"""The whole check in one call, and sweeps over α and k (the paper's RQ1 trade-off)."""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from ..storm import Method
from .chain import Budget, ExploredModel, ExploreSettings, StateKind
from .dtmc.build import Scope
from .dtmc.check import CheckResult, check_explored
from .explore import DistributionCache, explore
from .quantify import Quantification, available_quantifications, parse_quantifications
from .query import Query, parse_query
from .sources.base import TokenSource


@dataclass(frozen=True)
class Outcome:
    """A text where generation stops in the explored chain, and how likely that is.

    ``satisfies`` is whether the property holds from that text on: for a complete text
    (leaf or ended) that is settled; for a cut text it is ``None`` unless every possible
    continuation agrees.
    """

    text: str
    continuation: str
    probability: float
    kind: StateKind
    satisfies: bool | None
    values: dict[str, int]

    def to_dict(self) -> dict[str, object]:
        return {"continuation": self.continuation, "text": self.text, "probability": self.probability,
                "kind": self.kind.value, "satisfies": self.satisfies, "values": self.values}


@dataclass
class LLMCheckReport:
    """Everything ``forewarn llmcheck`` prints: the answer, the model's size, the cost."""

    model: ExploredModel
    result: CheckResult
    quantifications: tuple[Quantification, ...]
    scope: Scope
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def value(self) -> float:
        return self.result.value

    @property
    def unexplored_mass(self) -> float:
        return self.model.unexplored_mass

    def satisfying(self, n: int = 5) -> list[Outcome]:
        return [o for o in self.outcomes if o.satisfies is True][:n]

    def violating(self, n: int = 5) -> list[Outcome]:
        return [o for o in self.outcomes if o.satisfies is False][:n]

    def to_dict(self, top: int = 5) -> dict[str, object]:
        m, r, st = self.model, self.result, self.model.stats
        return {
            "property": r.query.text, "storm_formula": r.query.formula(), "prompt": m.prompt, "source": m.source,
            "alpha": m.settings.alpha, "k": m.settings.k, "depth": m.settings.depth, "scope": self.scope.value,
            "quantifications": {q.name: q.spec for q in self.quantifications},
            "value": r.value, "lower": r.lower, "upper": r.upper,
            "value_lower": r.value_lower, "value_upper": r.value_upper, "verdict": r.verdict,
            "method": r.method.value, "note": r.note,
            "unexplored_mass": self.unexplored_mass,
            "model": {"states": m.size, "transitions": m.transitions, "expanded": st.expanded,
                      "leaves": m.count(StateKind.LEAF), "ended": m.count(StateKind.ENDED),
                      "cut": m.count(StateKind.CUT), "merged_paths": st.merged},
            "cost": {"model_calls": st.model_calls, "batches": st.batches, "cache_hits": st.cache_hits,
                     "prefixes_per_batch": round(st.prefixes_per_batch, 3),
                     "explore_seconds": round(st.seconds, 6), "model_seconds": round(st.model_seconds, 6),
                     "check_seconds": round(r.seconds, 6), "seconds": round(self.seconds, 6),
                     "stopped_by": st.stopped_by},
            "satisfying": [o.to_dict() for o in self.satisfying(top)],
            "violating": [o.to_dict() for o in self.violating(top)],
        }


def resolve_quantifications(query_text: str, specs: Iterable[str | Quantification]) -> tuple[Query, tuple[Quantification, ...]]:
    """Parse the property; add the built-in quantifications it names that were not given."""
    given = list(parse_quantifications(specs))
    known = set(available_quantifications())
    query = parse_query(query_text, [q.name for q in given] + sorted(known))
    names = {q.name for q in given}
    extra = [name for name in query.quantities if name not in names and name in known]
    return query, tuple(given) + parse_quantifications(extra)


def outcomes_of(model: ExploredModel, result: CheckResult) -> list[Outcome]:
    """Leaf, ended and cut texts with the probability of stopping there, most likely first."""
    visit = model.visit_probabilities()
    out = []
    for s in model.states:
        if s.kind not in (StateKind.LEAF, StateKind.ENDED, StateKind.CUT) or visit[s.index] <= 0.0:
            continue
        satisfies: bool | None
        if s.kind is StateKind.CUT:
            lo = result.state_lower[s.index] if result.state_lower is not None else None
            hi = result.state_upper[s.index] if result.state_upper is not None else None
            satisfies = True if lo is not None and lo >= 1 - 1e-9 else False if hi is not None and hi <= 1e-9 else None
        else:
            satisfies = bool(result.values[s.index] >= 0.5)  # 0 or 1: the state is absorbing
        values = {name: v for name, column in result.labeling.values.items() if (v := column[s.index]) is not None}
        out.append(Outcome(s.text, s.continuation, visit[s.index], s.kind, satisfies, values))
    out.sort(key=lambda o: (-o.probability, o.text))  # equal ones by text: a stated order
    return out


def check_llm(source: TokenSource, prompt: str, property: str, *,
              quantifications: Sequence[str | Quantification] = (), settings: ExploreSettings | None = None,
              budget: Budget | None = None, scope: Scope = Scope.GENERATED, method: Method = Method.SOUND,
              precision: float = 1e-9, bounds: bool = True, cache: DistributionCache | None = None,
              on_level: Callable[[int, int], None] | None = None) -> LLMCheckReport:
    """Explore the α-k-bounded DTMC after ``prompt`` and check ``property`` on it with Storm.

    Args:
        source: the token source.
        prompt: the start text.
        property: ``P=? [path formula]`` over quantification labels such as ``"gender_bias>0"``.
        quantifications: specs (``"similarity:ref.txt"``) or objects; built-ins named in the
            property are added by themselves.
        settings: α, k, depth.
        budget: exploration limits.
        scope: whether quantifications read the generated text only or the whole text.
        method: Storm's method.
        precision: solver precision.
        bounds: compute the unexplored-mass interval.
        cache: next-token distributions to reuse (sweeps).
        on_level: progress callback (depth, states).
    """
    started = time.perf_counter()
    query, quants = resolve_quantifications(property, quantifications)
    model = explore(source, prompt, settings, budget=budget, cache=cache, on_level=on_level)
    result = check_explored(model, query, quants, scope=scope, method=method, precision=precision, bounds=bounds)
    report = LLMCheckReport(model, result, quants, scope, outcomes_of(model, result))
    report.seconds = time.perf_counter() - started
    return report


@dataclass(frozen=True)
class SweepRow:
    """One (α, k) point: the answer and what it cost."""

    alpha: float
    k: int
    depth: int
    value: float
    lower: float | None
    upper: float | None
    unexplored_mass: float
    states: int
    expanded: int  # model calls this point needs on its own (one per expanded prefix)
    new_calls: int  # model calls it made, the others answered by the shared cache
    seconds: float

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def sweep(source: TokenSource, prompt: str, property: str, *, alphas: Sequence[float], ks: Sequence[int],
          depths: Sequence[int], quantifications: Sequence[str | Quantification] = (),
          budget: Budget | None = None, scope: Scope = Scope.GENERATED, method: Method = Method.SOUND,
          precision: float = 1e-9) -> list[SweepRow]:
    """Check ``property`` for every (α, k, depth); one distribution cache serves all points.

    Points run from the largest k, α and depth down so the cache answers the smaller ones.
    Rows come back in the grid's natural order (α, then k, then depth, ascending).
    """
    cache = DistributionCache()
    rows = []
    grid = sorted(itertools.product(alphas, ks, depths), key=lambda p: (-p[1], -p[0], -p[2]))
    for alpha, k, depth in grid:
        report = check_llm(source, prompt, property, quantifications=quantifications,
                           settings=ExploreSettings(alpha, k, depth), budget=budget, scope=scope, method=method,
                           precision=precision, cache=cache)
        st = report.model.stats
        rows.append(SweepRow(alpha, k, depth, report.value, report.result.lower, report.result.upper,
                             report.unexplored_mass, report.model.size, st.expanded, st.model_calls,
                             report.seconds))
    rows.sort(key=lambda r: (r.alpha, r.k, r.depth))
    return rows
