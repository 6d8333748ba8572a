"""The public API of the runtime: run one command in the sandbox.

``run_sandboxed(argv, settings, cwd, timeout, capture=True)`` is the stable
Python API (the approval loop runs approved commands through it) and
``exec_passthrough`` is what ``sandbox exec`` calls (stdin/stdout/stderr
inherited, signals forwarded, exit status passed through). Both read the
settings and hand the run to the backend picked by name (``backends.pick``:
bubblewrap, srt or gVisor, one ``Backend`` interface).

Settings decide policy, so they are read only from a file no sandbox they
govern can write: ``load_settings`` refuses a settings file inside one of its
own writable roots, and every run binds its settings file read-only.

It never runs a command unsandboxed: every failure before the command starts
raises ``SandboxStartError`` (exit status ``SANDBOX_FAILED``, 125).
"""

from __future__ import annotations

import os

from agent_sandbox import contract

from .backends import OUTPUT_LIMIT, pick
from .failures import InvalidSettingsError, SandboxStartError
from .host import home_dir
from .settings import Settings, SettingsError, load

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO, Any

    from .broker.pinned import Pin
    from .result import CompletedRun

def default_path(home: str) -> str:
    """The settings file used when none is named, or SettingsError."""
    if os.path.isfile(contract.SYSTEM_SRT_SETTINGS):
        return contract.SYSTEM_SRT_SETTINGS
    user = os.path.join(home, contract.USER_SRT_SETTINGS)
    if os.path.isfile(user):
        return user
    raise SettingsError(
        f"no sandbox settings: neither {contract.SYSTEM_SRT_SETTINGS} nor {user} exists; "
        "pass --settings FILE (srt format) or --spec SPEC --host NAME"
    )


def load_settings(path: str, home: str, cwd: str) -> Settings:
    """Settings from a file, refused when the file lies in one of its own writable
    roots (a command could loosen its next run) or is writable by other users."""
    from agent_sandbox.spec.paths import expand, is_glob

    given = os.path.abspath(path)
    real = os.path.realpath(path)
    s = load(real)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}") from None
    if st.st_mode & 0o022:
        raise SettingsError(f"{path} is writable by other users; `chmod go-w {path}`")
    for rule in s.filesystem.allow_write:
        written = expand(rule, home=home, cwd=cwd)
        if is_glob(written):
            continue
        # the file, and every link on the way to it: a link in a writable root can
        # be pointed at another file by the command; a folder of the protected set
        # (a repository's .sandbox/) is read-only in every sandbox, wherever it is
        if any((p == root or p.startswith(root.rstrip("/") + "/")) and not _protected_dir(p)
               for p in (real, given) for root in (written, os.path.realpath(written))):
            raise SettingsError(
                f"{path} lies in its own writable root {written}: a sandboxed command could "
                "rewrite the policy of the next run; keep the settings file outside "
                "allowWrite (for example in ~/.config/agent-sandbox/)")
    return s


def _protected_dir(path: str) -> bool:
    """Whether a path lies inside a folder of the protected set (at any depth)."""
    from agent_sandbox.protected import ANY_DEPTH

    return any(kind == "d" and f"/{rel}/" in path for rel, kind, _ in ANY_DEPTH)


def resolve_settings(settings: Settings | str | os.PathLike[str] | dict[str, Any] | None,
                     home: str, cwd: str | None = None) -> Settings:
    if isinstance(settings, Settings):
        return settings
    if isinstance(settings, dict):
        from .settings import parse

        return parse(settings)
    path = default_path(home) if settings is None else os.fspath(settings)
    return load_settings(path, home, cwd or os.getcwd())


def run_sandboxed(
    argv: Sequence[str],
    settings: Settings | str | os.PathLike[str] | dict[str, Any] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    capture: bool = True,
    *,
    backend: str = "bwrap",
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    audit_dir: str | None = None,
    output_limit: int = OUTPUT_LIMIT,
    pin: Pin | None = None,
) -> CompletedRun:
    """Run ``argv`` in the sandbox and return its result.

    ``settings`` is srt-format settings (a path, a parsed ``Settings`` or a
    dict; None: the host default). Raises ``SandboxStartError`` when the sandbox
    cannot start, bad settings included (``InvalidSettingsError``, also a
    ``SettingsError``); the command never runs unsandboxed. A timeout kills every
    process of the command. Captured output is read while the command runs and
    at most ``output_limit`` bytes of each stream are kept, half its head and
    half its tail (``CompletedRun`` notes what was trimmed between them).
    ``pin``: the tree an approved command may read (``broker.pinned``; bubblewrap
    backend only): a file changed since is refused to it, never read.
    """
    try:
        return _run_sandboxed(argv, settings, cwd, timeout, capture, backend=backend, env=env,
                              stdin=stdin, audit_dir=audit_dir, output_limit=output_limit,
                              pin=pin)
    except InvalidSettingsError:
        raise
    except SettingsError as exc:
        raise InvalidSettingsError(str(exc)) from None


def _run_sandboxed(argv: Sequence[str], settings: Any, cwd: Any, timeout: float | None,
                   capture: bool, *, backend: str, env: dict[str, str] | None,
                   stdin: bytes | None, audit_dir: str | None,
                   output_limit: int, pin: Pin | None = None) -> CompletedRun:
    home = home_dir()
    wd = os.path.realpath(os.fspath(cwd) if cwd is not None else os.getcwd())
    if not os.path.isdir(wd):
        raise SandboxStartError(f"working directory {wd} does not exist")
    s = resolve_settings(settings, home, wd)
    chosen = pick(backend)
    if pin is not None and not chosen.pins:
        raise SandboxStartError("an approved command's tree is pinned by the bubblewrap "
                                "backend only")
    return chosen.run(list(argv), s, wd, home, timeout=timeout, capture=capture, env=env,
                      stdin=stdin, output_limit=output_limit, audit_dir=audit_dir, pin=pin)


def exec_passthrough(argv: Sequence[str], settings: Settings, cwd: str, *,
                     backend: str = "bwrap", timeout: float | None = None,
                     err: IO[str] | None = None,
                     started: Callable[[], None] | None = None) -> int:
    """Run with the terminal attached; return the command's exit status.
    ``started`` is called once the command runs (bwrap backend)."""
    return pick(backend).passthrough(list(argv), settings, cwd, home_dir(), timeout=timeout,
                                     err=err, started=started)
