"""`specbench generate`: one prompt, streamed as the target accepts tokens, or traced, or JSON.

The command checks every option before the minutes of model loading, loads the pair, picks
the gamma policy (the cost policy's costs from bench/cost_cache.py), generates, and renders:
streamed text and a summary line, `--json`'s one object, or `--trace`'s rounds (trace.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer
from rich.markup import escape

from specbench.cli import options as o
from specbench.cli import trace as tracing
from specbench.cli import tracefile, ui
from specbench.cli.progress import checked_pair_config, load_pair_with_progress
from specbench.errors import OptionError, PromptError


def generate_command(
    prompt: o.Prompt,
    target: o.Target = o.TARGET,
    drafter: o.Drafter = "default",
    gamma: o.Gamma = None,
    gamma_policy: o.GammaPolicy = "cost",
    temperature: o.Temperature = o.TEMPERATURE,
    top_k: o.TopK = o.TOP_K,
    top_p: o.TopP = o.TOP_P,
    max_new_tokens: o.MaxNewTokens = o.MAX_NEW_TOKENS,
    seed: o.Seed = o.SEED,
    raw: o.Raw = False,
    as_json: o.AsJson = False,
    dtype: o.Dtype = o.DTYPE,
    draft_dtype: o.DraftDtype = o.DRAFT_DTYPE,
    draft_vocab: o.DraftVocab = o.DRAFT_VOCAB,
    lookup: o.Lookup = o.LOOKUP,
    device: o.Device = o.DEVICE,
    gamma_min: o.GammaMin = 1,
    gamma_max: o.GammaMax = None,
    egag_beta: o.EgagBeta = 0.0,
    threshold: o.Threshold = None,
    kernels: o.Kernels = o.KERNELS,
    trace: o.Trace = False,
    trace_out: o.TraceOut = None,
    calibration: o.CalibrationFile = None,
) -> None:
    """Generate text with speculative decoding, streaming it as the target accepts tokens."""
    from specbench.models.run import check_policy, generation_config
    from specbench.models.text import TextStream, check_prompt_fits, encode_prompt
    from specbench.policies import default_gamma

    gamma = default_gamma(gamma_policy) if gamma is None else gamma
    knobs = dict(gamma_min=gamma_min, gamma_max=gamma_max, egag_beta=egag_beta, threshold=threshold)
    # 1. everything that can be checked before minutes of model loading
    if not prompt.strip():
        raise PromptError("the prompt is empty")
    if trace and as_json:
        raise OptionError("--trace and --json both want the terminal; save the trace with --trace-out instead")
    config = generation_config(
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
    )
    check_policy(gamma_policy, gamma, **knobs)
    pair_config = checked_pair_config(
        kernels,
        target=target,
        drafter=drafter,
        dtype=dtype,
        draft_dtype=draft_dtype,
        device=device,
        draft_vocab=draft_vocab,
        lookup=lookup,
    )

    # 2. the models (with the chosen kernels), the prompt, then the policy (the cost policy's costs)
    pair = load_pair_with_progress(
        pair_config,
        mismatch_hint="pick a drafter with a tokenizer that shares text with the target's, or --drafter none",
    )
    pair.use_kernels(kernels)
    keep_head = _restore_head(pair, pair_config, kernels)
    prompt_ids = encode_prompt(pair.tokenizer, prompt, raw=raw)
    check_prompt_fits(prompt_ids, pair.context_limit)
    kept_ids = _kept_ids(pair, prompt_ids)
    config = replace(config, eos_token_ids=pair.eos_token_ids)
    policy, keeper = _generate_policy(
        pair, pair_config, kernels, prompt_ids, config, gamma_policy, gamma, knobs, calibration
    )

    # 3. generate, streaming unless --json or --trace; 4. the ending
    settings = dict(
        gamma=gamma,
        gamma_policy=gamma_policy,
        lookup=pair.lookup,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    stream = TextStream(pair.tokenizer)
    streaming = not (as_json or trace)
    on_tokens = (lambda tokens: ui.console.out(stream.push(tokens), end="", highlight=False)) if streaming else None
    result, tracer = _run_traced(
        pair, prompt, prompt_ids, config, policy, on_tokens, settings, trace=trace, trace_out=trace_out
    )
    if keeper is not None:
        keeper(policy.calibration.evidence())
    if keep_head is not None:
        keep_head()
    if tracer is not None:
        tracer.finish(result.stats)
    elif as_json:
        out = generation_json(result, pair, prompt_ids, {**settings, "raw": raw}, kept_ids)
        typer.echo(json.dumps(out, ensure_ascii=False))
    else:
        ui.console.out(stream.finish(), highlight=False)  # whatever was held back, then a newline
        ui.say(f"[dim]{escape(summary_line(result, pair))}[/]", markup=True, stderr=True)
    if trace_out is not None:  # after the text's last line, not on it
        where = escape(str(trace_out))
        ui.say(f"[dim]trace saved to {where}; replay it with `specbench trace {where}`[/]", markup=True, stderr=True)


def summary_line(result, pair) -> str:
    """The line on stderr after streamed text: tokens, speed, acceptance, forwards, the stop."""
    stats = result.stats
    parts = [f"{stats.new_tokens} tokens", f"{stats.tokens_per_second:.2f} tok/s"]
    if pair.drafter_name == "none":
        parts.append("plain decoding")
    elif stats.drafted == 0:  # the policy never found a draft worth its cost
        parts.append("no drafts")
    else:
        parts += [
            f"acceptance {stats.acceptance_rate:.0%} ({stats.accepted}/{stats.drafted})",
            f"mean accepted length {stats.mean_accepted_length:.2f}",
        ]
    parts += [
        f"{stats.target_forwards} target forwards",
        f"prefill {stats.prefill_seconds:.2f} s",
        f"stop: {result.stop_reason}",
    ]
    return " · ".join(parts)


def _drafter_label(pair) -> str:
    return pair.drafter_model.name if pair.drafter_model is not None else pair.drafter_name


def generation_json(result, pair, prompt_ids: list[int], settings: dict, kept_ids: int | None = None) -> dict:
    """The --json object: text, new token ids, every RunStats field and rate, the settings;
    kept_ids: the prompt ids the model drafter started with already read (_kept_ids)."""
    return {
        "text": pair.tokenizer.decode(result.token_ids, skip_special_tokens=True),
        "token_ids": result.token_ids,
        "prompt_tokens": len(prompt_ids),
        "drafter_kept_ids": kept_ids,
        "stop_reason": result.stop_reason,
        "target": pair.target.name,
        "drafter": _drafter_label(pair),
        "mapping": pair.mapping,
        **settings,
        "stats": result.stats.as_dict(),
    }


def _generate_policy(
    pair,
    pair_config,
    kernels: str,
    prompt_ids: list[int],
    config,
    name: str,
    gamma: int,
    knobs: dict,
    calibration: str | None,
):
    """The gamma policy of the run (None for plain decoding, which runs none) and what keeps
    its calibration afterwards (None: nothing is kept). The cost policy gets its costs from
    the cache or a measurement (_pair_costs) and starts warm from the calibration file
    (_warm_start)."""
    from specbench.models.run import gamma_policy
    from specbench.models.specs import NONE

    if pair.drafter_name == NONE:
        return None, None
    if name != "cost":
        return gamma_policy(name, gamma, **knobs), None
    from specbench.bench.cost_cache import cost_key

    costs = _pair_costs(pair, pair_config, kernels, prompt_ids, config.max_new_tokens, config.sampling)
    warm, keeper = _warm_start(cost_key(pair, pair_config, kernels, config.sampling), pair.drafter_kind, calibration)
    chosen = gamma_policy(name, gamma, costs=costs, warm=warm, max_new_tokens=config.max_new_tokens, **knobs)
    return chosen, keeper


def _kept_ids(pair, prompt_ids: list[int]) -> int | None:
    """The prompt ids the model drafter starts with already read (bench/head_cache.py), for
    --json: 0 on a first run, which reads them; None without a model drafter."""
    from specbench.bench.head_cache import starts_with

    return starts_with(pair, prompt_ids)


def _restore_head(pair, pair_config, kernels: str):
    """Start the drafter with the template's opening read where an earlier run kept it
    (bench/head_cache.py); returns what keeps it after this run (None: kept already, or no
    model drafter)."""
    if pair.drafter_model is None:
        return None
    from specbench.bench.head_cache import head_key, restore_head, save_head

    key = head_key(pair, pair_config, kernels)
    return None if restore_head(pair, key) else (lambda: save_head(pair, key))


def _warm_start(key: str, drafter: str, calibration: str | None):
    """The Evidence the cost policy starts from and a function that keeps the run's own, from
    the file `calibration` names (None: the cache folder's for key; "none": neither). A note
    goes to stderr when the file was unusable; one of another pair is a CalibrationError."""
    from specbench.bench.calibration_cache import default_path, read_calibration, write_calibration

    if calibration is not None and calibration.lower() == "none":
        return None, None
    path = default_path(key) if calibration is None else Path(calibration)
    warm, note = read_calibration(path, key, drafter)
    if note or warm is not None:
        ui.say(f"[dim]{escape(note or f'calibration: warm, from {path}')}[/]", markup=True, stderr=True)
    return warm, lambda evidence: write_calibration(path, key, drafter, evidence)


def _pair_costs(pair, pair_config, kernels: str, prompt_ids: list[int], max_new_tokens: int, sampling):
    """The cost policy's costs (cost_cache.pair_costs) under a status line, then one line
    that says what they are and whether they came from the cache."""
    from specbench.bench.cost_cache import pair_costs

    with ui.err_console.status("measuring the drafter and verify costs for the cost policy (once per model pair)"):
        costs, cached = pair_costs(pair, pair_config, kernels, prompt_ids, max_new_tokens, sampling)
    verify = " ".join(f"{v:.2f}" for v in costs.verify_cost.values())
    ui.say(
        f"[dim]costs{' (cached)' if cached else ''}: c = {costs.c:.3f}, v(k) = {verify}[/]", markup=True, stderr=True
    )
    return costs


def _run_traced(
    pair,
    prompt: str,
    prompt_ids: list[int],
    config,
    policy,
    on_tokens,
    settings: dict,
    *,
    trace: bool,
    trace_out: Path | None,
):
    """run_generation with the live tracer (--trace) and the trace file (--trace-out);
    returns the result and the live tracer, if any. Ctrl-C keeps a partial trace file."""
    from specbench.models.run import run_generation

    header = dict(
        gamma=settings["gamma"],
        policy=settings["gamma_policy"],
        lookup=pair.lookup,
        temperature=settings["temperature"],
        top_k=settings["top_k"],
        top_p=settings["top_p"],
        seed=settings["seed"],
        max_new_tokens=config.max_new_tokens,
    )
    tracer, writer = _tracers(trace, trace_out, pair, prompt, header)
    on_step = tracing.tee(tracer and tracer.on_step, writer and writer.on_step)
    try:
        result = run_generation(pair, prompt_ids, config, policy, on_tokens=on_tokens, on_step=on_step)
    except KeyboardInterrupt:
        if writer is not None:
            writer.close()  # a partial trace still replays
        ui.err_console.print("\ninterrupted", highlight=False)
        raise typer.Exit(130) from None
    if writer is not None:
        writer.close(result.stats)
    return result, tracer


def _tracers(trace: bool, trace_out, pair, prompt: str, settings: dict):
    """The live tracer (--trace) and the JSONL writer (--trace-out), either may be None."""
    tokenizer = pair.tokenizer
    token_text = lambda token: tokenizer.decode([token])
    header = {
        "prompt": prompt,
        "target": pair.target.name,
        "drafter": _drafter_label(pair),
        "mapping": pair.mapping,
        **settings,
    }
    writer = tracefile.TraceWriter(trace_out, token_text, header) if trace_out is not None else None
    tracer = tracing.live_tracer(ui.console, token_text, header) if trace else None
    return tracer, writer
