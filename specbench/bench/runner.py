"""How a sweep times and counts one run: the plain baseline, specbench's speculative
decoding, HF's assisted generation (hf_assisted.py) and a predicted run replayed on its
prompt's recorded path (profile.py); and run_plan, which runs a list of PlannedRun in order,
a timing group at a time (a measured block with the plain run beside it, timed in turns
under --min-time), and writes each row as its group finishes (records.py).

SweepRunner holds the loaded models and the prompts' ids; the costs a run is priced with
come from the CostBook it is given (pricing.py), which it asks and never fills in from
outside. measure_block_costs is what a book measures a block with: c of one drafter model
and the target's v(k), timed on a prompt's context with the runs' own sampling settings.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from specbench.bench.costs import Costs, for_drafter, measure_costs, shared_limit, timing_context
from specbench.bench.hf_assisted import HFDrafter, hf_sampling_defect, measure_hf_assisted
from specbench.bench.labels import BASELINE_METHOD, MEASURED, PREDICTED, PROFILE, label_parts
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
    drafts_with_model,
    generation_config,
    label_uses_model,
    needs_drafter_model,
    predicted,
)
from specbench.bench.pricing import CostBook, drafter_costs
from specbench.bench.profile import predict, record_path
from specbench.bench.prompts import Prompt
from specbench.bench.records import write_run
from specbench.bench.replay import RecordedPath, position_counts
from specbench.bench.rows import Baseline, Measurement, baseline_key, make_row
from specbench.bench.warm import WarmBook
from specbench.core.generate import GenerationConfig, context_limit, plain_generate, speculative_generate
from specbench.drafters import make_drafter, parse_early_exit, uses_model
from specbench.errors import PromptError, SweepError
from specbench.models.pairing import output_vocab_size, timing_ids
from specbench.models.text import check_prompt_fits, encode_prompt
from specbench.policies import make_policy
from specbench.policies.calibration import Evidence
from specbench.speed.kernels import stock_kernels

MOST_TIMINGS = 9  # interleaved_timings' limit per run


def interleaved_timings(
    onces: list[Callable[[], Measurement]], min_time: float, most: int = MOST_TIMINGS
) -> list[Measurement]:
    """Each once() timed in turn, round after round, each until its decodes add up to
    min_time seconds (at most `most` times; once where min_time is 0): per once, the timing
    of median speed (the slower of the middle two). Why: a decode of a short answer takes
    well under a second, and one timing of it moved by 40% on a busy 2-core CPU; taking
    the runs of one prompt in turns, rather than one after the other, puts the machine's
    drift over those seconds on the plain run and the speculative ones alike. A long
    answer is timed once, as before."""
    timings: list[list[Measurement]] = [[] for _ in onces]

    def wants(i: int) -> bool:
        done = timings[i]
        return not done or (sum(m.stats.decode_seconds for m in done) < min_time and len(done) < most)

    while any(wants(i) for i in range(len(onces))):
        for i, once in enumerate(onces):
            if wants(i):
                timings[i].append(once())
    return [median_speed(done) for done in timings]


def median_speed(timings: list[Measurement]) -> Measurement:
    """The timing of median tokens per second (the slower of the middle two)."""
    ordered = sorted(timings, key=lambda m: m.stats.tokens_per_second)
    return ordered[(len(ordered) - 1) // 2]


def timing_groups(plan: list[PlannedRun]) -> list[list[PlannedRun]]:
    """The plan cut into what is timed together: the consecutive measured runs of one prompt
    and repeat (a block and the plain run beside it, measure_plan) form one group; every
    other run (phase 1's, a prediction) is a group of its own."""
    groups: list[list[PlannedRun]] = []
    for run in plan:
        last = groups[-1][-1] if groups else None
        same = last is not None and run.source == last.source == MEASURED
        if same and (run.prompt.id, run.repeat) == (last.prompt.id, last.repeat):
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


@dataclass(frozen=True)
class DrafterModel:
    """One drafter model of a sweep, and its own tokenizer when that is not the target's
    (config.translated names it: its drafts are translated through text)."""

    model: object
    tokenizer: object = None


def hf_tells_apart(target, drafter_model) -> bool:
    """Whether HF's generate() takes the pair for two tokenizers (it compares the configs'
    vocab_size; with equal sizes it refuses assistant_tokenizer)."""
    return target.config.get_text_config().vocab_size != drafter_model.config.get_text_config().vocab_size


def why_no_hf_universal(target, drafter_model, target_tokenizer, drafter_tokenizer, temperature: float) -> str | None:
    """Why HF's Universal Assisted Generation is no baseline for a drafter model with another
    tokenizer (None: it is): HF cannot tell the tokenizers apart, or, when sampling, its
    sampling mode would score the drafts under other tokens' probabilities (not lossless)."""
    if not hf_tells_apart(target, drafter_model):
        return "HF takes two tokenizers only where the models' vocab_size differ"
    vocab = target.config.get_text_config().vocab_size
    defect = hf_sampling_defect(target_tokenizer, drafter_tokenizer, vocab) if temperature > 0 else None
    return f"HF's sampling mode {defect}, so it is no lossless baseline" if defect else None


def target_layers(target) -> int:
    """The target's decoder layers, what an early-exit drafter's c is a share of (0 for a
    model that names none: such a target has no early exit, drafters.check_early_exit)."""
    return int(getattr(target.config, "num_hidden_layers", 0) or 0)


def encode_prompts(tokenizer, target, prompts: list[Prompt]) -> dict[str, list[int]]:
    """Each prompt's ids by prompt id (models.encode_prompt); one too long for the target
    raises PromptError, naming the prompt, before anything runs."""
    ids = {}
    for prompt in prompts:
        encoded = encode_prompt(tokenizer, prompt.messages())
        try:
            check_prompt_fits(encoded, context_limit(target))
        except PromptError as exc:
            raise PromptError(f"prompt {prompt.id}: {exc}") from None
        ids[prompt.id] = encoded
    return ids


def measure_plain(target, prompt_ids: list[int], gen: GenerationConfig) -> Measurement:
    result = plain_generate(target, prompt_ids, gen)
    return Measurement(result.token_ids, result.stats, acceptance_known=False, stop_reason=result.stop_reason)


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
    warm: Evidence | None = None,
) -> Measurement:
    """costs feed the "cost" policy (drafter_costs gives the drafter's own c), and warm is
    the calibration it starts from (warm.py).
    draft_vocab > 0 restricts the model drafter's head (draft_vocab.py; gen's EOS ids stay in);
    translate: make_drafter's, for a drafter model with another tokenizer."""
    costs = drafter_costs(costs, drafter, target_layers(target))
    made = make_drafter(
        drafter, drafter_model, draft_vocab, gen.eos_token_ids, target_model=target, translate=translate
    )
    chosen = make_policy(policy, gamma, costs=costs, warm=warm, max_new_tokens=gen.max_new_tokens)
    result = speculative_generate(target, made, prompt_ids, gen, chosen)
    return Measurement(
        result.token_ids,
        result.stats,
        steps=result.steps,
        stop_reason=result.stop_reason,
        positions=position_counts(result.steps),
    )


