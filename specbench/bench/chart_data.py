"""What each chart of a sweep shows, selected from the runs and the summary table: curves
over gamma, the theory's fixed-gamma groups, the configurations drawn per category (the
fastest MAX_CATEGORY_SERIES), the position charts' rows, the model-against-measured points.

Pure selections on DataFrames, apart from the drawing (chart_figure.py and the charts_*
modules), so they can be tested without a figure. Aggregation and theory come from
summary.py, theory.py and core/stats.py; nothing is re-derived here.
"""

from __future__ import annotations

import pandas as pd

from specbench.bench.labels import BASELINE_METHOD, FIXED_POLICY, ORACLE_POLICY, config_label, labels
from specbench.bench.summary import best_gammas, speedup_by_category
from specbench.bench.theory import estimate_alpha

MAX_CATEGORY_SERIES = 6  # bars per category group before the chart stops being readable


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
    return speedup_by_category(runs).reindex(labels(best, with_gamma=True)), left_out(len(best), len(every))


def left_out(shown: int, every: int) -> str:
    return f"\n(the {shown} fastest of {every} configurations)" if every > shown else ""


def category_series(table: pd.DataFrame) -> tuple[list[tuple[tuple[str, str], int]], str]:
    """The configurations the category chart draws, ((drafter, policy), best gamma) fastest
    first, at most MAX_CATEGORY_SERIES of them, and a title line saying so when there were more."""
    every = list(best_gammas(table).items())  # fastest first
    best = every[:MAX_CATEGORY_SERIES]
    return best, left_out(len(best), len(every))


def model_points(runs: pd.DataFrame) -> dict[str, list[tuple[float, float]]]:
    """label -> [(modelled, measured speedup)] per run that has both (specbench runs)."""
    both = runs[(runs["predicted_speedup"] > 0) & (runs["speedup"] > 0)]
    both = both.assign(label=labels(both, with_gamma=True))
    return {
        label: list(zip(group["predicted_speedup"].tolist(), group["speedup"].tolist()))
        for label, group in both.groupby("label", sort=False)
    }


def configurations(table: pd.DataFrame) -> list[tuple[str, str]]:
    """The specbench drafter x policy pairs of a summary (oracles apart), in a stable order."""
    spec = table[(table["method"] == "specbench") & (table["policy"] != ORACLE_POLICY)]
    return sorted(set(zip(spec["drafter"], spec["policy"])))


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


def position_label(drafter: str, policy: str, gamma: float) -> str:
    return f"{drafter} / {policy}" + ("" if pd.isna(gamma) else f", γ={int(gamma)}")
