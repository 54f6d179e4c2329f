"""Sweeps: methods x drafters x policies x gammas x prompts x repeats on loaded models.

A sweep profiles first and measures second. Phase 1, for every prompt: the plain run (the
baseline, timed) after its block's costs are measured; then, for every prompt, the drafter
teacher-forced along that output (profile.py), and a PREDICTED row for every drafter x
policy x gamma and each drafter's oracle, replayed on that path with no model in the loop
(replay.py) and priced with the median of all blocks' costs (costs.pooled: one block's
few dozen timings on a shared CPU are noisier than the costs differ between prompts).
Phase 2 times real runs only where `measure` says: "best" (each drafter x policy at its
best predicted gamma), a list of gammas, or "all"; on every prompt, or on the first
measure_per_category prompts of each category. Rows say which they are in `source`.

This module runs the benchmark protocol: how each method is timed, the cost measurements
(c and the verify cost curve v(k)) and how they price runs, and writing the results directory
(runs.csv appended row by row, positions.csv, paths.jsonl, rounds.jsonl, optional steps.jsonl). What runs
in which order is plan.py's (pure: SweepConfig and the PlannedRun lists of both phases);
what meta.json records, and what a resume must match, is meta.py's. It receives models that are
already loaded (the CLI loads them with models.load_pair, as `generate` does) and a tokenizer;
it knows nothing about where models come from, and it renders nothing: progress and tables go
through callbacks to the caller. Prompts become ids by models.encode_prompt, the one rule.

Methods:
  plain        specbench's plain_generate, the baseline of every speedup;
  specbench    speculative_generate with make_drafter(drafter) and make_policy(policy, gamma);
               the model drafter scores ids below config.draft_vocab (draft_vocab.py);
  hf-*         transformers' assisted generation (hf_assisted.py) on the same model objects,
               with a constant schedule of gamma draft tokens (label policy "fixed"), or with
               HF's own defaults; HF's drafter scores its whole vocabulary (the restricted head
               is specbench's). Each of specbench's drafters has its HF counterpart where HF
               has one (hf_counterparts): hf-assisted beside the model drafter (hf-universal,
               assistant_tokenizer, when the drafter model has another tokenizer, only where
               the two configs' vocab_size differ, which is how HF tells tokenizers apart,
               and, when sampling, only where HF's sampling mode is lossless for the pair:
               why_no_hf_universal), hf-early-exit beside
               early-exit:N, hf-prompt-lookup beside prompt-lookup.

Several drafter models (config.drafter_models, named): each drafter that runs a model gets
one label per model, "model@NAME" (results.drafter_label), with its own c and v(k) per block
(costs_key "PROMPT/REPEAT@NAME"), its own recorded path for predictions, and its own HF
counterpart (hf-assisted or hf-universal, labelled "model@NAME"); plain runs, model-free
drafters and early exit are shared, so every model is timed beside the same baseline. With
one drafter model its name is "" and labels stay bare, as in every sweep before.

Measured only: a drafter with another tokenizer (config.translated) and early-exit:N get
no predicted rows. Predicting them needs the drafter's rows along the target's path in the
target's ids, which a translated drafter does not have (its rows are over its own ids, one
per drafter token, not per target token) and an early-exit drafter would need a teacher-
forced run through the target's first layers of its own; rather than predict them wrongly,
"best" times them at every gamma of the sweep. Early exit's c is N / the target's layers
(the layers it runs; an estimate, not a timing).

Protocol: phase 1 goes prompt by prompt twice (the plain runs, then the predictions);
phase 2 runs, for each repeat and measured prompt, a plain run of its own and then every
measured combination in turn, so machine drift hits all methods alike (odd repeats in
reverse); one short warm-up generation per method before timing; c and v(k) measured as
each prompt's block starts, on that prompt's context (or once per sweep with
costs_per_prompt=False; a resumed sweep reuses what its blocks measured), and every
prediction and every measured cost policy priced with their pooled median, so a measured
run's policy decides as its prediction did. paths.jsonl keeps each plain output, so a
resumed sweep can still predict from it; rounds.jsonl keeps each predicted run's rounds
(stats.RoundCounts), so `specbench predict` (reprice.py) can price them again with other
costs, with the same functions (predicted_price, price_blocks).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from specbench.bench.costs import Costs, for_drafter, measure_costs, pooled, shared_limit, timing_context
from specbench.bench.hf_assisted import HFDrafter, hf_sampling_defect, measure_hf_assisted
from specbench.bench.meta import (
    add_costs_meta,
    build_meta,
    carry_over_meta,
    check_resume_meta,
    set_sweep_costs,
    summary_records,
)
from specbench.bench.plan import (
    HF_EARLY_EXIT,
    HF_METHODS,
    HF_PROMPT_LOOKUP,
    HF_STOCK_POLICY,
    HF_UNIVERSAL,
    METHODS,
    SPECBENCH,
    PlannedRun,
    SweepConfig,
    chosen_gammas,
    drafts_with_model,
    generation_config,
    label_uses_model,
    measure_plan,
    needs_drafter_model,
    pending_runs,
    plan_runs,
    predicted,
)
from specbench.bench.profile import Prediction, predict, record_path
from specbench.bench.prompts import Prompt
from specbench.bench.replay import position_counts
from specbench.bench.results import (
    BASELINE_METHOD,
    KEY_COLUMNS,
    MEASURED,
    MODEL_SEPARATOR,
    POSITIONS_CSV,
    PREDICTED,
    PROFILE,
    RUNS_CSV,
    STEPS_JSONL,
    append_positions,
    append_row,
    label_parts,
    make_dir,
    output_hash,
    plain_repeatability,
    prediction_accuracy,
    prediction_check,
    read_meta,
    read_rows,
    row_key,
    write_meta,
)
from specbench.core.generate import GenerationConfig, context_limit, plain_generate, speculative_generate
from specbench.core.stats import RoundCounts, RunStats, StepRecord, verify_cost_at, walltime_speedup
from specbench.drafters import make_drafter, parse_early_exit, uses_model
from specbench.drafters.early_exit import check_early_exit
from specbench.errors import PromptError, ResultsError, SweepError, reraise_as
from specbench.models.loading import output_vocab_size, timing_ids
from specbench.models.text import check_prompt_fits, encode_prompt
from specbench.policies import make_policy
from specbench.speed.kernels import stock_kernels

PATHS_JSONL = "paths.jsonl"  # each plain run's output ids, what predictions replay
ROUNDS_JSONL = "rounds.jsonl"  # each predicted run's rounds (RoundCounts), what `specbench predict` prices again


def hf_tells_apart(target, drafter_model) -> bool:
    """Whether HF's generate() takes the pair for two tokenizers (it compares the configs'
    vocab_size; with equal sizes it refuses assistant_tokenizer)."""
    size = lambda model: model.config.get_text_config().vocab_size  # noqa: E731
    return size(target) != size(drafter_model)


def why_no_hf_universal(target, drafter_model, target_tokenizer, drafter_tokenizer, temperature: float) -> str | None:
    """Why HF's Universal Assisted Generation is no baseline for a drafter model with another
    tokenizer (None: it is): HF cannot tell the tokenizers apart, or, when sampling, its
    sampling mode would score the drafts under other tokens' probabilities (not lossless)."""
    if not hf_tells_apart(target, drafter_model):
        return "HF takes two tokenizers only where the models' vocab_size differ"
    vocab = target.config.get_text_config().vocab_size
    defect = hf_sampling_defect(target_tokenizer, drafter_tokenizer, vocab) if temperature > 0 else None
    return f"HF's sampling mode {defect}, so it is no lossless baseline" if defect else None


