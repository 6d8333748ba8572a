"""Run one command in the sandbox: the orchestration behind ``sandbox exec``.

``run_sandboxed(argv, settings, cwd, timeout, capture=True)`` is the stable
Python API (the approval loop runs approved commands through it) and
``exec_passthrough`` is what the CLI calls (stdin/stdout/stderr inherited,
signals forwarded, exit status passed through).

The bwrap backend, step by step: plan the mounts (``bwrap.plan``), create the
protected-name placeholders under a lock, start ``bwrap`` held at
``--block-fd``, open the proxy ports inside its network namespace
(``netns.open_listeners``), release the command, serve the proxy lazily (on
the first connection, so a command that never connects pays nothing), wait,
clean up (after the command: ``sweep`` disarms protected names it created deep
in a writable root, then our placeholders go). ``--die-with-parent`` and the pid
namespace make every process the command started end with it.

Why no bridge process inside the sandbox (srt runs socat there, connected to a
unix socket bound in): the proxy's listening sockets are created in the
sandbox's network namespace and held by this process, so the sandbox's
loopback ports lead straight to the host proxy. Nothing inside can kill,
replace or impersonate the bridge, ``socket(AF_UNIX)`` can be refused outright
by seccomp, and the ports are ready before the command starts.

Exit statuses: the command's own; 125 when the sandbox could not start; 124
when a timeout expired; 128+N when the command died of signal N.

It never runs a command unsandboxed: every failure before the command starts
raises ``SandboxStartError`` (exit status ``SANDBOX_FAILED``, 125, with the
cause and the remedy).
"""

from __future__ import annotations

# The C halves: ``signal`` and ``json`` pull in ``enum`` and ``re``, which cost
# more at startup than the rest of ``sandbox exec``.
import _signal as signal
import fcntl
import os
import select
import sys
import time

from . import bwrap as bw
from .settings import (
    Settings,
    SettingsError,
    _Record,
    default_path,
    load,
    loads,
    require_enforceable,
)

# Imports for annotations only: the typing module costs startup time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import IO, Any

SANDBOX_FAILED = 125
TIMED_OUT = 124
BACKENDS = ("bwrap", "srt", "gvisor")
LOCK_DIR_ENV = "AGENT_SANDBOX_LOCK_DIR"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                     signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGCONT)


class SandboxStartError(RuntimeError):
    """The sandbox could not start; the message names the cause and the remedy."""


class InvalidSettingsError(SandboxStartError, SettingsError):
    """The settings are invalid (a ``SandboxStartError`` for callers of the API)."""


class CompletedRun(_Record):
    """The result of a sandboxed run."""

    __slots__ = ("backend", "duration", "returncode", "stderr", "stdout", "timed_out")
    returncode: int
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool
    backend: str
    _timed_out = False
    _backend = "bwrap"

    def __init__(self, returncode: int, stdout: bytes, stderr: bytes, duration: float,
                 timed_out: bool = False, backend: str = "bwrap") -> None:
        super().__init__(returncode=returncode, stdout=stdout, stderr=stderr,
                         duration=duration, timed_out=timed_out, backend=backend)


class _suppress:
    """``contextlib.suppress`` without importing contextlib on the fast path."""

    def __init__(self, *exc: type[BaseException]) -> None:
        self.exc = exc

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, self.exc)


def _no_inherited_fds() -> None:
    """Keep descriptors this process inherited (beyond stdio) out of the sandbox."""
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            with _suppress(OSError):
                os.set_inheritable(fd, False)


