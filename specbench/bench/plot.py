"""Charts of a sweep: a results directory (runs.csv, meta.json) -> PNG files.

Reads only the results files; imports no torch (nor anything that does), so plotting works
without the models. Uses matplotlib's object API (Figure, no pyplot), so it changes no global
backend state. Aggregation and theory come from results.py and stats.py; nothing is
re-derived here. A missing or malformed directory raises results.ResultsError.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from specbench.bench.results import (
    BASELINE_METHOD,
    FIXED_POLICY,
    MODEL_DRAFTER,
    RUNS_CSV,
    ResultsError,
    Summary,
    config_label,
    estimate_alpha,
    geometric_mean,
    group_rows,
    mean,
    number,
    read_meta,
    read_rows,
    summarize,
    verify_costs,
)
from specbench.core.stats import expected_tokens_per_round, predicted_speedup, verify_cost_at

CHARTS = (
    "acceptance_rate.png",
    "tokens_per_second.png",
    "speedup.png",
    "accepted_length.png",
    "predicted_speedup.png",
    "speedup_by_category.png",
    "model_vs_measured.png",
)
MAX_CATEGORY_SERIES = 6  # bars per category group before the chart stops being readable
GAMMA_AXIS = "gamma (draft tokens per round; adaptive policies: their gamma setting)"


# ---------------------------------------------------------------------------- data


def load_results(directory: Path) -> tuple[list[dict], dict]:
    """(rows, meta) of a results directory; ResultsError when it is not one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultsError(f"no results directory {directory}")
    rows = read_rows(directory / RUNS_CSV)
    if not rows:
        raise ResultsError(f"{directory / RUNS_CSV} has no rows yet")
    for row in rows:  # fail early, with the column's name, on cells that are not numbers
        for column in ("gamma", "tokens_per_second", "speedup", "acceptance_rate", "mean_accepted_length", "drafted", "accepted"):
            number(row, column)
    return rows, read_meta(directory)


def curves(summaries: list[Summary], metric: str) -> dict[str, list[tuple[int, float]]]:
    """label -> [(gamma, value)] sorted by gamma, for the speculative groups that have `metric`."""
    out: dict[str, list[tuple[int, float]]] = {}
    for s in summaries:
        value = getattr(s, metric)
        if s.method != BASELINE_METHOD and s.gamma is not None and value is not None:
            out.setdefault(s.label, []).append((s.gamma, value))
    return {label: sorted(points) for label, points in sorted(out.items())}


def baseline_tokens_per_second(rows: list[dict]) -> float | None:
    return mean([number(r, "tokens_per_second") for r in rows if r["method"] == BASELINE_METHOD])


def theory_groups(rows: list[dict]) -> dict[str, list[dict]]:
    """Speculative rows with a fixed gamma, by label: the setting the theory describes."""
    out: dict[str, list[dict]] = {}
    for (method, drafter, policy, gamma), group in group_rows(rows).items():
        if method != BASELINE_METHOD and policy == FIXED_POLICY and gamma is not None:
            out.setdefault(config_label(method, drafter, policy), []).extend(group)
    return out


def fitted_alpha(rows: list[dict]) -> float | None:
    """alpha explaining the measured accepted/drafted counts of these rows (None if unknown)."""
    points = [(number(r, "gamma"), number(r, "drafted"), number(r, "accepted")) for r in rows]
    return estimate_alpha([p for p in points if None not in p])


def gamma_span(rows: list[dict]) -> list[int]:
    gammas = sorted({int(number(r, "gamma")) for r in rows if number(r, "gamma") is not None})
    return list(range(gammas[0], gammas[-1] + 1)) if gammas else []


def category_speedups(rows: list[dict], summaries: list[Summary]) -> tuple[list[str], dict[str, list[float | None]]]:
    """Categories, and per configuration (each method/drafter/policy at its best gamma) the
    geometric-mean speedup in each category."""
    categories = list(dict.fromkeys(r["category"] for r in rows))
    best: dict[str, Summary] = {}
    for s in summaries:  # summaries come best first
        if s.method != BASELINE_METHOD and s.speedup is not None and s.label not in best:
            best[s.label] = s
    bars = {}
    for s in list(best.values())[:MAX_CATEGORY_SERIES]:
        mine = [r for r in rows if (r["method"], r["drafter"], r["policy"]) == (s.method, s.drafter, s.policy) and number(r, "gamma") == s.gamma]
        bars[config_label(s.method, s.drafter, s.policy, s.gamma)] = [geometric_mean([number(r, "speedup") for r in mine if r["category"] == c]) for c in categories]
    return categories, bars


