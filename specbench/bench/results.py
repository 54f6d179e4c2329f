"""The results directory of a sweep: the runs.csv schema, writing and reading it, gamma
ranges, and the aggregation every report of a sweep shares.

Writing appends one row at a time with the csv module and closes the file after each, so an
interrupted sweep loses at most the row it was writing. Reading is pandas: `load_runs` parses
every number once into a typed DataFrame, and summaries (group by source/method/drafter/
policy/gamma, with 95% bootstrap intervals over prompts), geometric means, pooled acceptance,
the per-category pivot and the comparisons of predictions with measurements and with the
oracle are computed on it; a resumed sweep reads the same rows as text (`read_rows`).
positions.csv (per run, the drafts reached and accepted at each draft position) is written and
read the same way. `estimate_alpha` fits the theory's alpha to measured counts.

It knows nothing about models or decoding; metrics are defined in core/stats.py. The CLI
imports this module for the schema at start-up, so pandas is imported on first use, inside the
functions that need it (plotting and the end-of-sweep table pay for it, `--help` does not).

runs.csv: one row per source x method x drafter x policy x gamma x prompt x repeat, where
source is "measured" (a timed run), "predicted" (replayed on the prompt's plain path,
profile.py) or "profile" (that plain run: a predicted row's tokens_per_second is its
speedup times this run's; a measured run is compared with the plain run timed beside it). A file from before predictions reads as measured. Blank cells mean
"does not apply or is not known" (the plain run has no drafter; HF's assisted generation may
not reveal its acceptance; identical_to_baseline is only checked for greedy runs); load_runs
reads them as NaN (numbers), NA (identical_to_baseline) or "" (text).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.core.stats import expected_tokens_per_round
from specbench.errors import OptionError as GammaRangeError
from specbench.errors import ResultsError

if TYPE_CHECKING:
    import pandas as pd

RUNS_CSV = "runs.csv"
POSITIONS_CSV = "positions.csv"
META_JSON = "meta.json"
STEPS_JSONL = "steps.jsonl"

# the columns DESIGN.md promises, then extra detail
REQUIRED_COLUMNS = (
    "method",
    "drafter",
    "policy",
    "gamma",
    "temperature",
    "prompt_id",
    "category",
    "repeat",
    "new_tokens",
    "drafted",
    "accepted",
    "acceptance_rate",
    "mean_accepted_length",
    "target_forwards",
    "tokens_per_second",
    "speedup",
    "c",
    "identical_to_baseline",
)
EXTRA_COLUMNS = (
    "rounds",
    "first_pass_tokens",
    "prompt_tokens",
    "prefill_seconds",
    "decode_seconds",
    "draft_seconds",
    "verify_seconds",
    "stop_reason",
    "seed",
    "output_hash",
    "predicted_speedup",
    "source",
)
COLUMNS = REQUIRED_COLUMNS + EXTRA_COLUMNS
KEY_COLUMNS = ("source", "method", "drafter", "policy", "gamma", "temperature", "prompt_id", "repeat")
POSITION_COLUMNS = (
    "source",
    "method",
    "drafter",
    "policy",
    "gamma",
    "temperature",
    "prompt_id",
    "category",
    "repeat",
    "position",
    "reached",
    "accepted",
)
POSITION_NUMBERS = ("gamma", "temperature", "repeat", "position", "reached", "accepted")  # the rest is text
MEASURED, PREDICTED, PROFILE = "measured", "predicted", "profile"
ORACLE_POLICY = "oracle"  # profile.py's label for the bound of every policy over a drafter
# how load_runs types the columns: text stays text ("" when blank), the flag becomes a nullable
# boolean, every other column of the schema is a float64 number (NaN when blank)
TEXT_COLUMNS = ("source", "method", "drafter", "policy", "prompt_id", "category", "stop_reason", "output_hash")
FLAG_COLUMNS = ("identical_to_baseline",)
NUMBER_COLUMNS = tuple(c for c in COLUMNS if c not in TEXT_COLUMNS + FLAG_COLUMNS)
GROUP_COLUMNS = ["source", "method", "drafter", "policy", "gamma"]  # one Summary per group
BASELINE_METHOD = "plain"
MODEL_DRAFTER = "model"  # the drafter that drafts with the drafter model (drafters/)
MODEL_SEPARATOR = "@"  # "model@NAME": a drafter label naming its drafter model, in a sweep with several
FIXED_POLICY = "fixed"  # the fixed-gamma policy (policies/), the setting of the theory


def drafter_label(drafter: str, model_name: str = "") -> str:
    """A drafter's label in the rows: the drafter's name, with "@model_name" when the sweep
    compares several drafter models (model_name "" when it has one: labels stay bare)."""
    return f"{drafter}{MODEL_SEPARATOR}{model_name}" if model_name else drafter


def drafter_model_name(name: str) -> str:
    """A drafter model's name in labels (model@NAME), from its display name: without
    ".gguf", and "-" for the separator and commas (which lists of labels use)."""
    name = name.removesuffix(".gguf").strip()
    return name.replace(MODEL_SEPARATOR, "-").replace(",", "-") or "drafter"


def label_parts(label: str) -> tuple[str, str]:
    """(drafter name, drafter model name) of a label; the model name is "" when the label
    names none."""
    drafter, _, model_name = label.partition(MODEL_SEPARATOR)
    return drafter, model_name


# ---------------------------------------------------------------------------- gamma ranges


def parse_gammas(text: str) -> list[int]:
    """ "4" -> [4]; "1..4" -> [1, 2, 3, 4]; "1,2,4" and "1..3,8" work too. Sorted, no repeats."""
    gammas: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if ".." in part:
            start, _, end = part.partition("..")
            lo, hi = _gamma_number(start, text), _gamma_number(end, text)
            if lo > hi:
                raise GammaRangeError(f"bad gamma range {part!r}: the start is above the end (write {hi}..{lo})")
            gammas.update(range(lo, hi + 1))
        else:
            gammas.add(_gamma_number(part, text))
    return sorted(gammas)


def _gamma_number(token: str, text: str) -> int:
    token = token.strip()
    if not token.isdigit():
        raise GammaRangeError(f"bad gamma {text!r}: use a number (4), a range (1..8) or a list (1,2,4)")
    value = int(token)
    if value < 1:
        raise GammaRangeError(f"bad gamma {text!r}: gamma must be >= 1, got {value}")
    return value


# ---------------------------------------------------------------------------- keys and cells


def run_key(
    source: str, method: str, drafter: str, policy: str, gamma, temperature, prompt_id: str, repeat
) -> tuple[str, ...]:
    """The identity of one run, normalised so that a row read back from CSV matches its plan."""
    gamma_cell = "" if gamma in (None, "") else str(int(float(gamma)))
    return (
        source or MEASURED,
        method,
        drafter or "",
        policy or "",
        gamma_cell,
        f"{float(temperature):g}",
        str(prompt_id),
        str(int(float(repeat))),
    )


def row_key(row: dict) -> tuple[str, ...]:
    return run_key(*(row.get(c) if c == "source" else row[c] for c in KEY_COLUMNS))


def output_hash(token_ids: list[int]) -> str:
    """A short fingerprint of an output, so that resumed sweeps can still compare with the baseline."""
    return hashlib.sha1(",".join(map(str, token_ids)).encode()).hexdigest()[:16]


def cell(value) -> str:
    """How a value is written to runs.csv (None -> blank)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