# ---------------------------------------------------------------------------- one measurement


@dataclass
class Measurement:
    token_ids: list[int]  # the new tokens
    stats: RunStats
    acceptance_known: bool = True
    steps: list[StepRecord] = field(default_factory=list)
    stop_reason: str | None = None
    positions: dict[int, tuple[float, float]] | None = None  # replay.position_counts (specbench runs)


def measure_plain(target, prompt_ids: list[int], gen: GenerationConfig) -> Measurement:
    result = plain_generate(target, prompt_ids, gen)
    return Measurement(result.token_ids, result.stats, acceptance_known=False, stop_reason=result.stop_reason)


def drafter_costs(costs: Costs | None, drafter: str, target) -> Costs | None:
    """The costs a drafter pays: for_drafter's (a model-free drafter's c is 0), and for
    early-exit:N a c of N / the target's layers, the share of the target it runs (an
    estimate, not a timing: costs.py times the drafter model, not each N)."""
    layers = parse_early_exit(drafter)
    if costs is None or layers is None:
        return for_drafter(costs, drafter) if costs is not None else None
    share = layers / target.config.num_hidden_layers
    return replace(costs, c=share, drafter_step_seconds=costs.target_step_seconds * share, drafter_cost=None)


def measure_specbench(
    target,
    drafter_model,
    prompt_ids: list[int],
    gen: GenerationConfig,
    drafter: str,
    policy: str,
    gamma: int,
    costs: Costs | None = None,
    draft_vocab: int = 0,
    translate: tuple | None = None,
) -> Measurement:
    """costs feed the "cost" policy (drafter_costs gives the drafter's own c).
    draft_vocab > 0 restricts the model drafter's head (draft_vocab.py; gen's EOS ids stay in);
    translate: make_drafter's, for a drafter model with another tokenizer."""
    costs = drafter_costs(costs, drafter, target)
    made = make_drafter(
        drafter, drafter_model, draft_vocab, gen.eos_token_ids, target_model=target, translate=translate
    )
    result = speculative_generate(target, made, prompt_ids, gen, make_policy(policy, gamma, costs=costs))
    return Measurement(
        result.token_ids,
        result.stats,
        steps=result.steps,
        stop_reason=result.stop_reason,
        positions=position_counts(result.steps),
    )


def predicted_measurement(
    path, run: PlannedRun, gen: GenerationConfig, costs: Costs | None, draft_vocab: int
) -> Measurement:
    """A predicted run: the replay's counts and rounds on the prompt's path (profile.predict)."""
    kind = label_parts(run.drafter)[0]
    if costs is not None:
        costs = for_drafter(costs, kind)
    predicted: Prediction = predict(path, kind, run.policy, run.gamma, gen, costs=costs, draft_vocab=draft_vocab)
    return Measurement(
        path.output, predicted.stats, steps=predicted.steps, stop_reason=None, positions=predicted.positions
    )


# ---------------------------------------------------------------------------- rows (pure)


