"""The typer application: one command group per area, registered from
``cli/<area>.py`` modules (each exposes ``register(app)``)."""

from __future__ import annotations

import importlib

import typer

from agent_sandbox.errors import SandboxError

AREAS = (
    "agent_sandbox.cli.spec_cmds",   # validate, render, schema
    "agent_sandbox.cli.exec_cmd",    # exec
    "agent_sandbox.cli.agent_cmd",   # agent
    "agent_sandbox.cli.approval",    # init, uninstall, watch, pending, approve, deny, mcp, status
    "agent_sandbox.cli.audit_cmd",   # audit verify|show|export|tail|repair
    "agent_sandbox.cli.verify_cmd",  # verify
    "agent_sandbox.cli.action_cmd",  # action list|run
    "agent_sandbox.cli.install_cmd",  # install proxy-service|apparmor-profile|repo
    "agent_sandbox.cli.serve_cmd",   # serve (the web approvals server)
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="sandbox",
        help="Provision and enforce sandboxes for AI coding agents.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for mod in AREAS:
        importlib.import_module(mod).register(app)
    return app


def run(args: list[str]) -> int:
    app = build_app()
    try:
        app(args=args, prog_name="sandbox", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except SandboxError as exc:
        typer.echo(f"sandbox: {exc}", err=True)
        return 1
    return 0
