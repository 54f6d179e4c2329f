"""The summary of a sweep: its runs grouped by source x method x drafter x policy x gamma
(GROUP_COLUMNS), each group's averages weighted as Summary says, with 95% bootstrap intervals
over prompts (bootstrap.py); and the queries on that table that the reports and charts share
(the best gamma of each configuration, each policy's share of the oracle's gain, the speedup
per prompt category).

Everything is computed once, here, on load_runs's DataFrame (or read_rows's rows), so the
end-of-sweep table and the charts show the same numbers. pandas and numpy are imported on
first use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from specbench.bench.bootstrap import INTERVAL_COLUMNS, bootstrap_intervals
from specbench.bench.labels import MEASURED, ORACLE_POLICY, PREDICTED, config_label, labels, whole_gamma
from specbench.bench.runs_file import GROUP_COLUMNS, as_runs

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Summary:
    """One source x method x drafter x policy x gamma, aggregated over prompts and repeats.

    Which averages weigh what: acceptance_rate is pooled over drafted tokens (token-weighted:
    a long run counts for more); speedup and predicted_speedup are geometric means over runs,
    mean_accepted_length and tokens_per_second plain means over runs (prompt-weighted: each
    prompt run counts once). The intervals are 95% bootstrap intervals over prompts (NaN,
    None here, with fewer than 2 prompts)."""

    source: str
    method: str
    drafter: str
    policy: str
    gamma: int | None
    runs: int
    acceptance_rate: float | None  # pooled: all accepted / all drafted
    mean_accepted_length: float | None  # mean over runs
    tokens_per_second: float | None  # mean over runs
    speedup: float | None  # geometric mean over runs of tokens/s over the plain run's
    predicted_speedup: float | None  # geometric mean of the walltime model's (specbench runs)
    differs: int  # greedy runs whose output is not the baseline's
    checked: int  # greedy runs compared with the baseline
    speedup_lo: float | None = None
    speedup_hi: float | None = None
    acceptance_lo: float | None = None
    acceptance_hi: float | None = None

    @property
    def label(self) -> str:
        return config_label(self.method, self.drafter, self.policy)


SUMMARY_FIELDS = [f.name for f in fields(Summary)]


def geometric_mean(values: Iterable[float | None]) -> float | None:
    """exp(mean(log v)) over the positive values (blank, NaN, zero and negative ones are left
    out); None when none is positive. Takes a list or a pandas Series (a groupby aggregate)."""
    import numpy as np
    import pandas as pd

    values = pd.Series(values, dtype="float64")
    positive = values[values > 0]
    return float(np.exp(np.log(positive).mean())) if len(positive) else None


def summary_frame(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """One row per source x method x drafter x policy x gamma (GROUP_COLUMNS), best speedup
    first: Summary's fields (NaN where Summary has None; the averages weighted as Summary
    says), the 95% bootstrap intervals over prompts (bootstrap_intervals) and the
    configuration's label (without its source: select rows by the source column)."""
    runs = _summary_inputs(_current_oracles(as_runs(runs)))
    table = (
        runs.groupby(GROUP_COLUMNS, dropna=False, sort=False)
        .agg(
            runs=("method", "size"),
            known=("known", "any"),
            drafted=("pooled_drafted", "sum"),
            accepted=("pooled_accepted", "sum"),
            mean_accepted_length=("mean_accepted_length", "mean"),  # mean over runs
            tokens_per_second=("tokens_per_second", "mean"),
            speedup=("speedup", geometric_mean),
            predicted_speedup=("predicted_speedup", geometric_mean),
            differs=("differs", "sum"),
            checked=("checked", "sum"),
        )
        .reset_index()
    )
    # pooled acceptance: RunStats.acceptance_rate (accepted / drafted) over the group's counts
    pooled = table["accepted"] / table["drafted"].where(table["drafted"] > 0)
    table["acceptance_rate"] = pooled.where(table["known"])
    table[["speedup", "predicted_speedup"]] = table[["speedup", "predicted_speedup"]].astype("float64")
    table["label"] = labels(table)
    table = table.merge(bootstrap_intervals(runs), on=GROUP_COLUMNS, how="left")
    table = table.sort_values(["speedup", "tokens_per_second"], ascending=False, na_position="last", kind="stable")
    return table[[*SUMMARY_FIELDS, "label"]].reset_index(drop=True)


