"""The simple gamma policies: fixed, HF's heuristic, EGAG, and the threshold stops.

The protocol they implement and the losslessness rule they keep are described in
specbench/policies/__init__.py. The entropy signals read the rows the drafter computes anyway
(after the shared sampling processor), so no policy costs a forward pass. This module knows
nothing about models or caches.
"""

from __future__ import annotations

import math

import torch

from specbench.core.sampling import entropy

# ---------------------------------------------------------------------------- signals


def normalized_entropy(probs: torch.Tensor) -> float:
    """h = H(q) / log(V) in [0, 1] for one row q ([vocab]); V is the row's length.

    H is the Shannon entropy in nats (sampling.entropy). h = 0 for a one-hot row, 1 for a
    uniform one. V is the full vocabulary even after top-k / top-p, so truncation lowers h.
    A vocabulary of one token has h = 0.
    """
    vocab = probs.shape[-1]
    if vocab <= 1:
        return 0.0
    h = float(entropy(probs)) / math.log(vocab)
    return min(1.0, max(0.0, h))


def top_prob(probs: torch.Tensor) -> float:
    """max_x q(x) of one row ([vocab])."""
    return float(probs.max())


def confidence_to_gamma(confidence: float, gamma_min: int, gamma_max: int) -> int:
    """Map a confidence c in [0, 1] onto gamma_min..gamma_max in equal-width bins.

    With L = gamma_max - gamma_min + 1 levels:
        gamma = gamma_min + min(L - 1, floor(c * L))
    so c in [k/L, (k+1)/L) gives gamma_min + k, and c = 1 gives gamma_max. Every gamma owns
    an interval of width 1/L; gamma_max is reached for c >= (L - 1)/L, not only at c = 1.
    Example, gamma_min=1, gamma_max=4 (L=4): c 0.10 -> 1, 0.30 -> 2, 0.60 -> 3, 0.80 -> 4.
    c outside [0, 1] is clamped first.
    """
    levels = gamma_max - gamma_min + 1
    c = min(1.0, max(0.0, confidence))
    return gamma_min + min(levels - 1, math.floor(c * levels))


# ---------------------------------------------------------------------------- policies


class Unpriced:
    """forward_pays for the policies that price no drafter forward: every one is run."""

    def forward_pays(self, step: int, feed: int) -> bool:
        return True


class FixedGamma(Unpriced):
    """Always gamma tokens."""

    name = "fixed"

    def __init__(self, gamma: int):
        _check_gamma("gamma", gamma)
        self.gamma = gamma

    def next_gamma(self) -> int:
        return self.gamma

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        return True

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None:
        """No-op: a fixed gamma learns nothing."""

    def info(self) -> dict:
        return {}


class HeuristicGamma(Unpriced):
    """HF assisted generation's "heuristic" schedule (transformers 5.23,
    AssistedCandidateGenerator.update_candidate_strategy):

        all drafts accepted (n_accepted == n_drafted):  gamma <- gamma + 2
        otherwise:                                      gamma <- max(1, gamma - 1)

    "All" is compared with the tokens actually drafted, as HF does, not with gamma.
    Two additions, both inert at their defaults: the floor is gamma_min (default 1, HF's
    floor) and an optional cap gamma_max (default None: no cap, as in HF).
    One deviation: HF counts a round that drafted nothing as fully accepted (0 == 0) and
    adds 2; here such a round (no room left, or an n-gram drafter with no match) leaves
    gamma as it is, since it says nothing about how good the drafts are.
    info(): {"gamma": this round's gamma, "next_gamma": the next round's}.
    """

    name = "heuristic"

    def __init__(self, gamma: int, gamma_min: int = 1, gamma_max: int | None = None):
        _check_range(gamma_min, gamma_max)
        _check_gamma("gamma", gamma)
        if gamma < gamma_min or (gamma_max is not None and gamma > gamma_max):
            raise ValueError(
                f"the heuristic policy starts at gamma={gamma}, outside gamma-min..gamma-max ({gamma_min}..{gamma_max})"
            )
        self.gamma = gamma
        self.gamma_min = gamma_min
        self.gamma_max = gamma_max
        self._round_gamma = gamma

    def next_gamma(self) -> int:
        self._round_gamma = self.gamma
        return self.gamma

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        return True

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None:
        if n_drafted == 0:
            return
        if n_accepted == n_drafted:
            self.gamma += 2
            if self.gamma_max is not None:
                self.gamma = min(self.gamma, self.gamma_max)
        else:
            self.gamma = max(self.gamma_min, self.gamma - 1)

    def info(self) -> dict:
        return {"gamma": self._round_gamma, "next_gamma": self.gamma}