class _Spawned:
    """A child started with posix_spawn (no subprocess import): pid, poll, wait, kill."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        # Python ignores SIGPIPE and SIGXFSZ; the command gets the defaults back
        self.pid = os.posix_spawn(argv[0], argv, env,
                                  setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        self.returncode: int | None = None

    def _status(self, status: int) -> int:
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._status(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                self.returncode = SANDBOX_FAILED
                break
            self._status(status)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            with _suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


# -- settings ------------------------------------------------------------------


def resolve_settings(settings: Settings | str | os.PathLike[str] | dict[str, Any] | None,
                     home: str) -> Settings:
    if isinstance(settings, Settings):
        return settings
    if isinstance(settings, dict):
        from .settings import parse

        return parse(settings)
    if settings is None:
        return load(default_path(home))
    return load(os.fspath(settings))


def home_dir() -> str:
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        return os.path.realpath(home)
    import pwd

    return os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)


# -- diagnostics ---------------------------------------------------------------

APPARMOR_PROFILE = "/etc/apparmor.d/agent-sandbox-bwrap"


def _read_proc(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def diagnose_userns(read: Callable[[str], str | None] = _read_proc) -> str:
    """Why user namespaces may be unavailable here, and what to do (or '')."""

    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor restricts unprivileged user namespaces on this host (Ubuntu 24.04+). "
            f"Install the profile rendered by `sandbox render` at {APPARMOR_PROFILE} "
            "(it grants `userns` to /usr/bin/bwrap) and run "
            f"`sudo apparmor_parser -r {APPARMOR_PROFILE}`"
        )
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        return ("unprivileged user namespaces are disabled: "
                "`sudo sysctl -w kernel.unprivileged_userns_clone=1`")
    if read("/proc/sys/user/max_user_namespaces") == "0":
        return "user namespaces are disabled: `sudo sysctl -w user.max_user_namespaces=15000`"
    return ""


def find_bwrap() -> str:
    override = os.environ.get("AGENT_SANDBOX_BWRAP")
    if override:
        if not os.access(override, os.X_OK):
            raise SandboxStartError(f"AGENT_SANDBOX_BWRAP={override} is not executable")
        return override
    for d in ("/usr/bin", "/usr/local/bin", "/bin"):
        p = os.path.join(d, "bwrap")
        if os.access(p, os.X_OK):
            return p
    import shutil

    found = shutil.which("bwrap")
    if not found:
        raise SandboxStartError(
            "bubblewrap (bwrap) is not installed: install it (`apt-get install bubblewrap`, "
            "`dnf install bubblewrap`) or run `make setup`"
        )
    return found


# -- placeholders for protected names that do not exist yet --------------------


def _lock_dir() -> str:
    d = os.environ.get(LOCK_DIR_ENV) or os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or "/tmp", f"agent-sandbox-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


class Placeholders:
    """Create empty protected-name placeholders; remove ours when the last user ends.

    One pair of lock files per user: ``placeholders.users`` (a shared flock held
    by every run for its whole duration; it also lists the placeholders created)
    and ``placeholders.mutex`` (held exclusively while a run plans and creates
    placeholders, and while the last run out removes them). Use it as a context
    manager around planning *and* creation: a run that finds another run's
    placeholder and binds it read-only must already hold ``.users``, or the other
    run's cleanup could delete the placeholder between the plan and bwrap's bind.
    Cleanup removes placeholders only when it can take ``.users`` exclusively,
    i.e. no other sandbox of this user is running, and never blocks a run.
    """

    def __init__(self) -> None:
        self.users = -1
        self.mutex = -1
        self.dir = _lock_dir()  # the per-user lock folder (plans and owed sweeps too)

    def __enter__(self) -> Placeholders:
        base = os.path.join(self.dir, "placeholders")
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
        if self.users < 0:
            self.mutex = os.open(base + ".mutex", flags, 0o600)
            self.users = os.open(base + ".users", flags | os.O_APPEND, 0o600)
        fcntl.flock(self.mutex, fcntl.LOCK_EX)
        fcntl.flock(self.users, fcntl.LOCK_SH)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.mutex, fcntl.LOCK_UN)

    @staticmethod
    def _root(path: str) -> str:
        root = os.path.dirname(path)
        while os.path.basename(root) == ".git":
            root = os.path.dirname(root)
        return root

    def create(self, items: Sequence[tuple[str, str]]) -> set[str]:
        """Create what is missing (call inside ``with``); the placeholders that
        cannot exist (not writable by this user, so the command cannot create
        them either)."""
        if self.users < 0:
            raise RuntimeError("Placeholders.create outside its lock")
        impossible: set[str] = set()
        lines: list[str] = []
        empty: dict[str, str] = {}  # folder -> an empty placeholder file made in it
        for path, kind in items:
            folder = os.path.dirname(path)
            made = None
            if kind == "f" and folder in empty:
                # another name for the same empty file: a directory entry, no new inode
                # (creating files is the slow part of starting on some filesystems)
                try:
                    os.link(empty[folder], path, follow_symlinks=False)
                    made = [(path, "f")]
                except FileExistsError:
                    continue
                except OSError:
                    made = None
            if made is None:
                made = _make(path, kind, self._root(path))
            if made and made[-1] == (path, "f"):
                empty.setdefault(folder, path)
            if made is None:
                impossible.add(path)
                continue
            lines += [f"{k}{m}\0" for m, k in made]  # paths hold no NUL
        if lines:
            os.write(self.users, os.fsencode("".join(lines)))
        return impossible

    def cleanup(self) -> None:
        users, mutex = self.users, self.mutex
        if users < 0:
            return
        self.users = self.mutex = -1
        try:
            fcntl.flock(mutex, fcntl.LOCK_EX)
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another sandbox still relies on the placeholders
            os.lseek(users, 0, os.SEEK_SET)
            data = b""
            while chunk := os.read(users, 65536):
                data += chunk
            for record in reversed(os.fsdecode(data).split("\0")):
                with _suppress(ValueError, OSError, TypeError):
                    if not record or record[0] not in "df":
                        continue
                    kind, path = record[0], record[1:]
                    if kind == "d":
                        os.rmdir(path)
                    elif os.lstat(path).st_size == 0:
                        os.unlink(path)
            os.ftruncate(users, 0)
            reap_stuck(self.dir)
            _settle_owed(self.dir)
        finally:
            os.close(users)
            os.close(mutex)


def _settle_owed(lock_dir: str) -> None:
    """The sweeps runs killed before theirs left owed (``sweep.settle``)."""
    try:
        if not os.listdir(os.path.join(lock_dir, "owed")):
            return
    except OSError:
        return
    from .sweep import _settle_cli

    with _suppress(Exception):
        _settle_cli(lock_dir)


REAP_EVERY = 30.0  # seconds between two looks for stuck sandboxes (per user)
GATE_MARKERS = (b"__gate", b"sandbox-gate")


def reap_stuck(lock_dir: str, every: float | None = None) -> int:
    """Kill this user's sandboxes left behind without a supervisor; how many.

    A caller SIGKILLed while bwrap is still setting up can leave bwrap's inner
    process blocked for good in bwrap's own start-up handshake (its parent,
    which would have answered, died with the caller; its parent-death signal
    is not armed yet). The command never runs there (the start gate), but the
    process stays. Such a process is a bwrap running our start gate whose
    parent is gone (it was handed to init, parent pid 1). The last run of a
    user to finish looks for them, at most every ``REAP_EVERY`` seconds
    (``AGENT_SANDBOX_REAP_EVERY`` overrides it).
    """
    if every is None:
        every = float(os.environ.get("AGENT_SANDBOX_REAP_EVERY", REAP_EVERY))
    stamp = os.path.join(lock_dir, "reaped")
    try:
        if time.time() - os.stat(stamp).st_mtime < every:
            return 0
    except OSError:
        pass
    try:
        os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        os.utime(stamp)
    except OSError:
        return 0
    uid, killed = os.getuid(), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[1] != b"1":
                    continue  # it still has its parent
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if argv[0].endswith(b"/bwrap") and any(m in argv for m in GATE_MARKERS):
                os.kill(int(name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError, IndexError):
            continue
    return killed


def _make(path: str, kind: str, root: str) -> list[tuple[str, str]] | None:
    """Create a placeholder (and missing parents up to ``root``); what was created,
    or None when this user may not create it (neither can the sandboxed command)."""
    made: list[tuple[str, str]] = []
    parent = os.path.dirname(path)
    missing = []
    while parent != root and not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    try:
        for d in reversed(missing):
            os.mkdir(d, 0o755)
            made.append((d, "d"))
        if kind == "d":
            os.mkdir(path, 0o755)
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644))
        made.append((path, kind))
    except FileExistsError:
        pass
    except (PermissionError, OSError) as exc:
        if exc.errno in (1, 13, 30) and not made:  # EPERM, EACCES, EROFS
            return None
        raise SandboxStartError(
            f"cannot create the protected placeholder {path}: {exc.strerror}; "
            "make the directory writable or remove it from allowWrite"
        ) from None
    return made


# -- the bwrap backend -----------------------------------------------------------


def _connect_helper() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-I", "-S", os.path.join(here, "connect.py")]


def runtime_paths(lock_dir: str | None = None) -> list[str]:
    """What the runtime keeps read-only in every sandbox besides the settings: the
    per-user lock and plan folder, and its own installation (the interpreter's
    prefix, where the launcher lives too, and the package). A command that could
    rewrite them would run its code outside the sandbox on the next start."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return list(dict.fromkeys([lock_dir or _lock_dir(), sys.prefix, package]))