@dataclass(frozen=True)
class Baseline:
    tokens_per_second: float | None
    output_hash: str


def baseline_key(source: str, prompt_id: str, repeat) -> tuple[str, str, str]:
    """Which plain run a row is compared with: predictions with their phase's (PROFILE),
    measured runs with the one timed beside them (MEASURED)."""
    kind = PROFILE if source in (PROFILE, PREDICTED) else MEASURED
    return (kind, str(prompt_id), str(int(float(repeat))))


def baselines_from_rows(rows: list[dict]) -> dict[tuple[str, str, str], Baseline]:
    """The plain runs of an earlier, interrupted sweep, by baseline_key."""
    found = {}
    for row in rows:
        if row["method"] == BASELINE_METHOD:
            tps = float(row["tokens_per_second"]) if row["tokens_per_second"] else None
            found[baseline_key(row.get("source") or MEASURED, row["prompt_id"], row["repeat"])] = Baseline(
                tps, row.get("output_hash", "")
            )
    return found


def predicted_speedup(run: PlannedRun, counts: RoundCounts, costs: Costs | None) -> float | None:
    """The walltime model's speedup of a specbench run's rounds (modelled_speedup); None
    for other methods."""
    return modelled_speedup(counts, costs) if run.method == SPECBENCH else None


def modelled_speedup(counts: RoundCounts, costs: Costs | None) -> float | None:
    """stats.walltime_speedup of a run's rounds, priced by its block's measured costs in
    units of the target's single step t(1): c = drafter step / t(1), paid by each drafter
    forward the round ran, a forward over n tokens as u(n) steps (a copy or a table's guess
    runs none), v(k) as measured, v(1) = 1 (a round without drafts is a single step among
    the round's others), and the loop's own work per round (Costs.loop; 0 for costs from
    before it was measured). Plain decoding is priced by the measured plain step
    (Costs.plain_step), not by the plain run: every number here is a median of interleaved
    timings (costs.py), where the plain run is one run whose speed wanders from run to run
    on a shared CPU as much as the speedups being predicted (the sweep reports that noise
    floor); pricing in the plain run's own step carried its noise into every prediction
    (docs/log.md, "Pricing predictions in t(1)"). None without costs or rounds."""
    if costs is None or not costs.verify_cost or not costs.target_step_seconds:
        return None
    c = (costs.drafter_step_seconds or 0.0) / costs.target_step_seconds
    verify = lambda k: 1.0 if k == 1 else verify_cost_at(costs.verify_cost, k)  # noqa: E731
    step_cost = lambda n: verify_cost_at(costs.drafter_cost, n) if costs.drafter_cost else 1.0  # noqa: E731
    return walltime_speedup(counts, c, verify, step_cost, costs.plain_step(), costs.loop())


def predicted_price(counts: RoundCounts, baseline: Baseline | None, costs: Costs | None) -> dict:
    """The columns of a predicted row that its costs set, and all that re-pricing it with
    other costs changes (`specbench predict`, reprice.py): the walltime model's speedup as
    speedup and predicted_speedup, tokens_per_second as that speedup times its plain run's
    (the profile run's, as runs.csv reads back), and c."""
    model = modelled_speedup(counts, costs)
    tps = (
        model * baseline.tokens_per_second
        if model is not None and baseline is not None and baseline.tokens_per_second
        else None
    )
    return {
        "tokens_per_second": tps,
        "speedup": model,
        "c": costs.c if costs is not None else None,
        "predicted_speedup": model,
    }


def make_row(
    run: PlannedRun,
    m: Measurement,
    baseline: Baseline | None,
    *,
    c: float | None,
    prompt_tokens: int,
    seed: int,
    costs: Costs | None = None,
) -> dict:
    """One runs.csv row; metrics come from RunStats, speedup and parity from the baseline,
    predicted_speedup from the run's rounds and the measured costs."""
    stats, greedy = m.stats, run.temperature == 0
    is_baseline = run.method == BASELINE_METHOD
    predicted = run.source == PREDICTED
    counts = RoundCounts.of(m.steps)
    model = predicted_speedup(run, counts, costs)
    tps = stats.tokens_per_second
    speedup = None
    if is_baseline:
        speedup = 1.0
    elif baseline is not None and baseline.tokens_per_second:
        speedup = tps / baseline.tokens_per_second
    identical = None
    if greedy and not is_baseline and not predicted and baseline is not None and baseline.output_hash:
        identical = output_hash(m.token_ids) == baseline.output_hash
    known = m.acceptance_known
    timed = lambda value: None if predicted else value
    row = {
        "source": run.source,
        "method": run.method,
        "drafter": run.drafter,
        "policy": run.policy,
        "gamma": run.gamma,
        "temperature": run.temperature,
        "prompt_id": run.prompt.id,
        "category": run.prompt.category,
        "repeat": run.repeat,
        "new_tokens": stats.new_tokens,
        "drafted": stats.drafted if known else None,
        "accepted": stats.accepted if known else None,
        "acceptance_rate": stats.acceptance_rate if known else None,
        "mean_accepted_length": stats.mean_accepted_length
        if (known or is_baseline) and stats.rounds
        else None,  # no round: nothing to average
        "target_forwards": stats.target_forwards,
        "tokens_per_second": tps,
        "speedup": speedup,
        "c": c,
        "identical_to_baseline": identical,
        "predicted_speedup": model,
        "rounds": stats.rounds,
        "first_pass_tokens": stats.first_pass_tokens,
        "prompt_tokens": prompt_tokens,
        "prefill_seconds": timed(stats.prefill_seconds),
        "decode_seconds": timed(stats.decode_seconds),
        "draft_seconds": timed(stats.draft_seconds) if run.method == SPECBENCH else None,
        "verify_seconds": timed(stats.verify_seconds) if run.method == SPECBENCH else None,
        "stop_reason": m.stop_reason,
        "seed": seed,
        "output_hash": output_hash(m.token_ids),
    }
    if predicted:  # the walltime model's speedup, in the plain run's tokens per second
        row.update(predicted_price(counts, baseline, costs))
    return row


