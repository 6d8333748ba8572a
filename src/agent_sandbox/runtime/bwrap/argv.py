"""The ``bwrap`` command line for a plan (pure), the start gate the command runs
behind, the proxy variables set inside the sandbox, and a run's argv and
environment put together (``prepare``, with its overlays as bwrap takes them).

Nothing here decides what is mounted: ``bwrap.plan`` does. This module only
writes the plan down in bwrap's terms, and must never drop or reorder a mount:
the one thing it moves is ``late_binds``, the read-only binds of files (and of
``/dev/null`` over hidden files) whose place in the order cannot matter, which
``runtime.bwrap.late_binds`` makes (same mounts) once bwrap has set the rest up, before
the command starts.
"""

from __future__ import annotations

import os
import sys

from agent_sandbox.contract import PROXY_HTTP_PORT, PROXY_SOCKS_PORT

from ..host import find_bwrap
from ..settings import _Record
from .plan import Mount, Plan, _by_path, _over

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence


class Fds(_Record):
    """Descriptors handed to bwrap: the seccomp program, info and block pipes, and
    the start gate read inside the sandbox (see ``gated``)."""

    __slots__ = ("block", "gate", "info", "ready", "seccomp")
    seccomp: int | None
    info: int | None
    block: int | None
    gate: int | None
    ready: int | None
    _seccomp = _info = _block = _gate = _ready = None

    def __init__(self, seccomp: int | None = None, info: int | None = None,
                 block: int | None = None, gate: int | None = None,
                 ready: int | None = None) -> None:
        super().__init__(seccomp=seccomp, info=info, block=block, gate=gate, ready=ready)


