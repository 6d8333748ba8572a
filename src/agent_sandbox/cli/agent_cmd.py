"""``sandbox agent CLIENT [OPTIONS] -- ARGS``: run an agent client itself in the sandbox.

The client (``claude``, ``codex`` or ``gemini``) runs under ``sandbox exec``'s
filesystem and network policy (the host's settings, ``--settings FILE`` or
``--spec SPEC [--host NAME]``) with its model API reachable and a private
state folder (``agent.profiles``, ``agent.state``), so every
call it makes is contained whatever its hooks, settings or flags say. The work is the
agent package's (``agent.run.run_client``); this module reads the command line and
the run's settings, finds the client's program and fails closed with a clear
message: an unknown client, a missing program, invalid settings or a spec that
does not load start nothing.
"""

from __future__ import annotations

import os
import sys

import typer

from agent_sandbox.agent.hook_frames import RELAY_PORT
from agent_sandbox.agent.profiles import is_wrapper
from agent_sandbox.contract import PROXY_HTTP_PORT, PROXY_SOCKS_PORT
from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

USAGE = """usage: sandbox agent CLIENT [--settings FILE | --spec SPEC [--host NAME]]
                     [--model-endpoint URL] [--program PATH] [--cwd DIR]
                     [--timeout SECONDS] -- [ARG...]

Run the agent client CLIENT (claude, codex or gemini) inside the sandbox, with
its model API reachable and a private state folder (the host's settings and
credentials read-only in it; nothing it writes reaches the host's folder).
--model-endpoint URL  the model API this run may reach besides the client's
                      default ones; on loopback exactly that port is forwarded
                      (default: the client's own base-URL variable, if set:
                      ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL)
--program PATH        the client's program (default: the first CLIENT on PATH
                      that is not the agent-sandbox wrapper)
The exit status is the client's; 125 means the sandbox could not start.
"""
HELP = ("Run an agent client itself in the sandbox: sandbox agent claude|codex|gemini "
        "[--settings FILE | --spec SPEC --host NAME] [--model-endpoint URL] -- ARGS")
# ports of the sandbox's own loopback: the proxy's and the hook relay's
RESERVED = frozenset({PROXY_HTTP_PORT, PROXY_SOCKS_PORT, RELAY_PORT})
_VALUED = ("--settings", "--spec", "--host", "--cwd", "--timeout", "--model-endpoint",
           "--program")


class UsageError(SandboxError, ValueError):
    pass


class AgentArgs:
    """The parsed command line."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.settings: str | None = None
        self.spec: str | None = None
        self.host: str | None = None
        self.cwd: str | None = None
        self.timeout: str | None = None
        self.model_endpoint: str | None = None
        self.program: str | None = None
        self.command: list[str] = []


def parse_args(args: list[str]) -> AgentArgs:
    if not args or args[0] in ("-h", "--help"):
        raise UsageError("help")
    out = AgentArgs(args[0])
    i = 1
    while i < len(args):
        a = args[i]
        if a == "--":
            out.command = args[i + 1:]
            break
        name, eq, value = a.partition("=")
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = args[i]
            setattr(out, name[2:].replace("-", "_"), value)
            i += 1
            continue
        raise UsageError(f"unknown option {a!r} (the client's own arguments go after `--`)")
    if out.settings and out.spec:
        raise UsageError("give either --settings or --spec, not both")
    if out.host and not out.spec:
        raise UsageError("--host needs --spec")
    return out


def find_program(name: str, path: str | None = None) -> str:
    """The client's program on PATH, skipping our wrapper; SandboxStartError."""
    from agent_sandbox.runtime.failures import SandboxStartError

    for d in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        cand = os.path.join(d, name)
        if d and os.path.isabs(d) and os.path.isfile(cand) and os.access(cand, os.X_OK) \
                and not is_wrapper(cand):
            return cand
    raise SandboxStartError(f"the {name} program was not found on PATH (the agent-sandbox "
                            f"wrapper excluded); install it or pass --program PATH")


def main(args: list[str], err: IO[str] | None = None) -> int:
    err = err or sys.stderr
    from agent_sandbox.runtime.failures import SandboxStartError

    try:
        opts = parse_args(args)
    except UsageError as exc:
        if str(exc) == "help":
            sys.stdout.write(USAGE)
            return 0 if args else 2
        err.write(f"sandbox agent: {exc}\n")
        return 2
    client = opts.client
    try:
        from agent_sandbox.agent.profiles import AgentProfileError, parse_endpoint, profile

        try:
            prof = profile(client)
            url = opts.model_endpoint or (prof.base_url_env
                                          and os.environ.get(prof.base_url_env))
            endpoint = parse_endpoint(url) if url else None
            if endpoint is not None and endpoint.loopback and endpoint.port in RESERVED:
                raise AgentProfileError(f"--model-endpoint {url}: port {endpoint.port} is "
                                        "the sandbox's own (proxy or hook relay)")
        except AgentProfileError as exc:
            err.write(f"sandbox agent: {exc}\n")
            return 2
        timeout = None
        if opts.timeout:
            try:
                timeout = float(opts.timeout)
                if not timeout > 0:
                    raise ValueError(opts.timeout)
            except ValueError:
                err.write(f"sandbox agent: --timeout: not a positive number: "
                          f"{opts.timeout!r}\n")
                return 2
        from agent_sandbox.agent.run import run_client
        from agent_sandbox.runtime.host import home_dir
        from agent_sandbox.runtime.run import resolve_settings

        from .exec_main import host_profile, settings_from_spec

        profile_doc = host_profile()
        if profile_doc.get("backend") not in (None, "bwrap"):
            raise SandboxStartError(f"the host's backend is {profile_doc['backend']!r}; "
                                    "sandbox agent runs clients with the bwrap backend only")
        home = home_dir()
        cwd = os.path.realpath(opts.cwd or os.getcwd())
        if not os.path.isdir(cwd):
            raise SandboxStartError(f"--cwd {cwd} is not a directory")
        if opts.spec:
            base = settings_from_spec(opts.spec, opts.host, home)
        else:
            base = resolve_settings(opts.settings, home, cwd)
        program = opts.program or find_program(prof.program)
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise SandboxStartError(f"--program {program} is not an executable file")
        if is_wrapper(program):
            raise SandboxStartError(f"{program} is the agent-sandbox wrapper, not the client")
        return run_client(client, [program, *opts.command], base, cwd, home,
                          endpoint=endpoint, timeout=timeout, err=err)
    except (Exception, KeyboardInterrupt) as exc:
        from .exec_main import start_failed

        return start_failed("sandbox agent", exc, err,
                            "the client did not run outside the sandbox")


def register(app: typer.Typer) -> None:
    @app.command(
        "agent",
        help=HELP,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                          "help_option_names": []},
        add_help_option=False,
    )
    def agent_command(ctx: typer.Context) -> None:
        raise typer.Exit(main(list(ctx.args)))
