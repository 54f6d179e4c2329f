"""Names of a sweep's results that bench/sweep.py, bench/plan.py, bench/meta.py and
cli/sweep.py still import from here; each is defined in labels.py, gammas.py, runs_file.py,
meta_file.py, summary.py or accuracy.py, where every other caller imports it from.
"""

from specbench.bench.accuracy import plain_repeatability, prediction_accuracy, prediction_check
from specbench.bench.gammas import parse_gammas
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
from specbench.bench.runs_file import RUNS_CSV, make_dir, read_rows, row_key, run_key
from specbench.bench.summary import best_gammas, summary_frame

__all__ = [
    "BASELINE_METHOD",
    "best_gammas",
    "drafter_label",
    "drafter_model_name",
    "FIXED_POLICY",
    "label_parts",
    "make_dir",
    "MEASURED",
    "MODEL_DRAFTER",
    "MODEL_SEPARATOR",
    "ORACLE_POLICY",
    "parse_gammas",
    "plain_repeatability",
    "PREDICTED",
    "prediction_accuracy",
    "prediction_check",
    "PROFILE",
    "read_meta",
    "read_rows",
    "row_key",
    "run_key",
    "RUNS_CSV",
    "summary_frame",
    "write_meta",
]
