"""How many tokens to draft: the gamma policies and make_policy.

The GammaPolicy protocol and Keep are core's (specbench/core/protocols.py).

A round asks the policy these things, in this order:
  1. next_gamma()                 the most tokens it may draft this round;
  2. forward_pays(step, feed)     asked by a drafter that runs a forward, before it: run the
                                  forward for draft `step`, feeding `feed` ids? (every policy
                                  but cost says yes: simple.Unpriced);
  3. keep_drafting(step, probs, token)
                                  for each draft token, with the drafter's distribution for
                                  it (None for drafters without one) and the token drawn
                                  from it: a Keep (or a bool: True is Keep.YES, False is
                                  Keep.NO);
  4. update(n_accepted, n_drafted, next_token)
                                  the outcome, once the target has verified, and the token
                                  it emitted after the kept drafts.
Policies that do not care about a step answer with the do-nothing default, so the decoding
loop never asks which kind of policy it holds. info() says what decided the round, for the
StepRecord and the trace; the loop calls it after update(), so a policy keeps the round's
decision apart from its state for the next round. next_gamma() starts a round: a policy
forgets the last round's decision there.

Losslessness rule: whether a draft is kept (NO against YES or LAST) may depend on its row q
and on everything before it, never on the token itself. Keeping a sampled draft only when
it came out a certain way would skew the drafts that reach verification away from q, and
rejection sampling, which assumes the draft was drawn from q, would no longer give the
target's distribution (tests/core/test_lossless.py shows such a policy failing). The
token may decide what happens after it (YES against LAST: whether to draft the next one),
since the kept draft is the same either way. Under greedy the token is q's argmax and
carries no news.

Policies (POLICIES, built by make_policy):
  fixed            always gamma;
  heuristic        HF assisted generation's schedule: +2 after a fully accepted draft, else -1;
  egag             entropy-guided: gamma from the entropy of the first draft step's q;
  entropy-stop     draft up to gamma_max, stop at the first step whose q is too flat;
  confidence-stop  draft up to gamma_max, stop at the first step whose top q is too low;
  cost             draft a token only while its calibrated chance of surviving beats its
                   measured cost (drafter step c, verify cost curve v(k)), and run a drafter
                   forward only while model rounds are expected to pay; starts warm from
                   earlier generations' Evidence (calibration.py).

The entropy signals read the rows the drafter computes anyway (after the shared sampling
processor), so no policy costs a forward pass. This module knows nothing about models or
caches.
"""

from __future__ import annotations

from specbench.core.protocols import GammaPolicy, Keep
from specbench.policies.calibration import Calibration, Evidence
from specbench.policies.cost import CostAwareGamma
from specbench.policies.simple import (
    EntropyGuidedGamma,
    FixedGamma,
    HeuristicGamma,
    ThresholdStop,
    _check_beta,
    _check_gamma,
    _check_range,
    _check_threshold,
    confidence_to_gamma,
    normalized_entropy,
    top_prob,
)

__all__ = [
    "Calibration",
    "confidence_to_gamma",
    "CostAwareGamma",
    "default_gamma",
    "DEFAULT_THRESHOLDS",
    "EntropyGuidedGamma",
    "Evidence",
    "FixedGamma",
    "GammaPolicy",
    "HeuristicGamma",
    "Keep",
    "make_policy",
    "normalized_entropy",
    "POLICIES",
    "ThresholdStop",
    "top_prob",
]

POLICIES = ("fixed", "heuristic", "egag", "entropy-stop", "confidence-stop", "cost")

DEFAULT_THRESHOLDS = {
    "entropy-stop": 0.15,  # h > 0.15: about 1.8 nats over Qwen's 151,936-token vocabulary
    "confidence-stop": 0.4,  # HF's default assistant_confidence_threshold
}


def default_gamma(policy: str) -> int:
    """gamma when the user gives none: the cost policy stops drafting itself once the next
    draft no longer pays for its cost, so its cap only bounds long accepted runs and can be
    high; a fixed gamma pays for every draft, so its cap is low."""
    return 12 if policy == "cost" else 4


def make_policy(
    name: str,
    gamma: int,
    *,
    gamma_min: int = 1,
    gamma_max: int | None = None,
    egag_beta: float = 0.0,
    threshold: float | None = None,
    costs=None,
    warm: Evidence | None = None,
    max_new_tokens: int | None = None,
) -> GammaPolicy:
    """A fresh policy by name (policies keep state: make one per generation).

    gamma is fixed's gamma and heuristic's starting gamma; gamma_max (default: gamma) bounds
    egag, entropy-stop and confidence-stop, and caps heuristic only when given. gamma_min is
    egag's lower end and heuristic's floor. egag_beta is egag's EMA weight; threshold is the
    stop policies' threshold (default DEFAULT_THRESHOLDS). A policy ignores the arguments it
    does not use, but every argument is checked, so a bad value fails whatever the policy.
    costs (anything with .c and .verify_cost, e.g. costs.Costs, and optionally
    .drafter_cost) is required by "cost"; warm (Evidence of earlier generations of the pair
    and drafter) starts its calibration, and max_new_tokens is the horizon it weighs a long
    catch-up against.
    """
    _check_gamma("gamma", gamma)
    _check_range(gamma_min, gamma_max)
    _check_beta(egag_beta)
    if threshold is not None:
        _check_threshold(threshold)
    upper = gamma if gamma_max is None else gamma_max
    if name == "fixed":
        return FixedGamma(gamma)
    if name == "heuristic":
        return HeuristicGamma(gamma, gamma_min, gamma_max)
    if name == "egag":
        if gamma_min > upper:
            raise ValueError(f"gamma-min ({gamma_min}) exceeds {upper}, egag's gamma-max (which defaults to gamma)")
        return EntropyGuidedGamma(gamma_min, upper, egag_beta)
    if name in DEFAULT_THRESHOLDS:
        signal = "entropy" if name == "entropy-stop" else "top_prob"
        return ThresholdStop(upper, DEFAULT_THRESHOLDS[name] if threshold is None else threshold, signal)
    if name == "cost":
        if costs is None or costs.c is None:
            raise ValueError("the cost policy needs measured costs (c and v(k)) of a model drafter")
        drafter_cost = getattr(costs, "drafter_cost", None)
        return CostAwareGamma(
            upper, costs.c, costs.verify_cost, warm, drafter_cost=drafter_cost, max_new_tokens=max_new_tokens
        )
    raise ValueError(f"unknown gamma policy {name!r}; choose from {', '.join(POLICIES)}")