def position_rows(run: PlannedRun, positions: dict[int, tuple[float, float]]) -> list[dict]:
    """positions.csv rows of one run: reached and accepted drafts at each draft position."""
    head = {**dict(zip(KEY_COLUMNS, run.key)), "gamma": run.gamma, "category": run.prompt.category}
    return [
        {**head, "position": i, "reached": reached, "accepted": accepted}
        for i, (reached, accepted) in sorted(positions.items())
    ]


def step_lines(run: PlannedRun, steps: list[StepRecord]) -> list[str]:
    """steps.jsonl lines: each StepRecord's fields, plus "run" naming the run it belongs to."""
    head = {"run": dict(zip(KEY_COLUMNS, run.key))}
    return [json.dumps({**head, **json.loads(step.to_json())}) for step in steps]


# ---------------------------------------------------------------------------- which costs price a run (pure)


def costs_model(drafter: str, first_model: str) -> str:
    """Whose c a run's row carries: its drafter model's (drafter is a label, model@NAME),
    or the sweep's first model's for plain and drafters without a model (their c is 0;
    v(k) is the target's alike)."""
    kind, name = label_parts(drafter)
    return name if uses_model(kind) else first_model


def costs_key(prompt_id: str, repeat: int, model: str, per_prompt: bool) -> str:
    """Which measurement of c and v(k) a run uses: its prompt's block (prompt id/repeat),
    or the sweep's one measurement ("sweep"); "@NAME" after it for a named drafter model.

    costs_key("cw-01", 0, "", True) == "cw-01/0"; costs_key("cw-01", 0, "small", False) == "sweep@small"
    """
    block = f"{prompt_id}/{repeat}" if per_prompt else "sweep"
    return f"{block}{MODEL_SEPARATOR}{model}" if model else block


def price_blocks(
    block_costs: dict[str, Costs], keys: dict[str, list[str]]
) -> tuple[dict[str, Costs], dict[str, tuple[Costs, int]]]:
    """What each measured block is priced with: costs.pooled over the blocks of its drafter
    model (keys: by model name, the costs_keys of its blocks, in the sweep's order; those
    not in block_costs were not measured). Returns (the pooled costs by costs_key, and by
    model name the pool over all its blocks, what meta.json and the tables report, with
    their count). The sweep prices its predictions with it, and `specbench predict` prices
    them again with it from meta.json's costs_by_block."""
    priced, sweep_wide = {}, {}
    for name, model_keys in keys.items():
        measured = [key for key in dict.fromkeys(model_keys) if key in block_costs]
        blocks = [block_costs[key] for key in measured]
        if not blocks:
            continue
        for key in measured:
            priced[key] = pooled(blocks, block_costs[key].context_tokens)
        sweep_wide[name] = (pooled(blocks, int(statistics.median(b.context_tokens for b in blocks))), len(blocks))
    return priced, sweep_wide


# ---------------------------------------------------------------------------- the sweep


@dataclass(frozen=True)
class DrafterModel:
    """One drafter model of a sweep, and its own tokenizer when that is not the target's
    (config.translated names it: its drafts are translated through text)."""

    model: object
    tokenizer: object = None


