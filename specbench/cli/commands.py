"""The names callers outside the CLI import from here, now owned by the modules listed in __init__."""

from specbench.cli.progress import load_pair_with_progress
from specbench.cli.report import predicted_table, summary_table
from specbench.cli.ui import app

__all__ = ["app", "load_pair_with_progress", "predicted_table", "summary_table"]
