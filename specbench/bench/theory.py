"""The theory of speculative decoding fitted to a sweep's counts: the per-token acceptance
alpha that explains measured drafted and accepted tokens, for the charts' theory curves.

The formulas themselves are core/stats.py's; this module only inverts them on measurements.
"""

from __future__ import annotations

from specbench.core.stats import expected_tokens_per_round


def expected_accepted_fraction(alpha: float, gamma: int) -> float:
    """E[accepted drafts] / gamma for a full draft of gamma tokens, each accepted with
    probability alpha until the first rejection: (E[tokens per round] - 1) / gamma."""
    return (expected_tokens_per_round(alpha, gamma) - 1.0) / gamma


def estimate_alpha(points: list[tuple[int, float, float]]) -> float | None:
    """The per-token acceptance probability alpha that best explains measured counts.

    points: (gamma, drafted, accepted) per run or group. accepted / drafted is not alpha: a
    rejection ends the round, so later drafts never get their chance. We solve
    sum(drafted * E[accepted fraction | alpha, gamma]) = sum(accepted) for alpha by bisection
    (the left side grows with alpha). Assumes full drafts of gamma tokens (a fixed policy).
    """
    points = [(int(g), d, a) for g, d, a in points if g and d]
    if not points:
        return None
    accepted = sum(a for _, _, a in points)

    def excess(alpha: float) -> float:
        return sum(d * expected_accepted_fraction(alpha, g) for g, d, _ in points) - accepted

    lo, hi = 0.0, 1.0
    if excess(hi - 1e-12) <= 0:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
