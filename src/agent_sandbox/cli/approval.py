"""CLI for the approval loop: init, uninstall, watch, pending, approve, deny,
mcp, status. Thin shells over ``repo_init``, ``approval`` and ``mcp_server``;
every refusal is a one-line message and exit status 1, never a traceback."""

from __future__ import annotations

import json
import os
from typing import Any

import typer

from ..display import printable
from ..errors import SandboxError


def _fail(msg: str) -> None:
    typer.echo(f"sandbox: {printable(msg)}", err=True)  # a message may quote a request
    raise typer.Exit(1)


def _split(args: list[str], what: str) -> tuple[str, str]:
    """``[DIR] ID``: DIR defaults to the current directory."""
    if len(args) == 1:
        return ".", args[0]
    if len(args) == 2:
        return args[0], args[1]
    _fail(f"usage: sandbox {what} [DIR] ID")
    raise AssertionError


def init_cmd(
    directory: str = typer.Argument(".", help="The repository to connect."),
    claude: bool = typer.Option(False, "--claude", help="Install Claude Code hooks."),
    codex: bool = typer.Option(False, "--codex", help="Install Codex hooks."),
    cursor: bool = typer.Option(False, "--cursor", help="Install Cursor hooks."),
    gemini: bool = typer.Option(False, "--gemini", help="Install Gemini CLI hooks."),
    mcp: bool = typer.Option(False, "--mcp", help="Register the sandbox MCP server."),
    trust: bool = typer.Option(
        False, "--trust",
        help="Trust this repository's sandbox hooks in the clients that ask for it "
             "(Codex project and hook trust, Gemini CLI trusted folder); uninstall "
             "takes it back. Without it those clients skip the hooks."),
) -> None:
    """Install the connector: .sandbox/ plus each chosen agent's hooks and MCP entries."""
    from ..repo_init import init

    agents = [n for n, on in (("claude", claude), ("codex", codex), ("cursor", cursor),
                              ("gemini", gemini)) if on]
    try:
        res = init(directory, agents, mcp, trust=trust)
    except SandboxError as exc:
        _fail(str(exc))
    changed = res["changed"]
    typer.echo(f"connected {res['repo']} for {', '.join(res['agents'])}"
               + (" with the MCP server" if mcp else "") + ": "
               + (f"{len(changed)} file(s) written" if changed else "nothing to change"))
    for c in changed:
        typer.echo(f"  {c}")
    for t in res.get("trusted", []):
        typer.echo(f"  trusted in {t}")
    from ..agent.client_checks import check

    clients = [a for a in res["agents"] if a in ("claude", "codex", "cursor", "gemini")]
    unfinished = []
    for f in check(res["repo"], clients=clients):
        if f.problem == "skips-hooks" and f.fix:
            unfinished.append(f)
            typer.echo(f"not enforcing: {f.client}: {f.detail}", err=True)
        elif f.problem == "skips-hooks":
            typer.echo(f"warning: {f.client}: {f.detail}", err=True)
    if unfinished:  # installed, but a client would run calls without our hooks
        fixes = " ".join(dict.fromkeys(f"--{f.client}" for f in unfinished))
        typer.echo(f"sandbox: {', '.join(f.client for f in unfinished)} will skip the "
                   f"hooks until trusted: run `sandbox init {fixes} --trust "
                   f"{res['repo']}`", err=True)
        raise typer.Exit(3)


def uninstall_cmd(directory: str = typer.Argument(".")) -> None:
    """Restore the files init replaced and remove what it added."""
    from ..repo_init import uninstall

    try:
        res = uninstall(directory)
    except SandboxError as exc:
        _fail(str(exc))
    typer.echo(f"restored {len(res['restored'])}, removed {len(res['removed'])} file(s)"
               + ("; kept .sandbox/audit (it holds audit records)" if res["kept_audit"]
                  else ""))


def pending_cmd(directory: str = typer.Argument("."),
                as_json: bool = typer.Option(False, "--json")) -> None:
    """List requests waiting for a decision."""
    from ..approval.approver import Approver, age

    try:
        ap = Approver(directory)
        ap.recover()
        items = ap.pending()
    except SandboxError as exc:
        _fail(str(exc))
    from ..approval.executor import changed_since
    from ..queue.shown import as_json as shown_json
    from ..queue.shown import effect, fields, mismatch, size

    repo = ap.repo
    if as_json:  # ASCII JSON: every other character is a \u escape
        typer.echo(json.dumps([{**shown_json(r), "changed_since": changed_since(repo, r)}
                               for r in items], indent=2))
        return
    if not items:
        typer.echo("no pending requests")
    for r in items:
        # the bound fields whole, each on its own line (a newline in one is shown as
        # \n): what the hash covers is what is printed
        typer.echo(f"{printable(r.get('id', ''))}  {age(r.get('created')):>4}  "
                   f"{printable(r.get('risk', '?')):6}  "
                   f"{printable(str(r.get('hash', ''))[:12])}  {printable(r.get('kind', ''))}"
                   f" ({printable(r.get('agent', ''))}): {printable(effect(r))}")
        for name, value in fields(r):
            typer.echo(f"    {printable(name)}: {printable(value)}"
                       + (f"   ({size(value)})" if len(value) > 80 or "\n" in value
                          else ""))
        why = "; ".join(str(x) for x in (r.get("reasons") or []))
        if why:
            typer.echo(f"    why: {printable(why)}")
        refused = mismatch(r)
        if refused:
            typer.echo(f"    WARNING: {refused}")
        moved = changed_since(repo, r)
        if moved:  # an approval now would refuse it and ask again, showing these
            typer.echo(f"    CHANGED since the request ({len(moved)}): "
                       + printable("; ".join(moved[:10]))
                       + (f"; and {len(moved) - 10} more" if len(moved) > 10 else ""))


