"""What the cost policy learns from verdicts (Calibration), and what it keeps between
generations (Evidence).

Calibration observes one generation's verdicts and gives rates: how often a draft of a
given confidence survives, how often the forward after it pays, how many tokens a unit of
cost has bought. It decides nothing; policies/cost.py reads it.

A generation that starts from even chances spends its first rounds learning what the pair
already showed in the last one: short answers end before the table is any good. So a
Calibration can start warm from Evidence, the verdicts of earlier generations of the same
pair and drafter with the priors taken out. The warm start is capped (WARM_TRIALS per bin,
WARM_ROUNDS rounds, WARM_COST target steps, each scaled down with its rate kept), so the
generation's own verdicts still move it within a few rounds; what is kept is capped more
loosely (KEEP_*), so older generations fade as new ones are added. Evidence is fixed before
a generation starts and is only added to after it ends, so a warm start decides nothing
from the tokens of its own generation and losslessness is each generation's own, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specbench.policies.simple import top_prob

TABLES = ("first", "later", "first_drawn", "later_drawn", "follow")  # Evidence's tables, in Calibration's order
PAIRS = ("further", "rate", "model", "model_extra", "share")  # Evidence's other counts
WARM_TRIALS, WARM_ROUNDS, WARM_COST = 16.0, 16.0, 32.0  # the most a warm start brings
WARM_MODEL_ROUNDS = 4.0  # ... of model rounds: a few bad rounds of this generation's must outweigh them
KEEP_TRIALS, KEEP_ROUNDS, KEEP_COST = 256.0, 256.0, 1024.0  # the most kept between generations
ROUNDING = 1e-9  # a bin's successes may pass its trials by this share (float rounding) when read
TILT_PRIOR = 2.0  # pseudo-verdicts, as the tables expect, that hold a generation's tilt near none


@dataclass(frozen=True)
class Evidence:
    """Verdicts observed, priors excluded. tables: name (TABLES) -> per bin (BINS + 1 of
    them) [successes, trials]; further: [further accepted drafts, rounds whose first draft
    was accepted]; rate: [tokens, cost in target steps]; then the rounds that ran a drafter
    forward ("model rounds"): model: [accepted drafts, rounds], model_extra: [their cost
    above a plain step, rounds], share: [model rounds, tokens emitted in rounds where the
    policy did not decline the drafter's forward]."""

    tables: dict[str, tuple[tuple[float, float], ...]]
    further: tuple[float, float]
    rate: tuple[float, float]
    model: tuple[float, float] = (0.0, 0.0)
    model_extra: tuple[float, float] = (0.0, 0.0)
    share: tuple[float, float] = (0.0, 0.0)

    def pairs(self) -> dict[str, tuple[float, float]]:
        """The counts outside the tables, by name."""
        return {name: getattr(self, name) for name in PAIRS}

    def __add__(self, other: Evidence) -> Evidence:
        tables = {
            name: tuple((s + s2, t + t2) for (s, t), (s2, t2) in zip(self.tables[name], other.tables[name]))
            for name in TABLES
        }
        theirs = other.pairs()
        return Evidence(tables, **{name: _add(pair, theirs[name]) for name, pair in self.pairs().items()})

    def capped(self, trials: float, rounds: float, cost: float, model_rounds: float | None = None) -> Evidence:
        """Each bin scaled down to at most `trials` trials (its rate kept), further to at most
        `rounds` rounds, rate to at most `cost` target steps and share to as many tokens,
        model and model_extra to at most `model_rounds` rounds (default: rounds)."""
        tables = {name: tuple(_cap_bin(pair, trials) for pair in self.tables[name]) for name in TABLES}
        model_rounds = rounds if model_rounds is None else model_rounds
        most = {"further": rounds, "rate": cost, "model": model_rounds, "model_extra": model_rounds, "share": cost}
        return Evidence(tables, **{name: _cap(pair, most[name]) for name, pair in self.pairs().items()})

    def scaled(self, factor: float) -> Evidence:
        """Every count times factor (the mean of n replays' evidence is their sum scaled by 1/n)."""
        tables = {name: tuple((s * factor, t * factor) for s, t in self.tables[name]) for name in TABLES}
        return Evidence(tables, **{name: (a * factor, b * factor) for name, (a, b) in self.pairs().items()})

    def kept(self) -> Evidence:
        """As kept between generations: capped at KEEP_*."""
        return self.capped(KEEP_TRIALS, KEEP_ROUNDS, KEEP_COST)

    def warm(self) -> Evidence:
        """As a generation starts from it: capped at WARM_*."""
        return self.capped(WARM_TRIALS, WARM_ROUNDS, WARM_COST, WARM_MODEL_ROUNDS)

    def as_json(self) -> dict:
        return {
            "tables": {name: [list(pair) for pair in self.tables[name]] for name in TABLES},
            **{name: list(pair) for name, pair in self.pairs().items()},
        }

    @classmethod
    def from_json(cls, raw) -> Evidence:
        """Evidence.as_json read back; anything else (a missing table, a bin count that is not
        this version's, a negative or non-finite count, more successes than trials) is a
        ValueError."""
        try:
            tables = {name: tuple(_pair(pair) for pair in raw["tables"][name]) for name in TABLES}
            pairs = {name: _pair(raw[name]) for name in PAIRS}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not calibration evidence: {exc!r}") from None
        if any(len(bins) != Calibration.BINS + 1 for bins in tables.values()):
            raise ValueError(f"calibration tables need {Calibration.BINS + 1} bins")
        if any(s > t * (1.0 + ROUNDING) for bins in tables.values() for s, t in bins):
            raise ValueError("calibration bins with more successes than trials")
        # a bin over by rounding alone (files kept by earlier versions): as many as its trials
        tables = {name: tuple((min(s, t), t) for s, t in bins) for name, bins in tables.items()}
        return cls(tables, **pairs)

    @classmethod
    def empty(cls) -> Evidence:
        return cls({name: ((0.0, 0.0),) * (Calibration.BINS + 1) for name in TABLES}, (0.0, 0.0), (0.0, 0.0))


def _add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return (a[0] + b[0], a[1] + b[1])


def _cap(pair: tuple[float, float], most: float) -> tuple[float, float]:
    hits, count = pair
    return (hits * most / count, most) if count > most else (hits, count)


def _cap_bin(pair: tuple[float, float], most: float) -> tuple[float, float]:
    """_cap for a table's [successes, trials]: hits * most / count can round one ulp above
    most when hits == count."""
    hits, count = _cap(pair, most)
    return (min(hits, count), count)


def _pair(raw) -> tuple[float, float]:
    first, second = (float(x) for x in raw)
    if not (math.isfinite(first) and math.isfinite(second)) or first < 0 or second < 0:
        raise ValueError(f"calibration counts must be finite and >= 0, got {raw!r}")
    return (first, second)


def mean_evidence(policies) -> Evidence | None:
    """The mean of the policies' own evidence (calibration.evidence()), for the replays of
    one run; None when none of them keeps a calibration (a policy other than cost)."""
    found = [p.calibration.evidence() for p in policies if getattr(p, "calibration", None) is not None]
    if not found:
        return None
    total = found[0]
    for evidence in found[1:]:
        total = total + evidence
    return total.scaled(1.0 / len(found))


def keep(kept: Evidence | None, new: Evidence) -> Evidence:
    """What is kept after a generation whose evidence is `new`, given what was kept before
    it (None: nothing): the sum, capped at KEEP_*. The one rule for `generate`'s cache and a
    sweep's prompts alike."""
    return (new if kept is None else kept + new).kept()


class Tally:
    """Per-bin successes over trials, each bin starting from `weight` pseudo-trials at its
    midpoint: bin b of `bins` starts at rate (b + 0.5) / bins (a calibrated drafter's top
    probability is its chance of matching). There is one bin past the last, for drafts
    without q, which have no confidence to start from: it starts at 1/2 (with weight 2,
    Laplace's rule of succession): a start by the formula, a little above 1, would make
    every step of an untried table look surer than the last, so each generation's first
    table rounds would draft to gamma_max and mostly be rejected at their first draft.
    `warm` ([successes, trials] per bin) is added to those starts."""

    def __init__(self, bins: int, weight: float, warm=None):
        self.successes = [weight * (b + 0.5) / bins for b in range(bins)] + [weight * 0.5]
        self.trials = [weight] * (bins + 1)
        for b, (hits, count) in enumerate(warm or ()):
            self.successes[b] += hits
            self.trials[b] += count
        self._own = [[0, 0] for _ in range(bins + 1)]  # counted apart: exact, never above its trials

    def rate(self, b: int) -> float:
        return self.successes[b] / self.trials[b]

    def add(self, b: int, success: int) -> None:
        self.trials[b] += 1
        self.successes[b] += success
        self._own[b][0] += success
        self._own[b][1] += 1

    def observed(self) -> tuple[tuple[float, float], ...]:
        """[successes, trials] per bin added since the start (priors and warm start out)."""
        return tuple((float(s), float(t)) for s, t in self._own)


class Calibration:
    """What the cost policy has learned from verdicts, this generation's and, when it starts
    warm, earlier ones'; it observes, it decides nothing.

    Confidences fall into BINS equal bins of [0, 1]; drafts without q share bin BINS.
      acceptance(step, b)        a(m): how often a draft whose row's top q is in bin b
                                 survived; step 0 has its own table, the steps after it share
                                 one (a round starts right after a rejection, where text is
                                 harder to guess, and a draft behind accepted drafts is in an
                                 easier stretch: pooled, deep drafts looked worse than they were);
      drawn_acceptance(step, b)  the same, binned by the drawn token's own q;
      follow_acceptance(b)       f(m): of the forwards run after an accepted draft from bin b,
                                 how often the next draft was accepted (a row the policy
                                 refused counts as a forward that yielded none);
      further_after_first()      R: mean further accepted drafts in rounds whose first draft
                                 was accepted (prior: 1 round with 1);
      rate()                     lambda: tokens / cost over the rounds so far, never below 1
                                 (prior: RATE_PRIOR rounds of 1 token for 1 target step).
    The three rates of drafts with q are tilted by this generation's own record: the odds
    of survival times (S + K) / (E + K) over (F + K) / (n - E + K), where this generation's
    n verdicts on such drafts had S survivals and F = n - S failures, E the survivals the
    tables expected of them, and K = TILT_PRIOR. The tables pool every generation of the
    pair, and a text the drafter knows less well (a translation after code) is harder at
    every confidence; a bin moves by one verdict in twenty, the tilt by one in a few. The
    tilt is the generation's own: it is never kept.
    evidence() is this generation's own verdicts, what is kept for the next (Evidence).
    """

    BINS = 10
    PRIOR_WEIGHT = 2.0
    RATE_PRIOR = 2.0

    def __init__(self, warm: Evidence | None = None):
        start = warm.warm() if warm is not None else Evidence.empty()  # empty: the priors alone
        tally = lambda name: Tally(self.BINS, self.PRIOR_WEIGHT, start.tables[name])
        self.by_top = [tally("first"), tally("later")]  # [depth]: step 0, the later steps
        self.by_drawn = [tally("first_drawn"), tally("later_drawn")]
        self.follow = tally("follow")
        # further accepted drafts, rounds with the first accepted
        self._after_first = [1.0 + start.further[0], 1.0 + start.further[1]]
        self._tokens, self._cost = self.RATE_PRIOR + start.rate[0], self.RATE_PRIOR + start.rate[1]
        # model rounds: accepted drafts, cost above a plain step, rounds; and [model rounds, tokens]
        self._model = [start.model[0], start.model_extra[0], start.model[1]]
        self._share = list(start.share)
        # this generation's own counts outside the tables (PAIRS), kept apart from the start
        # so that evidence() never subtracts it back out (float sums do not undo exactly)
        self._own = {name: [0.0, 0.0] for name in PAIRS}
        self._tilt = [0.0, 0.0, 0]  # survivals, survivals the tables expected, verdicts

    def bin(self, draft_probs: torch.Tensor | None, token: int | None = None) -> int:
        """The bin of the row's top q, or of q(token) when a token is given; BINS without q."""
        if draft_probs is None:
            return self.BINS
        q = top_prob(draft_probs) if token is None else float(draft_probs[token])
        return min(self.BINS - 1, int(q * self.BINS))  # [0, 0.1) -> 0, ..., [0.9, 1] -> 9

    def depth(self, step: int) -> int:
        return min(step, 1)

    def acceptance(self, step: int, b: int) -> float:
        return self.tilted(self.by_top[self.depth(step)].rate(b), b)

    def drawn_acceptance(self, step: int, b: int) -> float:
        return self.tilted(self.by_drawn[self.depth(step)].rate(b), b)

    def follow_acceptance(self, b: int) -> float:
        return self.tilted(self.follow.rate(b), b)

    def tilted(self, rate: float, b: int) -> float:
        """A table's rate for bin b with this generation's tilt (drafts with q only)."""
        odds = self.tilt()
        if b >= self.BINS or odds == 1.0:
            return rate
        return rate * odds / (rate * odds + 1.0 - rate)

    def tilt(self) -> float:
        """The odds factor this generation's record gives (see the class docstring); 1 before
        any verdict, and without a tilt (TILT_PRIOR infinite)."""
        k = TILT_PRIOR
        if not math.isfinite(k):
            return 1.0
        survivals, expected, n = self._tilt
        return ((survivals + k) / (expected + k)) / ((n - survivals + k) / (n - expected + k))

    def further_after_first(self) -> float:
        return self._after_first[0] / self._after_first[1]

    def rate(self) -> float:
        return max(1.0, self._tokens / self._cost)

    def observe(
        self, bins: list[int], drawn_bins: list[int], n_accepted: int, n_drafted: int, refused_next: bool
    ) -> None:
        """One round's verdicts: bins and drawn_bins per kept draft; refused_next says the
        drafter ran a forward after the last kept draft and its row was refused."""
        for i, (b, drawn) in enumerate(zip(bins[:n_drafted], drawn_bins)):
            if i > n_accepted:
                break  # never checked: an earlier draft was rejected
            self.observe_verdict(i, b, drawn, 1 if i < n_accepted else 0)
        # the forwards that followed an accepted draft: the next kept draft, or a refused row
        forwards_after = n_drafted - 1 + (1 if refused_next else 0)
        for i in range(min(n_accepted, forwards_after, len(bins))):
            self.follow.add(bins[i], 1 if i + 1 < n_accepted else 0)
        if n_accepted >= 1:
            self._after_first[0] += n_accepted - 1
            self._after_first[1] += 1
            self._count("further", n_accepted - 1, 1)

    def observe_verdict(self, step: int, b: int, drawn: int, survived: int) -> None:
        """One draft's verdict at `step`, its row's bin b and its token's bin drawn: a kept
        draft's (from observe), or the one a refused draft without q would have had (the
        cost policy learns it from the next token; see policies/cost.py)."""
        depth = self.depth(step)
        if b < self.BINS:  # the tilt's record: survived, and the table's expectation
            tilt = self._tilt
            tilt[0] += survived
            tilt[1] += self.by_top[depth].rate(b)
            tilt[2] += 1
        self.by_top[depth].add(b, survived)
        self.by_drawn[depth].add(drawn, survived)

    def observe_cost(self, tokens: int, cost: float, model_declined: bool = False) -> None:
        """One round's yield and price (in target steps), for rate(). A round whose drafter
        forward the policy declined adds nothing to the model rounds' share: counted, a
        declined read would lower the share and so its own chance of running next time,
        until a kept calibration refused every read for good."""
        self._tokens += tokens
        self._cost += cost
        self._count("rate", tokens, cost)
        if not model_declined:
            self._share[1] += tokens
            self._count("share", 0, tokens)

    def observe_model_round(self, accepted: int, extra: float) -> None:
        """A round that ran a drafter forward: its accepted drafts and its cost above a plain
        step, in target steps (its forwards and the verify rows its drafts added)."""
        self._model[0] += accepted
        self._model[1] += extra
        self._model[2] += 1
        self._share[0] += 1
        self._count("model", accepted, 1)
        self._count("model_extra", extra, 1)
        self._count("share", 1, 0)

    def _count(self, name: str, first: float, second: float) -> None:
        own = self._own[name]
        own[0] += first
        own[1] += second

    def round_saving(self, prior_rounds: float, prior_extra: float) -> float:
        """Target steps a model round has saved: the model rounds' mean accepted drafts less
        their mean cost above a plain step (warm start included), after prior_rounds rounds
        of one accepted draft at prior_extra."""
        accepted, extra, rounds = self._model
        return (prior_rounds + accepted - prior_rounds * prior_extra - extra) / (prior_rounds + rounds)

    def saved_per_token(self, prior_rounds: float, prior_extra: float) -> float:
        """Target steps model rounds have saved per token emitted: round_saving times model
        rounds per token emitted (prior: one in two)."""
        return self.round_saving(prior_rounds, prior_extra) * (1.0 + self._share[0]) / (2.0 + self._share[1])

    def evidence(self) -> Evidence:
        """The verdicts observed since the start: priors and the warm start left out."""
        tallies = (*self.by_top, *self.by_drawn, self.follow)
        tables = {name: t.observed() for name, t in zip(TABLES, tallies)}
        return Evidence(tables, **{name: (float(a), float(b)) for name, (a, b) in self._own.items()})