def launcher_path() -> str:
    """Where the native launcher is installed: next to this install's Python."""
    return os.path.join(os.path.dirname(sys.executable), "sandbox")


def prepare(p: bw.Plan, command: Sequence[str], cwd: str, env: dict[str, str] | None,
            fds: bw.Fds, interactive: bool = False) -> tuple[list[str], dict[str, str]]:
    """The argv and environment for a run (no effects)."""
    argv = bw.build_argv(p, command, cwd=cwd, fds=fds, bwrap=find_bwrap(),
                         is_root=os.geteuid() == 0, new_session=not interactive,
                         gate=bw.gate_program(p, launcher_path()))
    full_env = dict(os.environ if env is None else env)
    full_env.update(bw.proxy_env(connect_helper=_connect_helper()))
    return argv, full_env


class BwrapRun:
    """One sandboxed process (bwrap backend), from start to cleanup."""

    def __init__(self, settings: Settings, command: Sequence[str], *, cwd: str, home: str,
                 env: dict[str, str] | None = None, audit_dir: str | None = None,
                 record: Callable[[dict[str, Any]], None] | None = None) -> None:
        if not command:
            raise SandboxStartError("no command given: sandbox exec -- CMD [ARG...]")
        require_enforceable(settings, "bwrap")
        self.settings, self.command, self.cwd, self.home = settings, list(command), cwd, home
        self.env, self.audit_dir, self._record = env, audit_dir, record
        self.proc: Any = None
        self.pid1: int | None = None
        self.listeners: list[Any] = []
        self.proxy: Any = None
        self.placeholders: Placeholders | None = None
        self.plan: bw.Plan | None = None
        self.started = 0.0
        self.quarantined: list[tuple[str, str]] = []
        self.notices: list[str] = []
        self._audit_close: Callable[[], None] | None = None
        # the settings file this run was read from, when the launcher may replay it
        self.plan_source: str | None = None
        self.owed: str | None = None  # this run's marker until its sweep is done
        self._seccomp = b""  # the filter this run's sandbox got

    # start -----------------------------------------------------------------

    def start(self, *, capture: bool = False, stdin: Any = None, stdout: Any = None,
              stderr: Any = None) -> None:
        from . import seccomp

        n = self.settings.network
        try:
            self._seccomp = seccomp.program(allow_unix=bool(n.allow_unix_sockets)
                                            or n.allow_all_unix_sockets)
            sfd = seccomp.memfd(self._seccomp)
        except seccomp.SeccompError as exc:
            raise SandboxStartError(str(exc)) from None
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        gate_r, gate_w = os.pipe()
        ready_r, ready_w = os.pipe()
        fds = bw.Fds(seccomp=sfd, info=info_w, block=block_r, gate=gate_r, ready=ready_w)
        try:
            self.placeholders = Placeholders()
            lock_dir = self.placeholders.dir
            realfs: bw.RealFs
            if self.plan_source is not None:
                from .plancache import RecordingFs

                realfs = RecordingFs(skip=[lock_dir])
            else:
                realfs = bw.RealFs(skip=[lock_dir])
            with self.placeholders:
                p = bw.plan(self.settings, home=self.home, cwd=self.cwd, fs=realfs,
                            protect=runtime_paths(lock_dir))
                self.started = time.time()
                impossible = self.placeholders.create(p.placeholders)
                if impossible:
                    self.plan_source = None  # the launcher replays only complete plans
                p = bw.without(p, impossible)
                from .sweep import owe

                # owed until this run's own sweep is done (see sweep.settle)
                self.owed = owe(lock_dir, self.started, p.writable_roots,
                                [m.path for m in p.mounts])
            self.notices.extend(realfs.notes)
            self.plan = p
            argv, env = prepare(p, self.command, self.cwd, self.env, fds,
                                interactive=not capture and os.isatty(0))
            try:
                if capture:
                    import subprocess

                    self.proc = subprocess.Popen(
                        argv, env=env, pass_fds=(sfd, info_w, block_r, gate_r, ready_w),
                        stdin=stdin,
                        stdout=stdout, stderr=stderr)
                else:
                    _no_inherited_fds()
                    for fd in (sfd, info_w, block_r, gate_r, ready_w):
                        os.set_inheritable(fd, True)
                    self.proc = _Spawned(argv, env)
            except OSError as exc:
                raise SandboxStartError(f"cannot start bwrap: {exc}") from None
            os.close(info_w)
            info_w = -1
            os.close(block_r)
            block_r = -1
            os.close(gate_r)
            gate_r = -1
            os.close(ready_w)
            ready_w = -1
            os.close(sfd)
            sfd = -1
            info = _read_all(info_r)
            try:
                self.pid1 = int(loads(info)["child-pid"])
            except (ValueError, KeyError, TypeError):
                self.proc.wait()
                hint = diagnose_userns()
                raise SandboxStartError(
                    "bubblewrap could not create the sandbox (see its message above)"
                    + (f"; {hint}" if hint else "; check that user namespaces are enabled")
                ) from None
            from .netns import NamespaceError, open_listeners

            try:
                self.listeners = open_listeners(self.pid1, (bw.PROXY_HTTP_PORT,
                                                            bw.PROXY_SOCKS_PORT))
            except NamespaceError as exc:
                self.proc.kill()
                self.proc.wait()
                raise SandboxStartError(f"{exc}; {diagnose_userns() or 'check /proc access'}"
                                        ) from None
            os.write(block_w, b"1")
            if _read_line(ready_r) != b"ready\n":  # bwrap failed before the command
                self.proc.wait()
                raise SandboxStartError("the sandbox could not start the command "
                                        "(see bwrap's message above)")
            os.write(gate_w, b"go\n")  # the command starts only on this word
            if self.plan_source is not None:
                self._save_plan(realfs, lock_dir)
        except BaseException:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.cleanup()
            raise
        finally:
            for fd in (info_r, info_w, block_r, block_w, gate_r, gate_w, ready_r, ready_w,
                       sfd):
                if fd >= 0:
                    with _suppress(OSError):
                        os.close(fd)

    def _save_plan(self, fs: Any, lock_dir: str) -> None:
        """Write the plan file the native launcher replays (see ``plancache``)."""
        from . import plancache

        if self.plan is None or self.plan_source is None:
            return
        try:
            plancache.write(
                lock_dir=lock_dir, settings_path=self.plan_source, settings=self.settings,
                home=self.home, cwd=self.cwd, fs=fs, plan=self.plan,
                argv=bw.build_argv(self.plan, [], cwd=self.cwd, fds=plancache.FDS,
                                   bwrap=find_bwrap(), is_root=os.geteuid() == 0,
                                   gate=bw.gate_program(self.plan, launcher_path())),
                env_add=bw.proxy_env(connect_helper=_connect_helper()),
                seccomp_program=self._seccomp,
                notices=self.notices, python=sys.executable, env=_ENV_AT_START,
                audit_dir=self.audit_dir or os.environ.get("AGENT_SANDBOX_AUDIT_DIR"),
                profile_path=EXEC_PROFILE)
        except (OSError, ValueError):
            pass  # no plan file: the next run plans afresh

    # proxy -----------------------------------------------------------------

    def start_proxy(self) -> None:
        if self.proxy is not None or not self.listeners:
            return
        from .proxy import refusing, serve

        try:
            record = self._recorder()
        except Exception as exc:  # no audit, no egress: every request is refused
            reason = f"{type(exc).__name__}: {exc}"
            self.notices.append(f"sandbox: the audit log is unavailable ({reason}); "
                                "all network requests are refused\n")
            record = refusing(reason)
        self.proxy = serve(self.settings.network, self.listeners[0], self.listeners[1], record,
                           f"exec-{os.getpid()}")
        self.listeners = []  # the proxy owns them now

    # waiting ---------------------------------------------------------------

    def forward(self, signum: int) -> None:
        """Send a signal to the command (the children of the sandbox's init)."""
        targets: list[int] = []
        if self.pid1 is not None:
            with _suppress(OSError):
                with open(f"/proc/{self.pid1}/task/{self.pid1}/children") as fh:
                    targets = [int(x) for x in fh.read().split()]
        for pid in targets or ([self.pid1] if self.pid1 else []):
            with _suppress(OSError):
                os.kill(pid, signum)

    def wait(self, timeout: float | None = None, *, lazy_proxy: bool = True) -> tuple[int, bool]:
        """Wait for the command; (returncode, timed_out)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not lazy_proxy:
            self.start_proxy()
        pidfd = os.pidfd_open(self.proc.pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            watching = self.proxy is None and bool(self.listeners)
            if watching:
                for s in self.listeners:
                    poller.register(s.fileno(), select.POLLIN)
            while True:
                ms = None if deadline is None else max(0, int((deadline - time.monotonic())
                                                              * 1000))
                try:
                    events = poller.poll(ms)
                except InterruptedError:
                    continue
                if not events:
                    if deadline is not None and time.monotonic() >= deadline:
                        self.kill()
                        return self.proc.wait(), True
                    continue
                fds = {fd for fd, _ in events}
                if pidfd in fds:
                    return self.proc.wait(), False
                if watching:
                    for s in self.listeners:
                        poller.unregister(s.fileno())
                    watching = False
                    self.start_proxy()
        finally:
            os.close(pidfd)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # --die-with-parent and the pid namespace take the rest

    def sweep(self) -> bool:
        """Disarm protected names the command created below the writable roots;
        False when that cannot be done yet (the sandbox is still running)."""
        if self.plan is None or self.proc is None:
            return True  # nothing ran
        if self.proc.poll() is None:
            return False
        from .sweep import quarantine

        roots = [w for w in self.plan.writable_roots if os.path.isdir(w)]
        skip = [m.path for m in self.plan.mounts]
        self.quarantined, notes = quarantine(roots, self.started, skip, recorder=self._recorder)
        self.notices.extend(notes)
        return True

    def _recorder(self) -> Callable[[dict[str, Any]], None]:
        """This run's one audit recorder, for the proxy and the sweep alike: the
        caller's, or the audit folder's, opened on first use and closed in cleanup."""
        if self._record is None:
            from .proxy import audit_recorder

            self._record, self._audit_close = audit_recorder(self.audit_dir)
        return self._record

    def cleanup(self) -> None:
        swept = False
        with _suppress(Exception):
            swept = self.sweep()
        if swept and self.owed:
            with _suppress(OSError):
                os.unlink(self.owed)
            self.owed = None
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        for s in self.listeners:
            with _suppress(OSError):
                s.close()
        self.listeners = []
        if self._audit_close is not None:
            self._audit_close()
            self._audit_close = None
        if self.placeholders is not None:
            self.placeholders.cleanup()
            self.placeholders = None


def _read_line(fd: int, limit: int = 64) -> bytes:
    """One line from a pipe (or what came before end-of-file)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        try:
            chunk = os.read(fd, 1)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    return data


