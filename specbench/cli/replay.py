"""`specbench trace FILE`: a saved step-by-step trace replayed as the live run showed it.

Reading the file is tracefile.py's and drawing it trace.py's; the command needs no models.
"""

from __future__ import annotations

from specbench.cli import options as o
from specbench.cli import trace as tracing
from specbench.cli import tracefile, ui


def trace_command(path: o.TraceFile) -> None:
    """Replay a saved step-by-step trace: every round, the summary and the marked text. Needs no models."""
    tracing.replay(tracefile.read_trace(path), ui.console)
