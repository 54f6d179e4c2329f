"""The results of a sweep, re-exported from the modules that own them, for the callers that
still import them from here.

Each concern has a module of its own: labels.py (sources, method and policy names, drafter
and configuration labels), gammas.py (gamma settings), runs_file.py (runs.csv: schema, run
keys, writing and reading, the results directory), positions.py (positions.csv and the
acceptance at each draft position), meta_file.py (meta.json and the costs read from it),
summary.py (the grouped summary and its queries), bootstrap.py (its 95% intervals),
accuracy.py (predictions against measurements) and theory.py (alpha fitted to counts).
"""

from specbench.bench.accuracy import (
    CHECK_GROUP,
    plain_repeatability,
    prediction_accuracy,
    prediction_check,
)
from specbench.bench.gammas import GammaRangeError, parse_gammas
from specbench.bench.labels import (
    BASELINE_METHOD,
    FIXED_POLICY,
    MEASURED,
    MODEL_DRAFTER,
    MODEL_SEPARATOR,
    ORACLE_POLICY,
    PREDICTED,
    PROFILE,
    drafter_label,
    drafter_model_name,
    label_parts,
)
from specbench.bench.meta_file import read_meta, write_meta
from specbench.bench.positions import POSITIONS_CSV, append_positions, load_positions
from specbench.bench.runs_file import (
    COLUMNS,
    KEY_COLUMNS,
    REQUIRED_COLUMNS,
    RUNS_CSV,
    STEPS_JSONL,
    append_row,
    load_runs,
    make_dir,
    output_hash,
    read_rows,
    row_key,
    run_key,
)
from specbench.bench.summary import best_gammas, geometric_mean, oracle_share, summarize, summary_frame

__all__ = [
    "append_positions",
    "append_row",
    "BASELINE_METHOD",
    "best_gammas",
    "CHECK_GROUP",
    "COLUMNS",
    "drafter_label",
    "drafter_model_name",
    "FIXED_POLICY",
    "GammaRangeError",
    "geometric_mean",
    "KEY_COLUMNS",
    "label_parts",
    "load_positions",
    "load_runs",
    "make_dir",
    "MEASURED",
    "MODEL_DRAFTER",
    "MODEL_SEPARATOR",
    "ORACLE_POLICY",
    "oracle_share",
    "output_hash",
    "parse_gammas",
    "plain_repeatability",
    "POSITIONS_CSV",
    "PREDICTED",
    "prediction_accuracy",
    "prediction_check",
    "PROFILE",
    "read_meta",
    "read_rows",
    "REQUIRED_COLUMNS",
    "row_key",
    "run_key",
    "RUNS_CSV",
    "STEPS_JSONL",
    "summarize",
    "summary_frame",
    "write_meta",
]