def _read_all(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except InterruptedError:
            continue
        if not chunk:
            return data
        data += chunk
        if data.rstrip().endswith(b"}"):
            return data


# -- public API ------------------------------------------------------------------


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
) -> CompletedRun:
    """Run ``argv`` in the sandbox and return its result.

    ``settings`` is srt-format settings (a path, a parsed ``Settings`` or a
    dict; None: the host default). Raises ``SandboxStartError`` when the sandbox
    cannot start, bad settings included (``InvalidSettingsError``, also a
    ``SettingsError``); the command never runs unsandboxed. A timeout kills every
    process of the command.
    """
    try:
        return _run_sandboxed(argv, settings, cwd, timeout, capture, backend=backend, env=env,
                              stdin=stdin, audit_dir=audit_dir)
    except InvalidSettingsError:
        raise
    except SettingsError as exc:
        raise InvalidSettingsError(str(exc)) from None


def _run_sandboxed(
    argv: Sequence[str],
    settings: Settings | str | os.PathLike[str] | dict[str, Any] | None,
    cwd: str | os.PathLike[str] | None,
    timeout: float | None,
    capture: bool,
    *,
    backend: str,
    env: dict[str, str] | None,
    stdin: bytes | None,
    audit_dir: str | None,
) -> CompletedRun:
    started = time.monotonic()
    home = home_dir()
    s = resolve_settings(settings, home)
    wd = os.path.realpath(os.fspath(cwd) if cwd is not None else os.getcwd())
    if not os.path.isdir(wd):
        raise SandboxStartError(f"working directory {wd} does not exist")
    if backend != "bwrap":
        from .backends import run_backend

        return run_backend(backend, list(argv), s, wd, home, timeout=timeout, capture=capture,
                           env=env, stdin=stdin)
    import subprocess

    run = BwrapRun(s, argv, cwd=wd, home=home, env=env, audit_dir=audit_dir)
    pipe = subprocess.PIPE if capture else None
    run.start(capture=True, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
              stdout=pipe, stderr=pipe)
    out, err = b"", b""
    timed_out = False
    try:
        run.start_proxy()
        try:
            out_b, err_b = run.proc.communicate(input=stdin, timeout=timeout)
            out, err = out_b or b"", err_b or b""
        except subprocess.TimeoutExpired:
            timed_out = True
            run.kill()
            out_b, err_b = run.proc.communicate()
            out, err = out_b or b"", err_b or b""
        rc = run.proc.returncode
    finally:
        run.kill()
        run.cleanup()
    err += "".join(run.notices).encode()
    return CompletedRun(TIMED_OUT if timed_out else rc, out, err,
                        time.monotonic() - started, timed_out, "bwrap")