# ---------------------------------------------------------------------------- drawing


def _figure(title: str, subtitle: str, xlabel: str, ylabel: str):
    fig = Figure(figsize=(8.5, 5.2), dpi=120)
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=13, loc="left")
    if subtitle:
        fig.text(0.99, 0.01, subtitle, ha="right", va="bottom", fontsize=7.5, color="0.4")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _gamma_axis(ax, gammas: list[int]) -> None:
    if gammas:
        ax.set_xticks(gammas)


def _finish(fig, ax, path: Path) -> Path:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    else:
        ax.text(0.5, 0.5, "nothing to show in these results", ha="center", va="center", transform=ax.transAxes, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path)
    return path


def _draw_curves(ax, data: dict[str, list[tuple[int, float]]]) -> None:
    for label, points in data.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=label)


def chart_acceptance(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Acceptance rate vs gamma", subtitle, GAMMA_AXIS, "acceptance rate (accepted / drafted)")
    _draw_curves(ax, curves(summaries, "acceptance_rate"))
    ax.set_ylim(0, 1.05)
    _gamma_axis(ax, gamma_span(rows))
    return _finish(fig, ax, path)


def chart_tokens_per_second(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Decoding speed vs gamma", subtitle, GAMMA_AXIS, "tokens / second (after the first token)")
    _draw_curves(ax, curves(summaries, "tokens_per_second"))
    base = baseline_tokens_per_second(rows)
    if base:
        ax.axhline(base, color="black", linestyle="--", linewidth=1.2, label=f"plain decoding ({base:.2f} tok/s)")
    ax.set_ylim(bottom=0)
    _gamma_axis(ax, gamma_span(rows))
    return _finish(fig, ax, path)


def chart_speedup(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Speedup over plain decoding vs gamma", subtitle, GAMMA_AXIS, "speedup (geometric mean over prompts)")
    _draw_curves(ax, curves(summaries, "speedup"))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="plain decoding (1.0)")
    _gamma_axis(ax, gamma_span(rows))
    return _finish(fig, ax, path)


def chart_accepted_length(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    fig, ax = _figure("Mean accepted length vs gamma, measured and theory", subtitle, GAMMA_AXIS, "tokens per target forward")
    measured = curves(summaries, "mean_accepted_length")
    colors = {}
    for label, points in measured.items():
        xs, ys = zip(*points)
        colors[label] = ax.plot(xs, ys, marker="o", label=f"{label} (measured)")[0].get_color()
    for label, group in theory_groups(rows).items():
        alpha, gammas = fitted_alpha(group), gamma_span(group)
        if alpha is None or not gammas:
            continue
        theory = [expected_tokens_per_round(alpha, g) for g in gammas]
        ax.plot(gammas, theory, linestyle="--", marker="x", color=colors.get(label), label=f"{label}: (1-a^(γ+1))/(1-a), a={alpha:.2f}")
    ax.set_ylim(bottom=0)
    _gamma_axis(ax, gamma_span(rows))
    return _finish(fig, ax, path)


def chart_predicted_speedup(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    costs = verify_costs(meta)
    note = "v(γ+1) measured" if costs else "v = 1 (not measured)"
    fig, ax = _figure("Predicted vs measured speedup (model drafter, fixed gamma)", subtitle, GAMMA_AXIS, "speedup over plain decoding")
    measured = curves(summaries, "speedup")
    for label, group in theory_groups(rows).items():
        c = mean([number(r, "c") for r in group])
        alpha, gammas = fitted_alpha(group), gamma_span(group)
        if group[0]["drafter"] != MODEL_DRAFTER or c is None or alpha is None or label not in measured:
            continue
        xs, ys = zip(*measured[label])
        color = ax.plot(xs, ys, marker="o", label=f"{label} (measured)")[0].get_color()
        predicted = [predicted_speedup(alpha, g, c, verify_cost_at(costs, g + 1) or 1.0) for g in gammas]
        ax.plot(gammas, predicted, linestyle="--", marker="x", color=color, label=f"{label} (predicted: a={alpha:.2f}, c={c:.2f}, {note})")
    ax.axhline(1.0, color="black", linestyle=":", linewidth=1, label="plain decoding (1.0)")
    _gamma_axis(ax, gamma_span(rows))
    return _finish(fig, ax, path)


def chart_category_speedup(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    categories, bars = category_speedups(rows, summaries)
    fig, ax = _figure("Speedup by prompt category (each configuration at its best gamma)", subtitle, "prompt category", "speedup (geometric mean over prompts)")
    width = 0.8 / max(1, len(bars))
    for i, (label, values) in enumerate(bars.items()):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(categories))]
        ax.bar(xs, [v or 0 for v in values], width=width, label=label)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1.2, label="plain decoding (1.0)")
    tallest = max([v for values in bars.values() for v in values if v] + [1.0])
    ax.set_ylim(0, tallest * 1.3)  # room for the legend above the bars
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=20, ha="right")
    return _finish(fig, ax, path)


def model_points(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """label -> [(modelled, measured speedup)] per run that has both (specbench runs)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        modelled, measured = number(row, "predicted_speedup"), number(row, "speedup")
        if modelled and measured:
            gamma = number(row, "gamma")
            label = config_label(row["method"], row["drafter"], row["policy"], None if gamma is None else int(gamma))
            out.setdefault(label, []).append((modelled, measured))
    return out


def chart_model_vs_measured(summaries, rows, meta, path: Path, subtitle: str) -> Path:
    """Each run's measured speedup against the walltime model of its own rounds
    (bench.predicted_speedup: the sweep's c and v(k) in plain steps); the band is +-10%."""
    fig, ax = _figure("Measured speedup vs the walltime model, per run", subtitle, "modelled: tokens / sum over rounds of (k c + v(k+1)), in plain steps", "measured speedup over plain decoding")
    points = model_points(rows)
    for label, pairs in points.items():
        xs, ys = zip(*pairs)
        ratio = geometric_mean([y / x for x, y in pairs])
        ax.scatter(xs, ys, label=f"{label} (measured / modelled {ratio:.2f})", s=22)
    if points:
        top = max(max(max(p) for p in pairs) for pairs in points.values()) * 1.05
        line = [0, top]
        ax.plot(line, line, color="black", linewidth=1, label="measured = modelled")
        ax.fill_between(line, [0.9 * v for v in line], [1.1 * v for v in line], color="0.5", alpha=0.15, label="within 10%")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
    return _finish(fig, ax, path)


DRAWERS = (chart_acceptance, chart_tokens_per_second, chart_speedup, chart_accepted_length, chart_predicted_speedup, chart_category_speedup, chart_model_vs_measured)


def describe(meta: dict, rows: list[dict]) -> str:
    """A one-line footnote: which models, temperature and prompts the numbers come from."""
    models = meta.get("models") or {}
    names = [((models.get(role) or {}).get("name")) for role in ("target", "drafter")]
    temps = sorted({r["temperature"] for r in rows})
    parts = []
    if names[0]:
        parts.append(f"target {names[0]}")
    if names[1]:
        parts.append(f"drafter {names[1]}")
    parts.append(f"temperature {', '.join(temps)}")
    parts.append(f"{len({r['prompt_id'] for r in rows})} prompts")
    measured = [m["c"] for m in (meta.get("costs_by_block") or {}).values() if m.get("c") is not None]
    if len(measured) > 1:
        parts.append(f"c = {min(measured):.3f} to {max(measured):.3f} (per prompt)")
    elif meta.get("c") is not None:
        parts.append(f"c = {meta['c']:.3f}")
    return " · ".join(parts)


def plot_results(directory: Path, out_dir: Path | None = None) -> list[Path]:
    """Write every chart of a results directory (into it, unless out_dir is given); the paths."""
    rows, meta = load_results(directory)
    out_dir = Path(out_dir or directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = summarize(rows)
    subtitle = describe(meta, rows)
    return [draw(summaries, rows, meta, out_dir / name, subtitle) for draw, name in zip(DRAWERS, CHARTS)]
