"""``sandbox exec``: run a command under the host's sandbox policy.

``main`` is the fast path that ``cli/entry.py`` calls (through ``run``) without importing typer or
pydantic (stdlib argument parsing in ``exec_args``); ``exec_cmd.register`` adds the same
command to the typer app for ``sandbox --help`` (``exec_cmd``). The work is the runtime's
(``agent_sandbox.runtime.run``); this module reads the command line, the host
profile (``contract.EXEC_PROFILE``) and, with ``--spec``, renders the settings
from a spec (the only place the runtime's caller pulls in the renderer).

``run`` is what the ``sandbox`` command calls: ``main``, then the process ends
without the interpreter's teardown when nothing is left to do at exit.
"""

from __future__ import annotations

import gc
import os
import sys

from agent_sandbox import contract
from agent_sandbox.runtime.backends.base import NAMES as BACKENDS
from agent_sandbox.runtime.failures import SANDBOX_FAILED, SandboxStartError
from agent_sandbox.runtime.host import home_dir
from agent_sandbox.runtime.run import exec_passthrough, resolve_settings
from agent_sandbox.runtime.settings import Settings, SettingsError, loads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO, Any


HELP = (
    "Run CMD in the sandbox: sandbox exec [--settings FILE | --spec SPEC --host NAME] "
    "[--cwd DIR] [--backend bwrap|srt|gvisor] [--timeout S] [--max-processes N] "
    "[--max-memory SIZE] [--max-file-size SIZE] -- CMD [ARG...]. "
    "Exit status is CMD's; 125 means the sandbox could not start."
)