def exec_passthrough(argv: Sequence[str], settings: Settings, cwd: str, *,
                     backend: str = "bwrap", timeout: float | None = None,
                     err: IO[str] | None = None, plan_source: str | None = None) -> int:
    """Run with the terminal attached; return the command's exit status."""
    home = home_dir()
    if backend != "bwrap":
        from .backends import run_backend

        return run_backend(backend, list(argv), settings, cwd, home, timeout=timeout,
                           capture=False).returncode
    run = BwrapRun(settings, argv, cwd=cwd, home=home)
    run.plan_source = plan_source if timeout is None else None
    run.start()
    previous: dict[int, Any] = {}
    try:
        for sig in FORWARDED_SIGNALS:
            with _suppress(OSError, ValueError):
                previous[sig] = signal.signal(sig, lambda signum, _f: run.forward(signum))
        rc, timed_out = run.wait(timeout)
        if timed_out:
            return TIMED_OUT
        return rc if rc >= 0 else 128 - rc
    finally:
        for signum, handler in previous.items():
            with _suppress(OSError, ValueError, TypeError):
                signal.signal(signum, handler)
        run.kill()
        run.cleanup()
        for note in run.notices:
            (err or sys.stderr).write(note)


EXEC_PROFILE = "/etc/agent-sandbox/exec.json"
_ENV_AT_START: dict[str, str] | None = None


