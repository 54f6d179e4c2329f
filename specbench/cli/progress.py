"""Loading models under progress bars: the one rendering of assembling, dequantizing and loading,
and the pair's settings checked before it.

The models package reports progress as (task, done, total) calls; here they become rich bars
on stderr that clear when done. A pair whose tokenizers share no text (VocabMismatch) gets the
hint of the command that loaded it (which option to change) appended to its message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, DownloadColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from specbench.cli import ui
from specbench.errors import VocabMismatch

Report = Callable[[str, float, float | None], None]


class _BytesColumn(DownloadColumn):
    """Bytes done / total for byte-counted tasks (assembling); blank for one-step tasks."""

    def render(self, task):
        if task.total is None or task.total <= 1:
            return ""
        return super().render(task)


def _loading_progress() -> Progress:
    """Progress on stderr while models load (assembling, dequantizing, caching on first use)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", style="progress.description", markup=False),  # a name is not markup
        BarColumn(),
        _BytesColumn(),
        TimeElapsedColumn(),
        console=ui.err_console,
        transient=True,
    )


@contextmanager
def loading_bars(mismatch_hint: str) -> Iterator[Report]:
    """A models Progress callback, (task, done, total), drawn as rich bars on stderr and
    cleared when done; a VocabMismatch raised inside ends with mismatch_hint."""
    from specbench.models.model import quiet_transformers

    quiet_transformers()
    with _loading_progress() as progress:
        tasks: dict[str, int] = {}

        def report(task: str, done: float, total: float | None) -> None:
            if task not in tasks:
                tasks[task] = progress.add_task(task, total=total)
            progress.update(tasks[task], completed=done, total=total)

        try:
            yield report
        except VocabMismatch as exc:
            raise VocabMismatch(f"{exc}; {mismatch_hint}") from None


def checked_pair_config(kernels: str, **fields):
    """The PairConfig of these fields, validated, and the kernels name checked: what
    `generate` and `costs` find wrong before the minutes of loading."""
    from specbench.models.loading import PairConfig, validate_pair_config
    from specbench.models.specs import check_kernels

    pair_config = PairConfig(**fields)
    validate_pair_config(pair_config)
    check_kernels(kernels)
    return pair_config


def load_pair_with_progress(config, *, mismatch_hint: str):
    """load_pair under progress bars: how `generate`, `sweep` and `costs` load their models.
    mismatch_hint ends the message of a VocabMismatch (which option to change)."""
    from specbench.models.loading import load_pair

    with loading_bars(mismatch_hint) as report:
        return load_pair(config, report)