def predicted_measurement(
    path: RecordedPath,
    run: PlannedRun,
    gen: GenerationConfig,
    costs: Costs | None,
    draft_vocab: int,
    warm: Evidence | None = None,
) -> Measurement:
    """A predicted run: the replay's counts, rounds and calibration evidence on the prompt's
    path (profile.predict), its cost policy started from warm."""
    kind = label_parts(run.drafter)[0]
    if costs is not None:
        costs = for_drafter(costs, kind)
    prediction = predict(path, kind, run.policy, run.gamma, gen, costs=costs, draft_vocab=draft_vocab, warm=warm)
    return Measurement(
        path.output,
        prediction.stats,
        steps=prediction.steps,
        stop_reason=None,
        positions=prediction.positions,
        evidence=prediction.evidence,
    )


def measure_block_costs(
    target, drafter, prompt_ids: list[int], config: SweepConfig, eos_ids: tuple[int, ...], translated: bool
) -> Costs:
    """c of `drafter` (None when the sweep drafts with no model) and the target's v(k),
    timed on the prompt's context with the runs' own sampling settings; a translated
    drafter scores its whole vocabulary and reads the context in its own, fewer, ids."""
    context = timing_context(prompt_ids, config.max_new_tokens, shared_limit(target, drafter))
    vocab = config.draft_vocab if drafts_with_model(config) and not translated else 0
    return measure_costs(
        target,
        drafter,
        timing_ids(context, target, drafter),
        config.timing_repeats,
        draft_vocab=vocab,
        sampling=generation_config(config, eos_ids).sampling,
        predicting=True,
    )


def block_measurer(
    target, drafters: dict[str, DrafterModel], ids: dict[str, list[int]], config: SweepConfig, eos_ids: tuple[int, ...]
) -> Callable[[Prompt, str], Costs]:
    """The measure of a sweep's CostBook: measure_block_costs of drafter model `name` on a
    prompt's ids, with no drafter where the sweep drafts with no model."""

    def measure(prompt: Prompt, name: str) -> Costs:
        needed = needs_drafter_model(config) and name in drafters
        drafter = drafters[name].model if needed else None
        return measure_block_costs(target, drafter, ids[prompt.id], config, eos_ids, name in config.translated)

    return measure