def host_profile(path: str = EXEC_PROFILE) -> dict[str, Any]:
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


def main(args: Sequence[str], err: IO[str] | None = None) -> int:
    """``sandbox exec`` without typer (the fast path)."""
    err = err or sys.stderr
    global _ENV_AT_START
    _ENV_AT_START = dict(os.environ)  # what the native launcher will see (before the profile)
    from .cli_args import UsageError, parse_exec_args

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
        if opts.backend_given is False and profile.get("backend") in ("bwrap", "srt", "gvisor"):
            opts.backend = profile["backend"]
        if profile.get("auditDir") and "AGENT_SANDBOX_AUDIT_DIR" not in os.environ:
            os.environ["AGENT_SANDBOX_AUDIT_DIR"] = str(profile["auditDir"])
        home = home_dir()
        if opts.spec:
            settings = settings_from_spec(opts.spec, opts.host, home)
        else:
            settings = resolve_settings(opts.settings, home)
        cwd = os.path.realpath(opts.cwd or os.getcwd())
        if not os.path.isdir(cwd):
            raise SandboxStartError(f"--cwd {cwd} is not a directory")
        source = None if opts.spec else (opts.settings or default_path(home))
        return exec_passthrough(opts.command, settings, cwd, backend=opts.backend,
                                timeout=opts.timeout, plan_source=source)
    except SettingsError as exc:
        err.write(f"sandbox exec: {exc}\n")
        return SANDBOX_FAILED
    except SandboxStartError as exc:
        err.write(f"sandbox exec: the sandbox could not start: {exc}\n")
        return SANDBOX_FAILED
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # fail closed, and no traceback for the user
        err.write(f"sandbox exec: internal error ({type(exc).__name__}: {exc}); "
                  "nothing ran outside the sandbox\n")
        return SANDBOX_FAILED


def settings_from_spec(spec_path: str, host: str | None, home: str) -> Settings:
    """srt settings rendered from a spec (the same document the renderer writes).

    ``spec_path`` is a spec file, or an inventory folder with ``--host`` naming
    the host whose layered spec applies.
    """
    from agent_sandbox.errors import SandboxError
    from agent_sandbox.render.srt import srt_settings

    from .settings import parse

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
    return parse(srt_settings(spec, home), source=f"{spec_path} (rendered)")


USAGE = """usage: sandbox exec [--settings FILE | --spec SPEC [--host NAME]] [--cwd DIR]
                    [--backend bwrap|srt|gvisor] [--timeout SECONDS] -- CMD [ARG...]

Run CMD with the filesystem and network policy of srt-format settings enforced.
Settings default to /etc/agent-sandbox/srt-settings.json, then ~/.srt-settings.json.
The exit status is CMD's; 125 means the sandbox itself could not start
(the message names the cause and the remedy); 124 means --timeout expired.
"""
