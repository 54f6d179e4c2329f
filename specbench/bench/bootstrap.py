"""95% bootstrap intervals over prompts for the summary's two headline numbers: the
geometric-mean speedup (prompt-weighted) and the pooled acceptance (token-weighted).

A metric of its own, in a small module: resampling is by prompt, all of a prompt's repeats
moving together, and vectorised (one numpy draw for all resamples of a group). Every group
is drawn with the same seed, so an interval is reproducible and the same wherever it is
shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specbench.bench.runs_file import GROUP_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_SEED = 0
INTERVAL_COLUMNS = ["speedup_lo", "speedup_hi", "acceptance_lo", "acceptance_hi"]


def bootstrap_interval(
    frame: pd.DataFrame, statistic, by: str = "prompt_id", draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval (2.5th, 97.5th percentiles) of a statistic over
    the `by` units of one group (prompts): the units are resampled with replacement, all rows
    of a unit (its repeats) moving together. Pure: the same frame gives the same interval,
    whatever else a table holds (each call draws from its own generator, seeded with `seed`).

    frame: the group's rows; its numeric columns must be additive (counts, sums of logs), as
    they are summed per unit and then over each draw's units. statistic: {column: array of
    the draws' sums, shape (draws,)} -> an array of the draws' values (vectorised: one call
    for all draws). A draw whose statistic is undefined (only units with nothing to measure,
    such as prompts where a drafter drafted nothing) is left out; (NaN, NaN) with fewer than
    2 units or when half the draws or more are undefined."""
    import numpy as np

    totals = frame.groupby(by, sort=False).sum(numeric_only=True)
    if len(totals) < 2:
        return (np.nan, np.nan)
    pick = np.random.default_rng(seed).integers(0, len(totals), size=(draws, len(totals)))
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.asarray(
            statistic({c: totals[c].to_numpy(dtype="float64")[pick].sum(axis=1) for c in totals.columns}),
            dtype="float64",
        )
    values = values[np.isfinite(values)]
    if len(values) < draws / 2:
        return (np.nan, np.nan)
    lo, hi = np.percentile(values, [2.5, 97.5])
    return (float(lo), float(hi))


def _geometric_mean_of_sums(sums):
    """The geometric-mean speedup of a draw: exp(sum of log speedups / runs with a speedup)."""
    import numpy as np

    return np.exp(sums["log_speedup"] / sums["has_speedup"])


def _pooled_acceptance_of_sums(sums):
    """The pooled acceptance of a draw: accepted / drafted over the runs that report both."""
    return sums["accepted_known"] / sums["drafted_known"]


def bootstrap_intervals(runs: pd.DataFrame, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED) -> pd.DataFrame:
    """bootstrap_interval of each GROUP_COLUMNS group's geometric-mean speedup (prompt-weighted:
    each run with a speedup counts once) and pooled acceptance (token-weighted: by drafted
    tokens, over the runs that report their acceptance): one row per group, INTERVAL_COLUMNS
    (NaN with fewer than 2 prompts). Every group is drawn with the same seed, so a group's
    interval is the same in the sweep's table and in the charts (which summarise subsets)."""
    import numpy as np
    import pandas as pd

    known = runs["acceptance_rate"].notna() & runs["drafted"].notna() & runs["accepted"].notna()
    positive = runs["speedup"] > 0
    parts = runs[[*GROUP_COLUMNS, "prompt_id"]].assign(
        log_speedup=np.log(runs["speedup"].where(positive)).fillna(0.0),
        has_speedup=positive.astype("float64"),
        drafted_known=runs["drafted"].where(known).fillna(0.0),
        accepted_known=runs["accepted"].where(known).fillna(0.0),
    )
    out = []
    for key, group in parts.groupby(GROUP_COLUMNS, dropna=False, sort=False):
        group = group.drop(columns=GROUP_COLUMNS)
        speedup = (
            bootstrap_interval(group, _geometric_mean_of_sums, draws=draws, seed=seed)
            if group["has_speedup"].any()
            else (np.nan, np.nan)
        )
        acceptance = (
            bootstrap_interval(group, _pooled_acceptance_of_sums, draws=draws, seed=seed)
            if group["drafted_known"].any()
            else (np.nan, np.nan)
        )
        out.append((*key, *speedup, *acceptance))
    columns = [*GROUP_COLUMNS, *INTERVAL_COLUMNS]
    return pd.DataFrame(out, columns=columns).astype({c: "float64" for c in INTERVAL_COLUMNS})
