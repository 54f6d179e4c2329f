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

sweep() reads as its steps, each a function with inputs and outputs: plan (the results
directory, meta.json and the PlannedRun lists of both phases), profile (phase 1's plain
runs, each block's costs measured just before it), price (the blocks' costs pooled),
predict (phase 1's predicted rows), pick (the gammas phase 2 times), measure (phase 2's
timed runs) and report (meta.json's summary and checks). Who does the work: plan.py says
what runs in which order (pure); runner.py times and counts one run and writes it
(records.py, rows.py); pricing.py keeps the costs (CostBook, given to the runner when it is
made); meta.py says what meta.json records and what a resume must match. It receives
models that are already loaded (the CLI loads them with models.load_pair, as `generate`
does) and a tokenizer; it knows nothing about where models come from, and it renders
nothing: progress and tables go through callbacks to the caller. Prompts become ids by
models.encode_prompt, the one rule.

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
one drafter model its name is "" and labels stay bare.

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

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specbench.bench.costs import Costs
from specbench.bench.labels import PREDICTED, PROFILE
from specbench.bench.meta import (
    add_costs_meta,
    build_meta,
    carry_over_meta,
    check_resume_meta,
    closing_meta,
    set_sweep_costs,
)
from specbench.bench.meta_file import read_meta, write_meta
from specbench.bench.plan import (
    PlannedRun,
    SweepConfig,
    chosen_gammas,
    drafts_with_model,
    measure_plan,
    needs_drafter_model,
    pending_runs,
    plan_runs,
)
from specbench.bench.pricing import (
    CostBook,
    cost_models,
    pricing_line,
)
from specbench.bench.prompts import Prompt
from specbench.bench.records import prepare_out_dir, read_evidence, read_paths
from specbench.bench.reprice import sweep_price_check
from specbench.bench.rows import baselines_from_rows, late_runs
from specbench.bench.runner import (
    DrafterModel,
    SweepRunner,
    block_measurer,
    encode_prompts,
    run_plan,
    target_layers,
)
from specbench.bench.runs_file import RUNS_CSV, read_rows
from specbench.bench.warm import WarmBook
from specbench.drafters import parse_early_exit
from specbench.drafters.early_exit import check_early_exit
from specbench.errors import SweepError, reraise_as


@dataclass
class SweepResult:
    out_dir: Path
    written: int
    skipped: int
    costs: dict[str, Costs]  # every measurement of c and v(k), by pricing.costs_key
    pooled: dict[str, tuple[Costs, int]] = field(default_factory=dict)  # CostBook.pools
    late: int = 0  # measured runs a resume added to blocks whose plain run was timed before it


@dataclass
class Tally:
    """Rows a step wrote, runs it found already in runs.csv, and late runs (measure)."""

    written: int = 0
    skipped: int = 0
    late: int = 0  # measured runs added to a block whose plain run was timed before a resume

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.written + other.written, self.skipped + other.skipped, self.late + other.late)


@dataclass
class Session:
    """What the steps of one sweep share: where it writes, its meta.json as it grows, the
    rows an interrupted sweep left, the runner and the callbacks."""

    config: SweepConfig
    out_dir: Path
    meta: dict
    done_rows: list[dict]
    runner: SweepRunner
    status: Callable[[str], None]
    on_row: Callable[[PlannedRun, dict], None] | None

    def save_meta(self) -> None:
        write_meta(self.out_dir, self.meta)

    def rows(self) -> list[dict]:
        return read_rows(self.out_dir / RUNS_CSV)

    def run(self, runs: list[PlannedRun], rows_so_far: list[dict]) -> Tally:
        """The runs of `runs` not already in runs.csv, after a warm-up where any is timed;
        rows_so_far holds the plain runs they compare with."""
        todo = pending_runs(runs, self.done_rows)
        if any(run.source != PREDICTED for run in todo):
            self.status("warming up")
            self.runner.warm_up(todo)
        self.status("running")
        written = run_plan(
            todo,
            self.runner.measure_group,
            self.out_dir,
            costs_of=self.runner.costs.for_run,
            prompt_tokens=lambda prompt: len(self.runner.prompt_ids(prompt)),
            seed=self.config.seed,
            baselines=baselines_from_rows(rows_so_far),
            write_steps=self.config.steps,
            on_row=self.on_row,
        )
        return Tally(written, len(runs) - len(todo))


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
    is then not run (plan.hf_counterparts)."""
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


def open_results(out_dir: Path, resume: bool, meta: dict) -> tuple[dict, list[dict]]:
    """The results directory, made or resumed: (the interrupted sweep's meta.json, its
    rows), checked against this sweep's meta; both empty for a new sweep."""
    done_rows = prepare_out_dir(out_dir, resume)
    old_meta = read_meta(out_dir) if done_rows else {}
    if done_rows and not old_meta:
        raise SweepError(
            f"cannot resume: {out_dir} has finished rows but no meta.json, so what they measured cannot be"
            " checked; start again with another --out"
        )
    check_resume_meta(old_meta, meta)
    return old_meta, done_rows


def cost_recorder(session_meta: dict, out_dir: Path, status: Callable[[str], None]) -> Callable[[str, Costs], None]:
    """What the CostBook tells of each new measurement: a status line, and the measurement
    in meta.json's costs_by_block, written at once."""

    def record(key: str, costs: Costs) -> None:
        status(
            f"measured c and v(k) for {key}: c = {costs.c:.3f}" if costs.c is not None else f"measured v(k) for {key}"
        )
        add_costs_meta(session_meta, key, costs)
        write_meta(out_dir, session_meta)

    return record


