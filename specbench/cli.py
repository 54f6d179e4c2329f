"""The `specbench` command line: parse, build configs, call the library, render.

No torch logic lives here. User errors are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="specbench",
    help="Speculative decoding you can watch and measure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    """Print one error line on stderr and exit non-zero."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


# ---------------------------------------------------------------------------- generate, models


# ---------------------------------------------------------------------------- trace

# Imported here, not at the top, so this section stays self-contained while others edit above.
from pathlib import Path  # noqa: E402
from typing import Annotated  # noqa: E402

from specbench import trace as tracing  # noqa: E402  (rich only: no torch)


@app.command("trace")
def trace_command(
    path: Annotated[Path, typer.Argument(help="A trace file written by `specbench generate --trace-out`.", show_default=False)],
) -> None:
    """Replay a saved step-by-step trace: every round, the summary and the marked text. Needs no models."""
    try:
        saved = tracing.read_trace(path)
    except tracing.TraceFileError as exc:
        fail(str(exc))
    tracing.replay(saved, console)


# ---------------------------------------------------------------------------- sweep, plot


if __name__ == "__main__":
    app()