def model_name(run: PlannedRun) -> str | None:
    """The name of the drafter model run's label drafts with (an hf-assisted run's too);
    None for a drafter without one."""
    kind, name = label_parts(run.drafter)
    return name if uses_model(kind) else None


def first_predicted_model(config: SweepConfig, drafters: dict[str, DrafterModel]) -> str | None:
    """The first drafter model the sweep predicts (and has), whose path a model-free
    drafter's predictions replay on; None when no model is predicted."""
    names = [label_parts(d)[1] for d in config.drafters if label_uses_model(d) and predicted(config, d)]
    return next((name for name in names if name in drafters), None)


class PathBook:
    """The plain outputs of phase 1 by (prompt id, repeat), and the recorded paths
    (profile.record_path) of the prompt whose predictions run, by drafter model: a path is
    recorded once per prompt and model, and dropped when the next prompt's predictions start.
    models: the drafter models by name; first_model: first_predicted_model."""

    def __init__(self, target, models: dict, draft_vocab: int, first_model: str | None, outputs: dict):
        self.target, self.models, self.draft_vocab, self.first_model = target, models, draft_vocab, first_model
        self.outputs: dict[tuple[str, int], list[int]] = dict(outputs)
        self._paths: tuple[tuple[str, int], dict] | None = None

    def path_model(self, run: PlannedRun) -> str | None:
        """Which drafter model a predicted run's path records rows of: its own, or for a
        drafter without one the first model the sweep predicts (its path has the output
        every drafter replays on, recorded once per prompt); None when no model is predicted."""
        name = model_name(run)
        return name if name is not None else self.first_model

    def path(self, run: PlannedRun, prompt_ids: list[int], gen: GenerationConfig) -> RecordedPath:
        """The recorded path of run's prompt and repeat with run's drafter model."""
        key = (run.prompt.id, run.repeat)
        if self._paths is None or self._paths[0] != key:
            if key not in self.outputs:
                raise SweepError(
                    f"no plain output recorded for prompt {run.prompt.id} (repeat {run.repeat}) to predict from"
                )
            self._paths = (key, {})
        name, paths = self.path_model(run), self._paths[1]
        if name not in paths:
            model = self.models.get(name)
            paths[name] = record_path(self.target, model, prompt_ids, self.outputs[key], gen, self.draft_vocab)
        return paths[name]


def hf_drafter(run: PlannedRun, tokenizer, drafters: dict[str, DrafterModel]) -> HFDrafter:
    """Which of HF's candidate generators an hf-* run drafts with."""
    if run.method == HF_UNIVERSAL:
        return HFDrafter("universal", (tokenizer, drafters[model_name(run)].tokenizer))
    if run.method == HF_EARLY_EXIT:
        return HFDrafter("early-exit", layers=parse_early_exit(run.drafter))
    return HFDrafter("prompt-lookup") if run.method == HF_PROMPT_LOOKUP else HFDrafter()