class SweepRunner:
    """Holds the loaded models and runs one PlannedRun at a time. drafters: the drafter
    models by name (config.drafter_models; {} when the sweep drafts with none)."""

    def __init__(
        self, target, drafters: dict[str, DrafterModel], tokenizer, config: SweepConfig, eos_ids: tuple[int, ...]
    ):
        self.target, self.drafters, self.tokenizer, self.config = target, dict(drafters), tokenizer, config
        self.eos_ids = tuple(eos_ids)
        self.on_costs: Callable[[str, Costs], None] | None = None  # told of each new measurement
        self.block_costs: dict[str, Costs] = {}  # c and v(k) by costs_key, measured as blocks start
        self.cost_models: tuple[str, ...] = (config.drafter_models[0],)  # whose costs each block measures (costs_model)
        self.priced: dict[
            str, Costs
        ] = {}  # by costs_key: what predictions and measured runs are priced with (price_blocks)
        self.sweep_costs: dict[str, tuple[Costs, int]] = {}  # by model: the pool over all blocks, and their count
        self.outputs: dict[tuple[str, int], list[int]] = {}  # plain outputs by (prompt id, repeat)
        self._ids: dict[str, list[int]] = {}
        self._paths: tuple[tuple[str, int], dict] | None = None  # the last prompt's recorded paths, by drafter model
        predicted_models = [label_parts(d)[1] for d in config.drafters if label_uses_model(d) and predicted(config, d)]
        self._first_predicted_model = next((n for n in predicted_models if n in self.drafters), None)

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's ids (models.encode_prompt); one too long for the target raises
        PromptError, naming the prompt."""
        if prompt.id not in self._ids:
            ids = encode_prompt(self.tokenizer, prompt.messages())
            try:
                check_prompt_fits(ids, context_limit(self.target))
            except PromptError as exc:
                raise PromptError(f"prompt {prompt.id}: {exc}") from None
            self._ids[prompt.id] = ids
        return self._ids[prompt.id]

    def model_name(self, run: PlannedRun) -> str | None:
        """The name of the drafter model run's label drafts with (an hf-assisted run's too);
        None for a drafter without one."""
        kind, name = label_parts(run.drafter)
        return name if uses_model(kind) else None

    def drafter_model(self, name: str | None):
        return self.drafters[name].model if name is not None and name in self.drafters else None

    def translation(self, name: str | None) -> tuple | None:
        """make_drafter's translate argument for drafter model `name`: (its tokenizer, the
        target's, the target's logits width) when it has another tokenizer, else None."""
        if name is None or name not in self.config.translated:
            return None
        return (self.drafters[name].tokenizer, self.tokenizer, output_vocab_size(self.target))

    def measure(self, run: PlannedRun, max_new_tokens: int | None = None) -> Measurement:
        ids = self.prompt_ids(run.prompt)
        gen = generation_config(self.config, self.eos_ids, run.repeat, max_new_tokens)
        if run.source == PREDICTED:
            return predicted_measurement(self.path(run, gen), run, gen, self.costs_for(run), self.config.draft_vocab)
        if run.method == BASELINE_METHOD:
            m = measure_plain(self.target, ids, gen)
            if max_new_tokens is None and run.source == PROFILE:
                self.outputs[(run.prompt.id, run.repeat)] = m.token_ids
            return m
        name = self.model_name(run)
        if run.method == SPECBENCH:
            kind = label_parts(run.drafter)[0]
            return measure_specbench(
                self.target,
                self.drafter_model(name),
                ids,
                gen,
                kind,
                run.policy,
                run.gamma,
                self.priced_costs_for(run),
                self.config.draft_vocab,
                self.translation(name),
            )
        if run.method in HF_METHODS:  # the stock-kernels run is HF's defaults (gamma None)
            with stock_kernels() if run.policy == HF_STOCK_POLICY else nullcontext():
                hf = measure_hf_assisted(
                    self.target, self.drafter_model(name), ids, gen, run.gamma, self.hf_drafter(run)
                )
            return Measurement(hf.token_ids, hf.stats, acceptance_known=hf.acceptance_known, stop_reason=hf.stop_reason)
        raise SweepError(f"unknown method {run.method!r}; choose from {', '.join(METHODS)}")

    def hf_drafter(self, run: PlannedRun) -> HFDrafter:
        """Which of HF's candidate generators an hf-* run drafts with."""
        if run.method == HF_UNIVERSAL:
            return HFDrafter("universal", (self.tokenizer, self.drafters[self.model_name(run)].tokenizer))
        if run.method == HF_EARLY_EXIT:
            return HFDrafter("early-exit", layers=parse_early_exit(run.drafter))
        return HFDrafter("prompt-lookup") if run.method == HF_PROMPT_LOOKUP else HFDrafter()

    def path_model(self, run: PlannedRun) -> str | None:
        """Which drafter model a predicted run's path records rows of: its own, or for a
        drafter without one the first model the sweep predicts (its path has the output
        every drafter replays on, recorded once per prompt); None when no model is predicted."""
        name = self.model_name(run)
        return name if name is not None else self._first_predicted_model

    def path(self, run: PlannedRun, gen: GenerationConfig):
        """The recorded path of run's prompt and repeat with run's drafter model
        (profile.record_path), kept while that prompt's predictions run."""
        key = (run.prompt.id, run.repeat)
        if self._paths is None or self._paths[0] != key:
            if key not in self.outputs:
                raise SweepError(
                    f"no plain output recorded for prompt {run.prompt.id} (repeat {run.repeat}) to predict from"
                )
            self._paths = (key, {})
        name, paths = self.path_model(run), self._paths[1]
        if name not in paths:
            paths[name] = record_path(
                self.target,
                self.drafter_model(name),
                self.prompt_ids(run.prompt),
                self.outputs[key],
                gen,
                self.config.draft_vocab,
            )
        return paths[name]

    def warm_up(self, plan: list[PlannedRun]) -> None:
        """One short untimed generation per method and drafter, so first-call costs (allocator,
        kernels, lazy imports) land on no measured run."""
        seen = set()
        for run in plan:
            if run.source != PREDICTED and (run.method, run.drafter) not in seen:
                seen.add((run.method, run.drafter))
                self.measure(run, max_new_tokens=min(self.config.warmup_tokens, self.config.max_new_tokens))

    def costs_model(self, run: PlannedRun) -> str:
        return costs_model(run.drafter, self.config.drafter_models[0])

    def costs_key(self, run: PlannedRun, name: str | None = None) -> str:
        """costs_key of run's block, for its costs_model or drafter model `name`."""
        name = self.costs_model(run) if name is None else name
        return costs_key(run.prompt.id, run.repeat, name, self.config.costs_per_prompt)

    def costs_for(self, run: PlannedRun) -> Costs:
        """The costs a run's row carries (its c) and is priced with: a plain run of phase 1
        its own block's measurement (measuring the block first), any other run the pooled
        costs (priced_costs_for); an early-exit drafter's c is drafter_costs' estimate."""
        costs = self.block_costs_for(run) if run.source == PROFILE else self.priced_costs_for(run)
        return drafter_costs(costs, run.drafter, self.target) if parse_early_exit(run.drafter) is not None else costs

    def priced_costs_for(self, run: PlannedRun) -> Costs:
        """What run's predictions and its cost policy are priced with: the median of every
        block's measurement near its context (costs.pooled, set by price_blocks once phase 1's
        plain runs have measured them all), or its block's own before that."""
        return self.priced.get(self.costs_key(run)) or self.block_costs_for(run)

    def block_costs_for(self, run: PlannedRun) -> Costs:
        """The costs of run's block, measured when the block first asks (just before its plain
        run of phase 1, on its prompt's context) for each of cost_models, so that the blocks'
        measurements spread over the sweep like its runs; run's own model's."""
        for name in dict.fromkeys((*self.cost_models, self.costs_model(run))):
            key = self.costs_key(run, name)
            if key not in self.block_costs:
                self.block_costs[key] = self.costs(run.prompt, name)
                if self.on_costs is not None:
                    self.on_costs(key, self.block_costs[key])
        return self.block_costs[self.costs_key(run)]

    def price_blocks(self, runs: list[PlannedRun]) -> dict[str, tuple[Costs, int]]:
        """Price every measured block of `runs` (price_blocks); returns, by model name, the
        pool over all its blocks (what meta.json and the tables report) and their count."""
        keys = {name: [self.costs_key(run, name) for run in runs] for name in self.cost_models}
        priced, sweep_wide = price_blocks(self.block_costs, keys)
        self.priced.update(priced)
        return sweep_wide

    def costs(self, prompt: Prompt, name: str) -> Costs:
        """c of drafter model `name` (none when the sweep drafts with no model) and the
        target's v(k), timed on the prompt's context."""
        drafter = self.drafter_model(name) if needs_drafter_model(self.config) else None
        context = timing_context(
            self.prompt_ids(prompt), self.config.max_new_tokens, shared_limit(self.target, drafter)
        )
        vocab = self.config.draft_vocab if drafts_with_model(self.config) and name not in self.config.translated else 0
        context = timing_ids(context, self.target, drafter)  # a drafter with another tokenizer reads fewer ids
        sampling = generation_config(self.config, self.eos_ids).sampling  # the runs' own
        return measure_costs(
            self.target,
            drafter,
            context,
            self.config.timing_repeats,
            draft_vocab=vocab,
            sampling=sampling,
            predicting=True,
        )


