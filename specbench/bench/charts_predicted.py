"""The charts of a sweep with predictions (PREDICTION_CHARTS): metrics over gamma with
the predicted lines, their bootstrap bands and the measured points on them; the references
on the speedup chart (plain, HF's runs, each drafter's oracle); acceptance by draft
position; and the speedup per category at each configuration's best predicted gamma.

Predicted and measured rows of one configuration share a colour and never a curve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specbench.bench.chart_data import category_series, configurations, gamma_span, position_label, position_rows
from specbench.bench.chart_figure import GAMMA_AXIS, finish, gamma_axis, new_figure
from specbench.bench.labels import MEASURED, MODEL_DRAFTER, ORACLE_POLICY, PREDICTED, label_parts
from specbench.bench.positions import position_acceptance
from specbench.bench.summary import geometric_mean, summary_frame

PREDICTION_CHARTS = (
    "acceptance_vs_gamma.png",
    "accepted_length_vs_gamma.png",
    "speedup_vs_gamma.png",
    "position_acceptance.png",
    "position_acceptance_by_category.png",
    "category_speedup_predicted.png",
)  # drawn when a sweep has predicted rows (every sweep since predictions)


def prediction_charts(every: pd.DataFrame, positions: pd.DataFrame, out_dir: Path, subtitle: str) -> list[Path]:
    """The PREDICTION_CHARTS of a sweep with predictions (all its rows, every source), in that
    order; the POSITION_CHARTS are left out when there are no positions."""
    table = summary_frame(every)
    acceptance, length, speedup, by_position, by_category, category_speedup = (
        out_dir / name for name in PREDICTION_CHARTS
    )
    paths = [
        chart_gamma_metric(
            table,
            "acceptance_rate",
            "acceptance_lo",
            "acceptance_hi",
            "Acceptance rate vs gamma",
            "accepted / drafted (pooled over tokens)",
            acceptance,
            subtitle,
            ylim=(0, 1.02),
        ),
        chart_gamma_metric(
            table,
            "mean_accepted_length",
            None,
            None,
            "Tokens per target forward vs gamma",
            "mean accepted length (accepted drafts + 1)",
            length,
            subtitle,
            ylim=(0, None),
        ),
        chart_speedup_vs_gamma(table, speedup, subtitle),
    ]
    if len(positions):
        paths += [
            chart_positions(positions, by_position, subtitle),
            chart_positions_by_category(positions, by_category, subtitle),
        ]
    paths.append(chart_category_predicted(table, every, category_speedup, subtitle))
    return paths


def chart_gamma_metric(
    table,
    metric: str,
    lo: str | None,
    hi: str | None,
    title: str,
    ylabel: str,
    path: Path,
    subtitle: str,
    references: bool = False,
    ylim=(None, None),
) -> Path:
    """metric vs gamma: one predicted line per drafter x policy (its 95% bootstrap band over
    prompts shaded), the measured points of the same configuration on it (with intervals)."""
    fig, ax = new_figure(title, subtitle, GAMMA_AXIS, ylabel)
    colors = {}
    for i, (drafter, policy) in enumerate(configurations(table)):
        color = colors.setdefault((drafter, policy), f"C{i % 10}")
        rows = table[
            (table["method"] == "specbench")
            & (table["drafter"] == drafter)
            & (table["policy"] == policy)
            & table[metric].notna()
        ]
        predicted = rows[rows["source"] == PREDICTED].sort_values("gamma")
        if len(predicted):
            dot = "D" if len(predicted) == 1 else None  # a line through one point draws nothing
            ax.plot(
                predicted["gamma"],
                predicted[metric],
                color=color,
                marker=dot,
                markersize=4,
                label=f"{drafter} / {policy} (predicted)",
            )
            if lo and predicted[lo].notna().any():
                ax.fill_between(predicted["gamma"], predicted[lo], predicted[hi], color=color, alpha=0.15)
        measured = rows[rows["source"] == MEASURED].sort_values("gamma")
        if len(measured):
            errors = None
            if lo:  # no bar where a point has no interval (fewer than 2 prompts)
                errors = [
                    (measured[metric] - measured[lo]).clip(lower=0).fillna(0),
                    (measured[hi] - measured[metric]).clip(lower=0).fillna(0),
                ]
            ax.errorbar(
                measured["gamma"],
                measured[metric],
                yerr=errors,
                fmt="o",
                color=color,
                capsize=3,
                label=f"{drafter} / {policy} (measured)",
            )
    if references:
        _reference_lines(ax, table)
    ax.set_ylim(*ylim)
    gamma_axis(ax, gamma_span(table[(table["method"] == "specbench") & (table["policy"] != ORACLE_POLICY)]))
    return finish(fig, ax, path)


def chart_speedup_vs_gamma(table, path: Path, subtitle: str) -> Path:
    """Geometric-mean speedup vs gamma, predicted lines and measured points as in
    chart_gamma_metric; plain = 1, HF's runs with their own defaults (measured) and each
    drafter's oracle (predicted, drafting exactly what is accepted) as horizontal lines."""
    return chart_gamma_metric(
        table,
        "speedup",
        "speedup_lo",
        "speedup_hi",
        "Speedup over plain decoding vs gamma",
        "speedup (geometric mean over prompts)",
        path,
        subtitle,
        references=True,
    )


HF_DASHES = ("--", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (1, 1.5)))  # one per HF line, so that two stay apart
HF_SETTINGS = {"hf-defaults": "its defaults", "hf-defaults-stock-kernels": "its defaults, PyTorch's kernels"}


