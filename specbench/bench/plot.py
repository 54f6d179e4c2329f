"""Charts of a sweep: a results directory (runs.csv, meta.json) -> PNG files.

Reads only the results files; imports no torch (nor anything that does), so plotting works
without the models. The data are DataFrames: the runs from runs_file.load_runs and the
summary table from summary.summary_frame. This module chooses which charts a directory gets
and writes its footnote; chart_data.py selects what each chart shows, chart_figure.py lays
out the figure, and charts_measured.py and charts_predicted.py draw the two families. A
missing or malformed directory raises ResultsError.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd

from specbench.bench.charts_measured import (
    chart_acceptance,
    chart_accepted_length,
    chart_category_speedup,
    chart_model_vs_measured,
    chart_predicted_speedup,
    chart_speedup,
    chart_tokens_per_second,
)
from specbench.bench.charts_predicted import prediction_charts
from specbench.bench.labels import MEASURED, PREDICTED, label_parts
from specbench.bench.meta_file import read_meta
from specbench.bench.positions import load_positions
from specbench.bench.runs_file import RUNS_CSV, load_runs, make_dir
from specbench.bench.summary import summary_frame
from specbench.errors import ResultsError

CHARTS = (
    "acceptance_rate.png",
    "tokens_per_second.png",
    "speedup.png",
    "accepted_length.png",
    "predicted_speedup.png",
    "speedup_by_category.png",
    "model_vs_measured.png",
)
# the measured curves over gamma that a sweep with predictions replaces with its PREDICTION_CHARTS
# (it times a few gammas only, so they would be lone points); its measured rows are drawn there
SUPERSEDED = (
    "acceptance_rate.png",
    "tokens_per_second.png",
    "speedup.png",
    "accepted_length.png",
    "predicted_speedup.png",
)
POSITION_CHARTS = ("position_acceptance.png", "position_acceptance_by_category.png")  # need positions.csv
DRAWERS = (
    chart_acceptance,
    chart_tokens_per_second,
    chart_speedup,
    chart_accepted_length,
    chart_predicted_speedup,
    chart_category_speedup,
    chart_model_vs_measured,
)


def load_results(directory: Path) -> tuple[pd.DataFrame, dict]:
    """(runs, meta) of a results directory; ResultsError when it is not one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultsError(f"no results directory {directory}")
    runs = load_runs(directory)  # every number parsed here: a bad cell fails now, by name
    if runs.empty:
        raise ResultsError(f"{directory / RUNS_CSV} has no rows yet")
    return runs, read_meta(directory)


def describe(meta: dict, runs: pd.DataFrame) -> str:
    """A one-line footnote: which models, temperature and prompts the numbers come from."""
    models = meta.get("models") or {}
    names = [((models.get(role) or {}).get("name")) for role in ("target", "drafter")]
    several = [(d or {}).get("name") or label for label, d in (models.get("drafters") or {}).items()]
    temps = [f"{t:g}" for t in sorted(runs["temperature"].dropna().unique())]  # as runs.csv writes them
    parts = []
    if names[0]:
        parts.append(f"target {names[0]}")
    if several:
        parts.append(f"drafters {', '.join(several)}")
    elif names[1]:
        parts.append(f"drafter {names[1]}")
    parts.append(f"temperature {', '.join(temps)}")
    count = runs["prompt_id"].nunique()
    parts.append(f"{count} prompt{'' if count == 1 else 's'}")
    parts.append(describe_c(meta))
    costs = (meta.get("repriced") or {}).get("costs_from")  # `specbench predict --costs`: whose costs priced it
    if costs is not None:
        cpu = ((costs.get("machine") or {}).get("cpu") or {}).get("model") or "another machine"
        parts.append(f"priced with costs measured {(costs.get('created') or '')[:10]} on {cpu}")
    return " · ".join(part for part in parts if part)


def describe_c(meta: dict) -> str:
    """c as the sweep priced with it: the median of its blocks' measurements (costs_pooled,
    with their range) or its one measurement. A sweep written before pricing was pooled has
    no costs_pooled and priced each prompt with its own c: the range is what it used."""
    blocks = meta.get("costs_by_block") or {}
    # a block's key names its model as a label does; meta's c is the first's
    first_model = label_parts(next(iter(blocks), ""))[1]
    cs = [m["c"] for key, m in blocks.items() if label_parts(key)[1] == first_model and m.get("c") is not None]
    spread, c = (f"{min(cs):.3f} to {max(cs):.3f}" if cs else ""), f"c{f' of {first_model}' if first_model else ''}"
    if meta.get("costs_pooled", 1) > 1 and meta.get("c") is not None and spread:
        # one measurement a prompt and repeat
        return f"{c} = {meta['c']:.3f} (median of {meta['costs_pooled']} measurements, {spread})"
    if len(cs) > 1:
        return f"{c} = {spread} (per prompt)"
    return f"{c} = {meta['c']:.3f}" if meta.get("c") is not None else ""


def plot_results(directory: Path, out_dir: Path | None = None) -> list[Path]:
    """Write every chart of a results directory (into it, unless out_dir is given); the paths.

    A directory without predicted rows (every sweep before predictions) gets CHARTS, from its
    measured rows. One with predictions gets the PREDICTION_CHARTS (predicted lines with their
    bands, the measured points on them; the position charts only when positions.csv has rows)
    and, of CHARTS, those that are not SUPERSEDED, from the measured rows only: predicted and
    measured rows never share a curve."""
    with matplotlib.rc_context({"text.parse_math": False}):  # a "$" in a category or model name is text
        return _plot_results(directory, out_dir)


def _plot_results(directory: Path, out_dir: Path | None) -> list[Path]:
    every, meta = load_results(directory)
    out_dir = make_dir(Path(out_dir or directory))
    runs = every[every["source"] == MEASURED]
    predicted = bool((every["source"] == PREDICTED).any())
    subtitle = describe(meta, every)
    paths = []
    if len(runs):
        table = summary_frame(runs)
        paths += [
            draw(table, runs, meta, out_dir / name, subtitle)
            for draw, name in zip(DRAWERS, CHARTS)
            if not (predicted and name in SUPERSEDED)
        ]
    if predicted:
        paths += prediction_charts(every, load_positions(directory), out_dir, subtitle)
    return paths
