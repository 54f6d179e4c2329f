"""runs.csv, the file a sweep writes one row per run to: its schema, the key of a run, and
writing and reading it; make_dir for the results directory that holds it.

Writing appends one row at a time with the csv module and closes the file after each, so an
interrupted sweep loses at most the row it was writing. Reading is pandas: `load_runs` parses
every number once into a typed DataFrame, which the summaries and charts take; a resumed
sweep reads the same rows as text (`read_rows`) and compares their keys with its plan.
positions.py writes and reads positions.csv with the same helpers (append_csv, read_cells).

runs.csv: one row per source x method x drafter x policy x gamma x prompt x repeat, where
source is "measured" (a timed run), "predicted" (replayed on the prompt's plain path,
profile.py) or "profile" (that plain run: a predicted row's tokens_per_second is its
speedup times this run's; a measured run is compared with the plain run timed beside it).
A file from before predictions reads as measured. Blank cells mean "does not apply or is
not known" (the plain run has no drafter; HF's assisted generation may not reveal its
acceptance; identical_to_baseline is only checked for greedy runs); load_runs reads them
as NaN (numbers), NA (identical_to_baseline) or "" (text).

The CLI imports this module for the schema at start-up, so pandas is imported on first use,
inside the functions that need it (plotting and the end-of-sweep table pay for it, `--help`
does not).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.bench.labels import MEASURED
from specbench.errors import ResultsError

if TYPE_CHECKING:
    import pandas as pd

RUNS_CSV = "runs.csv"
STEPS_JSONL = "steps.jsonl"

# the cells that say which run a row is (with its source), in runs.csv and positions.csv
RUN_COLUMNS = ("method", "drafter", "policy", "gamma", "temperature", "prompt_id", "category", "repeat")
# the columns DESIGN.md promises, then extra detail
REQUIRED_COLUMNS = (
    *RUN_COLUMNS,
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
# how load_runs types the columns: text stays text ("" when blank), the flag becomes a nullable
# boolean, every other column of the schema is a float64 number (NaN when blank)
TEXT_COLUMNS = ("source", "method", "drafter", "policy", "prompt_id", "category", "stop_reason", "output_hash")
FLAG_COLUMNS = ("identical_to_baseline",)
NUMBER_COLUMNS = tuple(c for c in COLUMNS if c not in TEXT_COLUMNS + FLAG_COLUMNS)
GROUP_COLUMNS = ["source", "method", "drafter", "policy", "gamma"]  # one Summary per group


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


def append_row(path: Path, row: dict) -> None:
    """Append one row (writing the header first for a new file) and close, so it is on disk.
    A file started by an older version keeps its own columns (a resume never misaligns); a
    row that is not measured cannot go into one without a source column (a ResultsError), as
    it would read back as measured."""
    columns, new = file_columns(path, COLUMNS)
    if not new and "source" not in columns and (row.get("source") or MEASURED) != MEASURED:
        raise ResultsError(
            f"{path} was begun before predictions (no source column): {row.get('source')} rows would"
            " read as measured; write them to a new directory"
        )
    append_csv(path, columns, new, [row])


def file_columns(path: Path, default: Iterable[str]) -> tuple[list[str], bool]:
    """(the columns to write rows of `path` under, whether the file is new): `default` for a
    new (absent or empty) file, else the file's own header, after ending a half-written last
    line."""
    new = not path.exists() or path.stat().st_size == 0
    columns = list(default)
    if not new:
        _end_with_newline(path)
        with open(path, newline="", encoding="utf-8") as handle:
            columns = next(csv.reader(handle), None) or columns  # the file's own order
    return columns, new


def append_csv(path: Path, columns: list[str], new: bool, rows: Iterable[dict]) -> None:
    """Append rows under `columns` (the header first when the file is new) and close."""
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
    cells = _runs_cells(Path(path))
    cells["source"] = cells["source"].replace("", MEASURED) if "source" in cells else MEASURED
    return cells.to_dict("records")


def load_runs(path: Path) -> pd.DataFrame:
    """runs.csv (the file, or the results directory holding it) as a typed DataFrame: one row
    per run, every column of COLUMNS present (blank in a file begun by an older version), plus
    any other column the file has. Numbers are parsed once, here: a cell that is not a number
    is a ResultsError naming its column and prompt."""
    path = Path(path)
    return _typed(_runs_cells(path / RUNS_CSV if path.is_dir() else path))


def as_runs(runs: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """What the aggregations take: a DataFrame from load_runs (returned as it is), or rows as
    read_rows gives them (typed here, as load_runs would)."""
    import pandas as pd

    if isinstance(runs, pd.DataFrame):
        return runs
    return _typed(pd.DataFrame(list(runs), dtype=object).fillna("").astype(str))


def _runs_cells(path: Path) -> pd.DataFrame:
    """runs.csv as text, or a ResultsError when there is no such file."""
    if not path.is_file():
        raise ResultsError(f"no {path.name} in {path.parent} (is it a sweep's results directory?)")
    return read_cells(path, REQUIRED_COLUMNS, RUNS_CSV)


def read_cells(path: Path, required: Iterable[str], kind: str) -> pd.DataFrame:
    """A results CSV as text ("" when blank). The python parser tells a short line from blank
    cells: the cells a half-written line lacks read as NaN, and a line with too many cells is
    skipped; either way it is a row an interrupted sweep did not finish, and is dropped. A
    file that cannot be read, or lacks a `required` column, is a ResultsError naming `kind`."""
    import pandas as pd

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
    missing = [c for c in required if c not in cells.columns]
    if missing:
        raise ResultsError(f"{path} is not a {kind}: missing column(s) {', '.join(missing)}")
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


def make_dir(path: Path, error: type[Exception] = ResultsError) -> Path:
    """mkdir -p for an output folder, or `error` in one line saying why it cannot be one
    (a file of that name, no permission, a read-only file system)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot write to {path}: {exc.strerror or exc}") from None
    return path
