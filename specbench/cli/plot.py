"""`specbench plot`: a sweep's charts as PNG files, drawn by bench/plot.py; no models loaded."""

from __future__ import annotations

from specbench.cli import options as o
from specbench.cli import ui
from specbench.errors import ResultsError


def plot_command(directory: o.ResultsDirectory, out: o.PlotOut = None) -> None:
    """Draw the charts of a sweep (PNG files). Needs no models."""
    from specbench.bench.plot import plot_results

    charts = plot_results(directory, out)
    if not charts:
        raise ResultsError(
            f"nothing to chart in {directory} yet: only the first plain runs are there (an interrupted sweep:"
            " --resume it)"
        )
    ui.console.print(f"wrote {len(charts)} charts:", highlight=False)
    for chart in charts:
        ui.say(f"  {chart}")