# ---------------------------------------------------------------------------- writing runs.csv (csv)


def append_row(path: Path, row: dict) -> None:
    """Append one row (writing the header first for a new file) and close, so it is on disk.
    A file started by an older version keeps its own columns (a resume never misaligns); a
    row that is not measured cannot go into one without a source column (a ResultsError), as
    it would read back as measured."""
    new = not path.exists() or path.stat().st_size == 0
    columns = list(COLUMNS)
    if not new:
        _end_with_newline(path)
        with open(path, newline="", encoding="utf-8") as handle:
            columns = next(csv.reader(handle), None) or columns
        if "source" not in columns and (row.get("source") or MEASURED) != MEASURED:
            raise ResultsError(
                f"{path} was begun before predictions (no source column): {row.get('source')} rows would read as measured; write them to a new directory"
            )
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({c: cell(row.get(c)) for c in columns})


def append_positions(path: Path, rows: list[dict]) -> None:
    """Append one run's positions.csv rows (POSITION_COLUMNS: reached and accepted drafts at
    each 1-based draft position; expectations, so possibly fractional, for a sampled
    prediction) and close, as append_row does: the header first for a new file, the file's
    own column order otherwise, a half-written last line ended first."""
    new = not path.exists() or path.stat().st_size == 0
    columns = list(POSITION_COLUMNS)
    if not new:
        _end_with_newline(path)
        with open(path, newline="", encoding="utf-8") as handle:
            columns = next(csv.reader(handle), None) or columns  # the file's own order
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow({c: cell(row.get(c)) for c in columns})


def _end_with_newline(path: Path) -> None:
    """A run killed mid-write can leave half a line; start the next row on a line of its own."""
    with open(path, "rb+") as handle:
        handle.seek(-1, 2)
        if handle.read(1) != b"\n":
            handle.write(b"\n")


