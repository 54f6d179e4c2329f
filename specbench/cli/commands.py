"""The `specbench` command line: parse, build configs, call the library, render.

No torch logic lives here. User errors are SpecbenchErrors (errors.py), raised by the library
or here; `command` catches them once, around every command, as one line on stderr and exit 2.
Modules that import torch (models, core, bench, ...) are imported inside the commands,
so that `--help`, `models`, `trace` and `plot` start fast.
"""

from __future__ import annotations

import functools
import json as _json
import sys as _sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace as _replace
from datetime import datetime as _datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from specbench import paths
from specbench.bench import prompts as prompt_sets
from specbench.bench import results as sweep_results
from specbench.cli import trace as tracing
from specbench.cli import tracefile
from specbench.errors import OptionError, PromptError, ResultsError, SpecbenchError, SweepError
from specbench.models import defaults

app = typer.Typer(
    name="specbench",
    help="Speculative decoding you can watch and measure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print one error line on stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def command(name: str) -> Callable:
    """app.command(name), with the one catch of user errors: a SpecbenchError the command
    raises becomes `fail(message)`. Anything else is a bug and keeps its traceback."""

    def register(function: Callable) -> Callable:
        @functools.wraps(function)
        def run(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except SpecbenchError as exc:
                fail(str(exc))

        return app.command(name)(run)

    return register


# ---------------------------------------------------------------------------- loading with progress


class _BytesColumn(DownloadColumn):
    """Bytes done / total for byte-counted tasks (assembling); blank for one-step tasks."""

    def render(self, task):
        if task.total is None or task.total <= 1:
            return ""
        return super().render(task)


def _loading_progress() -> Progress:
    """Progress on stderr while models load (assembling, dequantizing, caching on first use)."""
    return Progress(
        SpinnerColumn(),
        TextColumn(
            "{task.description}", style="progress.description", markup=False
        ),  # a model name or prompt id is not markup
        BarColumn(),
        _BytesColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


@contextmanager
def _progress_bars() -> Iterator[Callable[[str, float, float | None], None]]:
    """A models Progress callback, (task, done, total), drawn as rich bars on stderr: the one
    rendering of loading progress (assembling, dequantizing, loading), cleared when done."""
    with _loading_progress() as progress:
        tasks: dict[str, int] = {}

        def report(task: str, done: float, total: float | None) -> None:
            if task not in tasks:
                tasks[task] = progress.add_task(task, total=total)
            progress.update(tasks[task], completed=done, total=total)

        yield report


def load_pair_with_progress(config, *, mismatch_hint: str):
    """models.load_pair under progress bars: how `generate` and `sweep` load their models.
    mismatch_hint ends the message of a VocabMismatch (which option to change)."""
    from specbench import models

    models.quiet_transformers()
    with _progress_bars() as report:
        try:
            return models.load_pair(config, report)
        except models.VocabMismatch as exc:
            raise models.VocabMismatch(f"{exc}; {mismatch_hint}") from None


# ---------------------------------------------------------------------------- generate


def _summary_line(result, pair) -> str:
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


def _model_key(loaded) -> str:
    """A model's part of a cache key: its name, and for a local folder or file also where
    it is and what it holds (ModelSpec.identity): two files of one name are two models."""
    identity = loaded.spec.identity()
    return loaded.name if identity is None else f"{loaded.name}@{identity}"


def _drafter_label(pair) -> str:
    return pair.drafter_model.name if pair.drafter_model is not None else pair.drafter_name


def generation_json(result, pair, prompt_ids: list[int], settings: dict) -> dict:
    """The --json object: text, new token ids, every RunStats field and rate, the settings."""
    return {
        "text": pair.tokenizer.decode(result.token_ids, skip_special_tokens=True),
        "token_ids": result.token_ids,
        "prompt_tokens": len(prompt_ids),
        "stop_reason": result.stop_reason,
        "target": pair.target.name,
        "drafter": _drafter_label(pair),
        "mapping": pair.mapping,
        **settings,
        "stats": result.stats.as_dict(),
    }


@command("generate")
def generate_command(
    prompt: Annotated[
        str, typer.Argument(help="The prompt (a user turn of the chat template unless --raw).", show_default=False)
    ],
    target: Annotated[
        str, typer.Option("--target", help="Target model: default, a local folder, a .gguf file or a cached hub id.")
    ] = "default",
    drafter: Annotated[
        str,
        typer.Option(
            "--drafter",
            help="default, none (plain decoding), a model-free drafter (ngram, prompt-lookup), early-exit:N (the target's first N layers) or a model spec (any tokenizer: another one drafts through text).",
        ),
    ] = "default",
    gamma: Annotated[
        int | None,
        typer.Option(
            "--gamma",
            help="Draft tokens per round: fixed's gamma, the adaptive policies' largest (default: 12 for cost, 4 for the others).",
            show_default=False,
        ),
    ] = None,
    gamma_policy: Annotated[
        str,
        typer.Option(
            "--gamma-policy",
            help="How gamma is chosen each round: cost (measured costs and confidence), fixed, heuristic, egag, ...",
        ),
    ] = "cost",
    temperature: Annotated[
        float, typer.Option("--temperature", help="0 is greedy; above 0 samples (losslessly).")
    ] = 0.0,
    top_k: Annotated[int, typer.Option("--top-k", help="Sample from the k most likely tokens; 0 keeps all.")] = 0,
    top_p: Annotated[
        float, typer.Option("--top-p", help="Sample from the smallest set with this much mass, in (0, 1].")
    ] = 1.0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Most tokens to generate.")] = 128,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling generator.")] = 0,
    raw: Annotated[bool, typer.Option("--raw", help="Feed the prompt as is, without the chat template.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (text, token_ids, stats) instead of streaming.")
    ] = False,
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype",
            help="Target weights: auto (on a CPU with AVX2: q4k for a GGUF target with Q4_K layers, the default one included, else int8; float32 elsewhere), float32, bfloat16, float16, int8 (weight-only, batch-invariant, CPU) or q4k (a GGUF file's own Q4_K blocks, the rest int8; batch-invariant, CPU).",
        ),
    ] = defaults.DEFAULT_DTYPE,
    draft_dtype: Annotated[
        str,
        typer.Option(
            "--draft-dtype",
            help="Drafter weights: auto (int8 on the CPU, else bfloat16), float32, bfloat16, float16, int8 (weight-only, CPU) or q4k (a GGUF drafter's own Q4_K blocks, the rest int8; CPU).",
        ),
    ] = defaults.DEFAULT_DRAFT_DTYPE,
    draft_vocab: Annotated[
        int,
        typer.Option(
            "--draft-vocab",
            help="The model drafter scores only ids below this (plus the prompt's and EOS); 0 scores all. Lossless either way.",
        ),
    ] = defaults.DEFAULT_DRAFT_VOCAB,
    lookup: Annotated[
        bool,
        typer.Option(
            "--lookup/--no-lookup",
            help="With a model drafter: copy from the context instead when its last 3 tokens occurred before (free drafts).",
        ),
    ] = defaults.DEFAULT_LOOKUP,
    device: Annotated[
        str, typer.Option("--device", help="cpu, cuda, mps, or auto (accelerate spreads the target).")
    ] = "cpu",
    gamma_min: Annotated[int, typer.Option("--gamma-min", help="egag: the smallest gamma; heuristic: its floor.")] = 1,
    gamma_max: Annotated[
        int | None,
        typer.Option(
            "--gamma-max",
            help="Adaptive policies' largest gamma (default: --gamma; the heuristic, like HF's, has none unless given).",
            show_default=False,
        ),
    ] = None,
    egag_beta: Annotated[
        float, typer.Option("--egag-beta", help="egag: EMA weight of the previous confidence, in [0, 1).")
    ] = 0.0,
    threshold: Annotated[
        float | None,
        typer.Option(
            "--threshold",
            help="entropy-stop: max normalized entropy; confidence-stop: min top probability.",
            show_default=False,
        ),
    ] = None,
    kernels: Annotated[
        str,
        typer.Option(
            "--kernels",
            help="auto (onednn when available), onednn (faster multi-token CPU forwards of float layers), or default (PyTorch's).",
        ),
    ] = "auto",
    trace: Annotated[
        bool, typer.Option("--trace", help="Show every round: drafts, q, p, accept/reject, the emitted token.")
    ] = False,
    trace_out: Annotated[
        Path | None,
        typer.Option("--trace-out", help="Save the rounds as JSONL for `specbench trace FILE`.", show_default=False),
    ] = None,
) -> None:
    """Generate text with speculative decoding, streaming it as the target accepts tokens."""
    from specbench import models
    from specbench.policies import default_gamma

    gamma = default_gamma(gamma_policy) if gamma is None else gamma
    knobs = dict(gamma_min=gamma_min, gamma_max=gamma_max, egag_beta=egag_beta, threshold=threshold)
    # 1. everything that can be checked before minutes of model loading
    if not prompt.strip():
        raise PromptError("the prompt is empty")
    if trace and as_json:
        raise OptionError("--trace and --json both want the terminal; save the trace with --trace-out instead")
    config = models.generation_config(
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
    )
    models.check_policy(gamma_policy, gamma, **knobs)
    pair_config = models.PairConfig(
        target=target,
        drafter=drafter,
        dtype=dtype,
        draft_dtype=draft_dtype,
        device=device,
        draft_vocab=draft_vocab,
        lookup=lookup,
    )
    models.validate_pair_config(pair_config)
    models.check_kernels(kernels)

    # 2. the models (with the chosen kernels), the prompt, then the policy (the cost policy's costs)
    pair = load_pair_with_progress(
        pair_config,
        mismatch_hint="pick a drafter with a tokenizer that shares text with the target's, or --drafter none",
    )
    pair.use_kernels(kernels)
    prompt_ids = models.encode_prompt(pair.tokenizer, prompt, raw=raw)
    models.check_prompt_fits(prompt_ids, pair.context_limit)
    config = _replace(config, eos_token_ids=pair.eos_token_ids)
    policy = _generate_policy(pair, pair_config, kernels, prompt_ids, config, gamma_policy, gamma, knobs)

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
    stream = models.TextStream(pair.tokenizer)
    on_tokens = (
        None if (as_json or trace) else (lambda tokens: console.out(stream.push(tokens), end="", highlight=False))
    )
    result, tracer = _run_traced(
        pair, prompt, prompt_ids, config, policy, on_tokens, settings, trace=trace, trace_out=trace_out
    )
    if tracer is not None:
        tracer.finish(result.stats)
    elif as_json:
        typer.echo(_json.dumps(generation_json(result, pair, prompt_ids, {**settings, "raw": raw}), ensure_ascii=False))
    else:
        console.out(stream.finish(), highlight=False)  # whatever was held back, then a newline
        err_console.print(f"[dim]{escape(_summary_line(result, pair))}[/]", highlight=False, soft_wrap=True)
    if trace_out is not None:  # after the text's last line, not on it
        err_console.print(
            f"[dim]trace saved to {escape(str(trace_out))}; replay it with `specbench trace {escape(str(trace_out))}`[/]",
            highlight=False,
            soft_wrap=True,
        )