class EntropyGuidedGamma(Unpriced):
    """EGAG: entropy-guided adaptive gamma, decided at draft step 0 of each round.

    At step 0, keep_drafting receives q_0, the drafter's processed distribution for the
    round's first draft token (computed anyway: no extra forward). Then
        h = H(q_0) / log(V)                               (normalized_entropy)
        c = 1 - h                                         the round's confidence
        s = c                          on the first decision of a generation,
        s = beta * s_prev + (1 - beta) * c                after it (EMA; beta = 0: no smoothing)
        gamma = gamma_min + min(L - 1, floor(s * L)),  L = gamma_max - gamma_min + 1
                                                          (confidence_to_gamma)
    and keep_drafting(step, .) answers step < gamma for the rest of the round.
    next_gamma() returns gamma_max, the round's upper bound.

    Drafters without q (n-gram, prompt lookup) call keep_drafting(0, None). There is no
    entropy then, so the confidence c is the previous round's acceptance ratio
    n_accepted / n_drafted (1.0 before any round that drafted), fed through the same EMA
    and mapping: a drafter whose guesses keep failing drafts less. Rounds that drafted
    nothing leave that ratio as it was.

    info(): {"entropy": h, "confidence": s, "gamma": gamma} (or "acceptance" in place of
    "entropy" for drafters without q); {} for a round where step 0 never came (nothing
    was drafted, so nothing was decided).
    """

    name = "egag"

    def __init__(self, gamma_min: int, gamma_max: int, beta: float = 0.0):
        _check_range(gamma_min, gamma_max)
        _check_beta(beta)
        self.gamma_min = gamma_min
        self.gamma_max = gamma_max
        self.beta = beta
        self._smoothed: float | None = None  # s, the EMA of the confidence
        self._last_acceptance = 1.0  # fallback signal for drafters without q
        self._round: dict = {}
        self._round_gamma = gamma_max

    def next_gamma(self) -> int:
        self._round = {}
        self._round_gamma = self.gamma_max
        return self.gamma_max

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        if step == 0:
            self._decide(draft_probs)
        return step < self._round_gamma

    def _decide(self, draft_probs: torch.Tensor | None) -> None:
        if draft_probs is not None:
            h = normalized_entropy(draft_probs)
            signal, confidence = {"entropy": h}, 1.0 - h
        else:
            signal, confidence = {"acceptance": self._last_acceptance}, self._last_acceptance
        if self._smoothed is None:
            self._smoothed = confidence
        else:
            self._smoothed = self.beta * self._smoothed + (1.0 - self.beta) * confidence
        self._round_gamma = confidence_to_gamma(self._smoothed, self.gamma_min, self.gamma_max)
        self._round = {**signal, "confidence": self._smoothed, "gamma": self._round_gamma}

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None:
        if n_drafted > 0:
            self._last_acceptance = n_accepted / n_drafted

    def info(self) -> dict:
        return dict(self._round)


class ThresholdStop(Unpriced):
    """Draft up to gamma_max tokens; stop at the first step whose q looks too uncertain.

    Before draft step i, keep_drafting receives q_i (the drafter's processed row for that
    token) and refuses the token, ending the round, when
        signal "entropy":   h(q_i) = H(q_i) / log(V) > threshold   (policy "entropy-stop",
                            in the spirit of SVIP / AdaEDL, which bound acceptance by entropy)
        signal "top_prob":  max_x q_i(x) < threshold               (policy "confidence-stop",
                            after HF's assistant_confidence_threshold)
    Step 0 may stop too: the round is then a plain target step. HF tests the probability of
    the token it drew and keeps that token; the protocol hands over q_i before the token, so
    this tests the top probability (the same thing under greedy) and drops the token.
    Drafters without q (keep_drafting(i, None)) are never stopped: they draft as far as their
    own matches go, up to gamma_max.

    info(): {"stopped_at": i or None, <signal>: its value at the stop, or the least
    confident value among the drafted steps (None if none had q), "threshold": threshold}.
    """

    SIGNALS = {"entropy": "entropy-stop", "top_prob": "confidence-stop"}

    def __init__(self, gamma_max: int, threshold: float, signal: str = "entropy"):
        if signal not in self.SIGNALS:
            raise ValueError(f"unknown stop signal {signal!r}; choose from {', '.join(self.SIGNALS)}")
        _check_gamma("gamma-max", gamma_max)
        _check_threshold(threshold)
        self.name = self.SIGNALS[signal]
        self.gamma_max = gamma_max
        self.threshold = threshold
        self.signal = signal
        self.next_gamma()

    def next_gamma(self) -> int:
        self._stopped_at: int | None = None
        self._value: float | None = None
        return self.gamma_max

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        if draft_probs is None:
            return True
        value = self._measure(draft_probs)
        if self._crosses(value):
            self._stopped_at, self._value = step, value
            return False
        if self._value is None or self._crosses_before(value, self._value):
            self._value = value  # the least confident step drafted so far
        return True

    def _measure(self, draft_probs: torch.Tensor) -> float:
        return normalized_entropy(draft_probs) if self.signal == "entropy" else top_prob(draft_probs)

    def _crosses(self, value: float) -> bool:
        return value > self.threshold if self.signal == "entropy" else value < self.threshold

    def _crosses_before(self, value: float, other: float) -> bool:
        """True if value is less confident than other."""
        return value > other if self.signal == "entropy" else value < other

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None:
        """No-op: the stop rule looks only at the current draft."""

    def info(self) -> dict:
        return {"stopped_at": self._stopped_at, self.signal: self._value, "threshold": self.threshold}


# ---------------------------------------------------------------------------- checks


def _check_gamma(label: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{label} must be an integer >= 1, got {value!r}")


def _check_range(gamma_min: int, gamma_max: int | None) -> None:
    _check_gamma("gamma-min", gamma_min)
    if gamma_max is not None:
        _check_gamma("gamma-max", gamma_max)
        if gamma_min > gamma_max:
            raise ValueError(f"gamma-min ({gamma_min}) must not exceed gamma-max ({gamma_max})")


def _check_beta(beta: float) -> None:
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"egag-beta must be in [0, 1), got {beta}")


def _check_threshold(threshold: float) -> None:
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
