"""Charts of a sweep: a results directory (runs.csv, meta.json) -> PNG files.

Reads only the results files; imports no torch (nor anything that does), so plotting works
without the models. Uses matplotlib's object API (Figure, no pyplot), so it changes no global
backend state. The data are DataFrames: the runs from results.load_runs and the summary table
from results.summary_frame; this module only selects what each chart shows (curves over gamma,
the theory's fixed-gamma groups, each configuration at its best gamma). Aggregation and theory
come from results.py and core/stats.py; nothing is re-derived here. A missing or malformed
directory raises results.ResultsError.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specbench.bench.labels import (
    BASELINE_METHOD,
    FIXED_POLICY,
    MEASURED,
    MODEL_DRAFTER,
    ORACLE_POLICY,
    PREDICTED,
    config_label,
    label_parts,
    labels,
)
from specbench.bench.meta_file import plain_and_loop, read_meta, verify_costs
from specbench.bench.positions import load_positions, position_acceptance
from specbench.bench.runs_file import RUNS_CSV, load_runs, make_dir
from specbench.bench.summary import best_gammas, geometric_mean, speedup_by_category, summary_frame
from specbench.bench.theory import estimate_alpha
from specbench.core.stats import expected_tokens_per_round, predicted_speedup, verify_cost_at
from specbench.errors import ResultsError

CHARTS = (
    "acceptance_rate.png",
    "tokens_per_second.png",
    "speedup.png",
    "accepted_length.png",
    "predicted_speedup.png",
    "speedup_by_category.png",
    "model_vs_measured.png",
)
PREDICTION_CHARTS = (
    "acceptance_vs_gamma.png",
    "accepted_length_vs_gamma.png",
    "speedup_vs_gamma.png",
    "position_acceptance.png",
    "position_acceptance_by_category.png",
    "category_speedup_predicted.png",
)  # drawn when a sweep has predicted rows (every sweep since predictions)
SUPERSEDED = (
    "acceptance_rate.png",
    "tokens_per_second.png",
    "speedup.png",
    "accepted_length.png",
    "predicted_speedup.png",
)
# the measured curves over gamma that a sweep with predictions replaces with its PREDICTION_CHARTS
# (it times a few gammas only, so they would be lone points); its measured rows are drawn there
POSITION_CHARTS = ("position_acceptance.png", "position_acceptance_by_category.png")  # need positions.csv
MAX_CATEGORY_SERIES = 6  # bars per category group before the chart stops being readable
LEGEND_INSIDE = 8  # legend entries that fit inside the axes; more go beside them
GAMMA_AXIS = "gamma (draft tokens per round; adaptive policies: their gamma setting)"


# ---------------------------------------------------------------------------- data


def load_results(directory: Path) -> tuple[pd.DataFrame, dict]:
    """(runs, meta) of a results directory; ResultsError when it is not one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultsError(f"no results directory {directory}")
    runs = load_runs(directory)  # every number parsed here: a bad cell fails now, by name
    if runs.empty:
        raise ResultsError(f"{directory / RUNS_CSV} has no rows yet")
    return runs, read_meta(directory)


def curves(table: pd.DataFrame, metric: str) -> dict[str, list[tuple[int, float]]]:
    """label -> [(gamma, value)] sorted by gamma, for the speculative groups of the summary
    table that have `metric`; labels in alphabetical order."""
    shown = table[(table["method"] != BASELINE_METHOD) & table["gamma"].notna() & table[metric].notna()]
    shown = shown.sort_values("gamma")
    return {
        label: list(zip(group["gamma"].astype(int).tolist(), group[metric].tolist()))
        for label, group in shown.groupby("label", sort=True)
    }


def baseline_tokens_per_second(runs: pd.DataFrame) -> float | None:
    value = runs.loc[runs["method"] == BASELINE_METHOD, "tokens_per_second"].mean()
    return None if pd.isna(value) else float(value)


