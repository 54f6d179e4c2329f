"""The results directory of a sweep: the runs.csv schema, writing and reading it, gamma
ranges, and the aggregation every report of a sweep shares.

Writing appends one row at a time with the csv module and closes the file after each, so an
interrupted sweep loses at most the row it was writing. Reading is pandas: `load_runs` parses
every number once into a typed DataFrame, and summaries (group by method/drafter/policy/gamma),
geometric means, pooled acceptance and the per-category pivot are computed on it; a resumed
sweep reads the same rows as text (`read_rows`). `estimate_alpha` fits the theory's alpha to
measured counts.

It knows nothing about models or decoding; metrics are defined in core/stats.py. The CLI
imports this module for the schema at start-up, so pandas is imported on first use, inside the
functions that need it (plotting and the end-of-sweep table pay for it, `--help` does not).

runs.csv: one row per method x drafter x policy x gamma x prompt x repeat. Blank cells mean
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

from specbench.errors import OptionError as GammaRangeError, ResultsError
from specbench.core.stats import expected_tokens_per_round

if TYPE_CHECKING:
    import pandas as pd

RUNS_CSV = "runs.csv"
META_JSON = "meta.json"
STEPS_JSONL = "steps.jsonl"

# the columns DESIGN.md promises, then extra detail
REQUIRED_COLUMNS = (
    "method", "drafter", "policy", "gamma", "temperature", "prompt_id", "category", "repeat",
    "new_tokens", "drafted", "accepted", "acceptance_rate", "mean_accepted_length",
    "target_forwards", "tokens_per_second", "speedup", "c", "identical_to_baseline",
)  # fmt: skip
EXTRA_COLUMNS = (
    "rounds", "first_pass_tokens", "prompt_tokens", "prefill_seconds", "decode_seconds",
    "draft_seconds", "verify_seconds", "stop_reason", "seed", "output_hash", "predicted_speedup",
)  # fmt: skip
COLUMNS = REQUIRED_COLUMNS + EXTRA_COLUMNS
KEY_COLUMNS = ("method", "drafter", "policy", "gamma", "temperature", "prompt_id", "repeat")
# how load_runs types the columns: text stays text ("" when blank), the flag becomes a nullable
# boolean, every other column of the schema is a float64 number (NaN when blank)
TEXT_COLUMNS = ("method", "drafter", "policy", "prompt_id", "category", "stop_reason", "output_hash")
FLAG_COLUMNS = ("identical_to_baseline",)
NUMBER_COLUMNS = tuple(c for c in COLUMNS if c not in TEXT_COLUMNS + FLAG_COLUMNS)
GROUP_COLUMNS = ["method", "drafter", "policy", "gamma"]  # one Summary per group
BASELINE_METHOD = "plain"
MODEL_DRAFTER = "model"  # the drafter that drafts with the drafter model (drafters/)
FIXED_POLICY = "fixed"  # the fixed-gamma policy (policies/), the setting of the theory


# ---------------------------------------------------------------------------- gamma ranges


def parse_gammas(text: str) -> list[int]:
    """"4" -> [4]; "1..4" -> [1, 2, 3, 4]; "1,2,4" and "1..3,8" work too. Sorted, no repeats."""
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


def run_key(method: str, drafter: str, policy: str, gamma, temperature, prompt_id: str, repeat) -> tuple[str, ...]:
    """The identity of one run, normalised so that a row read back from CSV matches its plan."""
    gamma_cell = "" if gamma in (None, "") else str(int(gamma))
    return (method, drafter or "", policy or "", gamma_cell, f"{float(temperature):g}", str(prompt_id), str(int(repeat)))


def row_key(row: dict) -> tuple[str, ...]:
    return run_key(*(row[c] for c in KEY_COLUMNS))


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
    A file started by an older version keeps its own columns (a resume never misaligns)."""
    new = not path.exists() or path.stat().st_size == 0
    columns = list(COLUMNS)
    if not new:
        _end_with_newline(path)
        with open(path, newline="", encoding="utf-8") as handle:
            columns = next(csv.reader(handle), None) or columns
    with open(path, "a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
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
    return _read_cells(Path(path)).to_dict("records")


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
    return _typed(pd.DataFrame(list(runs)).fillna("").astype(str))


def _read_cells(path: Path) -> pd.DataFrame:
    """runs.csv as text. The python parser tells a short line from blank cells: the cells a
    half-written line lacks read as NaN (blank ones as ""), and a line with too many cells is
    skipped; either way it is a row an interrupted sweep did not finish."""
    import pandas as pd

    if not path.is_file():
        raise ResultsError(f"no {path.name} in {path.parent} (is it a sweep's results directory?)")
    try:
        cells = pd.read_csv(path, dtype=str, keep_default_na=False, engine="python", on_bad_lines="skip", index_col=False, encoding="utf-8")
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
        raise ResultsError(f"column {column!r} holds {text[first]!r}, not a number (prompt {runs.at[first, 'prompt_id']!r})")
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


# ---------------------------------------------------------------------------- aggregation


@dataclass(frozen=True)
class Summary:
    """One method x drafter x policy x gamma, aggregated over prompts and repeats."""

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
    return [config_label(m, d, p, _whole(g)) for m, d, p, g in zip(frame["method"], frame["drafter"], frame["policy"], gammas)]


def geometric_mean(values: Iterable[float | None]) -> float | None:
    """exp(mean(log v)) over the positive values (blank, NaN, zero and negative ones are left
    out); None when none is positive. Takes a list or a pandas Series (a groupby aggregate)."""
    import numpy as np
    import pandas as pd

    values = pd.Series(values, dtype="float64")
    positive = values[values > 0]
    return float(np.exp(np.log(positive).mean())) if len(positive) else None


def summary_frame(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """One row per method x drafter x policy x gamma, best speedup first: Summary's fields (NaN
    where Summary has None) and the configuration's label."""
    runs = _summary_inputs(as_runs(runs))
    table = runs.groupby(GROUP_COLUMNS, dropna=False, sort=False).agg(
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
    ).reset_index()
    # pooled acceptance: RunStats.acceptance_rate (accepted / drafted) over the group's counts
    pooled = table["accepted"] / table["drafted"].where(table["drafted"] > 0)
    table["acceptance_rate"] = pooled.where(table["known"])
    table[["speedup", "predicted_speedup"]] = table[["speedup", "predicted_speedup"]].astype("float64")
    table["label"] = labels(table)
    table = table.sort_values(["speedup", "tokens_per_second"], ascending=False, na_position="last", kind="stable")
    return table[[*SUMMARY_FIELDS, "label"]].reset_index(drop=True)


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
    """One Summary per method x drafter x policy x gamma, best speedup first. Takes load_runs's
    DataFrame or read_rows's rows."""
    return [_summary(row) for row in summary_frame(runs).to_dict("records")]


def _summary(row: dict) -> Summary:
    def real(value) -> float | None:
        return None if value != value else float(value)  # NaN -> None

    return Summary(
        row["method"], row["drafter"], row["policy"], _whole(row["gamma"]), int(row["runs"]),
        real(row["acceptance_rate"]), real(row["mean_accepted_length"]), real(row["tokens_per_second"]),
        real(row["speedup"]), real(row["predicted_speedup"]), int(row["differs"]), int(row["checked"]),
    )  # fmt: skip


def _whole(value) -> int | None:
    """A gamma cell as an int; None for blank (None or NaN)."""
    return None if value is None or value != value else int(value)


def speedup_by_category(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """The geometric-mean speedup of each configuration in each prompt category: one row per
    method x drafter x policy x gamma (indexed by its label with gamma), one column per
    category, both in order of first appearance; NaN where a configuration has no speedup."""
    runs = as_runs(runs)
    configurations = runs.assign(configuration=labels(runs, with_gamma=True))
    pivot = configurations.pivot_table(index="configuration", columns="category", values="speedup", aggfunc=geometric_mean, sort=False)
    return pivot.reindex(index=configurations["configuration"].unique(), columns=runs["category"].unique()).astype("float64")


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
