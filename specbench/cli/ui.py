"""The terminal the commands share: the Typer app, stdout and stderr consoles, one error line.

Every command is registered through `register`, which wraps it in the one catch of user
errors: a SpecbenchError (errors.py) raised by the library or a command becomes one line on
stderr and exit 2, so no command writes its own try/except for them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape

from specbench.errors import SpecbenchError

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
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def user_errors(function: Callable) -> Callable:
    """The command, with the one catch of user errors: a SpecbenchError it raises becomes
    `fail(message)`. Anything else is a bug and keeps its traceback."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except SpecbenchError as exc:
            fail(str(exc))

    return run


def register(commands: dict[str, Callable]) -> None:
    """Each command on the app under its name, in the order given (`--help` lists them so)."""
    for name, function in commands.items():
        app.command(name)(user_errors(function))


def command_line() -> str:
    """How the user called specbench, as results and costs files record it."""
    return "specbench " + " ".join(sys.argv[1:])


def say(text: str, *, markup: bool = False, stderr: bool = False) -> None:
    """One message as it is: no highlighting, no wrapping of long paths, markup only if asked."""
    (err_console if stderr else console).print(text, highlight=False, soft_wrap=True, markup=markup)