def run_plan(
    plan: list[PlannedRun],
    measure: Callable[[PlannedRun], Measurement],
    out_dir: Path,
    *,
    costs_of: Callable[[PlannedRun], Costs | None],
    prompt_tokens: Callable[[Prompt], int],
    seed: int,
    baselines: dict | None = None,
    write_steps: bool = False,
    on_row: Callable[[PlannedRun, dict], None] | None = None,
) -> int:
    """Measure each run in order and append its row to runs.csv as soon as it finishes.
    costs_of(run) gives the costs of run's block (measured there when first asked, before
    the run). An interruption (Ctrl-C) loses only the run in progress. Returns rows written."""
    baselines = dict(baselines or {})
    written = 0
    for run in plan:
        costs = costs_of(run)
        m = measure(run)
        where = baseline_key(run.source, run.prompt.id, run.repeat)
        row = make_row(
            run,
            m,
            baselines.get(where),
            c=costs.c if costs else None,
            prompt_tokens=prompt_tokens(run.prompt),
            seed=seed + run.repeat,
            costs=costs,
        )
        if run.method == BASELINE_METHOD:
            baselines[where] = Baseline(row["tokens_per_second"], row["output_hash"])
        if run.method == BASELINE_METHOD and run.source == PROFILE:
            with open(out_dir / PATHS_JSONL, "a", encoding="utf-8") as handle:
                handle.write(
                    json.dumps({"prompt_id": run.prompt.id, "repeat": run.repeat, "output": m.token_ids}) + "\n"
                )
        if run.source == PREDICTED:  # before its row: every predicted row has its rounds
            with open(out_dir / ROUNDS_JSONL, "a", encoding="utf-8") as handle:
                handle.write(
                    json.dumps({"run": dict(zip(KEY_COLUMNS, run.key)), "rounds": RoundCounts.of(m.steps).as_json()})
                    + "\n"
                )
        append_row(out_dir / RUNS_CSV, row)
        if m.positions:
            append_positions(out_dir / POSITIONS_CSV, position_rows(run, m.positions))
        if write_steps and m.steps and run.source == MEASURED:
            with open(out_dir / STEPS_JSONL, "a", encoding="utf-8") as handle:
                handle.write("\n".join(step_lines(run, m.steps)) + "\n")
        written += 1
        if on_row is not None:
            on_row(run, row)
    return written