def _generate_policy(
    pair, pair_config, kernels: str, prompt_ids: list[int], config, name: str, gamma: int, knobs: dict
):
    """The gamma policy of the run; None for plain decoding, which runs none. The cost
    policy gets its costs from the cache or a measurement (_pair_costs)."""
    from specbench import models

    if pair.drafter_name == models.NONE:
        return None
    costs = (
        _pair_costs(pair, pair_config, kernels, prompt_ids, config.max_new_tokens, config.sampling)
        if name == "cost"
        else None
    )
    return models.gamma_policy(name, gamma, costs=costs, **knobs)


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
    """models.run_generation with the live tracer (--trace) and the trace file (--trace-out);
    returns the result and the live tracer, if any. Ctrl-C keeps a partial trace file."""
    from specbench import models

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
        result = models.run_generation(pair, prompt_ids, config, policy, on_tokens=on_tokens, on_step=on_step)
    except KeyboardInterrupt:
        if writer is not None:
            writer.close()  # a partial trace still replays
        err_console.print("\ninterrupted", highlight=False)
        raise typer.Exit(130) from None
    if writer is not None:
        writer.close(result.stats)
    return result, tracer


def _pair_costs(pair, pair_config, kernels: str, prompt_ids: list[int], max_new_tokens: int, sampling):
    """c and v(k) for the cost policy, with the run's sampling settings (bench/costs.py times
    the work on the logits too): from the cache folder, or measured once (seconds)."""
    import torch

    from specbench import models
    from specbench.bench.costs import METHOD, costs_for, for_drafter, shared_limit, timing_context
    from specbench.speed.kernels import VERSION

    drafter_model = pair.drafting_model
    drafter_key = _model_key(pair.drafter_model) if pair.drafter_model is not None else pair.drafter_name
    key = f"{_model_key(pair.target)}|{pair_config.dtype}|{drafter_key}|{pair_config.draft_dtype}|vocab={pair.draft_vocab}|{pair_config.device}|{kernels}.v{VERSION}|threads={torch.get_num_threads()}|t={sampling.temperature:g},k={sampling.top_k},p={sampling.top_p:g}|costs.v{METHOD}"
    context = models.timing_ids(
        timing_context(prompt_ids, max_new_tokens, shared_limit(pair.target.model, drafter_model)),
        pair.target.model,
        drafter_model,
    )
    with err_console.status("measuring the drafter and verify costs for the cost policy (once per model pair)"):
        costs, cached = costs_for(
            pair.target.model,
            drafter_model,
            key,
            context,
            paths.costs_dir(),
            draft_vocab=pair.draft_vocab,
            sampling=sampling,
        )
    if pair.drafter_model is not None or drafter_model is None:  # early exit keeps its measured c
        costs = for_drafter(costs, pair.drafter_name)
    err_console.print(
        f"[dim]costs{' (cached)' if cached else ''}: c = {costs.c:.3f}, v(k) = "
        + " ".join(f"{v:.2f}" for v in costs.verify_cost.values())
        + "[/]",
        highlight=False,
        soft_wrap=True,
    )
    return costs


