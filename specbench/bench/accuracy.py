"""How well a sweep's predictions came out: each measured specbench run beside its
prediction (prediction_check), the shares within 10% per run, per point and per
configuration (prediction_accuracy), the machine's own noise floor, the agreement of
two timings of the same plain run (plain_repeatability), and where a measured run's time
went against the costs that priced its prediction (price_check, price_accuracy).

Kept apart from the summary because it pairs rows across sources (measured with predicted,
measured plain with profile) rather than aggregating within one. pandas is imported on
first use.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from specbench.bench.costs import Costs
from specbench.bench.labels import BASELINE_METHOD, MEASURED, PREDICTED, PROFILE
from specbench.bench.rows import baseline_key, baselines_from_rows, modelled_prices
from specbench.bench.runs_file import as_runs, row_key
from specbench.bench.summary import geometric_mean
from specbench.core.stats import RoundCounts

if TYPE_CHECKING:
    import pandas as pd


CHECK_COLUMNS = [
    "drafter",
    "policy",
    "gamma",
    "temperature",
    "prompt_id",
    "repeat",
    "category",
    "predicted_forwards",
    "measured_forwards",
    "forwards_equal",
    "predicted_speedup",
    "measured_speedup",
    "speedup_error",
]
CHECK_GROUP = ["drafter", "policy", "gamma", "temperature"]  # one measured configuration of a prediction_check


def prediction_check(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """Every measured specbench run beside its prediction (the predicted row of the same
    drafter, policy, gamma, temperature, prompt and repeat), one row each (CHECK_COLUMNS):
    target forwards predicted and measured, forwards_equal (they differ by less than 0.5: a
    greedy prediction is exact or wrong, a sampled one is an expectation), and the speedups,
    speedup_error = predicted / measured - 1. Measured runs without a prediction (plain,
    hf-assisted, a policy not replayed) are left out."""
    import pandas as pd

    runs = as_runs(runs)
    keys = ["drafter", "policy", "gamma", "temperature", "prompt_id", "repeat"]
    spec = runs[runs["method"] == "specbench"]
    wanted = [*keys, "category", "target_forwards", "speedup"]
    predicted = spec[spec["source"] == PREDICTED][wanted].drop_duplicates(keys, keep="last")
    pairs = pd.merge(spec[spec["source"] == MEASURED][wanted], predicted, on=keys, suffixes=("_m", "_p"))
    check = pd.DataFrame(
        {
            **{k: pairs[k] for k in keys},
            "category": pairs["category_m"],
            "predicted_forwards": pairs["target_forwards_p"],
            "measured_forwards": pairs["target_forwards_m"],
            "predicted_speedup": pairs["speedup_p"],
            "measured_speedup": pairs["speedup_m"],
        }
    )
    check["forwards_equal"] = (check["predicted_forwards"] - check["measured_forwards"]).abs() < 0.5
    check["speedup_error"] = check["predicted_speedup"] / check["measured_speedup"] - 1
    return check[CHECK_COLUMNS].reset_index(drop=True)


def prediction_accuracy(check: pd.DataFrame) -> dict:
    """How well a prediction_check came out: n (measured runs with a prediction), the share
    whose target forwards were predicted exactly (meaningful under greedy decoding; under
    sampling predictions are expectations) and the share whose speedup was within 10%
    (|speedup_error| <= 0.10; runs without both speedups count as outside), and the median
    error (predicted / measured - 1: above 0, the predictions ran high); then the same
    for geometric means over repeats, per point (drafter x policy x gamma x temperature x
    prompt): points, the most repeats a point has, and the share within 10%; and over
    prompts, per configuration (drafter x policy x gamma x temperature: what the summary
    tables show): configurations, and the share within 10%.

    Why points: under sampling a prediction is an expectation and a run one sample, whose
    accepted lengths (and text) vary from seed to seed; a sweep with --repeats compares the
    mean of each point's runs, where that variance shrinks. Shares are None when n is 0."""
    n = len(check)
    if not n:
        return {
            "n": 0,
            "forwards_equal_share": None,
            "within_10pct_share": None,
            "median_error": None,
            "points": 0,
            "repeats_per_point": 0,
            "points_within_10pct_share": None,
            "configurations": 0,
            "configurations_within_10pct_share": None,
        }
    by_point = check.groupby([*CHECK_GROUP, "prompt_id"], sort=False)
    points = _mean_errors(by_point)
    configurations = _mean_errors(check.groupby(CHECK_GROUP, sort=False))
    return {
        "n": n,
        "forwards_equal_share": float(check["forwards_equal"].mean()),
        "within_10pct_share": _share_within(check["speedup_error"].tolist()),
        "median_error": _median(check["speedup_error"]),
        "points": len(points),
        "repeats_per_point": int(by_point.size().max()),
        "points_within_10pct_share": _share_within(points),
        "configurations": len(configurations),
        "configurations_within_10pct_share": _share_within(configurations),
    }


def _mean_errors(groups) -> list[float | None]:
    """Per group of a prediction_check's rows (a pandas GroupBy): geometric-mean predicted /
    geometric-mean measured - 1."""
    return [_ratio(geometric_mean(g["predicted_speedup"]), geometric_mean(g["measured_speedup"])) for _, g in groups]


def _median(values: pd.Series) -> float | None:
    """The median of the known values, or None when there are none."""
    known = values.dropna()
    return float(known.median()) if len(known) else None


def _share_within(errors: list[float | None], bound: float = 0.10) -> float:
    """The share of errors within bound (None and NaN count as outside)."""
    return sum(e is not None and abs(e) <= bound for e in errors) / len(errors)