class SweepRunner:
    """Holds the loaded models and runs one PlannedRun at a time. drafters: the drafter
    models by name (config.drafter_models; {} when the sweep drafts with none); ids: each
    prompt's ids (encode_prompts); costs: the sweep's CostBook; outputs: the plain outputs
    an interrupted sweep recorded (records.read_paths)."""

    def __init__(
        self,
        target,
        drafters: dict[str, DrafterModel],
        tokenizer,
        config: SweepConfig,
        eos_ids: tuple[int, ...],
        *,
        ids: dict[str, list[int]],
        costs: CostBook,
        outputs: dict[tuple[str, int], list[int]] | None = None,
        warm: WarmBook | None = None,
    ):
        self.target, self.drafters, self.tokenizer, self.config = target, dict(drafters), tokenizer, config
        self.eos_ids, self.ids, self.costs = tuple(eos_ids), ids, costs
        self.warm = warm if warm is not None else WarmBook(list(ids))
        models = {name: d.model for name, d in self.drafters.items()}
        first = first_predicted_model(config, self.drafters)
        self.paths = PathBook(target, models, config.draft_vocab, first, outputs or {})

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        return self.ids[prompt.id]

    def drafter_model(self, name: str | None):
        return self.drafters[name].model if name is not None and name in self.drafters else None

    def translation(self, name: str | None) -> tuple | None:
        """make_drafter's translate argument for drafter model `name`: (its tokenizer, the
        target's, the target's logits width) when it has another tokenizer, else None."""
        if name is None or name not in self.config.translated:
            return None
        return (self.drafters[name].tokenizer, self.tokenizer, output_vocab_size(self.target))

    def measure(self, run: PlannedRun, max_new_tokens: int | None = None) -> Measurement:
        """One run: a prediction replayed, or timed once (phase 1's plain runs, the warm-ups,
        and measured runs when config.min_time is 0)."""
        ids = self.prompt_ids(run.prompt)
        gen = generation_config(self.config, self.eos_ids, run.repeat, max_new_tokens)
        warm = self.warm.start(run)
        if run.source == PREDICTED:
            path = self.paths.path(run, ids, gen)
            m = predicted_measurement(path, run, gen, self.costs.for_run(run), self.config.draft_vocab, warm)
            self.warm.add(run, m.evidence)
            return m
        return self.time(run, ids, gen, warm, max_new_tokens)

    def measure_group(self, runs: list[PlannedRun]) -> list[Measurement]:
        """A timing group (timing_groups): one run after the other, or, where config.min_time
        is set and the group is measured, timed in turns (interleaved_timings)."""
        if self.config.min_time <= 0 or runs[0].source != MEASURED:
            return [self.measure(run) for run in runs]
        return interleaved_timings([lambda run=run: self.measure(run) for run in runs], self.config.min_time)

    def time(
        self, run: PlannedRun, ids: list[int], gen: GenerationConfig, warm: Evidence | None, max_new_tokens: int | None
    ) -> Measurement:
        """One timed run of the plain baseline, specbench or HF assisted. A measured run adds
        nothing to the warm calibration, so timing it again runs the same rounds."""
        if run.method == BASELINE_METHOD:
            m = measure_plain(self.target, ids, gen)
            if max_new_tokens is None and run.source == PROFILE:
                self.paths.outputs[(run.prompt.id, run.repeat)] = m.token_ids
            return m
        name = model_name(run)
        if run.method == SPECBENCH:
            kind, vocab = label_parts(run.drafter)[0], self.config.draft_vocab
            costs, translate = self.costs.for_pricing(run), self.translation(name)
            args = (kind, run.policy, run.gamma, costs, vocab, translate, warm)
            return measure_specbench(self.target, self.drafter_model(name), ids, gen, *args)
        if run.method in HF_METHODS:  # the stock-kernels run is HF's defaults (gamma None)
            chosen = hf_drafter(run, self.tokenizer, self.drafters)
            with stock_kernels() if run.policy == HF_STOCK_POLICY else nullcontext():
                hf = measure_hf_assisted(self.target, self.drafter_model(name), ids, gen, run.gamma, chosen)
            return Measurement(hf.token_ids, hf.stats, acceptance_known=hf.acceptance_known, stop_reason=hf.stop_reason)
        raise SweepError(f"unknown method {run.method!r}; choose from {', '.join(METHODS)}")

    def warm_up(self, plan: list[PlannedRun]) -> None:
        """One short untimed generation per method and drafter, so first-call costs (allocator,
        kernels, lazy imports) land on no measured run."""
        seen = set()
        for run in plan:
            if run.source != PREDICTED and (run.method, run.drafter) not in seen:
                seen.add((run.method, run.drafter))
                self.measure(run, max_new_tokens=min(self.config.warmup_tokens, self.config.max_new_tokens))


def run_plan(
    plan: list[PlannedRun],
    measure: Callable[[list[PlannedRun]], list[Measurement]],
    out_dir: Path,
    *,
    costs_of: Callable[[PlannedRun], Costs | None],
    prompt_tokens: Callable[[Prompt], int],
    seed: int,
    baselines: dict | None = None,
    write_steps: bool = False,
    on_row: Callable[[PlannedRun, dict], None] | None = None,
) -> int:
    """Measure the plan a timing group at a time (timing_groups; measure(group) gives one
    Measurement per run) and append each run's row to runs.csv as soon as its group
    finishes. costs_of(run) gives the costs of run's block (measured there when first asked,
    before the group). An interruption (Ctrl-C) loses only the group in progress. Returns
    rows written."""
    baselines = dict(baselines or {})
    for group in timing_groups(plan):
        costs = [costs_of(run) for run in group]
        for run, m, run_costs in zip(group, measure(group), costs, strict=True):
            where = baseline_key(run.source, run.prompt.id, run.repeat)
            row = make_row(
                run,
                m,
                baselines.get(where),
                c=run_costs.c if run_costs else None,
                prompt_tokens=prompt_tokens(run.prompt),
                seed=seed + run.repeat,
                costs=run_costs,
            )
            if run.method == BASELINE_METHOD:
                baselines[where] = Baseline(row["tokens_per_second"], row["output_hash"])
            write_run(out_dir, run, m, row, write_steps)
            if on_row is not None:
                on_row(run, row)
    return len(plan)
