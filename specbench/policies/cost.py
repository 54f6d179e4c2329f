"""The cost policy: draft a token only while its calibrated chance of surviving beats its cost.

Two parts: Calibration (calibration.py) observes verdicts and gives rates (how often a
draft of a given confidence survives, how often the forward after it pays, how many tokens
a unit of cost has bought so far), starting warm from earlier generations' Evidence when
given it; CostAwareGamma reads those rates and the measured costs to answer each draft
step. Costs come measured (bench/costs.py): the drafter step c and the verify curve v(k),
both in target steps. Knows nothing about models or caches.

The rule, in units of one target single-token forward. d_i = v(i + 2) - v(i + 1) is what
verifying draft i adds (on CPUs v(2) is far above 1 while v(3..9) add little). m_i =
max_x q_i(x) is the confidence of draft step i, read from the row the drafter computed
anyway, and a(m) its calibrated acceptance. P_i = a(m_0) * ... * a(m_i) is the chance that
drafts 0..i all survive, which is the expected number of tokens draft i adds. A token is
worth what it costs at the rate this generation runs, lambda = tokens / cost so far
(Dinkelbach's rule for the best ratio of tokens to time: priced at lambda = 1, a draft that
merely breaks even against plain decoding was drafted, which lowers a rate above 1). When
keep_drafting(i, q_i) is asked, the drafter step that made q_i is paid for, so two separate
questions are answered:

  keep draft i?    step 0:  P_0 * (1 + R) >= lambda * d_0
                            (R: mean further accepted drafts after an accepted first one:
                            the fixed cost of verifying at all is weighed against the
                            round's expected yield)
                   step i:  P_i >= lambda * d_i
  draft i + 1?     P_i * f(m_i) >= lambda * (d_(i+1) + c)
                   (the next row's confidence is not known yet; f(m) is how often a
                   forward that followed an accepted draft of confidence m yielded an
                   accepted draft. The row's own a(m) overrates the next row where a
                   confident token is followed by a hard one, as in translation. Asked
                   only after a draft with q: see below for those without)

Keep.NO, Keep.YES or Keep.LAST follow. LAST saves the forward for a row that would be
refused: asking only "P_i >= d_i + c" after the forward pays c for one refused row in almost
every round. A draft without q has no forward to save, so after a kept one the policy always
asks about the next (YES) and lets that draft's own keep question decide.

Before a forward (forward_pays): the keep questions price every forward of a round but the
first, which is paid before any row of the round is seen. So the first is priced by the
model rounds so far: it runs while their mean accepted drafts beat their mean cost above a
plain step (their forwards and verify rows; a round that forgoes the model is a plain
one, so a token it saves is worth one step here, not lambda), else the policy backs off
(SkipBackoff) and model+lookup drafts its free copies alone. A first forward that catches up
on many ids (the model drafter reads the prompt only in its first model round) costs c * u(n),
and runs only if what model rounds save per token, times the tokens left, covers it. What
a round learns from is what it paid: a first forward over n ids at c * u(n) (2 ids after a
round whose drafts all survived), except the prompt's read, which is the generation's
cost, not a model round's.

Refused drafts without q are still learned from. A table's draft costs nothing to make, so
it is the one draft whose verdict can be had without verifying it: when every kept draft
survived, the token the target emits next sits where the refused draft would have, and the
refused draft would have survived exactly when it equals that token (under sampling with
probability p(token), which is what accepting a draft of one-hot q takes). Without this, a
table whose first matches failed (a story's opening repeats nothing) fell below its price
and was never tried again, so it missed the repetition that came later. A refused draft
with q is not learned from: under sampling its survival is min(1, p/q), which one emitted token does not
show.

Sampled drafts: once draft i is kept its token is known, and a token drawn from the tail of
q_i (q_i(token) well below m_i) survives far less often than m_i promises. So P_i is
re-read from tables binned by q_i(token), and that P_i answers "draft i + 1?" and carries
into the next steps. The keep answer never sees the token (the losslessness rule in
policies/__init__.py). Under greedy q_i(token) = m_i: the same bin, the same counts, the
same decisions as for a policy never told the token.
"""

from __future__ import annotations

import torch

from specbench.core.protocols import Keep
from specbench.core.stats import verify_cost_at
from specbench.policies.calibration import Calibration, Evidence
from specbench.policies.simple import _check_gamma

# ---------------------------------------------------------------------------- the policy