def _tracers(trace: bool, trace_out, pair, prompt: str, settings: dict):
    """The live tracer (--trace) and the JSONL writer (--trace-out), either may be None."""
    tokenizer = pair.tokenizer
    token_text = lambda token: tokenizer.decode([token])  # noqa: E731
    header = {
        "prompt": prompt,
        "target": pair.target.name,
        "drafter": _drafter_label(pair),
        "mapping": pair.mapping,
        **settings,
    }
    writer = tracefile.TraceWriter(trace_out, token_text, header) if trace_out is not None else None
    tracer = tracing.live_tracer(console, token_text, header) if trace else None
    return tracer, writer


def _size(n: int) -> str:
    if n >= 1e8:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


@command("models")
def models_command() -> None:
    """List the embedded default pair: its packages, whether it is cached, and the sizes."""
    table = Table(title="Default model pair", title_justify="left")
    for name in ("role", "model", "parts", "GGUF", "cached", "cache"):
        table.add_column(name, justify="right" if name in ("GGUF", "cache") else "left", no_wrap=name == "model")
    statuses = [defaults.status(model) for model in defaults.PAIR]
    for s in statuses:
        cached = "[green]yes[/]" if s.cached else "no"
        table.add_row(
            s.model.role,
            s.model.name,
            f"{s.parts_found}/{s.model.n_parts}",
            _size(s.parts_bytes),
            cached,
            _size(s.cache_bytes) if s.cache_bytes else "–",
        )
    console.print(table)
    for s in statuses:
        where = f"parts in {s.parts_folder}" if s.parts_folder else "parts not installed"
        console.print(f"{s.model.role}: {where}; cache {s.cache_path}", highlight=False, soft_wrap=True, markup=False)
    if not all(s.cached for s in statuses):
        console.print(
            "an uncached model is built on first use (about 1-2 minutes, once)", highlight=False, soft_wrap=True
        )
    if any(s.parts_found < s.model.n_parts for s in statuses):
        console.print(
            f"[yellow]missing packages:[/] install them with {defaults.INSTALL_HINT}", highlight=False, soft_wrap=True
        )
    console.print(
        f"cache: {paths.models_dir()} (move it with ${paths.CACHE_ENV}; empty it with `specbench clear-cache`)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    console.print(drafters_table())


def drafters_table() -> Table:
    """How each kind of --drafter maps to the target (models.drafter_mapping's words)."""
    from specbench.models.loading import drafter_mapping, early_exit_mapping

    table = Table(title="Drafters and how they map to the target", title_justify="left")
    table.add_column("--drafter", no_wrap=True)
    table.add_column("maps to the target")
    table.add_row("default, or a model with the target's tokenizer", drafter_mapping("model"))
    table.add_row("a model with another tokenizer", drafter_mapping("model", translated=True))
    table.add_row("early-exit:N", early_exit_mapping("N"))
    table.add_row("ngram, prompt-lookup", drafter_mapping("ngram"))
    return table


@command("clear-cache")
def clear_cache_command() -> None:
    """Delete the cached default models, measured costs and compiled kernels (rebuilt on next use)."""
    where = paths.cache_root()
    freed = defaults.clear_cache()
    if freed:
        console.print(f"removed {_size(freed)} from {where}", highlight=False, soft_wrap=True, markup=False)
    else:
        console.print(f"nothing cached in {where}", highlight=False, soft_wrap=True, markup=False)


# ---------------------------------------------------------------------------- trace

# Imported here, not at the top, so this section stays self-contained while others edit above.


@command("trace")
def trace_command(
    path: Annotated[
        Path, typer.Argument(help="A trace file written by `specbench generate --trace-out`.", show_default=False)
    ],
) -> None:
    """Replay a saved step-by-step trace: every round, the summary and the marked text. Needs no models."""
    tracing.replay(tracefile.read_trace(path), console)


# ---------------------------------------------------------------------------- sweep, plot

# Imports for this section stay here so that it is self-contained; results and prompts use only
# the standard library, and the torch-heavy modules load inside the sweep command.


def summary_table(summaries: list, greedy: bool, title: str = "Measured") -> Table:
    """A table of summaries: one line per method/drafter/policy/gamma, best speedup first;
    speedup with its 95% bootstrap interval over prompts (tokens/s and the walltime model's
    speedup from the runs' own rounds are in runs.csv). Numbers never wrap; a long
    configuration name wraps, and a word too long for its column (model@NAME) folds."""
    runs = max((s.runs for s in summaries), default=0)
    table = Table(
        title=f"{title}: geometric means over {runs} prompt run(s) vs plain; 95% CI: bootstrap over prompts",
        title_justify="left",
    )
    table.add_column("config", overflow="fold")
    for name in ("γ", "accept", "len", "speedup", "95% CI"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    if greedy:
        table.add_column("output", no_wrap=True, min_width=8)

    def show(value, fmt):
        return "–" if value is None else format(value, fmt)

    for s in summaries:
        cells = [
            Text(_configuration(s)),
            show(s.gamma, "d"),
            show(s.acceptance_rate, ".0%"),
            show(s.mean_accepted_length, ".2f"),
            show(s.speedup, ".2f") + "×",
            _interval(s.speedup_lo, s.speedup_hi),
        ]
        if greedy:
            if s.method == sweep_results.BASELINE_METHOD:
                cells.append("baseline")
            elif s.differs:
                cells.append(f"[bold red]DIFFERS {s.differs}/{s.checked}[/]")
            else:
                cells.append("same" if s.checked else "–")
        table.add_row(*cells)
    return table


def _interval(lo, hi) -> str:
    return "–" if lo is None or hi is None else f"{lo:.2f}–{hi:.2f}"


def predicted_table(frame, shares) -> Table:
    """Every drafter x policy at its best predicted gamma over all prompts, with the
    acceptance and speedup intervals, and its share of its oracle's gain."""
    table = Table(
        title="Predicted on every prompt: each drafter/policy at its best gamma; oracle = knew every run length",
        title_justify="left",
    )
    table.add_column("configuration", overflow="fold")  # a long model@NAME folds, never cut
    for name in ("best γ", "accept", "len", "speedup", "95% CI", "of oracle"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    share = {(r["drafter"], r["policy"], r["gamma"]): r["share"] for r in shares.to_dict("records")}
    for _, row in frame.iterrows():
        key = (row["drafter"], row["policy"], row["gamma"])
        cells = [
            Text(f"{row['drafter']} {row['policy']}"),
            f"{int(row['gamma'])}",
            _pct(row["acceptance_rate"]),
            _num(row["mean_accepted_length"]),
            _num(row["speedup"]) + "×",
            _interval(_real(row["speedup_lo"]), _real(row["speedup_hi"])),
            _share(share.get(key)),
        ]
        table.add_row(*cells)
    return table


def prediction_table(check) -> Table:
    """Each measured point: predicted vs measured target forwards and speedup (means over its
    prompts), and how many prompts' forwards matched exactly / speedups within 10%. Narrow
    enough for an 80-column terminal or log."""
    title = "Prediction vs measurement at each measured point (n: runs over prompts and repeats; fwd: target forwards, mean; pred, meas: speedup)"
    table = Table(title=title, title_justify="left")
    table.add_column("configuration", overflow="fold")  # a long model@NAME folds, never cut
    for name in ("γ", "n", "fwd pred", "fwd meas", "equal", "pred", "meas", "≤10%"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    grouped = check.groupby(sweep_results.CHECK_GROUP, sort=False)
    for (drafter, policy, gamma, _t), group in grouped:
        within = (group["speedup_error"].abs() <= 0.10).mean()
        table.add_row(
            Text(f"{drafter} {policy}"),
            f"{int(gamma)}",
            str(len(group)),
            _num(group["predicted_forwards"].mean(), ".1f"),
            _num(group["measured_forwards"].mean(), ".1f"),
            _pct(group["forwards_equal"].mean()),
            _num(sweep_results.geometric_mean(group["predicted_speedup"])) + "×",
            _num(sweep_results.geometric_mean(group["measured_speedup"])) + "×",
            _pct(within),
        )
    return table


def _real(value):
    return None if value is None or value != value else float(value)


def _num(value, fmt: str = ".2f") -> str:
    value = _real(value)
    return "–" if value is None else format(value, fmt)


def _pct(value) -> str:
    value = _real(value)
    return "–" if value is None else f"{value:.0%}"


def _share(value) -> str:
    """A share of the oracle's gain; a policy slower than plain has none (its negative
    ratio to a small gain would read as a size)."""
    value = _real(value)
    return "< 0%" if value is not None and value < 0 else _pct(value)


def _configuration(summary) -> str:
    """e.g. "specbench model cost", "hf-assisted fixed", "hf-early-exit early-exit:2
    defaults", "plain"."""
    if summary.method.startswith("hf-"):  # hf-assisted and hf-universal draft with the drafter model
        names = {"hf-defaults": "defaults", "hf-defaults-stock-kernels": "defaults, stock kernels"}
        drafter = "" if summary.drafter == "model" else f"{summary.drafter} "
        return f"{summary.method} {drafter}" + names.get(summary.policy, summary.policy)
    return " ".join(part for part in (summary.method, summary.drafter, summary.policy) if part)


def _sweep_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}", style="progress.description", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def _run_label(run) -> str:
    setting = " ".join(p for p in (run.drafter, run.policy, f"γ={run.gamma}" if run.gamma else "") if p)
    return f"{run.method} {setting} · {run.prompt.id}".replace("  ", " ")


@command("sweep")
def sweep_command(
    gamma: Annotated[str, typer.Option("--gamma", help="Draft lengths: 4, a range 1..8, or a list 1,2,4.")] = "1..4",
    drafter: Annotated[
        list[str] | None,
        typer.Option(
            "--drafter",
            help="Drafter to compare (repeat for several): model, model+lookup, ngram, prompt-lookup, early-exit:N; default: model.",
            show_default=False,
        ),
    ] = None,
    gamma_policy: Annotated[
        list[str] | None,
        typer.Option(
            "--gamma-policy", help="Gamma policy to compare (repeat for several); default: fixed.", show_default=False
        ),
    ] = None,
    target: Annotated[
        str, typer.Option("--target", help="Target model: default, a local folder, a .gguf file or a cached hub id.")
    ] = "default",
    drafter_model: Annotated[
        list[str] | None,
        typer.Option(
            "--drafter-model",
            help="Drafter model for the model drafter and hf-assisted (a model spec, any tokenizer, or none); repeat to compare several in one sweep (labels model@NAME).",
            show_default=False,
        ),
    ] = None,
    prompts: Annotated[
        str,
        typer.Option(
            "--prompts",
            help='Prompt set: a name (default, quick) or a file: .jsonl (ours, Spec-Bench\'s, chat messages, {"prompt": ...}), a .json array of those, or .txt (a prompt a line).',
        ),
    ] = "default",
    category: Annotated[
        list[str] | None,
        typer.Option("--category", help="Only prompts of this category (repeat for several).", show_default=False),
    ] = None,
    temperature: Annotated[
        float, typer.Option("--temperature", help="0 is greedy (outputs are checked against plain decoding).")
    ] = 0.0,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Tokens per generation.")] = 128,
    repeats: Annotated[int, typer.Option("--repeats", help="Runs of every combination per prompt.")] = 1,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Results directory (default: results/sweep-DATE-TIME).", show_default=False),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue an interrupted sweep in --out, skipping the rows it has.")
    ] = False,
    hf_assisted: Annotated[
        bool,
        typer.Option(
            "--hf-assisted/--no-hf-assisted",
            help="Also run transformers' counterpart of each drafter: hf-assisted (hf-universal for another tokenizer), hf-early-exit, hf-prompt-lookup.",
        ),
    ] = True,
    hf_fixed: Annotated[
        bool,
        typer.Option(
            "--hf-fixed/--no-hf-fixed",
            help="Also time hf-assisted at each measured gamma, not only with its own defaults.",
        ),
    ] = False,
    measure: Annotated[
        str,
        typer.Option(
            "--measure",
            help="Which gammas get timed runs (every one is predicted): best (each drafter/policy's best predicted gamma), all, or a list such as 2,5.",
        ),
    ] = "best",
    measure_per_category: Annotated[
        int,
        typer.Option(
            "--measure-per-category",
            help="Time runs on the first N prompts of each category only (every prompt is predicted); 0: all prompts.",
        ),
    ] = 0,
    hf_stock: Annotated[
        bool,
        typer.Option(
            "--hf-stock/--no-hf-stock",
            help="Run hf-assisted's defaults once more on PyTorch's stock Linear kernels, as HF runs without specbench.",
        ),
    ] = False,
    steps: Annotated[bool, typer.Option("--steps", help="Also write every speculative round to steps.jsonl.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of repeat 0 (repeat r uses seed + r).")] = 0,
    timing_repeats: Annotated[
        int, typer.Option("--timing-repeats", help="Timed forwards per point of c and v(k) (the median counts).")
    ] = 5,
    costs_per_prompt: Annotated[
        bool,
        typer.Option(
            "--costs-per-prompt/--costs-once",
            help="Measure c and v(k) before each prompt's runs, on its context (seconds each), or once at the start.",
        ),
    ] = True,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Target weights dtype (default: the pair's).", show_default=False)
    ] = None,
    draft_dtype: Annotated[
        str | None,
        typer.Option("--draft-dtype", help="Drafter weights dtype (default: the pair's).", show_default=False),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, mps or auto.")] = "cpu",
    kernels: Annotated[
        str,
        typer.Option(
            "--kernels", help="auto (onednn when available), onednn or default; every method runs on the same kernels."
        ),
    ] = "auto",
    draft_vocab: Annotated[
        int,
        typer.Option(
            "--draft-vocab",
            help="specbench's model drafter scores only ids below this (plus the prompt's and EOS); 0 scores all. hf-assisted's drafter scores all.",
        ),
    ] = defaults.DEFAULT_DRAFT_VOCAB,
) -> None:
    """Benchmark drafters, gamma policies and gammas against plain decoding; write results/NAME."""
    from specbench import models
    from specbench.bench import plan
    from specbench.bench import sweep as bench

    # 1. everything that can be checked before minutes of model loading
    config = plan.SweepConfig(
        gammas=tuple(sweep_results.parse_gammas(gamma)),
        drafters=tuple(drafter or (sweep_results.MODEL_DRAFTER,)),
        policies=tuple(gamma_policy or (sweep_results.FIXED_POLICY,)),
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        seed=seed,
        hf_assisted=hf_assisted,
        hf_fixed=hf_fixed,
        hf_stock=hf_stock,
        measure=measure,
        measure_per_category=measure_per_category,
        steps=steps,
        timing_repeats=timing_repeats,
        costs_per_prompt=costs_per_prompt,
        kernels=kernels,
        draft_vocab=draft_vocab,
    )
    prompt_list = prompt_sets.load_prompts(prompts, category or ())
    out_dir = out or Path("results") / _datetime.now().strftime("sweep-%Y%m%d-%H%M%S")
    if not resume and (out_dir / sweep_results.RUNS_CSV).exists():
        raise SweepError(
            f"{out_dir / sweep_results.RUNS_CSV} already exists: pass --resume to continue that sweep, or choose another --out"
        )
    specs = list(dict.fromkeys(drafter_model or ["default"]))
    for spec in specs if len(specs) > 1 else ():
        if models.drafter_kind(spec) != "model":
            raise OptionError(
                f"--drafter-model {spec}: each of several drafter models must be a model (default, a folder, a .gguf file or a hub id)"
            )
    with _out_folder(out_dir):  # a bad --out fails now, not after loading the models
        # 2. the models, loaded as `generate` loads them (the drafters only when the sweep drafts with them)
        needed = plan.needs_drafter_model(config)
        why_no_hf = _why_no_hf_assisted(config, specs, drafter_model is not None, target) if needed else None
        if why_no_hf:
            needed = False
            err_console.print(f"[dim]hf-assisted: not run: {escape(why_no_hf)}[/]", highlight=False, soft_wrap=True)
        dtypes = {k: v for k, v in (("dtype", dtype), ("draft_dtype", draft_dtype)) if v}  # else the pair's defaults
        pair_config = models.PairConfig(
            target=target, drafter=specs[0] if needed else models.NONE, device=device, draft_vocab=draft_vocab, **dtypes
        )
        hint = "pick a --drafter-model with a tokenizer that shares text with the target's"
        pair = load_pair_with_progress(pair_config, mismatch_hint=hint)
        pair.use_kernels(kernels)
        drafters = _more_drafters(pair, pair_config, specs[1:] if needed else [], kernels, hint)
        config = _replace(config, **_drafter_settings(bench, pair, drafters, config.temperature))
        # 3. the sweep, then its table
        _run_sweep(bench, pair, prompt_list, config, out_dir, resume=resume, prompts_source=prompts, drafters=drafters)


def _why_no_hf_assisted(config, specs: list[str], named: bool, target: str) -> str | None:
    """Why a sweep whose drafters run no drafter model goes without hf-assisted (which would be
    the only one to draft with it), or None: --drafter-model none, or a target of the user's
    with no --drafter-model (the embedded drafter is the default target's partner)."""
    from specbench import models
    from specbench.bench import plan

    if plan.drafts_with_model(config):
        return None
    if specs == [models.NONE]:
        return "--drafter-model none"
    if not named and target != models.DEFAULT:
        return "no --drafter-model given for this target (the embedded drafter pairs with the default target)"
    return None


@contextmanager
def _out_folder(out_dir: Path) -> Iterator[Path]:
    """Make a sweep's --out folder before the models load (one line if it cannot be one), and
    remove it again if the command fails before writing anything there (a model that does
    not load, Ctrl-C while loading), with the parents it made: a failed start leaves no
    empty results folder behind."""
    made = [folder for folder in (out_dir, *out_dir.parents) if not folder.exists()]  # deepest first
    sweep_results.make_dir(out_dir, SweepError)
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
    from specbench import models

    if not specs:
        return {}
    models.quiet_transformers()
    with _progress_bars() as report:
        try:
            loaded = [
                (pair.drafter_model, pair.translated),
                *models.load_drafters(pair_config, pair.target, specs, kernels, report),
            ]
        except models.VocabMismatch as exc:
            raise models.VocabMismatch(f"{exc}; {hint}") from None
    named = {sweep_results.drafter_model_name(d.name): (d, translated) for d, translated in loaded}
    if len(named) < len(loaded):
        raise OptionError(
            f"two drafter models would share a name in labels ({', '.join(d.name for d, _ in loaded)}); give each once"
        )
    return named


def _drafter_settings(bench, pair, drafters: dict, temperature: float) -> dict:
    """SweepConfig's drafter_models, translated and hf_refuses for the loaded drafters: one
    unnamed model (the pair's), or several by name. A drafter model left without its
    hf-universal baseline is said in one line, with why."""
    models = _drafter_models(pair, drafters)
    translated = tuple(name for name, (_, is_translated) in models.items() if is_translated)
    refuses = []
    for name in translated:
        drafter = models[name][0]
        why = bench.why_no_hf_universal(
            pair.target.model, drafter.model, pair.tokenizer, drafter.tokenizer, temperature
        )
        if why:
            refuses.append(name)
            err_console.print(
                f"[dim]no hf-universal beside {escape(sweep_results.drafter_label(sweep_results.MODEL_DRAFTER, name))}: {escape(why)}[/]",
                highlight=False,
                soft_wrap=True,
            )
    settings = {"translated": translated, "hf_refuses": tuple(refuses)}
    return {"drafter_models": tuple(models), **settings} if drafters else settings


def _drafter_models(pair, drafters: dict) -> dict:
    """The sweep's drafter models by name, as (LoadedModel, translated): _more_drafters' for
    several, else the pair's one model under the name "" ({} when it drafts with none)."""
    if drafters:
        return drafters
    return {"": (pair.drafter_model, pair.translated)} if pair.drafter_model is not None else {}


def _run_sweep(
    bench, pair, prompt_list, config, out_dir: Path, *, resume: bool, prompts_source: str, drafters: dict | None = None
) -> None:
    """Run the sweep on a loaded pair under a progress bar; Ctrl-C keeps the finished rows;
    then the table. drafters: _more_drafters', for a sweep of several drafter models."""
    models = _drafter_models(pair, drafters)
    model = {name: bench.DrafterModel(d.model, d.tokenizer if t else None) for name, (d, t) in models.items()}
    names = {name: d.name for name, (d, _) in models.items()}
    written = 0
    with _sweep_progress() as progress:
        task = progress.add_task("starting", total=None)

        def on_row(run, row) -> None:
            nonlocal written
            written += 1
            progress.update(task, advance=1, description=_run_label(run))

        try:
            result = bench.sweep(
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
                command="specbench " + " ".join(_sys.argv[1:]),
                eos_ids=pair.eos_token_ids,
                on_status=lambda text: progress.update(task, description=text),
                on_start=lambda total, skipped: progress.update(task, total=total, completed=skipped),
                on_row=on_row,
            )
        except KeyboardInterrupt:
            progress.stop()
            err_console.print(
                f"interrupted: {written} new row(s) kept in {out_dir / sweep_results.RUNS_CSV}; add --resume to finish the sweep",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
            raise typer.Exit(130) from None
    render_sweep_end(out_dir, result, config)


def render_predicted(runs) -> None:
    """The predicted table of a results directory's rows (load_runs), if it has predictions."""
    frame = sweep_results.summary_frame(runs)
    predicted = frame[(frame["source"] == "predicted") & (frame["method"] == "specbench")]
    best = sweep_results.best_gammas(frame)
    chosen = predicted[
        [
            best.get((d, p)) == g or p == "oracle"
            for d, p, g in zip(predicted["drafter"], predicted["policy"], predicted["gamma"])
        ]
    ]
    if len(chosen):
        console.print(predicted_table(chosen, sweep_results.oracle_share(frame)))


def render_sweep_end(out_dir: Path, result, config) -> None:
    """The tables after a sweep: predicted (best gamma per configuration, share of the
    oracle), measured, and prediction against measurement at each measured point."""
    runs = sweep_results.load_runs(out_dir)
    render_predicted(runs)
    summaries = [s for s in sweep_results.summarize(runs) if s.source == "measured"]
    greedy = config.temperature == 0
    console.print(summary_table(summaries, greedy))
    check = sweep_results.prediction_check(runs)
    if len(check):
        console.print(prediction_table(check))
        accuracy = sweep_results.prediction_accuracy(check)
        console.print(
            f"over {accuracy['n']} measured run(s) (configuration x prompt x repeat): target forwards predicted exactly for {accuracy['forwards_equal_share']:.0%}, speedup within 10% for "
            f"{accuracy['within_10pct_share']:.0%}{_bias_clause(accuracy)}; {_repeats_clause(accuracy)}geometric means over prompts within 10% for "
            f"{accuracy['configurations_within_10pct_share']:.0%} of {accuracy['configurations']} configuration(s)",
            highlight=False,
            soft_wrap=True,
        )
        noise = sweep_results.plain_repeatability(runs)
        if noise["n"]:
            console.print(
                f"noise floor: plain decoding, timed twice per prompt (phase 1, then beside the measured runs), agreed within 10% "
                f"on {round(noise['within_10pct_share'] * noise['n'])} of {noise['n']}; median difference {noise['median_difference']:.0%}",
                highlight=False,
                soft_wrap=True,
            )
    for line in _costs_lines(result.costs, result.pooled):
        console.print(line, highlight=False, soft_wrap=True)
    if result.late:
        err_console.print(
            f"[bold yellow]warning:[/] {result.late} measured run(s) joined blocks timed before this resume: their speedups compare with those blocks' earlier plain runs",
            highlight=False,
            soft_wrap=True,
        )
    differing = [s.label + (f" γ={s.gamma}" if s.gamma else "") for s in summaries if s.differs]
    if greedy and differing:
        err_console.print(
            f"[bold yellow]warning:[/] greedy output differs from plain decoding for: {escape(', '.join(differing))}",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"{result.written} row(s) written, {result.skipped} already there: {out_dir}  (charts: specbench plot {out_dir})",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


def _bias_clause(accuracy: dict) -> str:
    """The runs' median error (results.prediction_accuracy), where some run had both speedups."""
    if accuracy["median_error"] is None:
        return ""
    return f" (median error {accuracy['median_error']:+.1%}, predicted / measured - 1)"


def _repeats_clause(accuracy: dict) -> str:
    """The per-point accuracy over repeats (results.prediction_accuracy), where points have several."""
    if accuracy["repeats_per_point"] < 2:
        return ""
    return f"means over up to {accuracy['repeats_per_point']} repeats within 10% for {accuracy['points_within_10pct_share']:.0%} of {accuracy['points']} point(s); "


def _costs_lines(measured: dict, pooled: dict) -> list[str]:
    """What a sweep priced with, per drafter model (sweep.pricing_line, as it printed when
    pricing began), and the range its measurements spanned when it pooled several."""
    from specbench.bench.sweep import pricing_line

    lines = []
    for name, (costs, count) in pooled.items():
        lines.append(pricing_line(name, costs, count))
        keys = [key for key in measured if sweep_results.label_parts(key)[1] == (name or "")]
        blocks = [measured[key] for key in keys]
        cs = [m.c for m in blocks if m.c is not None]
        if len(blocks) > 1:
            steps = sorted(m.target_step_seconds * 1000 for m in blocks)
            spread = f"c {min(cs):.3f} to {max(cs):.3f}, " if cs else ""
            digits = 0 if steps[0] >= 10 else 2  # a tiny model's steps take under a millisecond
            prompts = {
                sweep_results.label_parts(key)[0].rsplit("/", 1)[0] for key in keys
            }  # keys are PROMPT/REPEAT[@NAME]
            each = "one per prompt" if len(prompts) == len(blocks) else "one per prompt and repeat"
            lines.append(
                f"  its {len(blocks)} measurements, {each}: {spread}target step {steps[0]:.{digits}f} to {steps[-1]:.{digits}f} ms"
            )
    return lines


# ---------------------------------------------------------------------------- costs, predict


@command("costs")
def costs_command(
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="The costs file to write (JSON), for `specbench predict --costs`.", show_default=False
        ),
    ],
    target: Annotated[
        str, typer.Option("--target", help="Target model: default, a local folder, a .gguf file or a cached hub id.")
    ] = "default",
    drafter_model: Annotated[
        str,
        typer.Option(
            "--drafter-model", help="Drafter model (a model spec), or none to measure the target's v(k) alone."
        ),
    ] = "default",
    random_weights: Annotated[
        bool,
        typer.Option(
            "--random-weights",
            help="Build both models from their configs with random weights (no weights read; a folder holding only config.json will do): the costs of shapes you have not downloaded.",
        ),
    ] = False,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Target weights dtype (default: the pair's).", show_default=False)
    ] = None,
    draft_dtype: Annotated[
        str | None,
        typer.Option("--draft-dtype", help="Drafter weights dtype (default: the pair's).", show_default=False),
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, mps or auto.")] = "cpu",
    kernels: Annotated[
        str, typer.Option("--kernels", help="auto (onednn when available), onednn or default.")
    ] = "auto",
    draft_vocab: Annotated[
        int,
        typer.Option("--draft-vocab", help="The model drafter scores only ids below this (plus EOS); 0 scores all."),
    ] = defaults.DEFAULT_DRAFT_VOCAB,
    temperature: Annotated[
        float,
        typer.Option(
            "--temperature",
            help="The sampling settings whose work on the logits each forward is timed with (0: greedy).",
        ),
    ] = 0.0,
    top_k: Annotated[int, typer.Option("--top-k", help="As generate's.")] = 0,
    top_p: Annotated[float, typer.Option("--top-p", help="As generate's.")] = 1.0,
    context_tokens: Annotated[
        int,
        typer.Option(
            "--context-tokens",
            help="Tokens in the cache the forwards are timed over (a sweep times each prompt's: prompt plus half the new tokens).",
        ),
    ] = 160,
    timing_repeats: Annotated[
        int, typer.Option("--timing-repeats", help="Timed forwards per point of c, v(k) and u(n) (the median counts).")
    ] = 5,
) -> None:
    """Measure what forwards cost on this machine (c, v(k), u(n), the plain step, the loop) for a pair, as a sweep does, and write them to a file."""
    from specbench import models
    from specbench.bench.costs import measure_costs, shared_limit, timing_context
    from specbench.bench.meta import costs_meta, model_meta
    from specbench.bench.sweep import costs_summary

    # 1. everything that can be checked before minutes of model loading
    sampling = models.generation_config(max_new_tokens=1, temperature=temperature, top_k=top_k, top_p=top_p).sampling
    if context_tokens < 1 or timing_repeats < 1:
        raise OptionError("--context-tokens and --timing-repeats must be >= 1")
    if models.drafter_kind(drafter_model) not in ("model", models.NONE):
        raise OptionError(
            f"--drafter-model {drafter_model}: give a model (default, a folder, a .gguf file or a hub id) or none"
        )
    dtypes = {k: v for k, v in (("dtype", dtype), ("draft_dtype", draft_dtype)) if v}  # else the pair's defaults
    pair_config = models.PairConfig(
        target=target,
        drafter=drafter_model,
        device=device,
        draft_vocab=draft_vocab,
        random_weights=random_weights,
        **dtypes,
    )
    models.validate_pair_config(pair_config)
    models.check_kernels(kernels)
    if out.is_dir():
        raise ResultsError(f"--out {out} is a folder; give the costs file's name (e.g. costs.json)")
    sweep_results.make_dir(out.parent)
    # 2. the pair, then its costs on a context of context_tokens ids (which ids does not change what a forward costs)
    pair = load_pair_with_progress(pair_config, mismatch_hint="pick a drafter model with the target's vocabulary")
    pair.use_kernels(kernels)
    target_model, drafter = pair.target.model, pair.drafting_model
    context = models.timing_ids(
        timing_context(list(range(context_tokens)), 0, shared_limit(target_model, drafter)), target_model, drafter
    )
    with err_console.status("timing forwards of both models"):
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
    recorded = costs_meta(costs, named, settings, command="specbench " + " ".join(_sys.argv[1:]))
    try:
        out.write_text(_json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"cannot write {out}: {exc.strerror or exc}") from None
    console.print(costs_summary(costs), highlight=False, soft_wrap=True, markup=False)
    console.print(
        f"wrote {out}; price a sweep with it: specbench predict RESULTS --costs {out} --out DIR",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


@command("predict")
def predict_command(
    directory: Annotated[
        Path, typer.Argument(help="A results directory written by `specbench sweep`.", show_default=False)
    ],
    out: Annotated[
        Path,
        typer.Option("--out", help="The results directory to write (charts: specbench plot DIR).", show_default=False),
    ],
    costs: Annotated[
        Path | None,
        typer.Option(
            "--costs",
            help="A costs file (`specbench costs --out`) or another sweep's meta.json; default: the sweep's own costs.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Price a sweep's predictions again with other costs (another machine's, other shapes'). Needs no models."""
    from specbench.bench.reprice import reprice
    from specbench.bench.sweep import costs_summary

    result = reprice(directory, out, costs, command="specbench " + " ".join(_sys.argv[1:]))
    render_predicted(sweep_results.load_runs(out))
    which = f"the costs in {result.costs_file}" if result.costs_file is not None else "the sweep's own costs"
    console.print(
        f"{result.rows} predicted row(s) priced with {which}: {costs_summary(result.costs)}",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )
    if result.kept_drafts:
        err_console.print(
            f"[dim]{result.kept_drafts} row(s) of the cost policy and the oracle keep the drafts the sweep's costs chose: only their price changed[/]",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"wrote {out}  (charts: specbench plot {out})", highlight=False, soft_wrap=True, markup=False)


@command("plot")
def plot_command(
    directory: Annotated[
        Path, typer.Argument(help="A results directory written by `specbench sweep`.", show_default=False)
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Where to write the PNGs (default: the results directory).", show_default=False),
    ] = None,
) -> None:
    """Draw the charts of a sweep (PNG files). Needs no models."""
    from specbench.bench import plot

    paths = plot.plot_results(directory, out)
    if not paths:
        raise ResultsError(
            f"nothing to chart in {directory} yet: only the first plain runs are there (an interrupted sweep: --resume it)"
        )
    console.print(f"wrote {len(paths)} charts:", highlight=False)
    for path in paths:
        console.print(f"  {path}", highlight=False, soft_wrap=True, markup=False)


if __name__ == "__main__":
    app()
