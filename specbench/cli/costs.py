"""`specbench costs` and `predict`: what forwards cost on this machine, and a sweep priced again.

`costs` loads a pair, times its forwards as a sweep does (bench/costs.py) and writes them to a
file; `predict` prices a finished sweep's predictions with such a file (bench/reprice.py),
with no models loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbench.bench.runs_file import load_runs, make_dir
from specbench.cli import options as o
from specbench.cli import ui
from specbench.cli.progress import checked_pair_config, load_pair_with_progress
from specbench.cli.report import render_predicted
from specbench.errors import OptionError, ResultsError


def costs_command(
    out: o.CostsOut,
    target: o.Target = o.TARGET,
    drafter_model: o.DrafterModel = "default",
    random_weights: o.RandomWeights = False,
    dtype: o.Dtype = o.DTYPE,
    draft_dtype: o.DraftDtype = o.DRAFT_DTYPE,
    device: o.Device = o.DEVICE,
    kernels: o.Kernels = o.KERNELS,
    draft_vocab: o.DraftVocab = o.DRAFT_VOCAB,
    temperature: o.Temperature = o.TEMPERATURE,
    top_k: o.TopK = o.TOP_K,
    top_p: o.TopP = o.TOP_P,
    context_tokens: o.ContextTokens = 160,
    timing_repeats: o.TimingRepeats = o.TIMING_REPEATS,
) -> None:
    """Measure a pair's forward costs on this machine (c, v(k), u(n), plain step, loop) as a sweep does, into a file."""
    from specbench.bench.costs import measure_costs, shared_limit, timing_context
    from specbench.bench.meta import costs_meta, model_meta
    from specbench.bench.pricing import costs_summary
    from specbench.models.pairing import timing_ids
    from specbench.models.run import generation_config
    from specbench.models.specs import NONE, drafter_kind

    # 1. everything that can be checked before minutes of model loading
    sampling = generation_config(max_new_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p).sampling
    if context_tokens < 1 or timing_repeats < 1:
        raise OptionError("--context-tokens and --timing-repeats must be >= 1")
    if drafter_kind(drafter_model) not in ("model", NONE):
        raise OptionError(
            f"--drafter-model {drafter_model}: give a model (default, a folder, a .gguf file or a hub id) or none"
        )
    pair_config = checked_pair_config(
        kernels,
        target=target,
        drafter=drafter_model,
        dtype=dtype,
        draft_dtype=draft_dtype,
        device=device,
        draft_vocab=draft_vocab,
        random_weights=random_weights,
    )
    if out.is_dir():
        raise ResultsError(f"--out {out} is a folder; give the costs file's name (e.g. costs.json)")
    make_dir(out.parent)
    # 2. the pair, then its costs on a context of context_tokens ids (which ids does not change what a forward costs)
    pair = load_pair_with_progress(pair_config, mismatch_hint="pick a drafter model with the target's vocabulary")
    pair.use_kernels(kernels)
    target_model, drafter = pair.target.model, pair.drafting_model
    limit = shared_limit(target_model, drafter)
    context = timing_ids(timing_context(list(range(context_tokens)), 0, limit), target_model, drafter)
    with ui.err_console.status("timing forwards of both models"):
        costs = measure_costs(
            target_model,
            drafter,
            context,
            timing_repeats,
            draft_vocab=pair.draft_vocab,
            sampling=sampling,
            predicting=True,
        )
    # 3. the file
    named = {
        "target": model_meta(target_model, pair.target.name),
        "drafter": model_meta(drafter, pair.drafter_model.name) if pair.drafter_model is not None else None,
    }
    settings = dict(
        kernels=kernels,
        draft_vocab=pair.draft_vocab,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        timing_repeats=timing_repeats,
        random_weights=random_weights,
    )
    _write_costs(out, costs_meta(costs, named, settings, command=ui.command_line()))
    ui.say(costs_summary(costs))
    ui.say(f"wrote {out}; price a sweep with it: specbench predict RESULTS --costs {out} --out DIR")


def _write_costs(out: Path, recorded: dict) -> None:
    try:
        out.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"cannot write {out}: {exc.strerror or exc}") from None


def predict_command(directory: o.ResultsDirectory, out: o.PredictOut, costs: o.CostsIn = None) -> None:
    """Price a sweep's predictions again with other costs (another machine's, other shapes'). Needs no models."""
    from specbench.bench.pricing import costs_summary
    from specbench.bench.reprice import reprice

    result = reprice(directory, out, costs, command=ui.command_line())
    render_predicted(load_runs(out))
    which = f"the costs in {result.costs_file}" if result.costs_file is not None else "the sweep's own costs"
    ui.say(f"{result.rows} predicted row(s) priced with {which}: {costs_summary(result.costs)}")
    if result.kept_drafts:
        ui.say(
            f"[dim]{result.kept_drafts} row(s) of the cost policy and the oracle keep the drafts the sweep's costs"
            " chose: only their price changed[/]",
            markup=True,
            stderr=True,
        )
    ui.say(f"wrote {out}  (charts: specbench plot {out})")
