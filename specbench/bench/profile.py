"""The profile of a prompt, and the predictions read from it.

A sweep runs plain decoding on every prompt anyway (the baseline). `record_path` adds the
drafter teacher-forced along that output (its row for every position: the prompt in one
forward, then one token a forward over its cache, through the draft step real runs use)
and, under sampling, the target's processed p rows along it (the prompt in one forward, then
the output in one forward over its cache: the forwards real runs make, whose rows equal
one-token steps'). From
that, `predict` replays any drafter x policy x gamma (replay.py) and returns what a run
would have counted: rounds, drafts, accepted drafts, target forwards and the StepRecords
the walltime model prices. No run is timed here: the sweep turns the rounds into a
predicted speedup with its measured costs (c, v(k), u(n)), as it does for measured runs.

Prediction is exact under greedy decoding up to near ties (replay.py lists where it can
miss); under sampling it is an average over replay.REPLICAS replays and assumes what
replay.py says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from specbench.bench.labels import ORACLE_POLICY
from specbench.bench.replay import (
    REPLICAS,
    Acceptance,
    OracleDrafter,
    PathDrafter,
    RecordedPath,
    VocabTracker,
    position_counts,
    replay,
    replay_sampled,
)
from specbench.bench.rows import modelled_speedup
from specbench.core.cache import cache_arg, new_cache
from specbench.core.generate import GenerationConfig, context_limit, rope_boundary
from specbench.core.sampling import logits_to_probs
from specbench.core.stats import RoundCounts, RunStats, StepRecord, verify_cost_at
from specbench.drafters import LookupFirstDrafter, make_drafter, uses_model
from specbench.drafters.model import drafts_within, kept_length
from specbench.models.pairing import output_vocab_size
from specbench.policies import make_policy
from specbench.policies.calibration import Evidence, mean_evidence
from specbench.speed.draft_vocab import path_logits


@torch.inference_mode()
def record_path(
    target, drafter_model, prompt_ids: list[int], output: list[int], gen: GenerationConfig, draft_vocab: int = 0
) -> RecordedPath:
    """The path of one prompt: the plain run's output, the drafter's logits along it (when
    a drafter model is given; draft_vocab > 0 computes them as its restricted draft step
    does), how much of the prompt its cache starts with (a drafter that has read its kept
    head: the first generation of a loaded drafter reads the head too) and, under
    sampling, the target's processed rows."""
    draft_logits, draft_limit, kept = None, None, 0  # draft_logits: [len(seen), drafter vocab]
    if drafter_model is not None:
        draft_limit = context_limit(drafter_model)
        kept = kept_length(drafter_model, prompt_ids)
        seen = output[: max(0, drafts_within(draft_limit, len(prompt_ids)))]  # the rows ModelDrafter can draft from
        if not seen:
            draft_logits = torch.zeros(0, output_vocab_size(drafter_model))
        else:
            draft_logits = (
                path_logits(drafter_model, prompt_ids, seen)
                if draft_vocab > 0
                else teacher_forced_logits(drafter_model, prompt_ids, seen)
            )
    target_probs = None  # [len(output), target vocab], on the CPU
    if not gen.sampling.greedy:
        target_probs = logits_to_probs(target_path_logits(target, prompt_ids, output).float().cpu(), gen.sampling)
    return RecordedPath(
        list(prompt_ids),
        list(output),
        gen.sampling,
        draft_logits,
        target_probs,
        context_limit(target),
        rope_boundary(target),
        draft_limit,
        kept,
    )


def target_path_logits(target, prompt_ids: list[int], output: list[int]) -> torch.Tensor:
    """The target's logits for output[t] given prompt + output[:t] ([n, vocab]): the prompt's
    last row from its first forward, the rest from one forward over its cache, as decoding
    computes them (a target's rows over a cache are the bits of one-token steps; its
    forward over the whole path at once could round otherwise: fused_step.py)."""
    device = next(target.parameters()).device
    cache = new_cache(target)

    def forward(ids: list[int], keep: int) -> torch.Tensor:  # [keep, vocab]
        inputs = torch.tensor([ids], device=device)  # [1, len(ids)]
        return target(input_ids=inputs, **cache_arg(target, cache), use_cache=True, logits_to_keep=keep).logits[0]

    rows = [forward(list(prompt_ids), 1)]  # [1, vocab] for output[0]
    if len(output) > 1:
        rows.append(forward(list(output[:-1]), len(output) - 1))  # [n - 1, vocab] for output[1:]
    return torch.cat(rows)


def teacher_forced_logits(model, prompt_ids: list[int], output: list[int]) -> torch.Tensor:
    """The drafter's logits for output[t] given prompt + output[:t], t = 0..n-1 ([n, vocab],
    float32), through the model's own forward (the draft step of a drafter that scores every
    id): the prompt in one forward, then the path one token at a time over a KV cache.

    One token a forward, as the drafter feeds most tokens, and not one forward over the
    whole path: a model's several-row and one-row forwards round differently (an int8
    drafter runs several rows through a bf16 copy of its weights). A round's two-row
    catch-up still rounds its way here, so a near tie can cost a predicted round; the
    restricted draft step (draft_vocab.path_logits) computes every row as a one-row step."""
    device = next(model.parameters()).device
    cache = new_cache(model)

    def step(ids: list[int]) -> torch.Tensor:  # [vocab], the last row's
        inputs = torch.tensor([ids], device=device)  # [1, len(ids)]
        return model(input_ids=inputs, **cache_arg(model, cache), use_cache=True, logits_to_keep=1).logits[0, -1]

    rows = [step(list(prompt_ids))]
    rows += [step([token]) for token in output[:-1]]
    return torch.stack(rows).float().cpu()


