"""Pearson chi-square of sampled sequences against their exact distribution (shared by the
losslessness tests)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from scipy.stats import chisquare

View = Callable[[tuple], object]  # what of a sampled sequence to compare: a position, a pair, ...


def pvalues(outputs: list[tuple], joint: dict[tuple, float], views: dict[str, View]) -> dict[str, float]:
    """One p-value per view: observed counts of view(output) vs the exact marginal of `joint`."""
    result = {}
    for name, view in views.items():
        expected = Counter()
        for seq, prob in joint.items():
            expected[view(seq)] += prob
        result[name] = chi_square_pvalue(Counter(view(o) for o in outputs), expected, len(outputs))
    return result


def chi_square_pvalue(observed: Counter, expected: Counter, n: int) -> float:
    """Pearson chi-square; cells expected fewer than 5 times are pooled into one."""
    if any(count and expected[cell] == 0 for cell, count in observed.items()):
        return 0.0  # an impossible outcome was sampled (e.g. outside top-k / top-p)
    big = [cell for cell, p in expected.items() if p * n >= 5]
    small = [cell for cell, p in expected.items() if 0 < p * n < 5]
    f_exp = [expected[c] * n for c in big]
    f_obs = [observed[c] for c in big]
    if small:
        f_exp.append(sum(expected[c] for c in small) * n)
        f_obs.append(sum(observed[c] for c in small))
    if len(f_exp) < 2:
        return 1.0  # one possible outcome, and nothing impossible was seen
    scale = n / sum(f_exp)  # the exact probabilities sum to 1 only up to rounding
    return float(chisquare(f_obs, [e * scale for e in f_exp]).pvalue)