def _ratio(predicted: float | None, measured: float | None) -> float | None:
    """predicted / measured - 1, or None when either is missing."""
    return predicted / measured - 1 if predicted and measured else None


def plain_repeatability(runs: pd.DataFrame | Iterable[dict]) -> dict:
    """The sweep's noise floor. Each measured prompt's plain decoding is timed twice: in
    phase 1 (PROFILE, the path of its predictions) and beside its measured runs (MEASURED,
    their baseline). n: the (prompt, repeat) pairs with both; within_10pct_share: the share
    whose two tokens/s agree within 10% (measured / profile - 1); median_difference: the
    median of |measured / profile - 1|. A measured speedup is a ratio of two timings like
    these, so the share of predictions within 10% of it is bounded by the machine as well
    as by the model. Shares are None when n is 0."""
    import pandas as pd

    runs = as_runs(runs)
    plain = runs[runs["method"] == BASELINE_METHOD]
    keys = ["temperature", "prompt_id", "repeat"]
    both = pd.merge(
        plain[plain["source"] == PROFILE][[*keys, "tokens_per_second"]],
        plain[plain["source"] == MEASURED][[*keys, "tokens_per_second"]],
        on=keys,
        suffixes=("_p", "_m"),
    )
    difference = (both["tokens_per_second_m"] / both["tokens_per_second_p"] - 1).abs().dropna()
    if not len(difference):
        return {"n": 0, "within_10pct_share": None, "median_difference": None}
    return {
        "n": len(difference),
        "within_10pct_share": float((difference <= 0.10).mean()),
        "median_difference": float(difference.median()),
    }


PRICE_COLUMNS = [
    "drafter",
    "policy",
    "gamma",
    "prompt_id",
    "repeat",
    "category",
    "plain",
    "draft",
    "verify",
    "loop_ms",
    "loop_priced_ms",
]
PRICE_PARTS = ("plain", "draft", "verify")  # price_check's ratios of seconds measured to seconds priced


def price_check(
    rows: Iterable[dict], rounds: dict[tuple[str, ...], RoundCounts], costs_of: Callable[[dict], Costs]
) -> pd.DataFrame:
    """Where each measured specbench run's time went, against the costs that priced its
    prediction: one row (PRICE_COLUMNS) per measured run whose prediction made its rounds
    (equal target forwards and drafts, so the prediction's RoundCounts in `rounds`, by
    row_key, stand for the run's) and whose prompt has a measured plain run. rows: runs.csv
    as read_rows gives it; costs_of: a predicted row's costs (reprice.sweep_prices).

    plain: the measured plain run's step (1 / its tokens/s) over the plain step priced
    (Costs.plain_step_seconds, else t(1)); draft: the run's draft seconds over its drafter
    forwards' price (c t(1) u(n) each; None where it ran none); verify: its verify seconds
    over its verify passes' (v(k + 1) t(1) each); loop_ms: the rest of its decode time a
    round, beside loop_priced_ms (Costs.loop_seconds). Above 1, a part ran slower than
    priced: plain above 1 makes the measured speedup beat its prediction, draft or verify
    above 1 makes it fall short."""
    import pandas as pd

    rows = list(rows)
    baselines = baselines_from_rows(rows)  # the plain runs each measured speedup was taken against
    predicted = {row_key(row): row for row in rows if row.get("source") == PREDICTED}
    found = []
    for row in rows:
        if row["method"] != "specbench" or (row.get("source") or MEASURED) != MEASURED:
            continue
        key = row_key({**row, "source": PREDICTED})
        twin, baseline = predicted.get(key), baselines.get(baseline_key(MEASURED, row["prompt_id"], row["repeat"]))
        if twin is None or key not in rounds or not _same_rounds(row, twin):
            continue
        if baseline is None or not baseline.tokens_per_second or not _positive(row["decode_seconds"]):
            continue
        counts, costs = rounds[key], costs_of(twin)
        prices = modelled_prices(counts, costs)
        if prices is None or not counts.rounds:
            continue
        step = 1.0 / baseline.tokens_per_second
        t1 = costs.target_step_seconds
        draft, verify = float(row["draft_seconds"] or 0), float(row["verify_seconds"] or 0)
        found.append(
            {
                **{k: row[k] for k in ("drafter", "policy", "gamma", "prompt_id", "repeat", "category")},
                "plain": step / (costs.plain_step_seconds or t1),
                "draft": draft / (prices.drafter * t1) if prices.drafter > 0 else None,
                "verify": verify / (prices.verify * t1),
                "loop_ms": (float(row["decode_seconds"]) - draft - verify) / counts.rounds * 1000,
                "loop_priced_ms": prices.loop / counts.rounds * t1 * 1000,
            }
        )
    return pd.DataFrame(found, columns=PRICE_COLUMNS)


def price_accuracy(check: pd.DataFrame) -> dict:
    """The medians of a price_check over its runs: n, and plain, draft, verify, loop_ms and
    loop_priced_ms (None where no run has the part)."""
    medians = {}
    for column in (*PRICE_PARTS, "loop_ms", "loop_priced_ms"):
        known = [float(v) for v in check[column] if v is not None and v == v]
        medians[column] = statistics.median(known) if known else None
    return {"n": len(check), **medians}


def _same_rounds(measured: dict, predicted: dict) -> bool:
    """Whether a prediction made the measured run's rounds: the same target forwards and drafts."""
    pairs = [(_value(measured[k]), _value(predicted[k])) for k in ("target_forwards", "drafted")]
    return all(m is not None and p is not None and abs(m - p) < 0.5 for m, p in pairs)


def _value(text) -> float | None:
    """A runs.csv cell as a number, None when blank or not one."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def _positive(text) -> bool:
    value = _value(text)
    return value is not None and value > 0