@dataclass
class Prediction:
    """What a run would count (means over replays under sampling) and its rounds."""

    stats: RunStats
    steps: list[StepRecord]  # every replay's rounds, for the walltime model (pooled)
    positions: dict[int, tuple[float, float]]  # position_counts, averaged over replays
    evidence: Evidence | None = None  # the cost policy's own calibration evidence, averaged over replays


def predict(
    path: RecordedPath,
    drafter: str,
    policy: str,
    gamma: int,
    gen: GenerationConfig,
    *,
    costs=None,
    draft_vocab: int = 0,
    warm: Evidence | None = None,
) -> Prediction:
    """Replay `drafter` with `policy` at `gamma` (policy ORACLE_POLICY: the oracle, drafting
    up to gamma) on the path. costs and warm (the calibration to start from) feed the cost
    policy, as in a real run.

    model+lookup's oracle is the better, by the walltime model at `costs`, of its model
    rounds' oracle and its copies alone: the model oracle pays the drafter's read of the
    prompt whenever a model round pays for itself, and on an answer that copies a long
    prompt the read costs more than every model round earns, which a policy can see and
    decline (the cost policy's catch-up test). Without costs it is the model rounds' oracle."""
    policies = []

    def make(acceptance: Acceptance, copies_alone: bool = False):
        made = _drafter(path, drafter, gen, draft_vocab)
        if policy == ORACLE_POLICY:
            inner = made.lookup if copies_alone else made
            oracle = OracleDrafter(inner, acceptance, len(path.prompt_ids), oracle_pays(costs), path.kept)
            return oracle, make_policy("fixed", gamma)
        policies.append(make_policy(policy, gamma, costs=costs, warm=warm, max_new_tokens=gen.max_new_tokens))
        return made, policies[-1]

    def run(copies_alone: bool = False) -> Prediction:
        if gen.sampling.greedy:
            acceptance = Acceptance(path)
            made, chosen = make(acceptance, copies_alone)
            results = [replay(path, made, chosen, gen, acceptance)]
        else:
            results = replay_sampled(path, lambda acceptance: make(acceptance, copies_alone), gen, REPLICAS, gen.seed)
        return replace(_pool(results), evidence=mean_evidence(policies))

    prediction = run()
    if policy == ORACLE_POLICY and costs is not None and drafter == LookupFirstDrafter.name:
        copies = run(copies_alone=True)
        if _speedup(copies, costs) > _speedup(prediction, costs):
            return copies
    return prediction


def _speedup(prediction: Prediction, costs) -> float:
    """The walltime model's speedup of a prediction's rounds (0 where it has none)."""
    return modelled_speedup(RoundCounts.of(prediction.steps), costs) or 0.0


def oracle_pays(costs) -> Callable[[int, int], bool] | None:
    """Whether k accepted drafts from `forwards` drafter forwards are worth drafting: their
    price in target steps, c per forward (a catch-up is owed whether this round drafts or
    not) and v(k + 1) for the verify, below the k + 1 rounds without drafts they replace
    (v(1) = 1 each, and each round the loop's own work, Costs.loop). None without measured
    costs (the oracle then keeps every accepted draft)."""
    if costs is None or not costs.verify_cost or costs.c is None:
        return None
    loop = costs.loop()
    return lambda k, forwards: (
        costs.c * forwards + verify_cost_at(costs.verify_cost, k + 1) + loop < (k + 1) * (1 + loop)
    )


def _drafter(path: RecordedPath, name: str, gen: GenerationConfig, draft_vocab: int):
    """The drafter called `name`, its model replaced by the recorded rows."""
    if not uses_model(name):
        return make_drafter(name)
    vocab = None
    if draft_vocab > 0:
        vocab = VocabTracker(draft_vocab, path.draft_logits.shape[-1], gen.eos_token_ids)  # draft_logits: [n, vocab]
    model = PathDrafter(path, vocab)
    return model if name == "model" else LookupFirstDrafter(model)


def _pool(results) -> Prediction:
    """One Prediction from replays: counts are their means, rounds and positions pooled."""
    replays = len(results)
    stats = RunStats()
    for field in ("new_tokens", "first_pass_tokens", "drafted", "accepted", "rounds", "target_forwards"):
        total = sum(getattr(r.stats, field) for r in results)
        setattr(stats, field, total if replays == 1 else total / replays)
    positions: dict[int, list[float]] = {}
    for result in results:
        for i, (reached, accepted) in position_counts(result.steps).items():
            entry = positions.setdefault(i, [0.0, 0.0])
            entry[0] += reached / replays
            entry[1] += accepted / replays
    steps = [step for r in results for step in r.steps]
    return Prediction(stats, steps, {i: (r, a) for i, (r, a) in positions.items()})
