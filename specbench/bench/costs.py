"""What forwards cost: c (drafter step / target step), the verify curve v(k) and the
drafter's catch-up curve u(n).

    c    = drafter single-token forward time / target single-token forward time
           (Leviathan et al. Def. 3.7)
    v(k) = target forward time over k new tokens / over 1 token, with a realistic cache
    u(n) = drafter forward time over n new tokens (the last row's logits) / over 1 token:
           a model drafter feeds 2 tokens after a fully accepted round (its last draft was
           never fed) and more after a copy or a skipped round
    plain step = what plain decoding pays a token: a single-token step that follows steps
           like it on a growing cache, not one interleaved with forwards over k tokens
    loop = what a speculative round spends outside its forwards (cropping both caches,
           telling the drafter and the policy, recording the round), per round

Measured with the models as loaded (dtypes, kernels, device), by medians of timed forwards;
a drafter forward is its draft step (drafters/step.py), the one the model drafter runs.
Each timed forward includes the work the decoding loop does on its logits, with the run's
sampling settings: a draft step or a plain step picks its token (sampling.choose), a verify
pass processes its k rows (logits_to_probs, and the argmax under greedy). Over a large
vocabulary that is a few percent of a step, more at a temperature or with top-p, which
predictions priced by the forwards alone would leave out.
The forwards are interleaved (each round times k = 1..max_k and a drafter step once), so a
machine that slows down mid-measurement slows every point alike. v(k) for k >= 2 is the
non-decreasing curve closest to the medians (isotonic regression): a longer forward never
costs less, so a median below its left neighbour is noise and is pooled with it, while
steps stay. The curve is not a line on every kernel: the int8 kernel runs rows in tiles of
four, so on one AVX2 CPU v(2..4) was about 1.2, v(5) 1.5 and v(6..9) 1.9 to 2.1, where a
fitted line put v(4) at 1.4 and v(6) at 1.7.
t(1) keeps its own point: one row often runs a different kernel than several; so does the
drafter's t(2) (a half-precision drafter runs two rows on its half weight,
kernels.HybridLinear). The plain step is timed apart from t(1), after the interleaved rounds,
as PLAIN_STEPS steps in a row of which the second half counts: on PyTorch's own kernels
single-token steps that follow forwards over 2..9 tokens ran about 7% slower than in a
long run of single-token steps, and took some 8 steps to settle (SmolLM2-135M; the default
pair's kernels showed no such difference). A speculative round lives in the first state and
plain decoding in the second, so a plain run priced at the interleaved t(1) made every
speedup look that much better than it measured.
The loop's work is timed on the real loop (core/generate.py) over a short run with the
prompt-lookup drafter, which runs no forward: each round's time less its verify pass
(StepRecord.pass_seconds). It is mostly Python, about 0.1-0.3 ms a round whatever the
model: 0.2% of a round of the default pair, a tenth of one of a model whose step takes
1 ms.
A sweep measures them on each prompt's context (or once), records every measurement in
meta.json and prices with their median over similar contexts (pooled); `generate` with the
cost policy measures them once per model pair and settings and keeps them in the cache
folder (costs/*.json), so later runs start at once. Knows nothing about decoding.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import BinaryIO

import torch

from specbench.core.cache import cache_arg, crop_cache, new_cache
from specbench.core.generate import GenerationConfig, context_limit, model_device, speculative_generate, sync
from specbench.core.sampling import SamplingConfig, choose, greedy_tokens, logits_to_probs
from specbench.drafters import DraftStep, draft_step, make_drafter, uses_model
from specbench.policies import FixedGamma

MAX_VERIFY_K = 9  # v(k) is measured for k = 1..MAX_VERIFY_K
LONG_FEEDS = (16, 32, 64)  # u(n) is measured there too: a catch-up of many ids may take another path (speed/twins.py)
LOOP_TOKENS = 16  # tokens of the short run the loop's work per round is timed on
PLAIN_STEPS = 16  # plain decoding steps timed in a row once the rounds are done; the median of the second half counts
# How costs are measured: interleaved forwards with the work on their logits, draft steps as
# the model drafter runs them, v(k) and u(n) fitted. meta.json records it, a resume refuses
# another, and it is part of the on-disk cache key (the cache holds `generate`'s costs).
METHOD = 7


@dataclass(frozen=True)
class Costs:
    c: float | None  # drafter single-token forward / target single-token forward
    target_step_seconds: float
    drafter_step_seconds: float | None
    verify_cost: dict[int, float]  # k -> t(k tokens) / t(1 token), the target's (fitted for k >= 2)
    context_tokens: int  # cache length the forwards ran over
    verify_measured: dict[int, float] | None = None  # the medians the fit was made from, / t(1)
    drafter_cost: dict[int, float] | None = None  # n -> u(n), the drafter's (fitted for n >= 3)
    plain_step_seconds: float | None = None  # a plain decoding step (ForwardTimer.plain_steps); None: not measured
    loop_seconds: float | None = None  # the loop's own work per speculative round (measure_loop); None: not measured

    def plain_step(self) -> float:
        """What plain decoding pays a token, in target steps t(1) (1.0 where it was not measured:
        costs from before it was, as an older meta.json holds)."""
        if not self.plain_step_seconds or not self.target_step_seconds:
            return 1.0
        return self.plain_step_seconds / self.target_step_seconds

    def loop(self) -> float:
        """The loop's own work per speculative round, in target steps t(1) (0.0 where it was
        not measured)."""
        if not self.loop_seconds or not self.target_step_seconds:
            return 0.0
        return self.loop_seconds / self.target_step_seconds

    def as_meta(self) -> dict:
        meta = asdict(self)
        meta["verify_cost"] = {str(k): v for k, v in self.verify_cost.items()}
        for name in ("verify_measured", "drafter_cost"):
            if meta[name] is not None:
                meta[name] = {str(k): v for k, v in meta[name].items()}
        return meta

    @classmethod
    def from_meta(cls, raw: dict) -> Costs:
        return cls(
            c=raw.get("c"),
            target_step_seconds=raw.get("target_step_seconds", 0.0),
            drafter_step_seconds=raw.get("drafter_step_seconds"),
            verify_cost={int(k): float(v) for k, v in (raw.get("verify_cost") or {}).items()},
            context_tokens=raw.get("context_tokens", 0),
            verify_measured=_curve(raw.get("verify_measured")),
            drafter_cost=_curve(raw.get("drafter_cost")),
            plain_step_seconds=raw.get("plain_step_seconds"),
            loop_seconds=raw.get("loop_seconds"),
        )


def _curve(raw: dict | None) -> dict[int, float] | None:
    return {int(k): float(v) for k, v in raw.items()} if raw else None


class ForwardTimer:
    """Times forwards over k new tokens on a cache that holds `context`, cropped back after each,
    with the work the decoding loop does on their logits under `sampling`.

    Without a step a forward is the target's: over one token a plain decoding step (its
    logits, then choose), over k verification's (the logits of every new row, processed by
    logits_to_probs, and their argmax under greedy). With a draft step (drafters/step.py) it
    is that step as the model drafter runs it: the last row's logits (through a restricted
    head for draft_vocab.RestrictedStep), then choose.
    """

    def __init__(
        self, model, context: list[int], step: DraftStep | None = None, sampling: SamplingConfig | None = None
    ):
        self.model, self.context, self.step = model, context, step
        self.sampling = sampling if sampling is not None else SamplingConfig()
        self.device = model_device(model)
        self.generator = torch.Generator(self.device).manual_seed(0)
        self.cache = new_cache(model)
        prompt = torch.tensor([context], device=self.device)  # [1, n]
        if step is not None:
            step.start(model, prompt[0])
        model(input_ids=prompt, **cache_arg(model, self.cache), use_cache=True, logits_to_keep=1)

    def seconds(self, k: int) -> float:
        """One forward over k new tokens."""
        new = torch.tensor([(self.context * k)[:k]], device=self.device)  # [1, k] ordinary token ids
        sync(self.device)  # nothing queued before the clock starts (the crop, the copy of `new`)
        start = time.perf_counter()
        if self.step is not None:
            choose(self.step(self.model, new, self.cache), self.sampling, self.generator)
        else:
            logits = self.model(
                input_ids=new, **cache_arg(self.model, self.cache), use_cache=True, logits_to_keep=k
            ).logits[0, -k:]  # [k, vocab]
            if k == 1:
                choose(logits[0], self.sampling, self.generator)
            else:
                logits_to_probs(logits, self.sampling)
                if self.sampling.greedy:
                    greedy_tokens(logits)
        sync(self.device)
        elapsed = time.perf_counter() - start
        crop_cache(self.cache, len(self.context))
        return elapsed

    def plain_steps(self, n: int) -> list[float]:
        """n plain decoding steps in a row, each timed as plain_generate runs it (a forward
        over the token the step before chose, on the cache it grew, then choose); the cache
        is cropped back after the last. The target's only."""
        if self.step is not None:
            raise ValueError("plain steps are the target's")
        token, times = self.context[-1], []
        sync(self.device)
        for _ in range(n):
            start = time.perf_counter()
            new = torch.tensor([[token]], device=self.device)  # [1, 1]
            logits = self.model(
                input_ids=new, **cache_arg(self.model, self.cache), use_cache=True, logits_to_keep=1
            ).logits[0, -1]  # [vocab]
            token, _ = choose(logits, self.sampling, self.generator)
            sync(self.device)
            times.append(time.perf_counter() - start)
        crop_cache(self.cache, len(self.context))
        return times


