"""`specbench merge`: the shards of a sweep (`sweep --shard I/N`) joined by bench/merge.py into
one results directory, then its tables; no models loaded."""

from __future__ import annotations

from rich.markup import escape

from specbench.cli import options as o
from specbench.cli import ui
from specbench.cli.report import render_tables


def merge_command(out: o.MergeOut, shards: o.Shards) -> None:
    """Join the shards of one sweep into one results directory. Needs no models."""
    from specbench.bench.merge import merge
    from specbench.bench.runs_file import load_runs

    merged = merge(out, shards, command=ui.command_line())
    runs = load_runs(merged.out_dir)
    render_tables(
        runs, greedy=bool((runs["temperature"] == 0).all()), title="Measured (each prompt on its shard's machine)"
    )
    if len(merged.machines) > 1:
        ui.say(
            f"[bold yellow]note:[/] the shards ran on {len(merged.machines)} machines: "
            f"{escape('; '.join(merged.machines))}. Each speedup compares runs on one machine; the pooled costs"
            " mix them (price the predictions on one with `specbench predict DIR --costs FILE`)",
            markup=True,
            stderr=True,
        )
    else:
        ui.say(f"[dim]every shard ran on {escape(merged.machines[0])}[/]", markup=True)
    ui.say(f"{merged.shards} shards, {merged.rows} rows merged: {merged.out_dir}  (charts: specbench plot {out})")