@dataclass
class SweepResult:
    out_dir: Path
    written: int
    skipped: int
    costs: dict[str, Costs]  # every measurement of c and v(k), by SweepRunner.costs_key
    pooled: dict[str, tuple[Costs, int]] = field(default_factory=dict)  # SweepRunner.sweep_costs
    late: int = 0  # measured runs a resume added to blocks whose plain run was timed before it


def costs_summary(costs: Costs) -> str:
    """One line: c, t(1), v(2..), the plain step and the loop's work of a measurement or a pool."""
    c = f"c = {costs.c:.3f}, " if costs.c is not None else ""
    curve = " ".join(f"{v:.2f}" for k, v in sorted(costs.verify_cost.items()) if k > 1)
    extra = f", plain step {costs.plain_step():.2f}" if costs.plain_step_seconds else ""
    extra += f", loop {costs.loop():.3f} a round" if costs.loop_seconds is not None else ""
    return f"{c}target step {costs.target_step_seconds * 1000:.1f} ms, v(2..{max(costs.verify_cost, default=1)}) {curve}{extra}"


def pricing_line(name: str | None, costs: Costs, count: int) -> str:
    """What a sweep prices with, for drafter model `name` ("" or None: the sweep's one):
    the line the sweep prints when it starts pricing and again when it ends."""
    pool = f"the median of {count} measurements" if count > 1 else "its one measurement"
    return f"pricing with {pool}{f' of {name}' if name else ''}: {costs_summary(costs)}"


def late_runs(todo: list[PlannedRun], done_rows: list[dict]) -> int:
    """How many of phase 2's pending runs join a block whose plain run is already in runs.csv
    (a resume that measures more in a finished block, as when the best gamma moved): their
    speedups compare with a plain run timed before the resume, not beside them."""
    timed = baselines_from_rows(done_rows)
    return sum(
        run.method != BASELINE_METHOD and baseline_key(MEASURED, run.prompt.id, run.repeat) in timed for run in todo
    )


def prepare_out_dir(out_dir: Path, resume: bool) -> list[dict]:
    """Make the directory; the rows already there when resuming. Refuses to mix sweeps."""
    make_dir(out_dir, SweepError)
    csv_path = out_dir / RUNS_CSV
    if not csv_path.exists() or csv_path.stat().st_size == 0:
        return []
    if not resume:
        raise SweepError(f"{csv_path} already exists: pass --resume to continue that sweep, or choose another --out")
    return read_rows(csv_path)


def read_paths(out_dir: Path) -> dict[tuple[str, int], list[int]]:
    """The plain outputs an interrupted sweep recorded (paths.jsonl), by (prompt id, repeat);
    a half-written last line is skipped."""
    outputs = {}
    path = Path(out_dir) / PATHS_JSONL
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except json.JSONDecodeError:
                continue
            outputs[(item["prompt_id"], int(item["repeat"]))] = [int(t) for t in item["output"]]
    return outputs


