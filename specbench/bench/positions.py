"""positions.csv: per run, the drafts reached and accepted at each draft position, and the
acceptance at each position that the position charts draw.

A separate file from runs.csv because a run has one row there and gamma rows here. It is
written and read as runs.csv is (runs_file.append_csv and read_cells: a row at a time, a
half-written last line dropped); pandas is imported on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specbench.bench.labels import MEASURED
from specbench.bench.runs_file import RUN_COLUMNS, append_csv, file_columns, read_cells

if TYPE_CHECKING:
    import pandas as pd

POSITIONS_CSV = "positions.csv"
POSITION_COLUMNS = ("source", *RUN_COLUMNS, "position", "reached", "accepted")
POSITION_NUMBERS = ("gamma", "temperature", "repeat", "position", "reached", "accepted")  # the rest is text


def append_positions(path: Path, rows: list[dict]) -> None:
    """Append one run's positions.csv rows (POSITION_COLUMNS: reached and accepted drafts at
    each 1-based draft position; expectations, so possibly fractional, for a sampled
    prediction) and close, as append_row does: the header first for a new file, the file's
    own column order otherwise, a half-written last line ended first."""
    columns, new = file_columns(path, POSITION_COLUMNS)
    append_csv(path, columns, new, rows)


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
    table = read_cells(path, POSITION_COLUMNS, POSITIONS_CSV)
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