def _reference_lines(ax, table) -> None:
    ax.axhline(1.0, color="0.3", linewidth=1, label="plain decoding")
    hf = table[
        table["method"].str.startswith("hf-")
        & (table["source"] == MEASURED)
        & table["gamma"].isna()
        & table["speedup"].notna()
    ]
    for i, (_, row) in enumerate(hf.iterrows()):
        label = hf_line_label(row["method"], row["drafter"], row["policy"])
        ax.axhline(
            row["speedup"],
            color="0.4",
            linestyle=HF_DASHES[i % len(HF_DASHES)],
            linewidth=1.2,
            label=f"{label} ({row['speedup']:.2f}×)",
        )
    oracle = table[(table["policy"] == ORACLE_POLICY) & (table["source"] == PREDICTED) & table["speedup"].notna()]
    for i, (_, row) in enumerate(oracle.iterrows()):
        ax.axhline(
            row["speedup"],
            color=f"C{(i + 5) % 10}",
            linestyle=":",
            linewidth=1.4,
            label=f"oracle, {row['drafter']} drafter ({row['speedup']:.2f}×)",
        )


def hf_line_label(method: str, drafter: str, policy: str) -> str:
    """An HF run's line in the legend: its method, the drafter where the method does not
    already name it (model@NAME of several drafter models), and its settings in words."""
    named = drafter == "model" or method.endswith(drafter)
    return f"{method}{'' if named else ' ' + drafter}, {HF_SETTINGS.get(policy, policy)}"


def chart_positions(positions: pd.DataFrame, path: Path, subtitle: str) -> Path:
    """Acceptance at each draft position given the drafts before it were accepted (pooled
    over prompts): one predicted line per drafter (position_rows: the fixed policy at its
    largest gamma), the measured points of the same runs in the same colour."""
    fig, ax = new_figure(
        "Acceptance by draft position",
        subtitle,
        "draft position i in a round",
        "P(draft i accepted | drafts 1..i-1 accepted)",
    )
    table = position_acceptance(position_rows(positions))
    for i, ((drafter, policy, gamma), group) in enumerate(
        table.groupby(["drafter", "policy", "gamma"], sort=True, dropna=False)
    ):
        label = position_label(drafter, policy, gamma)
        predicted, measured = group[group["source"] == PREDICTED], group[group["source"] == MEASURED]
        if len(predicted):
            ax.plot(
                predicted["position"],
                predicted["acceptance"],
                color=f"C{i % 10}",
                marker=".",
                label=f"{label} (predicted)",
            )
        if len(measured):
            ax.plot(measured["position"], measured["acceptance"], "o", color=f"C{i % 10}", label=f"{label} (measured)")
    ax.set_ylim(0, 1.02)
    ax.xaxis.get_major_locator().set_params(integer=True)
    return finish(fig, ax, path)


def chart_positions_by_category(positions: pd.DataFrame, path: Path, subtitle: str) -> Path:
    """chart_positions for one drafter (the model drafter when there is one), one line per
    prompt category (predicted rows; measured ones when nothing was predicted)."""
    fig, ax = new_figure(
        "Acceptance by draft position, per category",
        subtitle,
        "draft position i in a round",
        "P(draft i accepted | drafts 1..i-1 accepted)",
    )
    rows = position_rows(positions)
    if len(rows):
        rows = rows[rows["source"] == (PREDICTED if (rows["source"] == PREDICTED).any() else MEASURED)]
        models = [d for d in dict.fromkeys(rows["drafter"]) if label_parts(d)[0] == MODEL_DRAFTER]
        drafter = models[0] if models else min(rows["drafter"])
        rows = rows[rows["drafter"] == drafter]
        table = position_acceptance(rows, by=("category",))
        for i, category in enumerate(dict.fromkeys(rows["category"])):
            group = table[table["category"] == category]
            ax.plot(group["position"], group["acceptance"], marker=".", color=f"C{i % 10}", label=category)
        shown = position_label(drafter, rows["policy"].iloc[0], rows["gamma"].iloc[0])
        ax.set_title(f"Acceptance by draft position, per category ({shown})", fontsize=13, loc="left")
    ax.set_ylim(0, 1.02)
    ax.xaxis.get_major_locator().set_params(integer=True)
    return finish(fig, ax, path)


def chart_category_predicted(table, runs, path: Path, subtitle: str) -> Path:
    """Per category: the predicted geometric-mean speedup of each drafter x policy at its best
    predicted gamma (bars), the measured one at that gamma where measured (black dots); the
    fastest MAX_CATEGORY_SERIES configurations, and the title says when others were left out."""
    best, note = category_series(table)
    fig, ax = new_figure(
        f"Speedup by prompt category, each configuration at its best predicted gamma{note}",
        subtitle,
        "",
        "speedup over plain",
    )
    categories = list(dict.fromkeys(runs["category"]))
    width = 0.8 / max(1, len(best))
    for i, ((drafter, policy), gamma) in enumerate(best):
        rows = runs[
            (runs["method"] == "specbench")
            & (runs["drafter"] == drafter)
            & (runs["policy"] == policy)
            & (runs["gamma"] == gamma)
        ]
        xs = np.arange(len(categories)) + (i - (len(best) - 1) / 2) * width
        for source, draw in ((PREDICTED, "bar"), (MEASURED, "dot")):
            chosen = rows[rows["source"] == source]
            values = [geometric_mean(chosen.loc[chosen["category"] == c, "speedup"]) for c in categories]
            values = [np.nan if v is None else v for v in values]
            if draw == "bar":
                ax.bar(xs, values, width, color=f"C{i}", label=f"{drafter} / {policy}, γ={gamma}")
            elif not all(np.isnan(values)):
                ax.plot(xs, values, "o", color="black", markersize=4, label="measured" if i == 0 else None)
    ax.axhline(1.0, color="0.3", linewidth=1)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=20, ha="right", fontsize=8)
    return finish(fig, ax, path, beside=True)
