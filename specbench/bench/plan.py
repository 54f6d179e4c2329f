"""What a sweep runs, and in which order: its settings (SweepConfig, checked as it is made),
the drafter labels and HF counterparts they imply, and the plan of both phases as a list of
PlannedRun. Pure: nothing here loads a model or times a run, so a plan can be built, counted
and compared with runs.csv (pending_runs, for --resume) before any model is loaded.

Phase 1 (profile_plan): per repeat and prompt the plain run (source PROFILE), then a
PREDICTED run of every drafter x policy x gamma and each drafter's oracle. Phase 2
(measure_plan): per repeat and measured prompt, a plain run and the block of measured runs
beside it, in reverse on odd repeats. Which gammas phase 2 times (chosen_gammas) depends on
phase 1's predictions for "best"; before phase 1 has run, plan_runs stands in the first
gamma, which gives the same number of runs. sweep.py runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.bench.gammas import parse_gammas
from specbench.bench.labels import (
    BASELINE_METHOD,
    FIXED_POLICY,
    MEASURED,
    MODEL_DRAFTER,
    MODEL_SEPARATOR,
    ORACLE_POLICY,
    PREDICTED,
    PROFILE,
    drafter_label,
    label_parts,
)
from specbench.bench.prompts import Prompt
from specbench.bench.runs_file import row_key, run_key
from specbench.bench.shards import Shard, check_shardable, shard_prompt_ids
from specbench.bench.summary import best_gammas, summary_frame
from specbench.core.generate import GenerationConfig
from specbench.core.sampling import SamplingConfig
from specbench.drafters import DRAFTERS, is_drafter, parse_early_exit, uses_model
from specbench.errors import SweepError, reraise_as
from specbench.models.specs import check_draft_vocab, check_kernels, check_names
from specbench.policies import POLICIES

SPECBENCH, HF_ASSISTED = "specbench", "hf-assisted"
HF_UNIVERSAL, HF_EARLY_EXIT, HF_PROMPT_LOOKUP = "hf-universal", "hf-early-exit", "hf-prompt-lookup"
METHODS = (BASELINE_METHOD, SPECBENCH, HF_ASSISTED, HF_UNIVERSAL, HF_EARLY_EXIT, HF_PROMPT_LOOKUP)
HF_METHODS = METHODS[2:]
HF_POLICY = FIXED_POLICY  # HF's constant num_assistant_tokens schedule is a fixed gamma
HF_DEFAULTS_POLICY = "hf-defaults"  # HF as it comes: hf_assisted.HF_DEFAULTS (its threshold adjusted online)
HF_STOCK_POLICY = "hf-defaults-stock-kernels"  # the same, on PyTorch's own Linear kernels (HF without specbench)


@dataclass(frozen=True)
class SweepConfig:
    gammas: tuple[int, ...] = (1, 2, 3, 4)
    drafters: tuple[str, ...] = (MODEL_DRAFTER,)
    policies: tuple[str, ...] = (FIXED_POLICY,)
    temperature: float = 0.0  # 0 is greedy, and greedy runs are checked against the baseline
    max_new_tokens: int = 128
    repeats: int = 1
    seed: int = 0  # repeat r of every method uses seed + r
    hf_assisted: bool = True
    hf_fixed: bool = False  # hf-assisted also at each measured gamma (constant schedule), beside its defaults
    hf_stock: bool = False  # hf-assisted defaults once more on PyTorch's stock kernels
    steps: bool = False  # also write every StepRecord to steps.jsonl
    timing_repeats: int = 5  # timed forwards per point of c and v(k); the median counts
    # each measured run of a prompt is timed again, the block's runs in turns, until its decodes add up to
    # this many seconds (runner.interleaved_timings)
    min_time: float = 0.0
    warmup_tokens: int = 16  # length of the untimed warm-up generation
    kernels: str = "auto"  # Linear kernels of both models (kernels.KERNELS); all methods share them
    draft_vocab: int = 0  # specbench's model drafter scores ids below it (+ prompt, EOS); 0: all
    costs_per_prompt: bool = True  # measure c and v(k) before each prompt's runs (else once per sweep)
    measure: str = "best"  # timed runs: "best" predicted gamma per drafter x policy, "all", or gammas "2,5"
    measure_per_category: int = 0  # time runs on the first N prompts of each category; 0: all prompts
    drafter_models: tuple[str, ...] = ("",)  # names of the drafter models compared; ("",): one, and labels stay bare
    # the drafter models with another tokenizer than the target's (set from the loaded models)
    translated: tuple[str, ...] = ()
    hf_refuses: tuple[str, ...] = ()  # of those, the ones without an hf-universal baseline (why_no_hf_universal)
    shard: Shard | None = None  # run only this shard's prompts (shards.py); None: all

    def __post_init__(self) -> None:
        """The options `generate` shares are checked by the same functions (core's configs,
        models.specs); an out-of-range value raises SweepError or OptionError, both user errors."""
        if not self.gammas or min(self.gammas) < 1:
            raise SweepError("gammas must be a non-empty list of integers >= 1")
        if self.repeats < 1:
            raise SweepError(f"repeats must be >= 1, got {self.repeats}")
        if self.timing_repeats < 1:
            raise SweepError(f"timing repeats must be >= 1, got {self.timing_repeats}")
        if not self.min_time >= 0:
            raise SweepError(f"min time must be >= 0 seconds, got {self.min_time}")
        for repeat in {0, self.repeats - 1}:  # max-new-tokens, temperature and the first and last seed: core's checks
            generation_config(self, (), repeat=repeat)
        check_draft_vocab(self.draft_vocab)
        check_model_names(self.drafter_models)
        object.__setattr__(self, "drafters", with_models(self.drafters, self.drafter_models))
        check_drafter_names(self.drafters, self.drafter_models)
        check_kernels(self.kernels)
        check_names(self.policies, POLICIES, "gamma policy")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(self.policies)))  # a repeated one runs once
        measured_gammas(self)  # a bad --measure fails now
        if self.measure_per_category < 0:
            raise SweepError(f"measure-per-category must be >= 0, got {self.measure_per_category}")
        check_shardable(self.shard, self.measure)


def measured_gammas(config: SweepConfig) -> tuple[int, ...] | None:
    """The gammas --measure names (within the sweep's), or None for "best"."""
    if config.measure == "best":
        return None
    if config.measure == "all":
        return tuple(config.gammas)
    try:
        gammas = tuple(parse_gammas(config.measure))
    except ValueError:
        raise SweepError(f"bad --measure {config.measure!r}: use best, all, or gammas such as 2,5") from None
    outside = [g for g in gammas if g not in config.gammas]
    if outside:
        raise SweepError(
            f"--measure {config.measure}: gamma {outside[0]} is not in the sweep's gammas {list(config.gammas)}"
        )
    return gammas


def check_model_names(names: tuple[str, ...]) -> None:
    """One unnamed drafter model (""), or several with distinct names that fit in a label."""
    if names == ("",):
        return
    if not names or "" in names or len(set(names)) < len(names):
        raise SweepError(f"several drafter models need distinct names, got {list(names)}")
    bad = [n for n in names if MODEL_SEPARATOR in n or "," in n or n != n.strip()]
    if bad:
        raise SweepError(f"drafter model name {bad[0]!r}: no {MODEL_SEPARATOR!r}, comma or surrounding space")


def with_models(drafters: tuple[str, ...], model_names: tuple[str, ...]) -> tuple[str, ...]:
    """The sweep's drafter labels: each drafter that runs a drafter model once per model
    (results.drafter_label: "model@NAME"), the others as they are; with one unnamed model
    every label stays bare. A label that already names its model is kept."""
    labels = []
    for drafter in drafters:
        kind, named = label_parts(drafter)
        expand = uses_model(kind) and not named
        labels += [drafter_label(kind, name) for name in model_names] if expand else [drafter]
    return tuple(dict.fromkeys(labels))


def check_drafter_names(labels: tuple[str, ...], model_names: tuple[str, ...] = ("",)) -> None:
    """Each one of DRAFTERS or early-exit:N, naming one of the sweep's drafter models if it
    runs one (SweepError otherwise)."""
    kinds = [label_parts(label)[0] for label in labels]
    with reraise_as(SweepError):
        unknown = [k for k in kinds if not is_drafter(k)]
    if not labels or unknown:
        check_names(tuple(kinds), (*DRAFTERS, "early-exit:N"), "drafter")
    for label in labels:
        kind, name = label_parts(label)
        if name and not uses_model(kind):
            raise SweepError(f"drafter {label!r}: {kind} runs no drafter model to name")
        if uses_model(kind) and name not in model_names:
            raise SweepError(
                f"drafter {label!r}: no drafter model {name!r} in this sweep ({', '.join(map(repr, model_names))})"
            )


def label_uses_model(label: str) -> bool:
    """Whether the drafter of a row's label runs a drafter model."""
    return uses_model(label_parts(label)[0])


def drafts_with_model(config: SweepConfig) -> bool:
    """Whether one of specbench's drafters in the sweep runs a drafter model."""
    return any(label_uses_model(d) for d in config.drafters)


def has_own_hf_counterpart(drafter: str) -> bool:
    """early-exit:N and prompt-lookup have HF counterparts that need no drafter model."""
    return drafter == "prompt-lookup" or parse_early_exit(drafter) is not None


def needs_drafter_model(config: SweepConfig) -> bool:
    """Whether the sweep drafts with the drafter model: the model drafter, or hf-assisted
    beside a drafter with no HF counterpart of its own (the model drafter, ngram)."""
    return drafts_with_model(config) or (
        config.hf_assisted and not all(has_own_hf_counterpart(d) for d in config.drafters)
    )


def predicted(config: SweepConfig, drafter: str) -> bool:
    """Whether the sweep predicts the drafter (else it is measured only; module docstring)."""
    kind, name = label_parts(drafter)
    return parse_early_exit(kind) is None and not (uses_model(kind) and name in config.translated)


def hf_counterparts(config: SweepConfig, has_drafter_model: bool) -> list[tuple[str, str]]:
    """(method, drafter label) of each HF run the sweep's drafters have beside them: HF's
    assisted generation with each drafter model (labelled as the model drafter with it)."""
    found = []
    if has_drafter_model and needs_drafter_model(config):
        for name in config.drafter_models:
            if name not in config.translated:
                found.append((HF_ASSISTED, drafter_label(MODEL_DRAFTER, name)))
            elif name not in config.hf_refuses:
                found.append((HF_UNIVERSAL, drafter_label(MODEL_DRAFTER, name)))
    found += [(HF_EARLY_EXIT, d) for d in config.drafters if parse_early_exit(d) is not None]
    if "prompt-lookup" in config.drafters:
        found.append((HF_PROMPT_LOOKUP, "prompt-lookup"))
    return found


def generation_config(
    config: SweepConfig, eos_token_ids: tuple[int, ...], repeat: int = 0, max_new_tokens: int | None = None
) -> GenerationConfig:
    """The settings of one run (repeat r uses seed + r); a bad value raises SweepError."""
    with reraise_as(SweepError):
        return GenerationConfig(
            max_new_tokens=max_new_tokens or config.max_new_tokens,
            sampling=SamplingConfig(temperature=config.temperature),
            eos_token_ids=tuple(eos_token_ids),
            seed=config.seed + repeat,
        )


# ---------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlannedRun:
    method: str
    drafter: str  # "" for plain
    policy: str  # "" for plain
    gamma: int | None  # None for plain
    temperature: float
    prompt: Prompt
    repeat: int
    source: str = MEASURED  # PREDICTED: replayed on the prompt's path, not run

    @property
    def key(self) -> tuple[str, ...]:
        return run_key(
            self.source,
            self.method,
            self.drafter,
            self.policy,
            self.gamma,
            self.temperature,
            self.prompt.id,
            self.repeat,
        )


def profile_plan(config: SweepConfig, prompts: list[Prompt], *, has_drafter_model: bool = True) -> list[PlannedRun]:
    """Phase 1: per repeat and prompt the plain run (source PROFILE: the path of the
    predictions; its block's costs are measured just before it), then, once every block's
    costs are in, per repeat and prompt a predicted run of every drafter x policy x gamma and
    each drafter's oracle (up to oracle_gamma), priced with the pooled costs. A drafter
    that needs the drafter model is predicted only when there is one."""
    prompts = shard_prompts(config, prompts)
    plan = [
        PlannedRun(BASELINE_METHOD, "", "", None, config.temperature, prompt, repeat, PROFILE)
        for repeat in range(config.repeats)
        for prompt in prompts
    ]
    for repeat in range(config.repeats):
        for prompt in prompts:
            drafters = [
                d for d in config.drafters if (has_drafter_model or not label_uses_model(d)) and predicted(config, d)
            ]
            for drafter in drafters:
                for gamma in config.gammas:
                    for policy in config.policies:
                        plan.append(
                            PlannedRun(SPECBENCH, drafter, policy, gamma, config.temperature, prompt, repeat, PREDICTED)
                        )
                plan.append(
                    PlannedRun(
                        SPECBENCH,
                        drafter,
                        ORACLE_POLICY,
                        oracle_gamma(config),
                        config.temperature,
                        prompt,
                        repeat,
                        PREDICTED,
                    )
                )
    return plan


def oracle_gamma(config: SweepConfig) -> int:
    """The most drafts the oracle may make a round: as many as any of the sweep's policies
    may, so that it bounds them all. Every policy stays within its gamma but "heuristic",
    which a sweep leaves uncapped (HF's schedule): with it, the most a generation has room for."""
    most = max(config.gammas)
    return max(most, config.max_new_tokens - 1) if "heuristic" in config.policies else most


def measured_prompts(config: SweepConfig, prompts: list[Prompt]) -> list[Prompt]:
    """The prompts phase 2 times: all, or the first measure_per_category of each category."""
    if not config.measure_per_category:
        return list(prompts)
    taken: dict[str, int] = {}
    chosen = []
    for prompt in prompts:
        if taken.get(prompt.category, 0) < config.measure_per_category:
            taken[prompt.category] = taken.get(prompt.category, 0) + 1
            chosen.append(prompt)
    return chosen


def shard_prompts(config: SweepConfig, prompts: list[Prompt]) -> list[Prompt]:
    """The prompts of the sweep's whole selection that its shard runs (shards.py): all without one."""
    mine = set(shard_prompt_ids([p.id for p in prompts], config.shard))
    return [p for p in prompts if p.id in mine]


def measure_plan(
    config: SweepConfig,
    prompts: list[Prompt],
    gammas: dict[tuple[str, str], tuple[int, ...]],
    *,
    has_drafter_model: bool = True,
) -> list[PlannedRun]:
    """Phase 2: per repeat and measured prompt, a plain run again (the baseline of the block's
    measured speedups, timed beside them so that drift since phase 1 hits all alike), then
    each drafter x policy at its gammas (gammas[(drafter, policy)]), then hf-assisted (at each
    of those gammas with hf_fixed, and with its defaults). Odd repeats run the block after
    plain in reverse, so that over two repeats each method sits as often early as late."""
    plan = []
    mine = {p.id for p in shard_prompts(config, prompts)}
    for repeat in range(config.repeats):
        for prompt in measured_prompts(config, prompts):
            if prompt.id not in mine:
                continue  # another shard's: chosen over all prompts first, so shards time what one sweep would
            block = _measured_block(config, prompt, repeat, gammas, has_drafter_model)
            plan.append(PlannedRun(BASELINE_METHOD, "", "", None, config.temperature, prompt, repeat))
            plan.extend(reversed(block) if repeat % 2 else block)
    return plan


def _measured_block(
    config: SweepConfig, prompt: Prompt, repeat: int, gammas: dict, has_drafter_model: bool
) -> list[PlannedRun]:
    block = []
    for drafter in config.drafters:
        if label_uses_model(drafter) and not has_drafter_model:
            continue
        for policy in config.policies:
            for gamma in gammas.get((drafter, policy), ()):
                block.append(PlannedRun(SPECBENCH, drafter, policy, gamma, config.temperature, prompt, repeat))
    if config.hf_assisted:
        for method, drafter in hf_counterparts(config, has_drafter_model):
            if config.hf_fixed:
                for gamma in sorted({g for gs in gammas.values() for g in gs}):
                    block.append(PlannedRun(method, drafter, HF_POLICY, gamma, config.temperature, prompt, repeat))
            block.append(PlannedRun(method, drafter, HF_DEFAULTS_POLICY, None, config.temperature, prompt, repeat))
            if config.hf_stock:
                block.append(PlannedRun(method, drafter, HF_STOCK_POLICY, None, config.temperature, prompt, repeat))
    return block


def chosen_gammas(config: SweepConfig, predicted_rows) -> dict[tuple[str, str], tuple[int, ...]]:
    """The gammas phase 2 times for each drafter x policy: --measure's list, or the best
    predicted gamma (geometric mean over prompts) of each."""
    listed = measured_gammas(config)
    pairs = [(d, p) for d in config.drafters for p in config.policies]
    if listed is not None:
        return {pair: listed for pair in pairs}
    best = best_gammas(summary_frame(predicted_rows)) if len(predicted_rows) else {}
    chosen = {pair: (best[pair],) for pair in pairs if pair in best}
    chosen.update({(d, p): tuple(config.gammas) for d, p in pairs if not predicted(config, d)})  # measured only
    return chosen


def plan_runs(
    config: SweepConfig, prompts: list[Prompt], *, has_drafter_model: bool = True, gammas: dict | None = None
) -> list[PlannedRun]:
    """Both phases' runs in order. Phase 2's gammas come from `gammas` (chosen_gammas), or,
    before phase 1 has run, stand in as the first gamma for "best" (the same number of runs)."""
    if gammas is None:
        listed = measured_gammas(config)

        def stand_in(drafter: str) -> tuple[int, ...]:
            return listed or ((config.gammas[0],) if predicted(config, drafter) else tuple(config.gammas))

        gammas = {(d, p): stand_in(d) for d in config.drafters for p in config.policies}
    return profile_plan(config, prompts, has_drafter_model=has_drafter_model) + measure_plan(
        config, prompts, gammas, has_drafter_model=has_drafter_model
    )


def pending_runs(plan: list[PlannedRun], done_rows: list[dict]) -> list[PlannedRun]:
    """The runs of `plan` not already in runs.csv (for --resume)."""
    done = {row_key(row) for row in done_rows}
    return [run for run in plan if run.key not in done]
