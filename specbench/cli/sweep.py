"""`specbench sweep`: drafters, gamma policies and gammas benchmarked against plain decoding.

The command checks its options and makes its --out folder before the models load, loads the
pair as `generate` does (and any further drafter models), hands the run to bench/sweep.py
under a progress bar, and ends with report.py's tables. Ctrl-C keeps the rows written so far,
and a sweep that fails before writing any leaves no empty folder behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from specbench.bench import prompts as prompt_sets
from specbench.bench.gammas import parse_gammas
from specbench.bench.labels import FIXED_POLICY, MODEL_DRAFTER, drafter_label, drafter_model_name
from specbench.bench.runs_file import RUNS_CSV, make_dir
from specbench.bench.shards import parse_shard
from specbench.cli import options as o
from specbench.cli import ui
from specbench.cli.progress import load_pair_with_progress, loading_bars
from specbench.cli.report import render_sweep_end
from specbench.errors import OptionError, SweepError


def sweep_command(
    gamma: o.Gammas = "1..4",
    drafter: o.Drafters = None,
    gamma_policy: o.GammaPolicies = None,
    target: o.Target = o.TARGET,
    drafter_model: o.DrafterModels = None,
    prompts: o.Prompts = "default",
    category: o.Categories = None,
    temperature: o.Temperature = o.TEMPERATURE,
    max_new_tokens: o.MaxNewTokens = o.MAX_NEW_TOKENS,
    repeats: o.Repeats = 1,
    out: o.SweepOut = None,
    resume: o.Resume = False,
    hf_assisted: o.HfAssisted = True,
    hf_fixed: o.HfFixed = False,
    measure: o.Measure = "best",
    measure_per_category: o.MeasurePerCategory = 0,
    shard: o.Shard = None,
    hf_stock: o.HfStock = False,
    steps: o.Steps = False,
    seed: o.Seed = o.SEED,
    timing_repeats: o.TimingRepeats = o.TIMING_REPEATS,
    min_time: o.MinTime = 0.0,
    costs_per_prompt: o.CostsPerPrompt = True,
    dtype: o.Dtype = o.DTYPE,
    draft_dtype: o.DraftDtype = o.DRAFT_DTYPE,
    device: o.Device = o.DEVICE,
    kernels: o.Kernels = o.KERNELS,
    draft_vocab: o.DraftVocab = o.DRAFT_VOCAB,
) -> None:
    """Benchmark drafters, gamma policies and gammas against plain decoding; write results/NAME."""
    from specbench.bench import plan
    from specbench.models.loading import PairConfig
    from specbench.models.specs import NONE

    # 1. everything that can be checked before minutes of model loading
    config = plan.SweepConfig(
        gammas=tuple(parse_gammas(gamma)),
        drafters=tuple(drafter or (MODEL_DRAFTER,)),
        policies=tuple(gamma_policy or (FIXED_POLICY,)),
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        seed=seed,
        hf_assisted=hf_assisted,
        hf_fixed=hf_fixed,
        hf_stock=hf_stock,
        measure=measure,
        measure_per_category=measure_per_category,
        shard=parse_shard(shard) if shard else None,
        steps=steps,
        timing_repeats=timing_repeats,
        min_time=min_time,
        costs_per_prompt=costs_per_prompt,
        kernels=kernels,
        draft_vocab=draft_vocab,
    )
    prompt_list = prompt_sets.load_prompts(prompts, category or ())
    out_dir = out or Path("results") / datetime.now().strftime("sweep-%Y%m%d-%H%M%S")
    _check_new_sweep(out_dir, resume)
    specs = _drafter_specs(drafter_model)
    with _out_folder(out_dir):  # a bad --out fails now, not after loading the models
        # 2. the models, loaded as `generate` loads them (the drafters only when the sweep drafts with them)
        needed = plan.needs_drafter_model(config)
        why_no_hf = _why_no_hf_assisted(config, specs, drafter_model is not None, target) if needed else None
        if why_no_hf:
            needed = False
            ui.say(f"[dim]hf-assisted: not run: {escape(why_no_hf)}[/]", markup=True, stderr=True)
        pair_config = PairConfig(
            target=target,
            drafter=specs[0] if needed else NONE,
            dtype=dtype,
            draft_dtype=draft_dtype,
            device=device,
            draft_vocab=draft_vocab,
        )
        hint = "pick a --drafter-model with a tokenizer that shares text with the target's"
        pair = load_pair_with_progress(pair_config, mismatch_hint=hint)
        pair.use_kernels(kernels)
        drafters = _more_drafters(pair, pair_config, specs[1:] if needed else [], kernels, hint)
        config = replace(config, **_drafter_settings(pair, drafters, config.temperature))
        # 3. the sweep, then its table
        _run_sweep(pair, prompt_list, config, out_dir, resume=resume, prompts_source=prompts, drafters=drafters)


def _check_new_sweep(out_dir: Path, resume: bool) -> None:
    """A sweep without --resume never writes into another sweep's rows."""
    runs_csv = out_dir / RUNS_CSV
    if not resume and runs_csv.exists():
        raise SweepError(f"{runs_csv} already exists: pass --resume to continue that sweep, or choose another --out")


def _drafter_specs(drafter_model: list[str] | None) -> list[str]:
    """The --drafter-model specs, each once (default: the default model); several must all be
    models (default, a folder, a .gguf file or a hub id)."""
    from specbench.models.specs import drafter_kind

    specs = list(dict.fromkeys(drafter_model or ["default"]))
    for spec in specs if len(specs) > 1 else ():
        if drafter_kind(spec) != "model":
            raise OptionError(
                f"--drafter-model {spec}: each of several drafter models must be a model (default, a folder, a"
                " .gguf file or a hub id)"
            )
    return specs


