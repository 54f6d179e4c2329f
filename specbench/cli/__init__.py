"""The `specbench` command line (Typer + rich): commands in commands.py, the step trace in trace.py."""

from specbench.cli.commands import app

__all__ = ["app"]
