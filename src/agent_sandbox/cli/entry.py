"""Entry point of the ``sandbox`` command.

``sandbox hook ...`` runs on every tool call of every agent, so it takes a fast
path that imports neither typer nor pydantic: ``agent_sandbox.hooks.tool_call``
(stdlib only). ``sandbox exec`` and ``sandbox mcp DIR`` (whose start a client
waits for: a stdlib launcher, ``mcp_launch``) skip typer too. Everything else
goes to the typer app in ``cli.main``.
"""

from __future__ import annotations

import sys


def hook() -> None:
    """``python -I -c "from agent_sandbox.cli.entry import hook; hook()" AGENT EVENT``:
    the hook as the clients run it (``contract.HOOK_CODE``), without ``runpy``."""
    raise SystemExit(main(["hook", *sys.argv[1:]]))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "hook":
        import os

        relay_port = os.environ.get("AGENT_SANDBOX_HOOK_RELAY")  # agent.hook_frames.RELAY_ENV
        if relay_port is not None:  # inside `sandbox agent`: the hook runs on the host
            try:
                from agent_sandbox.agent.hook_relay import relay
            except Exception as exc:  # fail closed
                sys.stderr.write(f"agent-sandbox hook relay unavailable: {exc}\n")
                return 2
            return relay(args[1:], relay_port)
        try:
            from agent_sandbox.hooks.tool_call import run as hook_run
        except Exception as exc:  # fail closed: a broken install blocks, never allows
            sys.stderr.write(f"agent-sandbox hook unavailable: {exc}\n")
            return 2
        return hook_run(args[1:])
    if args and args[0] == "exec":  # cold start matters: no typer/pydantic here either
        from agent_sandbox.cli.exec_main import run as exec_run

        return exec_run(args[1:])
    if args == ["mcp", "--resident"]:  # this user's resident server (mcp_resident)
        from agent_sandbox.mcp_resident import main as resident_main

        return resident_main()
    if args and args[0] == "mcp" and len(args) <= 2 and not any(
            a.startswith("-") for a in args[1:]):
        # a client waits for the server's first answer: no typer before it, and
        # the resident server's session when there is one
        from agent_sandbox.mcp_launch import main as mcp_main

        return mcp_main(args[1:])
    if args and args[0] == "agent":  # its `--` and the client's arguments, untouched
        from agent_sandbox.cli.agent_cmd import main as agent_main

        return agent_main(args[1:])
    from agent_sandbox.cli.main import run

    return run(args)