def host_profile(path: str = contract.EXEC_PROFILE) -> dict[str, Any]:
    """The rendered host profile (backend, audit folder, seccomp), or {} when absent.

    A profile that exists but cannot be read is an error: the host's policy
    must not be silently ignored.
    """
    try:
        with open(path, "rb") as fh:
            data = loads(fh.read())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SandboxStartError(f"cannot read the host profile {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SandboxStartError(f"{path}: expected a JSON object")
    return data


def run(args: Sequence[str]) -> int:
    """``main`` for the ``sandbox`` command: once it is done (the sandbox ended and was
    cleaned up), the process exits at once, its output flushed, when nothing else is
    left to do at exit: no exit handler registered (the audit log registers one) and
    no other thread but daemons. Freeing every object one by one at the end
    (the interpreter's teardown) costs a cold start about 4 ms for nothing."""
    rc = main(args)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return rc  # the interpreter's own exit reports it
    threading = sys.modules.get("threading")
    if "atexit" in sys.modules or (threading is not None and not all(
            t.daemon for t in threading.enumerate() if t is not threading.main_thread())):
        return rc
    os._exit(rc)


def main(args: Sequence[str], err: IO[str] | None = None) -> int:
    """``sandbox exec`` without typer (the fast path).

    The cyclic garbage collector is off while the sandbox starts (the start makes
    no cycles worth a collection, and the collections the imports would trigger
    cost about 1 ms) and back on once the command runs: the proxy's threads serve
    in this process for as long as the command runs."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(args, err or sys.stderr, _collect_again if collecting else None)
    finally:
        if collecting:
            gc.enable()


def _collect_again() -> None:
    """The collector on again, with what the start made (modules, the plan) set
    aside for good (``gc.freeze``): otherwise the first collection would walk all of
    it, a few milliseconds while the command runs and its end is waited for."""
    gc.freeze()
    gc.enable()


def _main(args: Sequence[str], err: IO[str], started: Callable[[], None] | None) -> int:
    from .exec_args import UsageError, parse_exec_args

    try:
        opts = parse_exec_args(list(args))
    except UsageError as exc:
        err.write(f"sandbox exec: {exc}\n")
        return 2
    if opts.help:
        sys.stdout.write(USAGE)
        return 0
    try:
        profile = host_profile()
        if opts.backend_given is False and profile.get("backend") in BACKENDS:
            opts.backend = profile["backend"]
        if opts.backend == "bwrap":
            # the run's cgroup made now, the launcher moving into it while the settings
            # are read and the run is planned (``runtime.limits``)
            from agent_sandbox.runtime.limits import start_early

            start_early()
        if profile.get("auditDir") and contract.AUDIT_DIR_ENV not in os.environ:
            os.environ[contract.AUDIT_DIR_ENV] = str(profile["auditDir"])
        home = home_dir()
        cwd = os.path.realpath(opts.cwd or os.getcwd())
        if not os.path.isdir(cwd):
            raise SandboxStartError(f"--cwd {cwd} is not a directory")
        if opts.spec:
            settings = settings_from_spec(opts.spec, opts.host, home)
        else:
            settings = resolve_settings(opts.settings, home, cwd)
        given = tuple(g if g is not None else s for g, s in zip(opts.limits, settings.limits,
                                                                 strict=True))
        if given != settings.limits:
            settings = settings.with_limits(given)  # type: ignore[arg-type]
        return exec_passthrough(opts.command, settings, cwd, backend=opts.backend,
                                timeout=opts.timeout, started=started)
    except (Exception, KeyboardInterrupt) as exc:
        return start_failed("sandbox exec", exc, err, "nothing ran outside the sandbox")
    finally:
        from agent_sandbox.runtime.limits import discard_early

        discard_early()  # groups no run adopted (a start that failed first)


def start_failed(prog: str, exc: BaseException, err: IO[str], outside: str) -> int:
    """The exit status of a run that failed before or while starting, its reason on
    ``err``: bad settings and start failures say why, an interrupt is 130, anything
    else is an internal error, never a traceback (``outside`` says what did not run)."""
    if isinstance(exc, SettingsError):
        err.write(f"{prog}: {_shown(exc)}\n")
    elif isinstance(exc, SandboxStartError):
        err.write(f"{prog}: the sandbox could not start: {_shown(exc)}\n")
    elif isinstance(exc, KeyboardInterrupt):
        return 130
    else:  # fail closed, and no traceback for the user
        err.write(f"{prog}: internal error ({type(exc).__name__}: {_shown(exc)}); {outside}\n")
    return SANDBOX_FAILED


def _shown(exc: BaseException) -> str:
    """The error's text for the terminal: the names in it may be a command's choice."""
    from agent_sandbox.display import printable_lines

    return printable_lines(str(exc))


def settings_from_spec(spec_path: str, host: str | None, home: str) -> Settings:
    """srt settings rendered from a spec (the same document the renderer writes).

    ``spec_path`` is a spec file, or an inventory folder with ``--host`` naming
    the host whose layered spec applies.
    """
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.render.srt import srt_settings
    from agent_sandbox.runtime.settings import parse

    try:
        if os.path.isdir(spec_path):
            if not host:
                raise SettingsError(f"{spec_path} is an inventory folder: add --host NAME")
            from agent_sandbox.fleet import FleetRenderer

            spec = FleetRenderer.from_path(spec_path).spec_for(host)
        else:
            from agent_sandbox.spec.loader import load_spec

            spec = load_spec(spec_path)
    except SettingsError:
        raise
    except SandboxError as exc:
        raise SettingsError(f"{spec_path}: invalid spec:\n{exc}") from None
    except (OSError, KeyError) as exc:
        raise SettingsError(f"cannot use spec {spec_path} (host {host}): {exc}") from None
    lim = spec.platforms.linux.limits
    return parse(srt_settings(spec, home), source=f"{spec_path} (rendered)").with_limits(
        (lim.processes, lim.memory, lim.file_size))


USAGE = """usage: sandbox exec [--settings FILE | --spec SPEC [--host NAME]] [--cwd DIR]
                    [--backend bwrap|srt|gvisor] [--timeout SECONDS]
                    [--max-processes N] [--max-memory SIZE] [--max-file-size SIZE]
                    -- CMD [ARG...]

Run CMD with the filesystem and network policy of srt-format settings enforced.
Settings default to /etc/agent-sandbox/srt-settings.json, then ~/.srt-settings.json.
The exit status is CMD's; 125 means the sandbox itself could not start
(the message names the cause and the remedy); 124 means --timeout expired.
Each run is bounded (default 4096 processes, half the host's memory, 16G per file;
the spec's platforms.linux.limits); a limit that stopped the command is said.
"""
