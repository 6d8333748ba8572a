"""``sandbox action list|run``: the repository's privileged infrastructure
actions from the command line, through the same gate, approvals, broker and
runner as the MCP server's ``run_action`` (``approval.action_request``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from ..errors import SandboxError

action_app = typer.Typer(help="Privileged infrastructure actions (list, run).",
                         no_args_is_help=True)


def _fail(message: str, code: int = 2) -> None:
    from ..display import printable

    typer.echo(f"sandbox action: {printable(message)}", err=True)
    raise typer.Exit(code)


def parse_params(pairs: list[str], as_json: str | None) -> dict[str, Any]:
    """``--param K=V`` pairs (V as text; JSON values with ``--params-json``)."""
    params: dict[str, Any] = {}
    if as_json is not None:
        try:
            loaded = json.loads(sys.stdin.read() if as_json == "-" else as_json)
        except ValueError as exc:
            raise SandboxError(f"--params-json is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise SandboxError("--params-json must be a JSON object")
        params.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SandboxError(f"--param {pair!r} is not KEY=VALUE")
        if key in params:
            raise SandboxError(f"parameter {key!r} is given twice")
        params[key] = value
    return params


@action_app.command("list")
def list_cmd(directory: Annotated[str, typer.Option("--repo", "-C")] = ".",
             as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The enabled actions: name, tier, description and parameters."""
    from ..actions.catalog import listing

    try:
        items = listing(directory)
    except SandboxError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    if not items:
        typer.echo("no actions declared")
    for it in items:
        props = ", ".join(sorted(it["params"].get("properties") or {}))
        typer.echo(f"{it['name']:<24} {it['tier']:<12} {it['description']}"
                   + (f"  [params: {props}]" if props else ""))


@action_app.command("run")
def run_cmd(name: str,
            param: Annotated[list[str], typer.Option("--param", "-p",
                                                     help="KEY=VALUE (repeatable)")] = [],  # noqa: B006
            params_json: Annotated[str | None, typer.Option(
                "--params-json", help="The parameters as a JSON object ('-': stdin)")] = None,
            directory: Annotated[str, typer.Option("--repo", "-C")] = ".",
            wait: Annotated[float, typer.Option("--wait", help="Seconds to wait for a human")
                            ] = 120.0,
            as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Run action NAME: at once when the gate lets it, else after an approval."""
    from ..approval.action_request import request

    try:
        params = parse_params(param, params_json)
        out = request(directory, name, params, agent="cli", wait=max(0.0, wait))
    except SandboxError as exc:
        _fail(str(exc))
    doc = out.as_json()
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        from ..display import printable

        if out.plan:
            typer.echo(f"plan: {printable(out.plan)}")
        typer.echo(f"request {out.request_id}: {out.action}: {out.status}"
                   + (f" ({printable(out.message)})" if out.message else ""))
        for stream in ("stdout", "stderr"):
            if doc.get(stream):
                typer.echo(doc[stream], nl=False, err=stream == "stderr")
    if out.status != "completed":
        raise typer.Exit(1)
    code = doc.get("exit_code")
    raise typer.Exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def register(app: typer.Typer) -> None:
    app.add_typer(action_app, name="action")
