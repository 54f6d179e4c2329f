"""The charts of a sweep's measured rows (CHARTS in plot.py): curves over gamma, the
theory fitted to fixed-gamma runs, the speedup per prompt category and each run against the
walltime model.

A sweep without predictions gets them all; one with predictions only those its
PREDICTION_CHARTS do not replace. Each takes (summary table, runs, meta, path, subtitle),
so plot.py draws them in a loop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbench.bench.chart_data import (
    baseline_tokens_per_second,
    category_bars,
    curves,
    fitted_alpha,
    gamma_span,
    model_points,
    theory_groups,
)
from specbench.bench.chart_figure import GAMMA_AXIS, draw_curves, finish, gamma_axis, new_figure
from specbench.bench.labels import MODEL_DRAFTER, label_parts
from specbench.bench.meta_file import plain_and_loop, verify_costs
from specbench.bench.summary import geometric_mean
from specbench.core.stats import expected_tokens_per_round, predicted_speedup, verify_cost_at


def chart_acceptance(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = new_figure("Acceptance rate vs gamma", subtitle, GAMMA_AXIS, "acceptance rate (accepted / drafted)")
    draw_curves(ax, curves(table, "acceptance_rate"))
    ax.set_ylim(0, 1.05)
    gamma_axis(ax, gamma_span(runs))
    return finish(fig, ax, path)


def chart_tokens_per_second(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = new_figure("Decoding speed vs gamma", subtitle, GAMMA_AXIS, "tokens / second (after the first token)")
    draw_curves(ax, curves(table, "tokens_per_second"))
    base = baseline_tokens_per_second(runs)
    if base:
        ax.axhline(base, color="black", linestyle="--", linewidth=1.2, label=f"plain decoding ({base:.2f} tok/s)")
    ax.set_ylim(bottom=0)
    gamma_axis(ax, gamma_span(runs))
    return finish(fig, ax, path)


def chart_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = new_figure(
        "Speedup over plain decoding vs gamma", subtitle, GAMMA_AXIS, "speedup (geometric mean over prompts)"
    )
    draw_curves(ax, curves(table, "speedup"))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="plain decoding (1.0)")
    gamma_axis(ax, gamma_span(runs))
    return finish(fig, ax, path)


def chart_accepted_length(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = new_figure(
        "Mean accepted length vs gamma, measured and theory", subtitle, GAMMA_AXIS, "tokens per target forward"
    )
    measured = curves(table, "mean_accepted_length")
    colors = {}
    for label, points in measured.items():
        xs, ys = zip(*points)
        colors[label] = ax.plot(xs, ys, marker="o", label=f"{label} (measured)")[0].get_color()
    for label, group in theory_groups(runs).items():
        alpha, gammas = fitted_alpha(group), gamma_span(group)
        if alpha is None or not gammas:
            continue
        theory = [expected_tokens_per_round(alpha, g) for g in gammas]
        ax.plot(
            gammas,
            theory,
            linestyle="--",
            marker="x",
            color=colors.get(label),
            label=f"{label}: (1-a^(γ+1))/(1-a), a={alpha:.2f}",
        )
    ax.set_ylim(bottom=0)
    gamma_axis(ax, gamma_span(runs))
    return finish(fig, ax, path)


def chart_predicted_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    costs, (plain, loop) = verify_costs(meta), plain_and_loop(meta)
    note = "v(γ+1) measured" if costs else "v = 1 (not measured)"
    fig, ax = new_figure(
        "Predicted vs measured speedup (model drafter, fixed gamma)",
        subtitle,
        GAMMA_AXIS,
        "speedup over plain decoding",
    )
    measured = curves(table, "speedup")
    for label, group in theory_groups(runs).items():
        c = group["c"].mean()
        alpha, gammas = fitted_alpha(group), gamma_span(group)
        if (
            label_parts(group["drafter"].iloc[0])[0] != MODEL_DRAFTER
            or pd.isna(c)
            or alpha is None
            or label not in measured
        ):
            continue
        xs, ys = zip(*measured[label])
        color = ax.plot(xs, ys, marker="o", label=f"{label} (measured)")[0].get_color()
        predicted = [
            plain * predicted_speedup(alpha, g, c, (verify_cost_at(costs, g + 1) or 1.0) + loop) for g in gammas
        ]
        ax.plot(
            gammas,
            predicted,
            linestyle="--",
            marker="x",
            color=color,
            label=f"{label} (predicted: a={alpha:.2f}, c={c:.2f}, {note})",
        )
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1, label="plain decoding (1.0)")
    gamma_axis(ax, gamma_span(runs))
    return finish(fig, ax, path)


def chart_category_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    bars, note = category_bars(runs, table)
    categories = list(bars.columns)
    fig, ax = new_figure(
        f"Speedup by prompt category (each configuration at its best gamma){note}",
        subtitle,
        "prompt category",
        "speedup (geometric mean over prompts)",
    )
    width = 0.8 / max(1, len(bars))
    for i, (label, values) in enumerate(bars.iterrows()):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(categories))]
        ax.bar(xs, values.fillna(0).tolist(), width=width, label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="plain decoding (1.0)")
    tallest = float(np.nanmax([1.0, *bars.to_numpy().ravel()]))
    ax.set_ylim(0, tallest * 1.3)  # room for the legend above the bars
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=20, ha="right")
    return finish(fig, ax, path, beside=True)


def chart_model_vs_measured(table, runs, meta, path: Path, subtitle: str) -> Path:
    """Each run's measured speedup against the walltime model of its own rounds
    (sweep.predicted_speedup: the sweep's c and v(k) in target steps t(1)); the band is +-10%."""
    fig, ax = new_figure(
        "Measured speedup vs the walltime model, per run",
        subtitle,
        "modelled: tokens x plain step / sum over rounds of (k c + v(k+1) + loop), in target steps t(1)",
        "measured speedup over plain decoding",
    )
    points = model_points(runs)
    for label, pairs in points.items():
        xs, ys = zip(*pairs)
        ratio = geometric_mean([y / x for x, y in pairs])
        ax.scatter(xs, ys, label=f"{label} (measured / modelled {ratio:.2f})", s=22)
    if points:
        top = max(max(max(p) for p in pairs) for pairs in points.values()) * 1.05
        line = [0, top]
        ax.plot(line, line, color="black", linewidth=1, label="measured = modelled")
        ax.fill_between(
            line, [0.9 * v for v in line], [1.1 * v for v in line], color="0.5", alpha=0.15, label="within 10%"
        )
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
    return finish(fig, ax, path)