# ---------------------------------------------------------------------------- reading runs.csv (pandas)


def read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a runs.csv as text cells ("" when blank), as a resumed sweep compares them with
    its plan (row_key). A missing file or missing columns is a ResultsError; incomplete lines
    (an interrupted write) are skipped."""
    cells = _read_cells(Path(path))
    cells["source"] = cells["source"].replace("", MEASURED) if "source" in cells else MEASURED
    return cells.to_dict("records")


def load_runs(path: Path) -> pd.DataFrame:
    """runs.csv (the file, or the results directory holding it) as a typed DataFrame: one row
    per run, every column of COLUMNS present (blank in a file begun by an older version), plus
    any other column the file has. Numbers are parsed once, here: a cell that is not a number
    is a ResultsError naming its column and prompt."""
    path = Path(path)
    return _typed(_read_cells(path / RUNS_CSV if path.is_dir() else path))


def as_runs(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """What the aggregations take: a DataFrame from load_runs (returned as it is), or rows as
    read_rows gives them (typed here, as load_runs would)."""
    import pandas as pd

    if isinstance(runs, pd.DataFrame):
        return runs
    return _typed(pd.DataFrame(list(runs), dtype=object).fillna("").astype(str))


def _read_cells(path: Path) -> pd.DataFrame:
    """runs.csv as text. The python parser tells a short line from blank cells: the cells a
    half-written line lacks read as NaN (blank ones as ""), and a line with too many cells is
    skipped; either way it is a row an interrupted sweep did not finish."""
    import pandas as pd

    if not path.is_file():
        raise ResultsError(f"no {path.name} in {path.parent} (is it a sweep's results directory?)")
    try:
        cells = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            engine="python",
            on_bad_lines="skip",
            index_col=False,
            encoding="utf-8",
        )
    except pd.errors.EmptyDataError:
        cells = pd.DataFrame()
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in cells.columns]
    if missing:
        raise ResultsError(f"{path} is not a runs.csv: missing column(s) {', '.join(missing)}")
    return cells.dropna().reset_index(drop=True)


def _typed(cells: pd.DataFrame) -> pd.DataFrame:
    """Text cells -> the typed table (see TEXT_COLUMNS, FLAG_COLUMNS, NUMBER_COLUMNS)."""
    runs = cells.reindex(columns=list(dict.fromkeys([*COLUMNS, *cells.columns])), fill_value="")
    runs["source"] = runs["source"].replace("", MEASURED)
    for column in NUMBER_COLUMNS:
        runs[column] = _numbers(runs, column)
    for column in FLAG_COLUMNS:
        runs[column] = runs[column].map({"true": True, "false": False}).astype("boolean")
    return runs


def _numbers(runs: pd.DataFrame, column: str) -> pd.Series:
    import pandas as pd

    text = runs[column].astype(str).str.strip()
    values = pd.to_numeric(text, errors="coerce").astype("float64")  # "" -> NaN
    bad = values.isna() & ~text.str.lower().isin(("", "nan"))
    if bad.any():
        first = bad.idxmax()
        raise ResultsError(
            f"column {column!r} holds {text[first]!r}, not a number (prompt {runs.at[first, 'prompt_id']!r})"
        )
    return values


# ---------------------------------------------------------------------------- meta.json


def read_meta(directory: Path) -> dict:
    """meta.json of a results directory ({} when absent); malformed JSON is a ResultsError."""
    path = Path(directory) / META_JSON
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"{path} should hold a JSON object")
    return data


def make_dir(path: Path, error: type[Exception] = ResultsError) -> Path:
    """mkdir -p for an output folder, or `error` in one line saying why it cannot be one
    (a file of that name, no permission, a read-only file system)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot write to {path}: {exc.strerror or exc}") from None
    return path


def write_meta(directory: Path, meta: dict) -> None:
    path = Path(directory) / META_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # never leave a half-written meta.json


def verify_costs(meta: dict) -> dict[int, float]:
    """v(k) from meta.json as {k: t(k)/t(1)} (empty when not measured)."""
    raw = meta.get("verify_cost") or {}
    try:
        return {int(k): float(v) for k, v in raw.items()}
    except (AttributeError, TypeError, ValueError):
        raise ResultsError("meta.json: 'verify_cost' should map k to t(k)/t(1)") from None


def plain_and_loop(meta: dict) -> tuple[float, float]:
    """The plain decoding step and the loop's own work per round, in target steps t(1), from
    meta.json's costs (Costs.plain_step and Costs.loop; 1.0 and 0.0 for a sweep from before
    they were measured)."""
    costs = meta.get("costs") or {}
    try:
        plain, loop, step = (
            float(costs.get(name) or 0) for name in ("plain_step_seconds", "loop_seconds", "target_step_seconds")
        )
    except (AttributeError, TypeError, ValueError):
        raise ResultsError("meta.json: 'costs' should hold its times as seconds") from None
    if step <= 0:
        return 1.0, 0.0
    return (plain / step if plain > 0 else 1.0), max(0.0, loop / step)