def build_argv(
    p: Plan,
    command: Sequence[str],
    *,
    cwd: str,
    fds: Fds | None = None,
    bwrap: str = "bwrap",
    is_root: bool = False,
    new_session: bool = True,
    overlays: Sequence[tuple[str, str, bool]] = (),
    late: Collection[str] = (),
) -> list[str]:
    """The ``bwrap`` command line for a plan (pure).

    ``late``: the targets of read-only binds of files (``late_binds``) left out of
    it, because the caller makes them after bwrap's setup (``runtime.bwrap.late_binds``).

    ``new_session=False`` keeps an interactive command on its terminal; only
    safe with the seccomp filter, which refuses TIOCSTI and TIOCLINUX.
    ``overlays``: ``(source, target, writable)`` binds over the plan's mounts, in
    order (``sandbox agent``'s private state folder, ``agent.state``).
    """
    argv = [bwrap] if p.hide_root else [bwrap, "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    # the sandbox's pid 1 is bwrap's own init, which runs without the seccomp
    # filter: its memory must not be writable by the command
    for mem in ("/proc/1/mem", "/proc/1/task/1/mem"):
        argv += ["--ro-bind", "/dev/null", mem]
    remount: list[str] = []
    for m in p.mounts:
        if m.op == "hide":
            if m.kind == "d":
                argv += ["--tmpfs", m.path]
                remount.append(m.path)  # after the mounts inside it are in place
            elif m.path in late:
                continue  # made after bwrap's setup, before the command (late_binds)
            else:
                argv += ["--ro-bind", "/dev/null", m.path]
        elif m.op == "ro" and m.kind == "f" and m.path in late:
            continue  # made after bwrap's setup, before the command (late_binds)
        elif m.op in ("show", "ro"):
            argv += ["--ro-bind", m.path, m.path]
        elif m.op == "rw":
            argv += ["--bind", m.path, m.path]
        elif m.op == "link":
            argv += ["--symlink", m.kind, m.path]
    for source, target, writable in overlays:
        argv += ["--bind" if writable else "--ro-bind", source, target]
    for path in remount:
        argv += ["--remount-ro", path]
    fds = fds or Fds()
    argv += [
        "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
        "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
        "--die-with-parent", "--cap-drop", "ALL",
    ]
    if new_session or fds.seccomp is None:
        argv.append("--new-session")
    if fds.seccomp is not None:
        argv += ["--seccomp", str(fds.seccomp)]
    if fds.info is not None:
        argv += ["--info-fd", str(fds.info)]
    if fds.block is not None:
        argv += ["--block-fd", str(fds.block)]
    for name in p.unset_env:
        argv += ["--unsetenv", name]
    argv += ["--chdir", cwd, "--", *gated(command, fds.gate, fds.ready)]
    return argv


def late_binds(p: Plan, overlays: Sequence[tuple[str, str, bool]] = ()
               ) -> tuple[tuple[str, str], ...]:
    """The read-only binds of files that may be made after bwrap's setup (pure), as
    (source, target): each ``ro`` mount of a file (its own path) and each ``hide``
    of a file (``/dev/null`` over it) that is the only mount of the plan at its path
    and lies under no overlay's target. Nothing is ever mounted below a file, and
    every other mount at a folder above it comes before it on the command line
    already (the plan goes shallow to deep; ``--remount-ro`` changes only its own
    folder's mount), so the command sees the same tree when it is made last."""
    count: dict[str, int] = {}
    for m in p.mounts:
        count[m.path] = count.get(m.path, 0) + 1
    targets = [t for _, t, _ in overlays]
    return tuple((m.path if m.op == "ro" else "/dev/null", m.path) for m in p.mounts
                 if m.op in ("ro", "hide") and m.kind == "f" and count[m.path] == 1
                 and not any(m.path == t or m.path.startswith(t.rstrip("/") + "/")
                             for t in targets))


# The start gate. bwrap's --block-fd treats end-of-file as "go", and the inner
# bwrap processes arm their parent-death signal late in their setup: a caller
# that dies during start-up could leave the command running unsupervised (no
# proxy, nobody to end it). So the command runs behind a two-step gate: once
# every bwrap level has finished its setup (parent-death signals armed), the
# gate says "ready"; only then does the live caller answer "go". End-of-file
# (the caller died) or anything else ends the sandbox before the command runs.
GATE_SCRIPT = ('echo ready >&{ready}; exec {ready}>&-; '
               'read -r go <&{gate} && [ "$go" = go ] || exit 125; '
               'exec {gate}<&-; exec "$@"')


def gated(command: Sequence[str], gate: int | None, ready: int | None) -> list[str]:
    """The command behind the start gate (unchanged without the gate's fds)."""
    if gate is None or ready is None:
        return list(command)
    script = GATE_SCRIPT.format(gate=int(gate), ready=int(ready))
    # sh (dash starts in about a third of bash's time) when both descriptors have
    # one digit: dash takes only single-digit descriptors in redirections, so bash
    # otherwise. -p: bash skips BASH_ENV (and as sh reads no start-up file at all),
    # so nothing of the caller's runs before the gate opens.
    shell = GATE_SHELL if max(int(gate), int(ready)) <= 9 else GATE_SHELL_WIDE
    return [shell, "-p", "-c", script, "sandbox-gate", *command]


GATE_SHELL = "/bin/sh"
GATE_SHELL_WIDE = "/bin/bash"
# the descriptors bwrap.run hands the sandbox when it starts bwrap itself (the
# seccomp program, info, block, gate and ready), renumbered to these in bwrap's
# process: single digits, so the gate runs under GATE_SHELL
CHILD_FDS = (3, 4, 5, 6, 7)


def proxy_env(http_port: int = PROXY_HTTP_PORT, socks_port: int = PROXY_SOCKS_PORT,
              connect_helper: Sequence[str] | None = None) -> dict[str, str]:
    """The proxy variables set inside the sandbox (both cases; loopback bypasses)."""
    http = f"http://127.0.0.1:{http_port}"
    socks = f"socks5h://127.0.0.1:{socks_port}"
    env: dict[str, str] = {}
    for k, v in (("HTTP_PROXY", http), ("HTTPS_PROXY", http), ("ALL_PROXY", socks),
                 ("FTP_PROXY", http), ("NO_PROXY", "localhost,127.0.0.1,::1")):
        env[k] = v
        env[k.lower()] = v
    env["GRPC_PROXY"] = http
    env["grpc_proxy"] = http
    env["SANDBOX_RUNTIME"] = "1"
    if connect_helper:
        cmd = " ".join(connect_helper)
        env["GIT_SSH_COMMAND"] = f"ssh -o ProxyCommand='{cmd} %h %p'"
    return env


def connect_helper() -> list[str]:
    """ssh's ProxyCommand inside the sandbox (an isolated interpreter, no site)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-I", "-S", os.path.join(here, "connect.py")]


def overlay_binds(p: Plan, overlays: Sequence[tuple[str, str, str | None]],
                  filters: Mapping[str, Callable[[str], str]] | None = None
                  ) -> list[tuple[str, str, bool]]:
    """``BwrapRun``'s overlays as ``build_argv`` takes them: a read-only source the
    plan hides is replaced by its fallback. A read-only target with a filter
    gets what the filter makes of the file chosen (the source's real path, or
    the fallback): the filter sees only what the sandbox would have shown."""
    index = _by_path(m for m in p.mounts if m.op != "link")
    out: list[tuple[str, str, bool]] = []
    for source, target, fallback in overlays:
        if fallback is None:
            out.append((source, target, True))
            continue
        real = os.path.realpath(source)
        over = _over(real, index)
        if over:
            visible = max(over, key=Mount.key).op != "hide"
        else:  # the plan's own rule: nothing of the host's where its root is hidden
            visible = not p.hide_root
        source = real if visible else fallback
        if filters and target in filters:
            source = filters[target](source)
        out.append((source, target, False))
    return out


def prepare(p: Plan, command: Sequence[str], cwd: str, env: dict[str, str] | None,
            fds: Fds, interactive: bool = False,
            overlays: Sequence[tuple[str, str, bool]] = (),
            late: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The argv and environment for a run (no effects). The settings' credential
    variables are removed from bwrap's own environment: no process inside holds
    them, bwrap's pid 1 included. ``late``: the binds the run makes after bwrap's
    setup (``bwrap.argv.late_binds``), left out of the argv."""
    argv = build_argv(p, command, cwd=cwd, fds=fds, bwrap=find_bwrap(),
                      is_root=os.geteuid() == 0, new_session=not interactive,
                      overlays=overlays, late=frozenset(late))
    full_env = {k: v for k, v in (os.environ if env is None else env).items()
                if k not in p.unset_env}
    full_env.update(proxy_env(connect_helper=connect_helper()))
    return argv, full_env