def theory_groups(runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Speculative runs with a fixed gamma, by label: the setting the theory describes."""
    fixed = runs[(runs["method"] != BASELINE_METHOD) & (runs["policy"] == FIXED_POLICY) & runs["gamma"].notna()]
    return {config_label(*key): group for key, group in fixed.groupby(["method", "drafter", "policy"], sort=False)}


def fitted_alpha(runs: pd.DataFrame) -> float | None:
    """alpha explaining the measured accepted/drafted counts of these runs (None if unknown)."""
    points = runs[["gamma", "drafted", "accepted"]].dropna()
    return estimate_alpha(list(points.itertuples(index=False, name=None)))


def gamma_span(runs: pd.DataFrame) -> list[int]:
    gammas = runs["gamma"].dropna()
    return list(range(int(gammas.min()), int(gammas.max()) + 1)) if len(gammas) else []


def category_bars(runs: pd.DataFrame, table: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The category pivot's rows for each method/drafter/policy at its best gamma (the summary
    table is best first), at most MAX_CATEGORY_SERIES: geometric-mean speedup per category;
    and a title line saying so when there were more (category_series' words)."""
    speculative = table[(table["method"] != BASELINE_METHOD) & table["speedup"].notna()]
    every = speculative.drop_duplicates("label")
    best = every.head(MAX_CATEGORY_SERIES)
    return speedup_by_category(runs).reindex(labels(best, with_gamma=True)), _left_out(len(best), len(every))


def _left_out(shown: int, every: int) -> str:
    return f"\n(the {shown} fastest of {every} configurations)" if every > shown else ""


# ---------------------------------------------------------------------------- drawing


FOOTER_CHARS = 130  # of the 7.5-point subtitle, what an 8.5-inch figure holds on one line


def footer_lines(subtitle: str, width: int = FOOTER_CHARS) -> list[str]:
    """The subtitle's " · "-separated parts on as few lines as fit `width` characters each
    (a long one ran off the figure's left edge)."""
    lines: list[str] = []
    for part in subtitle.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return lines


def _figure(title: str, subtitle: str, xlabel: str, ylabel: str):
    fig = Figure(figsize=(8.5, 5.2), dpi=120)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=13, loc="left")
    if subtitle:
        fig.text(
            0.99,
            0.01,
            "\n".join(footer_lines(subtitle)),
            ha="right",
            va="bottom",
            fontsize=7.5,
            color="0.4",
            gid="footer",
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


MAX_TICKS = 16  # more gamma ticks than this run into each other: matplotlib picks integers


def _gamma_axis(ax, gammas: list[int]) -> None:
    """A tick at each gamma swept, or at integers matplotlib spaces out when there are many."""
    from matplotlib.ticker import MaxNLocator

    if len(gammas) > MAX_TICKS:
        ax.xaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKS, integer=True))
    elif gammas:
        ax.set_xticks(gammas)


def _finish(fig, ax, path: Path, beside: bool = False) -> Path:
    """Legend, layout, PNG. The legend goes beside the axes (on a wider figure) when it has
    more than LEGEND_INSIDE entries or `beside` says so (bars fill the axes: any place
    inside hides some)."""
    handles, _ = ax.get_legend_handles_labels()
    if handles and (beside or len(handles) > LEGEND_INSIDE):
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 3.6, height)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.85)
    elif handles:
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    else:
        ax.text(
            0.5, 0.5, "nothing to show in these results", ha="center", va="center", transform=ax.transAxes, color="0.4"
        )
    footer = max((t.get_text().count("\n") + 1 for t in fig.texts if t.get_gid() == "footer"), default=1)
    fig.tight_layout(rect=(0, 0.03 * footer, 1, 1))
    fig.savefig(path)
    return path


def _draw_curves(ax, data: dict[str, list[tuple[int, float]]]) -> None:
    for label, points in data.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=label)