def price(session: Session, paths: list[PlannedRun]) -> None:
    """Step price: every block of phase 1 priced with the pool of its drafter model's
    blocks; each pool reported, and the first model's recorded as the sweep's costs."""
    book = session.runner.costs
    for name, (costs, count) in book.price(paths).items():
        session.status(pricing_line(name, costs, count))
        if name == book.models[0]:
            set_sweep_costs(session.meta, costs, count)
    session.save_meta()


def pick(session: Session, prompts: list[Prompt], has_model: bool) -> list[PlannedRun]:
    """Step pick: the gammas phase 2 times (plan.chosen_gammas, from the predicted rows for
    "best"), recorded in meta.json, and phase 2's plan."""
    predicted_rows = [row for row in session.rows() if row.get("source") == PREDICTED]
    gammas = chosen_gammas(session.config, predicted_rows)
    session.meta["measured_gammas"] = {f"{d}/{p}": list(g) for (d, p), g in gammas.items()}
    session.save_meta()
    return measure_plan(session.config, prompts, gammas, has_drafter_model=has_model)


def report(session: Session) -> None:
    """Step report: meta.json marked finished, with the summary table and the checks of
    every row (meta.closing_meta), where the measured runs' time went included."""
    rows = session.rows()
    session.meta.update(closing_meta(rows, sweep_price_check(session.meta, rows, session.out_dir)))
    session.save_meta()


def plan(
    target,
    drafters: dict[str, DrafterModel],
    tokenizer,
    prompts: list[Prompt],
    config: SweepConfig,
    out_dir: Path,
    *,
    resume: bool,
    meta: dict,
    eos_ids: tuple[int, ...],
    status: Callable[[str], None],
    on_row: Callable[[PlannedRun, dict], None] | None,
) -> tuple[Session, list[PlannedRun]]:
    """Step plan: the prompts' ids (a prompt too long for the context fails now, not an hour
    in), the results directory and meta.json (a resume checked against the interrupted
    sweep and carrying over what it measured), both phases' runs, the CostBook (the blocks
    a resume already measured) and the runner given it."""
    ids = encode_prompts(tokenizer, target, prompts)
    old_meta, done_rows = open_results(out_dir, resume, meta)
    everything = plan_runs(config, prompts, has_drafter_model=bool(drafters))
    carry_over_meta(meta, old_meta)
    write_meta(out_dir, meta)
    book = CostBook(
        block_measurer(target, drafters, ids, config, eos_ids),
        models=cost_models(everything, config.drafter_models[0]),
        per_prompt=config.costs_per_prompt,
        target_layers=target_layers(target),
        recorded={key: Costs.from_meta(raw) for key, raw in old_meta.get("costs_by_block", {}).items()},
        on_measured=cost_recorder(meta, out_dir, status),
    )
    warm = WarmBook([prompt.id for prompt in prompts], read_evidence(out_dir))
    runner = SweepRunner(
        target, drafters, tokenizer, config, eos_ids, ids=ids, costs=book, outputs=read_paths(out_dir), warm=warm
    )
    return Session(config, out_dir, meta, done_rows, runner, status, on_row), everything


def profile(session: Session, paths: list[PlannedRun]) -> Tally:
    """Step profile: phase 1's plain runs (PROFILE), the paths predictions replay; each
    block's costs are measured just before its plain run."""
    return session.run(paths, session.done_rows)


def predict(session: Session, predictions: list[PlannedRun]) -> Tally:
    """Step predict: phase 1's predicted rows, replayed on the paths and priced with the
    pooled costs."""
    return session.run(predictions, session.rows())


def measure(session: Session, measured: list[PlannedRun]) -> Tally:
    """Step measure: phase 2's timed runs, each block beside a plain run of its own; late
    counts those a resume adds to a block timed before it (rows.late_runs)."""
    late = late_runs(pending_runs(measured, session.done_rows), session.done_rows)
    return replace(session.run(measured, session.rows()), late=late)


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
    if not prompts:
        raise SweepError("no prompts to run")
    drafters = drafters_of(config, drafter_model, drafter_tokenizer)
    check_drafters(config, drafters, target)
    names = drafter_name if isinstance(drafter_name, dict) else {config.drafter_models[0]: drafter_name}
    meta = build_meta(
        target,
        {name: d.model for name, d in drafters.items()},
        config,
        prompts,
        target_name=target_name,
        drafter_names=names,
        prompts_source=prompts_source,
        command=command or " ".join(sys.argv),
    )
    status = on_status or (lambda _text: None)
    session, everything = plan(
        target,
        drafters,
        tokenizer,
        prompts,
        config,
        Path(out_dir),
        resume=resume,
        meta=meta,
        eos_ids=eos_ids,
        status=status,
        on_row=on_row,
    )
    if on_start is not None:
        on_start(len(everything), len(session.done_rows))
    paths = [run for run in everything if run.source == PROFILE]
    tally = profile(session, paths)
    price(session, paths)
    tally += predict(session, [run for run in everything if run.source == PREDICTED])
    tally += measure(session, pick(session, prompts, has_model=bool(drafters)))
    report(session)
    book = session.runner.costs
    return SweepResult(session.out_dir, tally.written, tally.skipped, book.block, book.pools, tally.late)