def _current_oracles(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs without the oracle rows a resume has outgrown: a sweep resumed with a larger
    gamma predicts each drafter's oracle again up to it (plan.oracle_gamma), and only that
    one bounds every policy; the rows up to the old gamma stay in runs.csv."""
    oracle = runs["policy"] == ORACLE_POLICY
    if not oracle.any():
        return runs
    reach = (
        runs["gamma"]
        .where(oracle)
        .groupby([runs["source"], runs["drafter"], runs["temperature"]], dropna=False)
        .transform("max")
    )
    return runs[~(oracle & (runs["gamma"] < reach))]


def _summary_inputs(runs: pd.DataFrame) -> pd.DataFrame:
    """The per-run columns summary_frame adds up: counts of runs whose acceptance is known
    (HF's assisted runs may not reveal theirs), and greedy parity checks."""
    known = runs["acceptance_rate"].notna()
    parity = runs["identical_to_baseline"]
    return runs.assign(
        known=known,
        pooled_drafted=runs["drafted"].where(known).fillna(0),
        pooled_accepted=runs["accepted"].where(known).fillna(0),
        checked=parity.notna(),
        differs=parity.eq(False).fillna(False),
    )


def summarize(runs: pd.DataFrame | Iterable[dict]) -> list[Summary]:
    """One Summary per source x method x drafter x policy x gamma, best speedup first. Takes
    load_runs's DataFrame or read_rows's rows."""
    return [_summary(row) for row in summary_frame(runs).to_dict("records")]


def _summary(row: dict) -> Summary:
    def real(value) -> float | None:
        return None if value != value else float(value)  # NaN -> None

    return Summary(
        row["source"],
        row["method"],
        row["drafter"],
        row["policy"],
        whole_gamma(row["gamma"]),
        int(row["runs"]),
        real(row["acceptance_rate"]),
        real(row["mean_accepted_length"]),
        real(row["tokens_per_second"]),
        real(row["speedup"]),
        real(row["predicted_speedup"]),
        int(row["differs"]),
        int(row["checked"]),
        *(real(row[c]) for c in INTERVAL_COLUMNS),
    )


def speedup_by_category(runs: pd.DataFrame | Iterable[dict], source: str = MEASURED) -> pd.DataFrame:
    """The geometric-mean speedup of each configuration in each prompt category, over the
    rows of one source: one row per method x drafter x policy x gamma (indexed by its label
    with gamma), one column per category, both in order of first appearance; NaN where a
    configuration has no speedup."""
    runs = as_runs(runs)
    runs = runs[runs["source"] == source]
    configurations = runs.assign(configuration=labels(runs, with_gamma=True))
    pivot = configurations.pivot_table(
        index="configuration", columns="category", values="speedup", aggfunc=geometric_mean, sort=False
    )
    return pivot.reindex(index=configurations["configuration"].unique(), columns=runs["category"].unique()).astype(
        "float64"
    )


def best_gammas(summary: pd.DataFrame, source: str = PREDICTED) -> dict[tuple[str, str], int]:
    """{(drafter, policy): the gamma with the highest geometric-mean speedup} over the
    specbench rows of `source` in a summary_frame (oracles left out), fastest first. Ties
    (speedups equal to 9 decimals: an adaptive policy that never drafts as deep as
    its cap predicts the same run at every gamma above it) go to the smallest gamma, so the
    tables, the charts and the gamma phase 2 measures name the same one."""
    rows = summary[
        (summary["source"] == source)
        & (summary["method"] == "specbench")
        & (summary["policy"] != ORACLE_POLICY)
        & summary["speedup"].notna()
    ]
    rows = rows.assign(rank=rows["speedup"].round(9))
    best = rows.sort_values(["rank", "gamma"], ascending=[False, True], kind="stable").drop_duplicates(
        ["drafter", "policy"]
    )
    return {(d, p): int(g) for d, p, g in zip(best["drafter"], best["policy"], best["gamma"])}


def oracle_share(summary: pd.DataFrame) -> pd.DataFrame:
    """Each specbench policy's share of its drafter's oracle gain, (speedup - 1) /
    (oracle speedup - 1), within each source (NaN where the oracle gains nothing)."""
    import pandas as pd

    spec = summary[summary["method"] == "specbench"]
    oracle = spec[spec["policy"] == ORACLE_POLICY][["source", "drafter", "speedup"]].rename(
        columns={"speedup": "oracle_speedup"}
    )
    others = spec[spec["policy"] != ORACLE_POLICY][["source", "drafter", "policy", "gamma", "speedup"]]
    table = others.merge(oracle.drop_duplicates(["source", "drafter"]), on=["source", "drafter"])
    gain = (table["oracle_speedup"] - 1).where(table["oracle_speedup"] > 1)
    table["share"] = (table["speedup"] - 1) / gain
    return (
        table.reset_index(drop=True)
        if len(table)
        else pd.DataFrame(columns=["source", "drafter", "policy", "gamma", "speedup", "oracle_speedup", "share"])
    )
