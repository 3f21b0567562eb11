"""The `tuner` command line: parse options, call one function per command, print.

Each command lives in the module that owns the work; this file only wires them together.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from tuner.errors import UserError

app = typer.Typer(
    name="tuner",
    help="Auto-tune SGLang launch parameters with Optuna (a simulated server is the default).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


@app.callback()
def _root() -> None:
    """Auto-tune SGLang launch parameters with Optuna (a simulated server is the default)."""


# Commands register themselves below; keep each block a thin call into its module.


@app.command()
def version() -> None:
    """Print the tuner's version."""
    from tuner import __version__

    typer.echo(__version__)


if __name__ == "__main__":
    main()