def fit_verify_curve(seconds: dict[int, float], exact: int = 1) -> dict[int, float]:
    """v(k) = t(k) / t(1): t(k <= exact) as measured, t(k > exact) the isotonic (least-squares
    non-decreasing) fit to those points: a point below the one before it is pooled with it.
    No fitted point falls below t(1): a forward over more tokens does all a one-token step
    does, so a lower median is noise (another process on the CPU while the costs were timed).

    fit_verify_curve({1: 1.0, 2: 1.5, 3: 1.4, 4: 1.9}) == {1: 1.0, 2: 1.45, 3: 1.45, 4: 1.9}
    fit_verify_curve({1: 1.0, 2: 1.5, 3: 1.4, 4: 1.9}, exact=2) == {1: 1.0, 2: 1.5, 3: 1.4, 4: 1.9}
    """
    t1 = seconds[1]
    own = {k: t / t1 for k, t in sorted(seconds.items()) if k <= exact}
    points = [(k, t) for k, t in sorted(seconds.items()) if k > exact]
    fitted = [max(t, t1) for t in isotonic([t for _, t in points])]  # clipped: still the bounded least-squares fit
    return {**own, **{k: t / t1 for (k, _), t in zip(points, fitted)}}


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to values in least squares (pool adjacent
    violators): each run of points that decreases is replaced by its mean.

    isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]"""
    blocks: list[list[float]] = []  # [sum, count] of each pooled run
    for value in values:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(count)]


def shared_limit(target, drafter_model=None) -> int:
    """The context both models can attend over: where cost timings must stay."""
    return min(context_limit(m) for m in (target, drafter_model) if m is not None)


def timing_context(prompt_ids: list[int], max_new_tokens: int, limit: int) -> list[int]:
    """A realistic cache for timing: the prompt, grown to where decoding spends its middle."""
    length = max(1, min(len(prompt_ids) + max_new_tokens // 2, limit - max(MAX_VERIFY_K, PLAIN_STEPS) - 1))
    return (prompt_ids * (length // len(prompt_ids) + 1))[:length]


@torch.inference_mode()
def measure_loop(
    target, context: list[int], tokens: int = LOOP_TOKENS, sampling: SamplingConfig | None = None
) -> float | None:
    """The decoding loop's own work per speculative round: a run of `tokens` new tokens with
    the prompt-lookup drafter at gamma 2 on the end of `context` (at most 32 tokens of it),
    its decode time less every round's verify pass, over its rounds. None when no round
    ran (a stop at the first token)."""
    config = GenerationConfig(max_new_tokens=tokens, eos_token_ids=(), sampling=sampling or SamplingConfig())
    result = speculative_generate(target, make_drafter("prompt-lookup"), context[-32:], config, FixedGamma(2))
    rounds = [step for step in result.steps if step.round > 0]
    if not rounds:
        return None
    return max(0.0, result.stats.decode_seconds - sum(step.pass_seconds for step in rounds)) / len(rounds)


@torch.inference_mode()
def measure_costs(
    target,
    drafter_model,
    context: list[int],
    repeats: int,
    max_k: int = MAX_VERIFY_K,
    draft_vocab: int = 0,
    sampling: SamplingConfig | None = None,
    predicting: bool = False,
) -> Costs:
    """c from single-token forwards of both models (the drafter's over draft_vocab ids when
    > 0, as the model drafter runs it); v(k) for k = 1..max_k from the target; u(n) for
    n = 1..max_k and LONG_FEEDS from the drafter (last row's logits only, as a catch-up
    runs; the prompt the drafter reads in its first model round is priced by it too); with
    `predicting`, also the plain step from PLAIN_STEPS target steps in a row, after those,
    and the loop's own work per round (measure_loop): what predictions need and the cost
    policy does not. Each with the work on its logits under `sampling` (ForwardTimer;
    default greedy).

    repeats + 1 interleaved rounds; the first is a warm-up and is not counted."""
    target_timer = ForwardTimer(target, context, sampling=sampling)
    drafter_timer = (
        ForwardTimer(drafter_model, context, draft_step(drafter_model, draft_vocab), sampling)
        if drafter_model is not None
        else None
    )
    target_times: dict[int, list[float]] = {k: [] for k in range(1, max_k + 1)}
    long_feeds = [n for n in LONG_FEEDS if n > max_k] if drafter_timer else []
    drafter_times: dict[int, list[float]] = (
        {n: [] for n in [*range(1, max_k + 1), *long_feeds]} if drafter_timer else {}
    )
    for round_ in range(repeats + 1):
        # the drafter's long feeds first, each with the step after it, which can be slower
        # (twins.py): that step's excess over this round's own step is the feed's
        after = {n: (drafter_timer.seconds(n), drafter_timer.seconds(1)) for n in long_feeds}
        verifies, feeds = {}, {}
        for k in range(1, max_k + 1):
            verifies[k] = target_timer.seconds(k)
            if drafter_timer is not None:
                feeds[k] = drafter_timer.seconds(k)
        feeds |= {n: feed + max(0.0, step - feeds[1]) for n, (feed, step) in after.items()}
        if round_:
            for n, elapsed in feeds.items():
                drafter_times[n].append(elapsed)
            for k, elapsed in verifies.items():
                target_times[k].append(elapsed)
    plain_times = target_timer.plain_steps(PLAIN_STEPS)[PLAIN_STEPS // 2 :] if predicting else None
    loop_time = measure_loop(target, context, sampling=sampling) if predicting else None
    medians = {k: statistics.median(times) for k, times in target_times.items()}
    t1 = medians[1]
    drafter_medians = {n: statistics.median(times) for n, times in drafter_times.items()}
    drafter_step = drafter_medians.get(1)
    return Costs(
        c=drafter_step / t1 if drafter_step is not None and t1 > 0 else None,
        target_step_seconds=t1,
        drafter_step_seconds=drafter_step,
        verify_cost=fit_verify_curve(medians) if t1 > 0 else {k: 0.0 for k in medians},
        context_tokens=len(context),
        verify_measured={k: t / t1 if t1 > 0 else 0.0 for k, t in medians.items()},
        drafter_cost=fit_verify_curve(drafter_medians, exact=2) if drafter_step else None,
        plain_step_seconds=statistics.median(plain_times) if plain_times else None,
        loop_seconds=loop_time,
    )


POOL_SPAN = 2.0  # pooled() takes the blocks whose context is within this factor of a block's


def pooled(blocks: list[Costs], context_tokens: int) -> Costs:
    """Each cost's median over the measurements (`blocks`) taken on a context within
    POOL_SPAN of `context_tokens` (at least the nearest one): what a sweep prices with.

    One block's measurement is a few dozen timed forwards on a shared CPU, and over a sweep
    the blocks scatter far more than the prompts' contexts could explain; one measured while
    something else ran is off by multiples. Priced with its own block, each prompt's
    predictions would carry that block's error. A median over blocks drops such an outlier;
    the span keeps prompts of very different lengths apart, where attention makes the costs
    differ for real. c is the median of the blocks' c (each
    a ratio of interleaved timings, so drift cancels within a block), and the drafter step
    is c times the median target step, so that c = drafter step / target step still holds;
    the plain step and the loop's work likewise, from the blocks' ratios to t(1).
    The median of non-decreasing curves is non-decreasing, so the pooled v(k) and u(n) keep
    the fit's shape."""
    if not blocks:
        raise ValueError("no measurements to pool")
    near = [b for b in blocks if context_tokens / POOL_SPAN <= b.context_tokens <= context_tokens * POOL_SPAN]
    near = near or [min(blocks, key=lambda b: abs(b.context_tokens - context_tokens))]
    if len(near) == 1:
        return near[0]

    def median(values: list) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    def curve(name: str) -> dict[int, float] | None:
        curves = [getattr(b, name) for b in near if getattr(b, name)]
        keys = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        return {k: statistics.median(c[k] for c in curves) for k in keys} or None

    c, step = median([b.c for b in near]), median([b.target_step_seconds for b in near])
    plain = median([b.plain_step() if b.plain_step_seconds else None for b in near])
    loop = median([b.loop() if b.loop_seconds is not None else None for b in near])
    return Costs(
        c=c,
        target_step_seconds=step,
        drafter_step_seconds=c * step if c is not None else median([b.drafter_step_seconds for b in near]),
        verify_cost=curve("verify_cost") or {},
        context_tokens=context_tokens,
        verify_measured=curve("verify_measured"),
        drafter_cost=curve("drafter_cost"),
        plain_step_seconds=plain * step if plain is not None else None,
        loop_seconds=loop * step if loop is not None else None,
    )