class SkipBackoff:
    """The cost policy's back-off: a round whose drafter forwards bought nothing (a refused
    step 0 with q; or a drafter that drops what it drafted, as the translated one drops a
    last target token that the next drafter token could still change), or a model round
    expected to cost more than it yields (CostAwareGamma.round_gain), makes the policy
    decline the drafter's first forward of the next `_skip` rounds that want one
    (forward_pays says no; a model-free draft, such as model+lookup's copies, still goes
    on). `_skip` doubles after each such event up to MAX_SKIP; the first forward after a
    back-off is a probe, run whatever the estimate says, so the estimate can recover; a
    round whose forwards bought an accepted draft resets it. `_skip_left`: the declines to
    come."""

    MAX_SKIP = 16
    _skip = _skip_left = 0
    _probe = False

    def _declines(self) -> bool:
        """Whether this round's first forward is declined by a back-off (one fewer then remains)."""
        declined = self._skip_left > 0
        self._skip_left -= 1 if declined else 0
        return declined

    def _back_off(self) -> None:
        self._skip = min(self.MAX_SKIP, max(1, 2 * self._skip))
        self._skip_left, self._probe = self._skip, True

    def _after_round(self, n_accepted: int, n_drafted: int, paid: int) -> None:
        """After a round that ran `paid` drafter forwards: wasted (nothing drafted), or paid."""
        if paid and n_drafted == 0:
            self._back_off()
        elif paid and n_accepted > 0:
            self._skip = 0


