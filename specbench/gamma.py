"""How many tokens to draft: the GammaPolicy protocol and its policies.

A round asks the policy three things, in this order:
  1. next_gamma()                 the most tokens it may draft this round;
  2. keep_drafting(step, probs, token)
                                  for each draft token, with the drafter's distribution for
                                  it (None for drafters without one) and the token drawn
                                  from it: a Keep (or a bool: True is Keep.YES, False is
                                  Keep.NO);
  3. update(n_accepted, n_drafted) the outcome, once the target has verified.
Policies that do not care about a step answer with the do-nothing default, so the decoding
loop never asks which kind of policy it holds. info() says what decided the round, for the
StepRecord and the trace; the loop calls it after update(), so a policy keeps the round's
decision apart from its state for the next round. next_gamma() starts a round: a policy
forgets the last round's decision there.

Losslessness rule: whether a draft is kept (NO against YES or LAST) may depend on its row q
and on everything before it, never on the token itself. Keeping a sampled draft only when
it came out a certain way would skew the drafts that reach verification away from q, and
rejection sampling, which assumes the draft was drawn from q, would no longer give the
target's distribution (tests/test_lossless.py shows such a policy failing). The
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
                   measured cost (drafter step c, verify cost curve v(k)).

The entropy signals read the rows the drafter computes anyway (after the shared sampling
processor), so no policy costs a forward pass. This module knows nothing about models or
caches.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import Protocol

import torch

from specbench.sampling import entropy


class Keep(IntEnum):
    """A policy's answer for one draft step; the drafter has already paid for its row.

    NO    drop this token and end the round;
    YES   keep it and draft the next one (another drafter forward);
    LAST  keep it and end the round: no forward for a row the policy would refuse anyway.
    """

    NO = 0
    YES = 1
    LAST = 2


class GammaPolicy(Protocol):
    name: str

    def next_gamma(self) -> int: ...

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> Keep | bool: ...

    def update(self, n_accepted: int, n_drafted: int) -> None: ...

    def info(self) -> dict: ...


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


class FixedGamma:
    """Always gamma tokens."""

    name = "fixed"

    def __init__(self, gamma: int):
        _check_gamma("gamma", gamma)
        self.gamma = gamma

    def next_gamma(self) -> int:
        return self.gamma

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        return True

    def update(self, n_accepted: int, n_drafted: int) -> None:
        """No-op: a fixed gamma learns nothing."""

    def info(self) -> dict:
        return {}


class HeuristicGamma:
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
            raise ValueError(f"the heuristic policy starts at gamma={gamma}, outside gamma-min..gamma-max ({gamma_min}..{gamma_max})")
        self.gamma = gamma
        self.gamma_min = gamma_min
        self.gamma_max = gamma_max
        self._round_gamma = gamma

    def next_gamma(self) -> int:
        self._round_gamma = self.gamma
        return self.gamma

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> bool:
        return True

    def update(self, n_accepted: int, n_drafted: int) -> None:
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


class EntropyGuidedGamma:
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

    def update(self, n_accepted: int, n_drafted: int) -> None:
        if n_drafted > 0:
            self._last_acceptance = n_accepted / n_drafted

    def info(self) -> dict:
        return dict(self._round)


class ThresholdStop:
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

    def update(self, n_accepted: int, n_drafted: int) -> None:
        """No-op: the stop rule looks only at the current draft."""

    def info(self) -> dict:
        return {"stopped_at": self._stopped_at, self.signal: self._value, "threshold": self.threshold}



class CostAwareGamma:
    """Draft a token only while it is expected to pay for itself (policy "cost").

    Costs, measured once per model pair and in units of one target single-token forward:
    c = a drafter step, v(k) = a target forward over k tokens (v(1) = 1; on CPUs v(2) is far
    above 1 while v(3..9) add little). d_i = v(i + 2) - v(i + 1) is what verifying draft i
    adds. Signals, read from the rows the drafter computes anyway: the confidence
    m_i = max_x q_i(x) of draft step i, mapped to an acceptance probability a(m) by
    calibration tables learned online from this generation's verdicts (10 bins of m, each
    starting from 2 pseudo-verdicts at the bin's midpoint: a calibrated drafter's top
    probability is its chance of matching). Drafters without q use one bin for all steps.
    There are two tables, one for step 0 and one for the steps after it: a round starts
    right after a rejection, where text is harder to guess, and a draft that follows
    accepted drafts is in an easier stretch, so pooling them made deep drafts look worse
    than they were.

    P_i = a(m_0) * ... * a(m_i) is the chance that drafts 0..i all survive, which is the
    expected number of tokens draft i adds. A token is worth what it costs at the rate this
    generation is running: lambda = tokens / cost over its rounds so far (a round's cost is
    its paid drafter steps times c plus v(drafts + 1); a plain round costs 1), with a prior
    of 2 rounds at 1 token each, and never below 1. Adding a draft pays when its tokens beat
    lambda times its cost (Dinkelbach's rule for the best ratio of tokens to time; with
    lambda = 1, as before, a draft that merely breaks even against plain decoding was
    drafted, which lowers a rate above 1). When keep_drafting(i, q_i) is asked, the drafter
    step that made q_i is paid for, so two separate questions are answered:
      keep draft i?    step 0:  P_0 * (1 + R) >= lambda * d_0
                                (R: mean further accepted drafts after an accepted first
                                one, learned online: the fixed cost of verifying at all is
                                weighed against the round's expected yield)
                       step i:  P_i >= lambda * d_i
      draft i + 1?     P_i * f(m_i) >= lambda * (d_(i+1) + c)
                       (the next row's confidence is not known yet; f(m) is how often a
                       forward that followed an accepted draft of confidence m yielded an
                       accepted draft, a refused row counting as none: its own table, fed the
                       same verdicts. The row's own a(m) overrated the next row where a
                       confident token is followed by a hard one, as in translation. c is 0
                       for a draft without q: it came from a table or a copy, not from a
                       forward)
    Keep.NO, Keep.YES or Keep.LAST follow. LAST saves the forward for a row that would be
    refused: an earlier version asked only "P_i >= d_i + c" after the forward, and so paid c
    for one refused row in almost every round.
    Sampled drafts: once draft i is kept, its token is known, and a token drawn from the
    tail of q_i (q_i(token) well below m_i) survives far less often than m_i promises (a
    scratch check on the default pair, two translation prompts at T=0.7: 1 of 17 drafts
    drawn with q(token) < 0.3 survived). So P_i is re-read from tables binned by
    q_i(token) (per depth, fed the same verdicts), and that P_i answers "draft i + 1?" and
    carries into the next steps. The keep answer never sees the token
    (the losslessness rule above). Under greedy q_i(token) = m_i: the same bin, the same
    counts, the same decisions as without the table.
    Back-off: a refused step 0 with q wasted one drafter step, so the policy then skips the drafter
    for `skip` rounds (plain target steps, no drafter cost: next_gamma() returns 0), doubling
    skip after each consecutive refusal up to 16 and resetting it after a round that drafts.

    info(): {"p_all": P at the last decision (for "draft i + 1?": P_i * a(m_i)), "cost":
    its threshold (lambda included), "stopped_at": the first step not drafted (None if the
    round drafted gamma_max), "rate": lambda}, or {"skipped": True} on a skipped round.
    """

    name = "cost"
    BINS = 10
    PRIOR_WEIGHT = 2.0
    RATE_PRIOR = 2.0  # lambda starts as this many rounds of 1 token for 1 target step
    MAX_SKIP = 16

    def __init__(self, gamma_max: int, c: float, verify_cost: dict[int, float], *, at_rate: bool = True, split_first: bool = True, read_token: bool = True, follow: bool = True):
        """at_rate=False prices every token at 1 (lambda = 1); split_first=False pools step 0's
        verdicts with the later steps'; read_token=False ignores the drawn token; follow=False
        prices the next draft with this row's own a(m) instead of f(m). Each is the policy
        before a change, kept for bench/replay_policies.py, bench/rate_policy_ab.py and
        bench/drawn_token_ab.py."""
        _check_gamma("gamma-max", gamma_max)
        if not c >= 0:
            raise ValueError(f"the drafter cost ratio c must be >= 0, got {c}")
        self.gamma_max, self.c = gamma_max, c
        self.at_rate, self.split_first, self.read_token, self.follow = at_rate, split_first, read_token, follow
        self.v = _verify_curve(verify_cost, gamma_max + 1)
        prior = [self.PRIOR_WEIGHT * (b + 0.5) / self.BINS for b in range(self.BINS + 1)]
        # [depth][bin]: depth 0 is step 0, depth 1 every later step; the last bin: drafts without q
        self._accepted = [list(prior), list(prior)]
        self._checked = [[self.PRIOR_WEIGHT] * (self.BINS + 1) for _ in range(2)]
        # the same, binned by the drawn token's q instead of the row's top q
        self._accepted_drawn = [list(prior), list(prior)]
        self._checked_drawn = [[self.PRIOR_WEIGHT] * (self.BINS + 1) for _ in range(2)]
        # [bin of row i]: forwards run after an accepted draft i, and how many yielded an accepted draft
        self._followed = list(prior)
        self._follow_runs = [self.PRIOR_WEIGHT] * (self.BINS + 1)
        self._after_first = [1.0, 1.0]  # further accepted drafts, rounds with the first accepted
        self._tokens, self._cost = self.RATE_PRIOR, self.RATE_PRIOR  # lambda = tokens / cost
        self._skip, self._skip_left = 0, 0
        self.next_gamma()

    def next_gamma(self) -> int:
        self._bins: list[int] = []  # per kept draft: the bin of its row's top q
        self._drawn_bins: list[int] = []  # per kept draft: the bin of its own token's q
        self._paid = 0  # drafter forwards this round
        self._rate = max(1.0, self._tokens / self._cost) if self.at_rate else 1.0
        self._p_all, self._threshold, self._stopped_at, self._wasted = 1.0, 0.0, None, False
        self._skipped = self._skip_left > 0
        if self._skipped:
            self._skip_left -= 1
            return 0
        return self.gamma_max

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> Keep:
        free = draft_probs is None  # a model-free draft (a table or a copy): no forward to pay
        self._paid += 0 if free else 1
        b = self.BINS if free else _bin(top_prob(draft_probs), self.BINS)
        depth = self._depth(step)
        p_before = self._p_all
        p_all = p_before * self._acceptance(depth, b)
        gain = p_all * (1.0 + self._after_first[0] / self._after_first[1]) if step == 0 else p_all
        self._p_all, self._threshold = p_all, self._rate * self._added(step)
        if gain < self._threshold:  # the row alone decides: the token is not looked at
            self._stopped_at, self._wasted = step, not free
            return Keep.NO
        # kept whatever follows; from here on the token may inform what comes next
        drawn = b if free or token is None or not self.read_token else _bin(float(draft_probs[token]), self.BINS)
        self._bins.append(b)
        self._drawn_bins.append(drawn)
        if drawn != b:
            p_all = p_before * self._drawn_acceptance(depth, drawn)
            self._p_all = p_all
        if step + 1 >= self.gamma_max:
            return Keep.LAST
        next_gain = p_all * (self._follow_acceptance(b) if self.follow else self._acceptance(self._depth(step + 1), b))
        next_cost = self._rate * (self._added(step + 1) + (0.0 if free else self.c))
        if next_gain < next_cost:
            self._p_all, self._threshold, self._stopped_at = next_gain, next_cost, step + 1
            return Keep.LAST
        return Keep.YES

    def _depth(self, step: int) -> int:
        return min(step, 1) if self.split_first else 0

    def _acceptance(self, depth: int, b: int) -> float:
        return self._accepted[depth][b] / self._checked[depth][b]

    def _drawn_acceptance(self, depth: int, b: int) -> float:
        return self._accepted_drawn[depth][b] / self._checked_drawn[depth][b]

    def _follow_acceptance(self, b: int) -> float:
        return self._followed[b] / self._follow_runs[b]

    def _added(self, step: int) -> float:
        """d_step: the verify cost that draft `step` adds."""
        return self.v[step + 2] - self.v[step + 1]

    def update(self, n_accepted: int, n_drafted: int) -> None:
        for i, (b, drawn) in enumerate(zip(self._bins[:n_drafted], self._drawn_bins)):
            if i > n_accepted:
                break  # never checked: an earlier draft was rejected
            depth, survived = self._depth(i), 1 if i < n_accepted else 0
            self._checked[depth][b] += 1
            self._accepted[depth][b] += survived
            self._checked_drawn[depth][drawn] += 1
            self._accepted_drawn[depth][drawn] += survived
        # the forwards that followed an accepted draft: the next kept draft, or a refused row
        refused_row = n_drafted > 0 and self._stopped_at == n_drafted and self._wasted
        run_after = n_drafted - 1 + (1 if refused_row else 0)
        for i in range(min(n_accepted, run_after, len(self._bins))):
            self._follow_runs[self._bins[i]] += 1
            self._followed[self._bins[i]] += 1 if i + 1 < n_accepted else 0
        if n_accepted >= 1:
            self._after_first[0] += n_accepted - 1
            self._after_first[1] += 1
        self._tokens += n_accepted + 1
        self._cost += self._paid * self.c + self.v[n_drafted + 1]  # a skipped round: v(1) = 1
        if self._skipped:
            return
        if n_drafted == 0 and self._stopped_at == 0 and self._wasted:
            self._skip = min(self.MAX_SKIP, max(1, 2 * self._skip))
            self._skip_left = self._skip
        elif n_drafted > 0:
            self._skip = 0

    def info(self) -> dict:
        if self._skipped:
            return {"skipped": True}
        return {"p_all": round(self._p_all, 3), "cost": round(self._threshold, 3), "stopped_at": self._stopped_at, "rate": round(self._rate, 3)}


def _bin(probability: float, bins: int) -> int:
    """The calibration bin of a probability: [0, 1/bins) -> 0, ..., [1 - 1/bins, 1] -> bins - 1."""
    return min(bins - 1, int(probability * bins))


def _verify_curve(verify_cost: dict[int, float], up_to: int) -> dict[int, float]:
    """v(1..up_to) relative to v(1), continued linearly past the largest measured k.

    The continuation uses the mean slope from k = 2 to the last measured k, never below 0:
    single neighbouring points are noisy (a measured v(9) < v(8) must not make longer
    drafts look cheaper than shorter ones).
    """
    measured = {int(k): float(v) for k, v in verify_cost.items()}
    if 1 not in measured or 2 not in measured or measured[1] <= 0:
        raise ValueError("verify costs need v(1) > 0 and v(2)")
    v = {k: t / measured[1] for k, t in measured.items()}
    top = max(k for k in range(1, max(v) + 1) if all(j in v for j in range(1, k + 1)))
    slope = max(0.0, (v[top] - v[2]) / (top - 2)) if top > 2 else 0.0
    for k in range(top + 1, up_to + 1):
        v[k] = v[top] + (k - top) * slope
    return v


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


# ---------------------------------------------------------------------------- factory

POLICIES = ("fixed", "heuristic", "egag", "entropy-stop", "confidence-stop", "cost")

DEFAULT_THRESHOLDS = {
    "entropy-stop": 0.15,  # h > 0.15: about 1.8 nats over Qwen's 151,936-token vocabulary
    "confidence-stop": 0.4,  # HF's default assistant_confidence_threshold
}


def default_gamma(policy: str) -> int:
    """gamma when the user gives none: the cost policy stops drafts itself, so its cap can be
    high (12 measured best on the default CPU pair); a fixed gamma pays for every draft."""
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
) -> GammaPolicy:
    """A fresh policy by name (policies keep state: make one per generation).

    gamma is fixed's gamma and heuristic's starting gamma; gamma_max (default: gamma) bounds
    egag, entropy-stop and confidence-stop, and caps heuristic only when given. gamma_min is
    egag's lower end and heuristic's floor. egag_beta is egag's EMA weight; threshold is the
    stop policies' threshold (default DEFAULT_THRESHOLDS). A policy ignores the arguments it
    does not use, but every argument is checked, so a bad value fails whatever the policy.
    costs (anything with .c and .verify_cost, e.g. costs.Costs) is required by "cost".
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
        return CostAwareGamma(upper, costs.c, costs.verify_cost)
    raise ValueError(f"unknown gamma policy {name!r}; choose from {', '.join(POLICIES)}")