def approve_cmd(args: list[str] = typer.Argument(..., help="[DIR] ID"),
                always: bool = typer.Option(
                    False, "--always", help="Also always allow this exact call (tool, "
                    "arguments, content, working directory) in this repository."),
                scope: str = typer.Option(
                    "exact", "--scope", help="With --always: 'exact' (the default), or "
                    "'anywhere' (the same call in any directory of the repository)."),
                seen: str = typer.Option(
                    "", "--hash", help="The request hash you reviewed (`sandbox pending "
                    "--json`); refused if the request no longer has it."),
                ) -> None:
    """Approve one pending request (single use, bound to its exact parameters)."""
    from ..approval.approver import Approver

    directory, rid = _split(args, "approve")
    try:
        dec = Approver(directory).approve(rid, always=always, scope=scope,
                                          seen_hash=seen or None)
    except SandboxError as exc:
        _fail(str(exc))
    typer.echo(f"approved {printable(dec['id'])}")


def deny_cmd(args: list[str] = typer.Argument(..., help="[DIR] ID"),
             reason: str = typer.Option("", "--reason")) -> None:
    """Deny one pending request."""
    from ..approval.approver import Approver

    directory, rid = _split(args, "deny")
    try:
        dec = Approver(directory).deny(rid, reason)
    except SandboxError as exc:
        _fail(str(exc))
    typer.echo(f"denied {printable(dec['id'])}")


def watch_cmd(directory: str = typer.Argument(".")) -> None:
    """Interactive approver: live list, keys to approve, deny or always allow."""
    from ..approval.watch import watch

    try:
        raise typer.Exit(watch(directory))
    except SandboxError as exc:
        _fail(str(exc))


def mcp_cmd(directory: str = typer.Argument(".")) -> None:
    """Serve the sandbox MCP tools over stdio."""
    from ..mcp_server import serve

    try:
        serve(directory)
    except SandboxError as exc:
        _fail(str(exc))


def status_cmd(directory: str = typer.Argument("."),
               as_json: bool = typer.Option(False, "--json")) -> None:
    """The connector and its queue in one view."""
    from ..repo_init import status

    try:
        st: dict[str, Any] = status(os.path.abspath(directory))
    except SandboxError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps(st, indent=2))
        return
    from ..last_verify import describe_drift

    drift_lines = [printable(line) for line in describe_drift(st["drift_check"])]
    if not st["installed"]:
        typer.echo(f"{printable(st['repo'])}: not connected (run `sandbox init`)")
        typer.echo("\n".join(drift_lines))
        return
    q = st["queue"] or {}
    typer.echo(f"{printable(st['repo'])}: agents "
               f"{printable(', '.join(str(a) for a in st['agents']))}"
               + (", MCP server" if st["mcp"] else ""))
    typer.echo(f"queue: {q.get('pending', 0)} pending, {q.get('approved', 0)} approved, "
               f"{q.get('running', 0)} running, {q.get('done', 0)} done")
    for r in st["recent"]:
        typer.echo(f"  {printable(r['id'])}  {printable(r['status']):<11} "
                   f"{printable(r['summary'])}")
    for f in st.get("clients", []):
        typer.echo(f"WARN  {printable(f['client'])}: {printable(f['problem'])}: "
                   f"{printable(f['detail'])}")
    typer.echo("\n".join(drift_lines))  # the host's last drift check, plain about drift


def register(app: typer.Typer) -> None:
    """The approval loop's commands: the connector (init, uninstall), the decisions
    (pending, approve, deny, watch), the MCP server and the status view."""
    app.command("init")(init_cmd)
    app.command("uninstall")(uninstall_cmd)
    app.command("pending")(pending_cmd)
    app.command("approve")(approve_cmd)
    app.command("deny")(deny_cmd)
    app.command("watch")(watch_cmd)
    app.command("mcp")(mcp_cmd)
    app.command("status")(status_cmd)