class CostAwareGamma(SkipBackoff):
    """Draft a token only while it is expected to pay for itself (policy "cost"; the rule is
    in this module's docstring), run a drafter forward only while a model round is expected
    to pay (forward_pays), backing off from a drafter that wastes its forwards (SkipBackoff).

    gamma_max caps a round; c (a drafter step) and verify_cost ({k: v(k)}, a target forward
    over k tokens) are measured once per model pair, and v is read relative to v(1);
    drafter_cost ({n: u(n)}, a drafter forward over n new tokens) prices a catch-up (None:
    u(n) = 1). warm: earlier generations' Evidence to start the calibration from (None:
    even chances). max_new_tokens: the generation's length cap, the horizon a catch-up of
    many ids is weighed against (None: every catch-up is run).

    info(): {"p_all": P at the last decision (for "draft i + 1?": P_i * f(m_i)), "cost":
    its threshold (lambda included), "stopped_at": the first step not drafted (None if the
    round drafted gamma_max), "rate": lambda}, or {"skipped": why} on a round whose drafter
    forward was declined (why: "back-off", "estimate" or "catch-up").
    """

    name = "cost"
    _read = False  # a drafter forward has run in this generation
    MODEL_PRIOR = 2.0  # model rounds of one accepted draft at the price of one draft, before any is seen

    def __init__(
        self,
        gamma_max: int,
        c: float,
        verify_cost: dict[int, float],
        warm: Evidence | None = None,
        *,
        drafter_cost: dict[int, float] | None = None,
        max_new_tokens: int | None = None,
    ):
        _check_gamma("gamma-max", gamma_max)
        if not c >= 0:
            raise ValueError(f"the drafter cost ratio c must be >= 0, got {c}")
        self.gamma_max, self.c = gamma_max, c
        self.v = verify_curve(verify_cost, gamma_max + 1)
        self.u = {int(n): float(x) for n, x in drafter_cost.items()} if drafter_cost else None
        self.max_new_tokens = max_new_tokens
        self.calibration = Calibration(warm)
        self._produced = 1  # the first-target pass's token
        self.next_gamma()

    def next_gamma(self) -> int:
        self._bins: list[int] = []  # per kept draft: the bin of its row's top q
        self._drawn_bins: list[int] = []  # per kept draft: the bin of its own token's q
        self._paid = 0  # drafter forwards this round
        self._premium = 0.0  # what this round's first forward costs above c: c * (u(feed) - 1)
        self._reads_prompt = False  # that forward is the generation's first: it reads the prompt
        self._rate = self.calibration.rate()
        self._p_all, self._threshold, self._stopped_at, self._wasted = 1.0, 0.0, None, False
        self._refused_free: int | None = None  # the token of a refused draft without q
        self._skipped: str | None = None  # why this round's drafter forward was declined
        return self.gamma_max

    def forward_pays(self, step: int, feed: int) -> bool:
        """Before the forward for draft `step` feeding `feed` ids. Past step 0 the answer to
        the last keep question (YES: go on) has priced it. The first forward of a round is
        declined during a back-off, when it catches up on more ids than the rest of the
        generation is expected to earn back (catch_up_pays), or when a model round is
        expected to cost more than it yields (round_gain < 0: the back-off starts)."""
        if step > 0:
            return True
        why = None
        if self._declines():
            why = "back-off"
        elif not self.catch_up_pays(feed):
            why = "catch-up"
        elif self._probe:
            self._probe = False
        elif self.round_gain() < 0:
            self._back_off()
            self._skip_left -= 1  # this round is the first declined
            why = "estimate"
        self._skipped = why
        if why is None:
            self._premium = self._catch_up(feed)
            self._reads_prompt, self._read = not self._read, True
        return why is None

    def round_gain(self) -> float:
        """Target steps a model round is expected to save: its mean accepted drafts less its
        mean cost above a plain step (its forwards and the verify rows they add), from the
        model rounds seen so far (warm start included) after MODEL_PRIOR rounds of one
        accepted draft at c + d_0. The alternative to a model round is a plain one (a round
        with a copy to draft never asks), so a drafted token is worth the one plain step it
        saves, not lambda: lambda counts the copies' yield, which a round without one forgoes."""
        return self.calibration.round_saving(self.MODEL_PRIOR, self.c + self._added(0))

    def catch_up_pays(self, feed: int) -> bool:
        """Whether a first forward over `feed` ids (the prompt, which the model drafter reads
        only when first asked, or what a run of copies added) is worth what it costs above
        one step, c * (u(feed) - 1): what model rounds have saved per token emitted so far
        (warm start included), times the tokens max_new_tokens leaves, must cover it."""
        if self.u is None or self.max_new_tokens is None or feed <= 1:
            return True
        left = self.max_new_tokens - self._produced
        saved = self.calibration.saved_per_token(self.MODEL_PRIOR, self.c + self._added(0))
        return left * saved >= self._catch_up(feed)

    def _catch_up(self, feed: int) -> float:
        """What a forward over `feed` ids costs above one drafter step, c * (u(feed) - 1)
        (0 without a measured u(n))."""
        return self.c * (verify_cost_at(self.u, feed) - 1.0) if self.u is not None and feed > 1 else 0.0

    def keep_drafting(self, step: int, draft_probs: torch.Tensor | None, token: int | None = None) -> Keep:
        free = draft_probs is None  # a model-free draft (a table or a copy): no forward to pay
        self._paid += 0 if free else 1
        calibration = self.calibration
        b = calibration.bin(draft_probs)
        p_before = self._p_all
        self._p_all = p_before * calibration.acceptance(step, b)
        self._threshold = self._rate * self._added(step)
        gain = self._p_all * (1.0 + calibration.further_after_first()) if step == 0 else self._p_all
        if gain < self._threshold:  # the row alone decides: the token is not looked at
            self._stopped_at, self._wasted = step, not free
            self._refused_free = token if free else None  # for update(): its verdict is free
            return Keep.NO
        # kept whatever follows; from here on the token may inform what comes next
        drawn = b if free or token is None else calibration.bin(draft_probs, token)
        self._bins.append(b)
        self._drawn_bins.append(drawn)
        if drawn != b:
            self._p_all = p_before * calibration.drawn_acceptance(step, drawn)
        return self._draft_next(step, b, free)

    def _draft_next(self, step: int, b: int, free: bool) -> Keep:
        """YES or LAST for kept draft `step` from bin b: is one more drafter forward worth it?"""
        if step + 1 >= self.gamma_max:
            return Keep.LAST
        if free:  # no forward to save: the next draft's own keep question decides
            return Keep.YES
        next_gain = self._p_all * self.calibration.follow_acceptance(b)
        next_cost = self._rate * (self._added(step + 1) + self.c)
        if next_gain < next_cost:
            self._p_all, self._threshold, self._stopped_at = next_gain, next_cost, step + 1
            return Keep.LAST
        return Keep.YES

    def _added(self, step: int) -> float:
        """d_step: the verify cost that draft `step` adds."""
        return self.v[step + 2] - self.v[step + 1]

    def update(self, n_accepted: int, n_drafted: int, next_token: int | None = None) -> None:
        calibration = self.calibration
        refused_next = n_drafted > 0 and self._stopped_at == n_drafted and self._wasted
        calibration.observe(self._bins, self._drawn_bins, n_accepted, n_drafted, refused_next)
        if self._refused_free is not None and next_token is not None and n_accepted == n_drafted:
            # every kept draft survived, so next_token stands where the refused one would have
            calibration.observe_verdict(
                n_drafted, Calibration.BINS, Calibration.BINS, int(next_token == self._refused_free)
            )
        # a round without drafts: v(1) = 1; a first forward over several ids: its catch-up too
        price = self._paid * self.c + self._premium + self.v[n_drafted + 1]
        calibration.observe_cost(n_accepted + 1, price, model_declined=self._skipped is not None)
        if self._paid:  # the prompt's read is the generation's, priced by catch_up_pays, not the round's
            read = self._premium if self._reads_prompt else 0.0
            calibration.observe_model_round(n_accepted, price - 1.0 - read)
        self._produced += n_accepted + 1
        self._after_round(n_accepted, n_drafted, self._paid)

    def info(self) -> dict:
        if self._skipped:
            return {"skipped": self._skipped}
        return {
            "p_all": round(self._p_all, 3),
            "cost": round(self._threshold, 3),
            "stopped_at": self._stopped_at,
            "rate": round(self._rate, 3),
        }


def verify_curve(verify_cost: dict[int, float], up_to: int) -> dict[int, float]:
    """v(1..up_to) relative to v(1), continued past the largest measured k by the one rule
    every caller shares (core.stats.verify_cost_at)."""
    measured = {int(k): float(v) for k, v in verify_cost.items()}
    if 1 not in measured or 2 not in measured or measured[1] <= 0:
        raise ValueError("verify costs need v(1) > 0 and v(2)")
    return {k: verify_cost_at(measured, k) / measured[1] for k in range(1, up_to + 1)}
