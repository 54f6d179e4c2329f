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
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


# ---------------------------------------------------------------------------- generate, models


# ---------------------------------------------------------------------------- trace


# ---------------------------------------------------------------------------- sweep, plot


if __name__ == "__main__":
    app()
