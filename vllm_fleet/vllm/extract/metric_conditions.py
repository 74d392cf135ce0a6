"""Path conditions of metric-creating code, and their truth per feature scenario.

A scenario is the set of features switched on (``speculative``, ``lora``, ...; the empty set is vLLM's defaults).
A ``Cond`` carries the truth of its test in every scenario over the features it reads, so that a metric's
conditions classify it as ``always`` created or created only with some features (``classify``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

Scenario = frozenset[str]
#: A condition reads at most this many features (2**n scenarios each).
MAX_FEATURES = 5


@dataclass(frozen=True)
class Cond:
    """A path condition, with its truth in every scenario (set of switched-on features) that matters to it."""

    key: str  # source text of the positive test
    positive: bool
    features: frozenset[str]
    table: tuple[tuple[Scenario, bool | None], ...]  # truth of the positive test, per subset of ``features``

    @property
    def text(self) -> str:
        return self.key if self.positive else f"not ({self.key})"

    def truth(self, scenario: Scenario = frozenset()) -> bool | None:
        t = dict(self.table).get(scenario & self.features)
        return t if self.positive or t is None else not t

    def negate(self) -> Cond:
        return Cond(self.key, not self.positive, self.features, self.table)


def pseudo_cond(text: str, feature: str) -> Cond:
    """A condition outside the code read (``<kv_connector configured>``): true iff ``feature`` is on."""
    return Cond(text, True, frozenset({feature}), ((frozenset(), False), (frozenset({feature}), True)))


def merge_conds(*groups: Iterable[Cond]) -> tuple[Cond, ...]:
    """The conditions of all groups, each (test, polarity) once, in first-seen order."""
    out: dict[tuple[str, bool], Cond] = {}
    for group in groups:
        for c in group:
            out.setdefault((c.key, c.positive), c)
    return tuple(out.values())


def consistent(*groups: Iterable[Cond]) -> bool:
    """False when the conditions contain a test and its negation (an impossible path)."""
    seen: dict[str, bool] = {}
    for group in groups:
        for c in group:
            if seen.setdefault(c.key, c.positive) != c.positive:
                return False
    return True


def classify(conds: Iterable[Cond]) -> tuple[str, list[str]]:
    """``always``; else the minimal feature sets that make every condition true (``a+b``, alternatives
    ``|``-joined); ``unknown`` when no scenario decides. Plus the texts of the conditions not true by default."""
    conds = list(conds)
    texts = [c.text for c in conds if c.truth() is not True]
    if not texts:
        return "always", []
    universe = sorted(set().union(*(c.features for c in conds)))[: MAX_FEATURES + 2]
    minimal: list[frozenset[str]] = []
    undecided = False
    for r in range(len(universe) + 1):
        for combo in itertools.combinations(universe, r):
            scen = frozenset(combo)
            if any(m <= scen for m in minimal):
                continue
            truths = [c.truth(scen) for c in conds]
            if all(t is True for t in truths):
                minimal.append(scen)
            elif None in truths and False not in truths:
                undecided = True
    if not minimal:
        return ("unknown" if undecided else "never"), texts
    if frozenset() in minimal:
        return "always", texts
    return "|".join(sorted("+".join(sorted(m)) for m in minimal)), texts
