"""The progress callback every long step of loading reports through, and its silent default.

Models know nothing about the terminal: assembling, dequantizing, preparing and loading each
call `progress(task, done, total)`, and the CLI draws the calls as bars. A task is reported
first with done=0 and last with done == total; total None is a task of unknown length.
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, float, "float | None"], None]


def no_progress(task: str, done: float, total: float | None) -> None:
    """The do-nothing default."""
