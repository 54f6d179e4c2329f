"""What a generation records, and every metric, defined once.

StepRecord is one round (or the first-target pass, round 0) as plain data. RunStats keeps
raw counts and seconds; every rate is a property derived from them, so no two places can
compute a metric differently. Rendering lives in trace.py; nothing here prints.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

# StepRecord.emitted_kind: where the token a round adds after its accepted drafts came from
FIRST = "first"  # the first-target pass (round 0)
BONUS = "bonus"  # every draft was accepted: drawn from p at position k + 1
CORRECTION = "correction"  # a draft was rejected: drawn from the residual norm(max(0, p - q))


@dataclass
class StepRecord:
    round: int  # 0 is the first-target pass; speculative rounds count from 1
    position: int  # new tokens already generated before this round
    gamma: int  # most draft tokens the policy allowed this round
    draft_tokens: list[int]  # what the drafter proposed (may be fewer than gamma)
    draft_probs: list[float | None]  # q(x_i) of each draft; None for drafters without q
    target_probs: list[float]  # p(x_i) of each draft under the target
    draws: list[float]  # uniform r per examined draft (sampling only; empty for greedy)
    accepted: int  # how many drafts were kept
    emitted_token: int  # the correction / bonus token (or the first token in round 0)
    emitted_kind: str  # "correction", "bonus" or "first"
    emitted_prob: float  # its probability under the distribution it came from
    tokens: list[int]  # tokens this round appended to the output, after any stop cut
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0  # the verify pass, then both caches cropped and the drafter and policy told
    pass_seconds: float = 0.0  # the verify pass alone: the target's forward, the work on its logits, the test
    drafter_feeds: list[int] = field(default_factory=list)  # tokens fed per drafter forward (Draft.feeds)
    policy_info: dict = field(default_factory=dict)  # why the policy chose gamma
    stop_reason: str | None = None  # "eos", "stop_string", "max_new_tokens", "context"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str) -> StepRecord:
        data = json.loads(line)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class RunStats:
    """Raw counts and seconds of one generation; rates are derived properties."""

    new_tokens: int = 0  # tokens generated, the first-target pass's token included
    first_pass_tokens: int = 0  # tokens from the first-target pass (1; hf-assisted: its whole first round)
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted
    rounds: int = 0  # target forward passes after the first-target pass
    target_forwards: int = 0  # all target forward passes, the first-target pass included
    prefill_seconds: float = 0.0  # the first-target pass (both models read the prompt; first token)
    decode_seconds: float = 0.0  # wall time after the first-target pass
    draft_seconds: float = 0.0  # inside drafter.propose
    verify_seconds: float = 0.0  # inside the target's verify forwards

    def add_round(self, drafted: int, accepted: int, draft_seconds: float, verify_seconds: float) -> None:
        """Count one verified round: one target forward, its drafts and their seconds."""
        self.rounds += 1
        self.target_forwards += 1
        self.drafted += drafted
        self.accepted += accepted
        self.draft_seconds += draft_seconds
        self.verify_seconds += verify_seconds

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / drafted; None when nothing was drafted (no draft, no rate: a 0% would
        read as every draft rejected)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target forward after the first-target pass.

        Counts the bonus or correction token, as vLLM and Spec-Bench do: plain decoding
        scores 1.0, and a round that keeps all gamma drafts scores gamma + 1.
        """
        decoded = self.new_tokens - self.first_pass_tokens
        return decoded / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Tokens after the first-target pass / wall seconds after it (prefill apart)."""
        decoded = self.new_tokens - self.first_pass_tokens
        return decoded / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def overhead_seconds(self) -> float:
        """Decode time spent outside drafting and verifying (the loop's own cost)."""
        return max(0.0, self.decode_seconds - self.draft_seconds - self.verify_seconds)

    def as_dict(self) -> dict:
        raw = asdict(self)
        for name in (
            "acceptance_rate",
            "mean_accepted_length",
            "tokens_per_second",
        ):
            raw[name] = getattr(self, name)
        return raw


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """E[tokens per round] = (1 - a^(g+1)) / (1 - a) (Leviathan et al. Eq. 1)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """Walltime factor over plain decoding (Leviathan et al. Thm 3.8, extended).

    E[tokens per round] / (gamma * c + v), where c = drafter forward / target forward time
    and v = t(gamma + 1 tokens) / t(1 token), the target's verify cost in single steps
    (v = 1 is the paper's assumption; on CPUs it is larger).
    """
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + verify_cost)


@dataclass(frozen=True)
class RoundCounts:
    """A run's rounds after the first-target pass, as much of them as pricing reads: what
    walltime_speedup needs, and what a sweep records of each predicted run (rounds.jsonl)
    so that it can be priced again with other costs without replaying it.

    A round that drafts k tokens pays one target forward over k + 1 tokens; each drafter
    forward over n new tokens (StepRecord.drafter_feeds) one drafter step of n tokens; and
    it emits its accepted drafts plus one token (fewer when a stop cuts it). Those costs
    add up round by round, so counting rounds by k and forwards by n loses nothing.

    RoundCounts.of(steps) for rounds (k drafted, feeds, tokens) = (2, [1, 1], 3), (2, [2, 1], 1),
    (0, [], 1): RoundCounts(emitted=5, verified={2: 2, 0: 1}, feeds={1: 3, 2: 1}).
    """

    emitted: int = 0  # tokens the rounds emitted
    verified: dict[int, int] = field(default_factory=dict)  # k -> rounds that verified k drafts
    feeds: dict[int, int] = field(default_factory=dict)  # n -> drafter forwards over n new tokens

    @property
    def rounds(self) -> int:
        return sum(self.verified.values())

    @classmethod
    def of(cls, steps) -> RoundCounts:
        """The counts of StepRecords (round 0, the first-target pass, is not a round)."""
        emitted, verified, feeds = 0, {}, {}
        for step in steps:
            if step.round > 0:
                emitted += len(step.tokens)
                k = len(step.draft_tokens)
                verified[k] = verified.get(k, 0) + 1
                for n in step.drafter_feeds:
                    feeds[n] = feeds.get(n, 0) + 1
        return cls(emitted, verified, feeds)

    def as_json(self) -> dict:
        return {
            "emitted": self.emitted,
            "verified": {str(k): v for k, v in self.verified.items()},
            "feeds": {str(n): v for n, v in self.feeds.items()},
        }

    @classmethod
    def from_json(cls, raw: dict) -> RoundCounts:
        return cls(
            int(raw["emitted"]),
            {int(k): int(v) for k, v in raw["verified"].items()},
            {int(n): int(v) for n, v in raw["feeds"].items()},
        )


@dataclass(frozen=True)
class RoundPrices:
    """What a run's rounds cost by part, in target single steps (walltime_speedup's sum): its
    drafter forwards, its verify passes and the loop's own work."""

    drafter: float
    verify: float
    loop: float

    @property
    def total(self) -> float:
        return self.drafter + self.verify + self.loop


def round_prices(
    counts: RoundCounts, c: float, verify_cost, drafter_step=lambda n: 1.0, loop: float = 0.0
) -> RoundPrices:
    """The price of a run's rounds by part (walltime_speedup says what each costs)."""
    drafter = sum(forwards * (1.0 if n == 1 else drafter_step(n)) for n, forwards in counts.feeds.items())
    verify = sum(rounds * verify_cost(k + 1) for k, rounds in counts.verified.items())
    return RoundPrices(c * drafter, verify, counts.rounds * loop)


def walltime_speedup(
    counts: RoundCounts, c: float, verify_cost, drafter_step=lambda n: 1.0, plain_step: float = 1.0, loop: float = 0.0
) -> float | None:
    """The speedup over plain decoding that a run's own rounds predict.

    counts: the run's rounds after the first-target pass (RoundCounts). In target single
    steps, a round that drafts k tokens costs v(k + 1) (verify_cost(k + 1)) plus loop, the
    loop's own work in a round; a drafter forward over n new tokens costs c * u(n)
    (drafter_step(n); u(1) = 1: a forward that catches up on several tokens costs more
    than one step; a model-free drafter or a copy runs none); every forward counts, the
    one whose row the policy refused included. Plain decoding emits one token per step, of
    plain_step single steps (a step in a row of plain steps can run faster than the t(1)
    the rest is priced in). This is Leviathan et al.'s walltime factor evaluated on the
    rounds that happened rather than on its expectation under a fixed gamma and i.i.d.
    acceptance, so it applies to adaptive policies too. What it leaves out (forwards
    slower than measured, the Python of each draft step) is what a measured speedup below
    it points to. None for a run with no rounds.
    """
    cost = round_prices(counts, c, verify_cost, drafter_step, loop).total
    return counts.emitted * plain_step / cost if counts.rounds and cost > 0 else None


def verify_cost_at(costs: dict[int, float], k: int) -> float | None:
    """v(k) from a measured curve {k: cost}; the one rule for reading a curve past its end.

    Measured points are returned as they are; below the first measured k, its value. Past the
    largest k measured without gaps from the first, the curve goes on linearly at the mean
    slope from its second point to that k, never below 0: single neighbouring points are
    noisy, and a measured v(9) < v(8) must not make longer drafts look cheaper than shorter
    ones. A curve with points measured further out (the drafter's u(n) at costs.LONG_FEEDS)
    is read on the line between the two points around k, and past its last point at the
    slope of its last two, never below 0. None when nothing was measured.
    verify_cost_at({1: 1.0, 2: 1.4, 3: 1.6}, 5) == 2.0 (slope (1.6 - 1.4) / 1 = 0.2).
    verify_cost_at({1: 1.0, 2: 1.4, 3: 1.6, 7: 2.0}, 5) == 1.8 (between 3 and 7).
    """
    if not costs:
        return None
    costs = {int(j): float(v) for j, v in costs.items()}
    if k in costs:
        return costs[k]
    ks = sorted(costs)
    if k < ks[0]:
        return costs[ks[0]]
    top = ks[0]
    while top + 1 in costs:
        top += 1
    if k < top:  # a gap inside the measured range cannot be reached here: k would be in costs
        return costs[top]
    if k < ks[-1]:  # between two points measured further out (the drafter's long feeds): the line between them
        below, above = max(j for j in ks if j < k), min(j for j in ks if j > k)
        return costs[below] + (k - below) * (costs[above] - costs[below]) / (above - below)
    if ks[-1] > top:  # past points measured further out: the slope of the last two, never below 0
        top, second = ks[-1], ks[-2]
        return costs[top] + (k - top) * max(0.0, (costs[top] - costs[second]) / (top - second))
    second = ks[1] if len(ks) > 1 and ks[1] <= top else top
    slope = max(0.0, (costs[top] - costs[second]) / (top - second)) if top > second else 0.0
    return costs[top] + (k - top) * slope
