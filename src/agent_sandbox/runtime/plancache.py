"""Compiled plans for the native ``sandbox exec`` launcher.

Planning a sandbox (parsing the settings, resolving every rule against the
disk, building the seccomp program) is what costs time in ``sandbox exec``,
not the sandbox itself. When ``sandbox exec --settings FILE -- CMD`` runs the
bwrap backend, the Python runtime also writes what it planned to a *plan
file*: the inputs it depended on and the bwrap command line it built. The
native launcher (``launcher/sandbox.c``, installed as ``sandbox``) replays a
plan file only when every input still gives the same answer; anything else,
or any doubt, runs the Python runtime, which plans afresh.

The inputs recorded are complete because the planner sees the filesystem only
through an ``FsView`` (``bwrap.plan``): ``RecordingFs`` records each question
it asked (a path's kind, a path's resolved form, a bounded directory walk)
with the answer. Besides those: the settings file (path and exact bytes), the
host profile, the user, the working directory and the environment variables
the runtime reads.

Plan files live in the per-user lock directory, which every bwrap sandbox gets
read-only (``protect`` in ``bwrap.plan``) and every srt sandbox gets in
``denyWrite``: a sandboxed command cannot plant a plan for the next run. The
launcher also refuses a plan file (or folder) not owned by the user or
writable by anyone else.

The format is a sequence of fields ``TAG LENGTH\\n BYTES \\n``; the launcher
reads them in order. See ``write``.
"""

from __future__ import annotations

import os

from . import bwrap as bw

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from .settings import Settings

VERSION = b"agent-sandbox-plan 1"
# Environment variables the runtime reads while planning and starting a run.
KEY_ENV = ("HOME", "PATH", "XDG_RUNTIME_DIR", "AGENT_SANDBOX_AUDIT_DIR", "AGENT_SANDBOX_HOSTS",
           "AGENT_SANDBOX_LOCK_DIR", "AGENT_SANDBOX_BWRAP", "AGENT_SANDBOX_NO_PLAN_CACHE")
# Descriptor numbers the cached command line names; the launcher puts its
# pipes (and the seccomp program) on exactly these before starting bwrap.
FDS = bw.Fds(seccomp=1001, info=1002, block=1003, gate=1004, ready=1005)
DISABLE_ENV = "AGENT_SANDBOX_NO_PLAN_CACHE"
KEEP = 256  # plan files kept per user (one per settings file, folder and user)


class RecordingFs(bw.RealFs):
    """``RealFs`` that keeps every question asked and its answer."""

    def __init__(self, skip: Sequence[str] = ()) -> None:
        super().__init__(skip=skip)
        self.kinds: dict[str, str | None] = {}
        self.reals: dict[str, str] = {}

    def kind(self, path: str) -> str | None:
        k = super().kind(path)
        self.kinds[path] = k
        return k

    def realpath(self, path: str) -> str:
        r = super().realpath(path)
        self.reals[path] = r
        return r


def plans_dir(lock_dir: str) -> str:
    return os.path.join(lock_dir, "plans")


def key_name(uid: int, home: str, cwd: str, settings_path: str) -> str:
    """The plan file's name: FNV-1a (64 bit) of the lookup key, in hex.

    Only a name: the launcher compares every input in full, so two keys that
    share a name just replace each other's plan.
    """
    h = 0xcbf29ce484222325
    for b in f"{uid}\0{home}\0{cwd}\0{settings_path}".encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def _field(tag: str, value: bytes | str) -> bytes:
    data = value if isinstance(value, bytes) else os.fsencode(value)
    return b"%s %d\n%s\n" % (tag.encode(), len(data), data)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def write(*, lock_dir: str, settings_path: str, settings: Settings, home: str, cwd: str,
          fs: RecordingFs, plan: bw.Plan, argv: Sequence[str], env_add: dict[str, str],
          seccomp_program: bytes, notices: Iterable[str], python: str,
          audit_dir: str | None, profile_path: str,
          env: dict[str, str] | None = None) -> str | None:
    """Write the plan file for this run; its path, or None when this run cannot be replayed.

    ``env``: the environment the command was started with (the launcher compares
    it), when the runtime has changed its own since (the host profile's audit
    folder); ``audit_dir`` is where this run's proxy and sweep record.
    """
    seen: Mapping[str, str] = os.environ if env is None else env
    if seen.get(DISABLE_ENV) or fs.notes:
        return None  # a walk hit its budget: plan afresh each time (and say so)
    settings_real = os.path.realpath(settings_path)
    raw = _read(settings_real)
    if raw is None:
        return None
    uid = os.getuid()
    out = [_field("V", VERSION), _field("uid", str(uid)), _field("euid", str(os.geteuid()))]
    for name in KEY_ENV:
        value = seen.get(name)
        out.append(_field("E", name if value is None else f"{name}\0{value}"))
    out += [_field("cwd", cwd), _field("sfile", settings_real), _field("sbytes", raw)]
    profile = _read(profile_path)
    out.append(_field("profile", b"-" if profile is None else b"+" + profile))
    for path, kind in fs.kinds.items():
        out.append(_field("K", f"{path}\0{kind or '-'}"))
    for path, real in fs.reals.items():
        out.append(_field("R", f"{path}\0{real}"))
    for (root, depth), paths in fs._walked.items():
        out.append(_field("W", "\0".join([root, str(depth), str(fs.budget), *paths])))
    new_session = argv.index("--new-session")
    out.append(_field("I", str(new_session)))
    out += [_field("A", a) for a in argv]
    out += [_field("X", f"{k}={v}") for k, v in env_add.items()]
    out += [_field("P", f"{kind}{path}") for path, kind in plan.placeholders]
    out += [_field("O", w) for w in plan.writable_roots]
    out += [_field("M", m.path) for m in plan.mounts]
    out += [_field("N", n) for n in notices]
    out += [_field("S", seccomp_program), _field("Y", python), _field("D", audit_dir or ""),
            _field("Z", "end")]
    folder = plans_dir(lock_dir)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    target = os.path.join(folder, key_name(uid, home, cwd, settings_real))
    tmp = f"{target}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                 0o600)
    try:
        os.write(fd, b"".join(out))
    finally:
        os.close(fd)
    os.replace(tmp, target)
    prune(folder)
    return target


def prune(folder: str, keep: int = KEEP) -> None:
    """Remove the least recently written plan files beyond ``keep``."""
    try:
        with os.scandir(folder) as it:
            entries = [(e.stat(follow_symlinks=False).st_mtime, e.path) for e in it]
    except OSError:
        return
    if len(entries) <= keep:
        return
    for _, path in sorted(entries)[: len(entries) - keep]:
        try:
            os.unlink(path)
        except OSError:
            continue