def for_drafter(costs: Costs, drafter: str) -> Costs:
    """The costs a drafter pays: a model-free drafter (ngram, prompt-lookup) runs no forward
    pass, so its c is 0; the drafters with the model (model, model+lookup) keep the measured
    c (model+lookup's copies are free: the cost policy reads that from their missing q)."""
    return costs if uses_model(drafter) else replace(costs, c=0.0)


# ---------------------------------------------------------------------------- the on-disk cache


CACHE_FORMAT = 3  # v(k) and u(n) fitted isotonic, never below 1; a file of another format is measured anew


def load_cached(folder: Path, key: str) -> Costs | None:
    """Costs measured earlier for `key` (a description of models and settings) and fitted the
    way this version fits them (CACHE_FORMAT), if any."""
    path = folder / f"{slug(key)}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return Costs.from_meta(raw["costs"]) if raw.get("key") == key and raw.get("format") == CACHE_FORMAT else None


def save_cached(folder: Path, key: str, costs: Costs) -> None:
    write_json_atomic(folder / f"{slug(key)}.json", {"key": key, "format": CACHE_FORMAT, "costs": costs.as_meta()})


def write_json_atomic(path: Path, data: dict) -> None:
    """Write `data` as JSON to path, atomically (write_atomic)."""
    write_atomic(path, lambda handle: handle.write(json.dumps(data, indent=1).encode("utf-8")))


def write_atomic(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write path through a temporary file in its folder, which write(handle) fills: a crash
    never leaves half a file behind, and a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def slug(key: str) -> str:
    """A short file name for a cache key."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def costs_for(
    target,
    drafter_model,
    key: str,
    context: list[int],
    folder: Path,
    max_k: int = MAX_VERIFY_K,
    repeats: int = 3,
    draft_vocab: int = 0,
    sampling: SamplingConfig | None = None,
) -> tuple[Costs, bool]:
    """Cached costs for `key` (which must name draft_vocab and the sampling settings), else
    measured now and cached; returns (costs, were they cached)."""
    cached = load_cached(folder, key)
    if cached is not None and max(cached.verify_cost, default=0) >= max_k:
        return cached, True
    costs = measure_costs(target, drafter_model, context, repeats, max_k, draft_vocab, sampling)
    save_cached(folder, key, costs)
    return costs, False