# ---------------------------------------------------------------------------- aggregation


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


def config_label(method: str, drafter: str, policy: str, gamma: int | None = None) -> str:
    """How charts name a configuration: "specbench / model / cost", ", γ=12" when gamma is given."""
    label = " / ".join(p for p in (method, drafter, policy) if p)
    return label if gamma is None else f"{label}, γ={gamma}"


def labels(frame: pd.DataFrame, with_gamma: bool = False) -> list[str]:
    """config_label of each row of a runs or summary table (", γ=4" too when with_gamma)."""
    gammas = frame["gamma"] if with_gamma else [None] * len(frame)
    return [
        config_label(m, d, p, _whole(g))
        for m, d, p, g in zip(frame["method"], frame["drafter"], frame["policy"], gammas)
    ]


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
        _whole(row["gamma"]),
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


def _whole(value) -> int | None:
    """A gamma cell as an int; None for blank (None or NaN)."""
    return None if value is None or value != value else int(value)


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


# ---------------------------------------------------------------------------- predictions against measurements


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


def load_positions(directory: Path) -> pd.DataFrame:
    """positions.csv of a results directory: POSITION_COLUMNS, the numbers as float64 (an
    empty table with those columns when the file is absent or empty). Lines an interrupted
    sweep left unfinished are dropped."""
    import pandas as pd

    path = Path(directory) / POSITIONS_CSV
    empty = pd.DataFrame(
        {c: pd.Series(dtype="float64" if c in POSITION_NUMBERS else "object") for c in POSITION_COLUMNS}
    )
    if not path.is_file() or path.stat().st_size == 0:
        return empty
    try:
        table = pd.read_csv(
            path,
            dtype=str,
            keep_default_na=False,
            engine="python",
            on_bad_lines="skip",
            index_col=False,
            encoding="utf-8",
        )
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise ResultsError(f"cannot read {path}: {exc}") from None
    missing = [c for c in POSITION_COLUMNS if c not in table.columns]
    if missing:
        raise ResultsError(f"{path} is not a positions.csv: missing column(s) {', '.join(missing)}")
    table = table.dropna()  # a half-written last line (python parser: its missing cells are NaN)
    table["source"] = table["source"].replace("", MEASURED)
    for column in POSITION_NUMBERS:
        table[column] = pd.to_numeric(table[column].str.strip(), errors="coerce").astype("float64")
    return table.dropna(subset=["position", "reached", "accepted"]).reset_index(drop=True)


def position_acceptance(positions: pd.DataFrame, by=("source", "drafter", "policy", "gamma")) -> pd.DataFrame:
    """Acceptance at each draft position i given drafts 1..i-1 of the round were accepted:
    sum(accepted) / sum(reached) over each group (token-weighted)."""
    table = (
        positions.groupby([*by, "position"], sort=True, dropna=False)
        .agg(reached=("reached", "sum"), accepted=("accepted", "sum"))
        .reset_index()
    )
    table["acceptance"] = table["accepted"] / table["reached"].where(table["reached"] > 0)
    return table


# ---------------------------------------------------------------------------- theory from measurements


def expected_accepted_fraction(alpha: float, gamma: int) -> float:
    """E[accepted drafts] / gamma for a full draft of gamma tokens, each accepted with
    probability alpha until the first rejection: (E[tokens per round] - 1) / gamma."""
    return (expected_tokens_per_round(alpha, gamma) - 1.0) / gamma


def estimate_alpha(points: list[tuple[int, float, float]]) -> float | None:
    """The per-token acceptance probability alpha that best explains measured counts.

    points: (gamma, drafted, accepted) per run or group. accepted / drafted is not alpha: a
    rejection ends the round, so later drafts never get their chance. We solve
    sum(drafted * E[accepted fraction | alpha, gamma]) = sum(accepted) for alpha by bisection
    (the left side grows with alpha). Assumes full drafts of gamma tokens (a fixed policy).
    """
    points = [(int(g), d, a) for g, d, a in points if g and d]
    if not points:
        return None
    accepted = sum(a for _, _, a in points)

    def excess(alpha: float) -> float:
        return sum(d * expected_accepted_fraction(alpha, g) for g, d, _ in points) - accepted

    lo, hi = 0.0, 1.0
    if excess(hi - 1e-12) <= 0:
        return 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if excess(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
