"""A guard property backed by an llmcheck query on the agent's prompt.

Before the model is sampled, explore what it is likely to write after the agent's
prompt and decide with a :class:`~guard.policy.Policy`: "the model is 40% likely to
propose ``rm -rf`` next — reflect".
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from ..policy import Policy
from ..runtime import Decision
from ..spec import Action, Thresholds
from ..storm import Method
from .chain import Budget, ExploreSettings
from .dtmc.build import Scope
from .explore import DistributionCache
from .pipeline import LLMCheckReport, check_llm, resolve_quantifications
from .quantify import Quantification
from .sources.base import TokenSource


class LLMCheckGuard:
    """Decides on an agent's prompt from the probability that the model's next text is unsafe.

    Args:
        source: the agent's model as a token source.
        property: the *unsafe* event, e.g. ``'P=? [F "destructive_commands>0"]'``.
        quantifications: what its labels read (built-ins named in it are added).
        policy: thresholds on p_safe = 1 − p_unsafe; default reflect 0.9, ask_human 0.5, stop 0.2.
        settings: α, k, depth of the exploration.
        budget: limits per check (the unexplored mass they leave is accounted for).
        conservative: decide on the upper end of the interval (unexplored mass counted as
            unsafe) instead of the paper's value.
        scope: what text the quantifications read (default: only the generated text, so a
            prompt that quotes ``rm -rf`` is not itself a violation).
        cache_size: prompts whose decisions are kept.
    """

    def __init__(self, source: TokenSource, property: str, *,
                 quantifications: Sequence[str | Quantification] = (), policy: Policy | None = None,
                 settings: ExploreSettings | None = None, budget: Budget | None = None,
                 conservative: bool = False, scope: Scope = Scope.GENERATED,
                 method: Method = Method.SOUND, cache_size: int = 128) -> None:
        self.source = source
        self.query, self.quantifications = resolve_quantifications(property, quantifications)
        self.property = property
        self.policy = policy or Policy(Thresholds(reflect=0.9, ask_human=0.5, stop=0.2))
        self.settings = settings or ExploreSettings(alpha=0.9, k=5, depth=8)
        self.budget = budget
        self.conservative = conservative
        self.scope = scope
        self.method = method
        self.last_report: LLMCheckReport | None = None
        self._distributions = DistributionCache()
        self._decisions: OrderedDict[str, tuple[Decision, LLMCheckReport]] = OrderedDict()
        self._cache_size = cache_size

    def check_prompt(self, prompt: str) -> Decision:
        """Explore after ``prompt``, check the property, and decide."""
        cached = self._decisions.get(prompt)
        if cached is not None:
            self._decisions.move_to_end(prompt)
            self.last_report = cached[1]
            return cached[0]
        report = check_llm(self.source, prompt, self.property, quantifications=self.quantifications,
                           settings=self.settings, budget=self.budget, scope=self.scope, method=self.method,
                           cache=self._distributions)
        decision = self._decide(report)
        self._decisions[prompt] = (decision, report)
        if len(self._decisions) > self._cache_size:
            self._decisions.popitem(last=False)
        self.last_report = report
        return decision

    def _decide(self, report: LLMCheckReport) -> Decision:
        result = report.result
        p_unsafe = result.upper if (self.conservative and result.upper is not None) else result.value
        p_unsafe = min(1.0, max(0.0, p_unsafe))
        p_safe = 1.0 - p_unsafe
        action, theta = self.policy.act(p_safe)
        labels = result.labeling.labels
        start = {c.text: 0 in labels[name] for name, c in self.query.comparisons.items()}
        unsafe_now = any(start.values())  # the start text itself already has an unsafe label
        message = "" if action is Action.ALLOW else self._message(report, p_unsafe, action, theta)
        return Decision(action, p_unsafe, p_safe, self.property, start, message, lower=result.lower,
                        upper=result.upper, threshold=theta, known=True, unsafe_now=unsafe_now)

    def _message(self, report: LLMCheckReport, p_unsafe: float, action: Action, theta: float | None) -> str:
        result, settings = report.result, report.model.settings
        event = " or ".join(f"'{c.text}'" for c in self.query.comparisons.values()) or self.property
        interval = ""
        if result.lower is not None and result.upper is not None:
            interval = (f" (between {result.lower:.1%} and {result.upper:.1%} counting the "
                        f"{report.unexplored_mass:.1%} of generations left unexplored)")
        worst = report.satisfying(1)
        example = f" Most likely such continuation: {worst[0].continuation.strip()!r}." if worst else ""
        return (f"Risk alert (llmcheck): within the next {settings.depth} tokens the model is {p_unsafe:.1%} "
                f"likely{interval} to write text where {event} (property {self.property}).{example} "
                f"The probability of staying safe, {1 - p_unsafe:.1%}, is below the '{action.value}' threshold "
                f"{theta}. Revise the plan so that the next action does not need it.")