def chart_acceptance(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Acceptance rate vs gamma", subtitle, GAMMA_AXIS, "acceptance rate (accepted / drafted)")
    _draw_curves(ax, curves(table, "acceptance_rate"))
    ax.set_ylim(0, 1.05)
    _gamma_axis(ax, gamma_span(runs))
    return _finish(fig, ax, path)


def chart_tokens_per_second(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Decoding speed vs gamma", subtitle, GAMMA_AXIS, "tokens / second (after the first token)")
    _draw_curves(ax, curves(table, "tokens_per_second"))
    base = baseline_tokens_per_second(runs)
    if base:
        ax.axhline(base, color="black", linestyle="--", linewidth=1.2, label=f"plain decoding ({base:.2f} tok/s)")
    ax.set_ylim(bottom=0)
    _gamma_axis(ax, gamma_span(runs))
    return _finish(fig, ax, path)


def chart_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure(
        "Speedup over plain decoding vs gamma", subtitle, GAMMA_AXIS, "speedup (geometric mean over prompts)"
    )
    _draw_curves(ax, curves(table, "speedup"))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="plain decoding (1.0)")
    _gamma_axis(ax, gamma_span(runs))
    return _finish(fig, ax, path)


def chart_accepted_length(table, runs, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure(
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
    _gamma_axis(ax, gamma_span(runs))
    return _finish(fig, ax, path)


def chart_predicted_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    costs, (plain, loop) = verify_costs(meta), plain_and_loop(meta)
    note = "v(γ+1) measured" if costs else "v = 1 (not measured)"
    fig, ax = _figure(
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
    _gamma_axis(ax, gamma_span(runs))
    return _finish(fig, ax, path)


def chart_category_speedup(table, runs, meta, path: Path, subtitle: str) -> Path:
    bars, note = category_bars(runs, table)
    categories = list(bars.columns)
    fig, ax = _figure(
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
    return _finish(fig, ax, path, beside=True)


def model_points(runs: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """label -> [(modelled, measured speedup)] per run that has both (specbench runs)."""
    both = runs[(runs["predicted_speedup"] > 0) & (runs["speedup"] > 0)]
    both = both.assign(label=labels(both, with_gamma=True))
    return {
        label: list(zip(group["predicted_speedup"].tolist(), group["speedup"].tolist()))
        for label, group in both.groupby("label", sort=False)
    }


def chart_model_vs_measured(table, runs, meta, path: Path, subtitle: str) -> Path:
    """Each run's measured speedup against the walltime model of its own rounds
    (sweep.predicted_speedup: the sweep's c and v(k) in target steps t(1)); the band is +-10%."""
    fig, ax = _figure(
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
    return _finish(fig, ax, path)


DRAWERS = (
    chart_acceptance,
    chart_tokens_per_second,
    chart_speedup,
    chart_accepted_length,
    chart_predicted_speedup,
    chart_category_speedup,
    chart_model_vs_measured,
)


def describe(meta: dict, runs: pd.DataFrame) -> str:
    """A one-line footnote: which models, temperature and prompts the numbers come from."""
    models = meta.get("models") or {}
    names = [((models.get(role) or {}).get("name")) for role in ("target", "drafter")]
    several = [(d or {}).get("name") or label for label, d in (models.get("drafters") or {}).items()]
    temps = [f"{t:g}" for t in sorted(runs["temperature"].dropna().unique())]  # as runs.csv writes them
    parts = []
    if names[0]:
        parts.append(f"target {names[0]}")
    if several:
        parts.append(f"drafters {', '.join(several)}")
    elif names[1]:
        parts.append(f"drafter {names[1]}")
    parts.append(f"temperature {', '.join(temps)}")
    count = runs["prompt_id"].nunique()
    parts.append(f"{count} prompt{'' if count == 1 else 's'}")
    parts.append(describe_c(meta))
    costs = (meta.get("repriced") or {}).get("costs_from")  # `specbench predict --costs`: whose costs priced it
    if costs is not None:
        parts.append(
            f"priced with costs measured {(costs.get('created') or '')[:10]} on {((costs.get('machine') or {}).get('cpu') or {}).get('model') or 'another machine'}"
        )
    return " · ".join(part for part in parts if part)


def describe_c(meta: dict) -> str:
    """c as the sweep priced with it: the median of its blocks' measurements (costs_pooled,
    with their range) or its one measurement. A sweep written before pricing was pooled has
    no costs_pooled and priced each prompt with its own c: the range is what it used."""
    blocks = meta.get("costs_by_block") or {}
    first_model = label_parts(next(iter(blocks), ""))[
        1
    ]  # a block's key names its model as a label does; meta's c is the first's
    cs = [m["c"] for key, m in blocks.items() if label_parts(key)[1] == first_model and m.get("c") is not None]
    spread, c = (f"{min(cs):.3f} to {max(cs):.3f}" if cs else ""), f"c{f' of {first_model}' if first_model else ''}"
    if meta.get("costs_pooled", 1) > 1 and meta.get("c") is not None and spread:
        return f"{c} = {meta['c']:.3f} (median of {meta['costs_pooled']} measurements, {spread})"  # one a prompt and repeat
    if len(cs) > 1:
        return f"{c} = {spread} (per prompt)"
    return f"{c} = {meta['c']:.3f}" if meta.get("c") is not None else ""


def plot_results(directory: Path, out_dir: Path | None = None) -> list[Path]:
    """Write every chart of a results directory (into it, unless out_dir is given); the paths.

    A directory without predicted rows (every sweep before predictions) gets CHARTS, from its
    measured rows. One with predictions gets the PREDICTION_CHARTS (predicted lines with their
    bands, the measured points on them; the position charts only when positions.csv has rows)
    and, of CHARTS, those that are not SUPERSEDED, from the measured rows only: predicted and
    measured rows never share a curve."""
    with matplotlib.rc_context({"text.parse_math": False}):  # a "$" in a category or model name is text
        return _plot_results(directory, out_dir)


def _plot_results(directory: Path, out_dir: Path | None) -> list[Path]:
    every, meta = load_results(directory)
    out_dir = make_dir(Path(out_dir or directory))
    runs = every[every["source"] == MEASURED]
    predicted = bool((every["source"] == PREDICTED).any())
    subtitle = describe(meta, every)
    paths = []
    if len(runs):
        table = summary_frame(runs)
        paths += [
            draw(table, runs, meta, out_dir / name, subtitle)
            for draw, name in zip(DRAWERS, CHARTS)
            if not (predicted and name in SUPERSEDED)
        ]
    if predicted:
        paths += prediction_charts(every, load_positions(directory), out_dir, subtitle)
    return paths


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


# ---------------------------------------------------------------------------- prediction charts


def _configurations(table: pd.DataFrame) -> list[tuple[str, str]]:
    """The specbench drafter x policy pairs of a summary (oracles apart), in a stable order."""
    spec = table[(table["method"] == "specbench") & (table["policy"] != ORACLE_POLICY)]
    return sorted(set(zip(spec["drafter"], spec["policy"])))


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
    fig, ax = _figure(title, subtitle, GAMMA_AXIS, ylabel)
    colors = {}
    for i, (drafter, policy) in enumerate(_configurations(table)):
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
    _gamma_axis(ax, gamma_span(table[(table["method"] == "specbench") & (table["policy"] != ORACLE_POLICY)]))
    return _finish(fig, ax, path)


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


def position_rows(positions: pd.DataFrame) -> pd.DataFrame:
    """The positions.csv rows the position charts draw: for each drafter, its fixed-policy runs
    at the largest gamma (the most positions), falling back to its other policies, then to
    its oracle, when it has no fixed runs; one policy and one gamma per drafter, every source."""
    chosen = []
    for _, rows in positions.groupby("drafter", sort=True):
        for pick in (rows[rows["policy"] == FIXED_POLICY], rows[rows["policy"] != ORACLE_POLICY], rows):
            if len(pick):
                break
        pick = pick[pick["policy"] == min(pick["policy"])]
        top = pick["gamma"].max()
        chosen.append(pick if pd.isna(top) else pick[pick["gamma"] == top])
    return pd.concat(chosen, ignore_index=True) if chosen else positions.iloc[0:0]


def _position_label(drafter: str, policy: str, gamma: float) -> str:
    return f"{drafter} / {policy}" + ("" if pd.isna(gamma) else f", γ={int(gamma)}")


def chart_positions(positions: pd.DataFrame, path: Path, subtitle: str) -> Path:
    """Acceptance at each draft position given the drafts before it were accepted (pooled
    over prompts): one predicted line per drafter (position_rows: the fixed policy at its
    largest gamma), the measured points of the same runs in the same colour."""
    fig, ax = _figure(
        "Acceptance by draft position",
        subtitle,
        "draft position i in a round",
        "P(draft i accepted | drafts 1..i-1 accepted)",
    )
    table = position_acceptance(position_rows(positions))
    for i, ((drafter, policy, gamma), group) in enumerate(
        table.groupby(["drafter", "policy", "gamma"], sort=True, dropna=False)
    ):
        label = _position_label(drafter, policy, gamma)
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
    return _finish(fig, ax, path)


def chart_positions_by_category(positions: pd.DataFrame, path: Path, subtitle: str) -> Path:
    """chart_positions for one drafter (the model drafter when there is one), one line per
    prompt category (predicted rows; measured ones when nothing was predicted)."""
    fig, ax = _figure(
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
        ax.set_title(
            f"Acceptance by draft position, per category ({_position_label(drafter, rows['policy'].iloc[0], rows['gamma'].iloc[0])})",
            fontsize=13,
            loc="left",
        )
    ax.set_ylim(0, 1.02)
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _finish(fig, ax, path)


def category_series(table: pd.DataFrame) -> tuple[list[tuple[tuple[str, str], int]], str]:
    """The configurations the category chart draws, ((drafter, policy), best gamma) fastest
    first, at most MAX_CATEGORY_SERIES of them, and a title line saying so when there were more."""
    every = list(best_gammas(table).items())  # fastest first
    best = every[:MAX_CATEGORY_SERIES]
    return best, _left_out(len(best), len(every))


def chart_category_predicted(table, runs, path: Path, subtitle: str) -> Path:
    """Per category: the predicted geometric-mean speedup of each drafter x policy at its best
    predicted gamma (bars), the measured one at that gamma where measured (black dots); the
    fastest MAX_CATEGORY_SERIES configurations, and the title says when others were left out."""
    best, note = category_series(table)
    fig, ax = _figure(
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
    return _finish(fig, ax, path, beside=True)
