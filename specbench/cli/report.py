"""What a results directory says in the terminal: the tables and the closing lines of a sweep.

The numbers come from the bench modules (summary.py, accuracy.py, runs_file.py, which load
pandas on first use); this module only lays them out: the measured summaries, each
drafter/policy at its best predicted gamma, the predictions checked against the measurements,
and what the sweep priced its predictions with.
`sweep` ends with render_sweep_end, `predict` with render_predicted.
"""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specbench.bench.accuracy import CHECK_GROUP, plain_repeatability, prediction_accuracy, prediction_check
from specbench.bench.labels import BASELINE_METHOD, label_parts
from specbench.bench.meta_file import read_meta
from specbench.bench.runs_file import load_runs
from specbench.bench.summary import best_gammas, geometric_mean, oracle_share, summarize, summary_frame
from specbench.cli import ui


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
            if s.method == BASELINE_METHOD:
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
    title = (
        "Prediction vs measurement at each measured point (n: runs over prompts and repeats; fwd: target"
        " forwards, mean; pred, meas: speedup)"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("configuration", overflow="fold")  # a long model@NAME folds, never cut
    for name in ("γ", "n", "fwd pred", "fwd meas", "equal", "pred", "meas", "≤10%"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    grouped = check.groupby(CHECK_GROUP, sort=False)
    for (drafter, policy, gamma, _t), group in grouped:
        within = (group["speedup_error"].abs() <= 0.10).mean()
        table.add_row(
            Text(f"{drafter} {policy}"),
            f"{int(gamma)}",
            str(len(group)),
            _num(group["predicted_forwards"].mean(), ".1f"),
            _num(group["measured_forwards"].mean(), ".1f"),
            _pct(group["forwards_equal"].mean()),
            _num(geometric_mean(group["predicted_speedup"])) + "×",
            _num(geometric_mean(group["measured_speedup"])) + "×",
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


def render_predicted(runs) -> None:
    """The predicted table of a results directory's rows (load_runs), if it has predictions."""
    frame = summary_frame(runs)
    predicted = frame[(frame["source"] == "predicted") & (frame["method"] == "specbench")]
    best = best_gammas(frame)
    chosen = predicted[
        [
            best.get((d, p)) == g or p == "oracle"
            for d, p, g in zip(predicted["drafter"], predicted["policy"], predicted["gamma"])
        ]
    ]
    if len(chosen):
        ui.console.print(predicted_table(chosen, oracle_share(frame)))


def render_tables(runs, greedy: bool, title: str = "Measured") -> list:
    """A results directory's tables (load_runs): predicted, if it has predictions, and the
    measured summary; returns the measured Summary rows."""
    render_predicted(runs)
    summaries = [s for s in summarize(runs) if s.source == "measured"]
    ui.console.print(summary_table(summaries, greedy, title))
    return summaries


def render_sweep_end(out_dir: Path, result, config) -> None:
    """The tables after a sweep: predicted (best gamma per configuration, share of the
    oracle), measured, and prediction against measurement at each measured point; then what
    it priced with, its warnings, and where the rows went."""
    runs = load_runs(out_dir)
    greedy = config.temperature == 0
    summaries = render_tables(runs, greedy)
    check = prediction_check(runs)
    if len(check):
        ui.console.print(prediction_table(check))
        for line in _accuracy_lines(runs, check):
            ui.say(line, markup=True)
        prices = (read_meta(out_dir).get("checks") or {}).get("prices") or {}
        if prices.get("n"):
            ui.say(price_line(prices))
    for line in _costs_lines(result.costs, result.pooled):
        ui.say(line, markup=True)
    if result.late:
        ui.say(
            f"[bold yellow]warning:[/] {result.late} measured run(s) joined blocks timed before this resume: their"
            " speedups compare with those blocks' earlier plain runs",
            markup=True,
            stderr=True,
        )
    differing = [s.label + (f" γ={s.gamma}" if s.gamma else "") for s in summaries if s.differs]
    if greedy and differing:
        ui.say(
            f"[bold yellow]warning:[/] greedy output differs from plain decoding for: {escape(', '.join(differing))}",
            markup=True,
            stderr=True,
        )
    ui.say(
        f"{result.written} row(s) written, {result.skipped} already there: {out_dir}"
        f"  (charts: specbench plot {out_dir})"
    )


def _accuracy_lines(runs, check) -> list[str]:
    """How well the predictions matched the measured runs, and the noise floor of the timing
    (plain decoding timed twice per prompt), where the sweep has both."""
    accuracy = prediction_accuracy(check)
    lines = [
        f"over {accuracy['n']} measured run(s) (configuration x prompt x repeat): target forwards predicted exactly"
        f" for {accuracy['forwards_equal_share']:.0%}, speedup within 10% for {accuracy['within_10pct_share']:.0%}"
        f"{_bias_clause(accuracy)}; {_repeats_clause(accuracy)}geometric means over prompts within 10% for"
        f" {accuracy['configurations_within_10pct_share']:.0%} of {accuracy['configurations']} configuration(s)"
    ]
    noise = plain_repeatability(runs)
    if noise["n"]:
        lines.append(
            "noise floor: plain decoding, timed twice per prompt (phase 1, then beside the measured runs), agreed"
            f" within 10% on {round(noise['within_10pct_share'] * noise['n'])} of {noise['n']}; median difference"
            f" {noise['median_difference']:.0%}"
        )
    return lines


def price_line(prices: dict) -> str:
    """Where the measured runs' time went against the costs that priced their predictions
    (reprice.sweep_price_check), one line: what separates a measured speedup from its
    prediction."""
    parts = [
        f"{name} {prices[key]:.2f}x"
        for key, name in (("plain", "a plain step"), ("draft", "drafter forwards"), ("verify", "verify passes"))
        if prices.get(key) is not None
    ]
    loop = ""
    if prices.get("loop_ms") is not None and prices.get("loop_priced_ms") is not None:
        loop = f", the loop {prices['loop_ms']:.2f} ms a round (priced {prices['loop_priced_ms']:.2f})"
    return (
        f"time against its price (medians over {prices['n']} run(s) whose rounds were predicted exactly; above 1x"
        f" slower than priced): {', '.join(parts)}{loop}"
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
    return (
        f"means over up to {accuracy['repeats_per_point']} repeats within 10% for"
        f" {accuracy['points_within_10pct_share']:.0%} of {accuracy['points']} point(s); "
    )


def _costs_lines(measured: dict, pooled: dict) -> list[str]:
    """What a sweep priced with, per drafter model (sweep.pricing_line, as it printed when
    pricing began), and the range its measurements spanned when it pooled several."""
    from specbench.bench.pricing import pricing_line

    lines = []
    for name, (costs, count) in pooled.items():
        lines.append(pricing_line(name, costs, count))
        keys = [key for key in measured if label_parts(key)[1] == (name or "")]
        blocks = [measured[key] for key in keys]
        cs = [m.c for m in blocks if m.c is not None]
        if len(blocks) > 1:
            steps = sorted(m.target_step_seconds * 1000 for m in blocks)
            spread = f"c {min(cs):.3f} to {max(cs):.3f}, " if cs else ""
            digits = 0 if steps[0] >= 10 else 2  # a tiny model's steps take under a millisecond
            prompts = {label_parts(key)[0].rsplit("/", 1)[0] for key in keys}  # PROMPT/REPEAT[@NAME]
            each = "one per prompt" if len(prompts) == len(blocks) else "one per prompt and repeat"
            lines.append(
                f"  its {len(blocks)} measurements, {each}: {spread}target step {steps[0]:.{digits}f} to"
                f" {steps[-1]:.{digits}f} ms"
            )
    return lines