def read_rounds(out_dir: Path) -> dict[tuple[str, ...], RoundCounts]:
    """Each predicted run's rounds (rounds.jsonl), by results.row_key; a half-written last
    line is skipped. A directory without the file (a sweep from before it was written) is
    a ResultsError."""
    path = Path(out_dir) / ROUNDS_JSONL
    if not path.is_file():
        raise ResultsError(
            f"no {ROUNDS_JSONL} in {out_dir}: its sweep was written before sweeps recorded their predicted rounds; run it again with this version to price it"
        )
    rounds = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
            rounds[row_key(item["run"])] = RoundCounts.from_json(item["rounds"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue
    return rounds


def drafters_of(config: SweepConfig, drafter_model, drafter_tokenizer=None) -> dict[str, DrafterModel]:
    """sweep()'s drafter models by name: {name: DrafterModel} as given for a sweep with
    several, or the one model (with its tokenizer when translated) under the one name."""
    if isinstance(drafter_model, dict):
        return dict(drafter_model)
    if drafter_model is None:
        return {}
    return {config.drafter_models[0]: DrafterModel(drafter_model, drafter_tokenizer)}


def check_drafters(config: SweepConfig, drafters: dict[str, DrafterModel], target) -> None:
    """Each early-exit:N fits the target, and the drafter models a sweep's own drafters need
    are there, with a tokenizer where translated. hf-assisted alone may go without one: it
    is then not run (hf_counterparts)."""
    for drafter in config.drafters:
        layers = parse_early_exit(drafter)
        if layers is not None:
            with reraise_as(SweepError):
                check_early_exit(target, layers)
    if not needs_drafter_model(config):
        return
    missing = [name for name in config.drafter_models if name not in drafters]
    if missing and drafts_with_model(config):
        which = f"drafter model {missing[0]!r}" if missing[0] else "the drafter model"
        raise SweepError(f"this sweep drafts with {which} (the model drafter or hf-assisted) but none was given")
    if any(drafters[name].tokenizer is None for name in config.translated if name in drafters):
        raise SweepError("the drafter model has another tokenizer, but none was given to translate its drafts")


def sweep(
    target,
    drafter_model,
    tokenizer,
    prompts: list[Prompt],
    config: SweepConfig,
    out_dir: Path,
    *,
    resume: bool = False,
    target_name: str | None = None,
    drafter_name: str | dict[str, str] | None = None,
    prompts_source: str = "",
    command: str | None = None,
    eos_ids: tuple[int, ...] = (),
    drafter_tokenizer=None,
    on_status: Callable[[str], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_row: Callable[[PlannedRun, dict], None] | None = None,
) -> SweepResult:
    """Run a whole sweep into out_dir (see the module docstring for the protocol).

    drafter_model: the drafter model (None when the sweep drafts with none), or for a sweep
    of several (config.drafter_models) {name: DrafterModel}, with drafter_name {name: its
    name in meta.json}. drafter_tokenizer: the one drafter model's, when it is not the
    target's (config.translated). on_status(text) reports a phase; on_start(total, skipped)
    comes once the plan is known; on_row(run, row) after each row is written.
    KeyboardInterrupt propagates after the rows finished so far are on disk. eos_ids end
    every generation (models.eos_token_ids gives a loaded pair's); names and command only go
    into meta.json.
    """
    status = on_status or (lambda _text: None)
    if not prompts:
        raise SweepError("no prompts to run")
    drafters = drafters_of(config, drafter_model, drafter_tokenizer)
    check_drafters(config, drafters, target)
    runner = SweepRunner(target, drafters, tokenizer, config, eos_ids)
    for prompt in prompts:  # a prompt too long for the context fails now, not an hour in
        runner.prompt_ids(prompt)
    # 1. the directory, and what an interrupted sweep there already measured
    out_dir = Path(out_dir)
    done_rows = prepare_out_dir(out_dir, resume)
    names = drafter_name if isinstance(drafter_name, dict) else {config.drafter_models[0]: drafter_name}
    meta = build_meta(
        target,
        drafters,
        config,
        prompts,
        target_name=target_name,
        drafter_names=names,
        prompts_source=prompts_source,
        command=command or " ".join(sys.argv),
    )
    old_meta = read_meta(out_dir) if done_rows else {}
    if done_rows and not old_meta:
        raise SweepError(
            f"cannot resume: {out_dir} has finished rows but no meta.json, so what they measured cannot be checked; start again with another --out"
        )
    check_resume_meta(old_meta, meta)

    # 2. the plan; the costs c and v(k) of each prompt's block are measured as it starts
    # (a resume reuses the blocks' recorded costs), and meta.json records every measurement
    has_model = bool(drafters)
    everything = plan_runs(config, prompts, has_drafter_model=has_model)
    total = len(everything)
    runner.cost_models = tuple(dict.fromkeys(runner.costs_model(run) for run in everything))
    runner.block_costs = {key: Costs.from_meta(raw) for key, raw in old_meta.get("costs_by_block", {}).items()}
    runner.outputs = read_paths(out_dir)
    carry_over_meta(meta, old_meta)
    write_meta(out_dir, meta)

    def record_costs(key: str, costs: Costs) -> None:
        status(
            f"measured c and v(k) for {key}: c = {costs.c:.3f}" if costs.c is not None else f"measured v(k) for {key}"
        )
        add_costs_meta(meta, key, costs)
        write_meta(out_dir, meta)

    runner.on_costs = record_costs
    if on_start is not None:
        on_start(total, len(done_rows))

    def run_phase(todo: list[PlannedRun], rows_so_far: list[dict]) -> int:
        if any(run.source != PREDICTED for run in todo):
            status("warming up")
            runner.warm_up(todo)
        status("running")
        return run_plan(
            todo,
            runner.measure,
            out_dir,
            costs_of=runner.costs_for,
            prompt_tokens=lambda p: len(runner.prompt_ids(p)),
            seed=config.seed,
            baselines=baselines_from_rows(rows_so_far),
            write_steps=config.steps,
            on_row=on_row,
        )

    # 3. phase 1: plain runs (each block's costs measured before it), then predictions
    # priced with the pooled costs; phase 2: the timed runs they point to
    paths = [run for run in everything if run.source == PROFILE]
    todo = pending_runs(paths, done_rows)
    skipped = len(paths) - len(todo)
    written = run_phase(todo, done_rows)
    runner.sweep_costs = runner.price_blocks(paths)
    for name, (costs, count) in runner.sweep_costs.items():
        status(pricing_line(name, costs, count))
        if name == runner.cost_models[0]:
            set_sweep_costs(meta, costs, count)
    write_meta(out_dir, meta)
    predictions = [run for run in everything if run.source == PREDICTED]
    todo = pending_runs(predictions, done_rows)
    skipped += len(predictions) - len(todo)
    written += run_phase(todo, read_rows(out_dir / RUNS_CSV))
    rows = read_rows(out_dir / RUNS_CSV)
    gammas = chosen_gammas(config, [r for r in rows if r.get("source") == PREDICTED])
    meta["measured_gammas"] = {f"{d}/{p}": list(g) for (d, p), g in gammas.items()}
    write_meta(out_dir, meta)
    measured = measure_plan(config, prompts, gammas, has_drafter_model=has_model)
    todo = pending_runs(measured, done_rows)
    late = late_runs(todo, done_rows)
    skipped += len(measured) - len(todo)
    written += run_phase(todo, rows)
    meta["finished"] = True
    final = read_rows(out_dir / RUNS_CSV)
    meta["summary"] = summary_records(final)
    meta["checks"] = {
        "prediction": prediction_accuracy(prediction_check(final)),
        "plain_twice": plain_repeatability(final),
    }
    write_meta(out_dir, meta)
    return SweepResult(out_dir, written, skipped, runner.block_costs, runner.sweep_costs, late)
