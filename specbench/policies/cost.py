"""The cost policy: draft a token only while its calibrated chance of surviving beats its cost.

Costs come measured (speed/costs.py): the drafter step c and the verify curve v(k), both in
target steps. Knows nothing about models or caches.
"""

from __future__ import annotations

import math

import torch

from specbench.core.protocols import Keep
from specbench.core.stats import verify_cost_at
from specbench.policies.simple import _check_gamma, top_prob


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
    """v(1..up_to) relative to v(1), continued past the largest measured k by the one rule
    every caller shares (core.stats.verify_cost_at)."""
    measured = {int(k): float(v) for k, v in verify_cost.items()}
    if 1 not in measured or 2 not in measured or measured[1] <= 0:
        raise ValueError("verify costs need v(1) > 0 and v(2)")
    return {k: verify_cost_at(measured, k) / measured[1] for k in range(1, up_to + 1)}