def _why_no_hf_assisted(config, specs: list[str], named: bool, target: str) -> str | None:
    """Why a sweep whose drafters run no drafter model goes without hf-assisted (which would be
    the only one to draft with it), or None: --drafter-model none, or a target of the user's
    with no --drafter-model (the embedded drafter is the default target's partner)."""
    from specbench.bench import plan
    from specbench.models.specs import DEFAULT, NONE

    if plan.drafts_with_model(config):
        return None
    if specs == [NONE]:
        return "--drafter-model none"
    if not named and target != DEFAULT:
        return "no --drafter-model given for this target (the embedded drafter pairs with the default target)"
    return None


@contextmanager
def _out_folder(out_dir: Path) -> Iterator[Path]:
    """Make a sweep's --out folder before the models load (one line if it cannot be one), and
    remove it again if the command fails before writing anything there (a model that does
    not load, Ctrl-C while loading), with the parents it made: a failed start leaves no
    empty results folder behind."""
    made = [folder for folder in (out_dir, *out_dir.parents) if not folder.exists()]  # deepest first
    make_dir(out_dir, SweepError)
    try:
        yield out_dir
    except BaseException:
        for folder in made:
            try:
                folder.rmdir()  # only an empty folder: a sweep that wrote rows keeps them
            except OSError:
                break
        raise


def _more_drafters(pair, pair_config, specs: list[str], kernels: str, hint: str) -> dict:
    """For a sweep of several drafter models: each by its name in labels
    (results.drafter_model_name), the pair's own first, as (LoadedModel, translated); {} for
    a sweep of one."""
    from specbench.models.loading import load_drafters

    if not specs:
        return {}
    with loading_bars(hint) as report:
        loaded = [
            (pair.drafter_model, pair.translated),
            *load_drafters(pair_config, pair.target, specs, kernels, report),
        ]
    named = {drafter_model_name(d.name): (d, translated) for d, translated in loaded}
    if len(named) < len(loaded):
        raise OptionError(
            f"two drafter models would share a name in labels ({', '.join(d.name for d, _ in loaded)}); give each once"
        )
    return named


def _drafter_settings(pair, drafters: dict, temperature: float) -> dict:
    """SweepConfig's drafter_models, translated and hf_refuses for the loaded drafters: one
    unnamed model (the pair's), or several by name. A drafter model left without its
    hf-universal baseline is said in one line, with why."""
    from specbench.bench.runner import why_no_hf_universal

    drafter_models = _drafter_models(pair, drafters)
    translated = tuple(name for name, (_, is_translated) in drafter_models.items() if is_translated)
    refuses = []
    for name in translated:
        drafter = drafter_models[name][0]
        why = why_no_hf_universal(pair.target.model, drafter.model, pair.tokenizer, drafter.tokenizer, temperature)
        if why:
            refuses.append(name)
            label = drafter_label(MODEL_DRAFTER, name)
            ui.say(f"[dim]no hf-universal beside {escape(label)}: {escape(why)}[/]", markup=True, stderr=True)
    settings = {"translated": translated, "hf_refuses": tuple(refuses)}
    return {"drafter_models": tuple(drafter_models), **settings} if drafters else settings


def _drafter_models(pair, drafters: dict) -> dict:
    """The sweep's drafter models by name, as (LoadedModel, translated): _more_drafters' for
    several, else the pair's one model under the name "" ({} when it drafts with none)."""
    if drafters:
        return drafters
    return {"": (pair.drafter_model, pair.translated)} if pair.drafter_model is not None else {}


def _sweep_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}", style="progress.description", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=ui.console,
        transient=False,
    )


def _run_label(run) -> str:
    setting = " ".join(p for p in (run.drafter, run.policy, f"γ={run.gamma}" if run.gamma else "") if p)
    return f"{run.method} {setting} · {run.prompt.id}".replace("  ", " ")


def _run_sweep(
    pair, prompt_list, config, out_dir: Path, *, resume: bool, prompts_source: str, drafters: dict | None = None
) -> None:
    """Run the sweep on a loaded pair under a progress bar; Ctrl-C keeps the finished rows;
    then the table. drafters: _more_drafters', for a sweep of several drafter models."""
    from specbench.bench.runner import DrafterModel
    from specbench.bench.sweep import sweep

    drafter_models = _drafter_models(pair, drafters)
    model = {name: DrafterModel(d.model, d.tokenizer if t else None) for name, (d, t) in drafter_models.items()}
    names = {name: d.name for name, (d, _) in drafter_models.items()}
    written = 0
    with _sweep_progress() as progress:
        task = progress.add_task("starting", total=None)

        def on_row(run, row) -> None:
            nonlocal written
            written += 1
            progress.update(task, advance=1, description=_run_label(run))

        try:
            result = sweep(
                pair.target.model,
                model,
                pair.tokenizer,
                prompt_list,
                config,
                out_dir,
                resume=resume,
                target_name=pair.target.name,
                drafter_name=names,
                prompts_source=prompts_source,
                command=ui.command_line(),
                eos_ids=pair.eos_token_ids,
                on_status=lambda text: progress.update(task, description=text),
                on_start=lambda total, skipped: progress.update(task, total=total, completed=skipped),
                on_row=on_row,
            )
        except KeyboardInterrupt:
            progress.stop()
            ui.say(
                f"interrupted: {written} new row(s) kept in {out_dir / RUNS_CSV}; add --resume to finish the sweep",
                stderr=True,
            )
            raise typer.Exit(130) from None
    render_sweep_end(out_dir, result, config)
