"""``sandbox exec`` on the typer app (for ``sandbox --help``); the work is in
``exec_main.main``, which the fast path in ``cli/entry.py`` calls directly."""

from __future__ import annotations

import typer

from .exec_main import HELP


def register(app: typer.Typer) -> None:
    @app.command(
        "exec",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "help_option_names": []},
        add_help_option=False,
    )
    def exec_command(ctx: typer.Context) -> None:
        from .exec_main import main

        raise typer.Exit(main(list(ctx.args)))
