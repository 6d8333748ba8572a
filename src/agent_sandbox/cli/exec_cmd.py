"""``sandbox exec``: run a command under the host's sandbox policy.

The work is in ``agent_sandbox.runtime.exec`` (stdlib argument parsing, so the
``sandbox exec`` fast path in ``cli/entry.py`` never imports typer); this module
only registers the same command on the typer app for ``sandbox --help``.
"""

from __future__ import annotations

import typer

HELP = (
    "Run CMD in the sandbox: sandbox exec [--settings FILE | --spec SPEC --host NAME] "
    "[--cwd DIR] [--backend bwrap|srt|gvisor] [--timeout S] -- CMD [ARG...]. "
    "Exit status is CMD's; 125 means the sandbox could not start."
)


def register(app: typer.Typer) -> None:
    @app.command(
        "exec",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "help_option_names": []},
        add_help_option=False,
    )
    def exec_command(ctx: typer.Context) -> None:
        from agent_sandbox.runtime.exec import main

        raise typer.Exit(main(list(ctx.args)))
