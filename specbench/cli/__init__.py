"""The `specbench` command line (Typer + rich): each module parses, calls the library, renders.

    ui.py        the Typer app, the consoles, the one error line of a user error
    options.py   every option, defined once, shared by the commands that take it
    progress.py  loading models under progress bars
    generate.py  generate            cache.py   models, clear-cache
    replay.py    trace               sweep.py   sweep (report.py: its tables and closing lines)
    costs.py     costs, predict      plot.py    plot
    merge.py     merge (a sharded sweep's shards joined)
    trace.py     how a generation's rounds look; tracefile.py their JSONL file

COMMANDS below is the whole command set, in the order `specbench --help` lists it. Modules
that import torch (models, core, bench, ...) are imported inside the commands, so that
`--help`, `models`, `trace` and `plot` start fast.
"""

from specbench.cli.cache import clear_cache_command, models_command
from specbench.cli.costs import costs_command, predict_command
from specbench.cli.generate import generate_command
from specbench.cli.merge import merge_command
from specbench.cli.plot import plot_command
from specbench.cli.replay import trace_command
from specbench.cli.sweep import sweep_command
from specbench.cli.ui import app, register

COMMANDS = {
    "generate": generate_command,
    "models": models_command,
    "clear-cache": clear_cache_command,
    "trace": trace_command,
    "sweep": sweep_command,
    "costs": costs_command,
    "predict": predict_command,
    "merge": merge_command,
    "plot": plot_command,
}
register(COMMANDS)

__all__ = ["COMMANDS", "app"]
