"""``sandbox serve``: the web approvals server (``agent_sandbox.web``).

A thin shell: the options, then ``web.server.serve``. FastAPI and uvicorn are imported
only when the command runs, never when the CLI starts (``sandbox --help``, the hook)."""

from __future__ import annotations

from typing import Annotated

import typer

from agent_sandbox import contract
from agent_sandbox.display import printable
from agent_sandbox.errors import SandboxError


def serve_cmd(
    repos: Annotated[list[str] | None, typer.Argument(
        help="Connected repositories to serve.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback unless TLS or "
                                           "--insecure-bind).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = contract.WEB_PORT,
    tls_cert: Annotated[str | None, typer.Option("--tls-cert", help="PEM certificate.")] = None,
    tls_key: Annotated[str | None, typer.Option("--tls-key", help="PEM private key.")] = None,
    insecure_bind: Annotated[bool, typer.Option(
        "--insecure-bind", help="Listen on a non-loopback address without TLS (only behind "
                                "something that protects the token).")] = False,
    webhook_file: Annotated[str | None, typer.Option(
        "--webhook-file", help="A file holding a Slack-compatible webhook URL, told of each "
                               "new escalation.")] = None,
    public_url: Annotated[str | None, typer.Option(
        "--public-url", help="The dashboard's URL as approvers reach it (for the webhook's "
                             "links and the dashboard's login).")] = None,
    rotate_token: Annotated[bool, typer.Option(
        "--rotate-token", help="Write a new token into the token file first (in place: "
                               "the folder is kept); without REPOS, only that.")] = False,
) -> None:
    """Serve the approval queues and audits of REPOS: REST API, live events, dashboard."""
    from agent_sandbox.web.server import Options, serve

    try:
        serve(Options(repos=repos or [], host=host, port=port, tls_cert=tls_cert,
                      tls_key=tls_key, insecure_bind=insecure_bind, webhook_file=webhook_file,
                      public_url=public_url, rotate_token=rotate_token))
    except SandboxError as exc:
        typer.echo(f"sandbox serve: {printable(str(exc))}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
