"""What one run may take of the host: processes, memory, and the size of a file.

A sandboxed command is hostile, and so is what it consumes: a fork bomb, a
memory hog or an endless file would make the host unusable for the user and
every other run. Each run gets, by default and from the spec
(``platforms.linux.limits``) or ``sandbox exec``'s options:

- **processes** (default 4096): a cgroup of the run's own with ``pids.max``:
  cgroup v2 where this user may make one below its own (a delegated
  subtree), else the v1 ``pids`` hierarchy where it is writable (root);
  otherwise ``RLIMIT_NPROC`` (which the kernel does not apply to root, said
  when the run starts);
- **memory** (default: half the host's memory): the same cgroup's
  ``memory.max`` (v2) or ``memory.limit_in_bytes`` (v1); otherwise
  ``RLIMIT_DATA``;
- **file size** (default 16 GiB): ``RLIMIT_FSIZE``: a write past it fails
  (``SIGXFSZ``, ``EFBIG``).

The child that becomes bubblewrap is in the cgroup and has the rlimits before
its ``exec`` (``Limits.apply``), so everything the command starts is inside.
Moving a process into a cgroup waits for the kernel's RCU grace period (about
10 ms): the launcher carries the group instead (``carry``). It moves itself in
from a thread while it plans the run, so the child is born inside, and moves
itself out again from a thread while the sandbox starts (``leave``); the child
joins by itself only where the launcher could not.
After the run, ``Limits.hit`` says which limit stopped the command, in words
the user can act on; ``close`` removes the cgroup.
"""

from __future__ import annotations

import _signal as signal
import _thread
import os
import resource
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

DEFAULT_PROCESSES = 4096
DEFAULT_FILE_SIZE = 16 << 30
_PREFIX = "agent-sandbox-"
_STALE_AFTER = 60.0  # seconds: a group this old whose launcher is gone is left over
_V2 = "/sys/fs/cgroup"
_V1 = "/sys/fs/cgroup/{}"
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# What the launcher allocates while it carries the group is charged to the run's
# memory (cgroup v1 keeps a page's charge where it was made): it carries the group
# only where that is a small part of the limit; below it the child joins by itself.
_CARRY_MIN_MEMORY = 1 << 30


def parse_size(text: str) -> int:
    """``512M``, ``8G``, ``1048576``: bytes (K, M, G, T are powers of 1024)."""
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[:-1] if unit else t
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"{text!r} is not a size (such as 512M, 8G or a number of bytes)")
    return int(number) * _UNITS[unit]


def host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Limits:
    """One run's limits: made before the command starts, read and removed after."""

    def __init__(self, processes: int | None = None, memory: int | None = None,
                 file_size: int | None = None) -> None:
        self.processes = processes or DEFAULT_PROCESSES
        self.memory = memory or host_memory() // 2
        self.file_size = file_size or DEFAULT_FILE_SIZE
        self.groups: dict[str, str] = {}  # controller -> the run's cgroup folder
        self.notes: list[str] = []
        self.carried = False  # the launcher is in every group: its children are born there
        self._left = False
        self._home: dict[str, str] = {}  # controller -> the launcher's own group
        self._moving: Any = None  # a lock held while the launcher moves (``carry``, ``leave``)

    # the launcher, before the child starts ------------------------------------

    def prepare(self) -> None:
        """Make the run's cgroup where the host lets this user (nothing fails the
        run: a limit that cannot be a cgroup's is an rlimit, said in ``notes``)."""
        # one per run, even for runs a process starts at once (the approval runner)
        name = f"{_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        v2 = self._v2_parent()
        if v2 is not None:
            folder = os.path.join(v2, name)
            if self._make(folder, self._values("v2")):
                self.groups = {"pids": folder, "memory": folder}
                return
        for controller in ("pids", "memory"):
            limits = self._values(controller)
            parent = self._v1_parent(controller)
            if parent is None:
                continue
            folder = os.path.join(parent, name)
            if self._make(folder, limits):
                self.groups[controller] = folder
        if "pids" not in self.groups and os.geteuid() == 0:
            self.notes.append("no process limit: no cgroup this user may make, and the "
                              "kernel does not apply RLIMIT_NPROC to root")

    def _values(self, group: str) -> dict[str, int]:
        """What one group's files say: ``v2`` (both controllers), else a v1 controller."""
        if group == "v2":
            return {"pids.max": self.processes, "memory.max": self.memory}
        return ({"pids.max": self.processes} if group == "pids"
                else {"memory.limit_in_bytes": self.memory})

    def adopt(self, processes: int | None, memory: int | None, file_size: int | None
              ) -> bool:
        """This run's values written into groups made early (``start_early``): False
        when they cannot be (the caller makes its own then)."""
        self.processes = processes or DEFAULT_PROCESSES
        self.memory = memory or host_memory() // 2
        self.file_size = file_size or DEFAULT_FILE_SIZE
        if self.memory < _CARRY_MIN_MEMORY:
            return False
        one = len(set(self.groups.values())) == 1 and len(self.groups) == 2  # v2
        try:
            for controller, folder in self.groups.items():
                if not (one and controller == "memory"):
                    _write_values(folder, self._values("v2" if one else controller))
        except OSError:
            return False
        return True

    def carry(self) -> None:
        """Move the launcher into the run's groups from a thread (``_thread``: the
        cold start imports no ``threading``), while it goes on planning; ``before``
        waits for it, so that the child is forked inside."""
        if not self.groups or ("memory" in self.groups and self.memory < _CARRY_MIN_MEMORY):
            return
        self._moving = _thread.allocate_lock()
        self._moving.acquire()
        _thread.start_new_thread(self._move_in, ())

    def _move_in(self) -> None:
        try:
            # each group was made in the launcher's own group of its hierarchy
            self._home = {c: os.path.dirname(f) for c, f in self.groups.items()}
            for folder in dict.fromkeys(self.groups.values()):
                _join(folder)
            self.carried = True
        except OSError:
            self._go_home()  # the child joins by itself (``apply``)
        finally:
            self._moving.release()

    def leave(self) -> None:
        """After the fork: the launcher moves back to its own groups from a thread,
        while the sandbox starts; ``close`` waits for it before removing the groups."""
        if not self.carried:
            return
        self._wait()
        self._moving = _thread.allocate_lock()
        self._moving.acquire()

        def run() -> None:
            try:
                self._go_home()
                self._left = True
            finally:
                self._moving.release()
        _thread.start_new_thread(run, ())

    def _go_home(self) -> None:
        for folder in dict.fromkeys(self._home.values()):
            try:
                _join(folder)
            except OSError:
                pass

    def settle(self) -> None:
        """Wait for the launcher's move (``carry`` or ``leave``) to be over."""
        self._wait()

    def _wait(self) -> None:
        if self._moving is not None:
            self._moving.acquire()
            self._moving.release()

    @staticmethod
    def _v2_parent() -> str | None:
        """This process's own v2 cgroup when the pids and memory controllers can be
        given to a child of it (a delegated subtree), else None."""
        try:
            with open("/proc/self/cgroup") as fh:
                rel = next((ln.split(":", 2)[2].strip() for ln in fh if ln.startswith("0::")),
                           None)
            with open(os.path.join(_V2, "cgroup.controllers")) as fh:
                if not {"pids", "memory"} <= set(fh.read().split()):
                    return None
        except OSError:
            return None
        if rel is None:
            return None
        parent = os.path.join(_V2, rel.lstrip("/"))
        return parent if os.access(parent, os.W_OK) else None

    @staticmethod
    def _v1_parent(controller: str) -> str | None:
        try:
            with open("/proc/self/cgroup") as fh:
                rel = next((ln.split(":", 2)[2].strip() for ln in fh
                            if controller in ln.split(":", 2)[1].split(",")), None)
        except OSError:
            return None
        if rel is None:
            return None
        parent = os.path.join(_V1.format(controller), rel.lstrip("/"))
        return parent if os.access(parent, os.W_OK) else None

    @staticmethod
    def _make(folder: str, limits: dict[str, int]) -> bool:
        parent = os.path.dirname(folder)
        try:  # the groups of runs whose launcher is gone (a killed run), when empty and
            # old enough that no run is between making its group and joining it
            for stale in os.listdir(parent):
                pid = stale[len(_PREFIX):].split("-", 1)[0] if stale.startswith(_PREFIX) else ""
                there = os.path.join(parent, stale)
                if pid.isdigit() and not os.path.exists(f"/proc/{pid}") and \
                        time.time() - os.stat(there).st_mtime > _STALE_AFTER:
                    _remove(there)
        except OSError:
            pass
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            pass
        except OSError:
            return False
        try:
            _write_values(folder, limits)
        except OSError:
            _remove(folder)
            return False
        return True

    # the child, before its exec ------------------------------------------------

    def apply(self, *, inside: bool = False) -> None:
        """In the child that becomes bubblewrap: join the cgroups (unless born
        ``inside`` them, ``carry``), set the rlimits (a group it cannot join, its
        rlimit instead: never a run that cannot start)."""
        for controller, folder in list(self.groups.items()) if not inside else ():
            try:
                _join(folder)
            except OSError:
                del self.groups[controller]
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size, self.file_size))
        if "memory" not in self.groups:
            resource.setrlimit(resource.RLIMIT_DATA, (self.memory, self.memory))
        if "pids" not in self.groups:
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            cap = self.processes if hard == resource.RLIM_INFINITY else min(hard, self.processes)
            resource.setrlimit(resource.RLIMIT_NPROC, (cap, cap))

    # the launcher, after the run ------------------------------------------------

    def hit(self, returncode: int | None) -> list[str]:
        """Which limits stopped the command, in words the user can act on."""
        out: list[str] = []
        if returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            out.append(f"a file reached the size limit ({_size(self.file_size)}; "
                       "--max-file-size, platforms.linux.limits.file_size)")
        pids = self.groups.get("pids")
        if pids and _event(os.path.join(pids, "pids.events"), "max"):
            out.append(f"the command reached its process limit ({self.processes}; "
                       "--max-processes, platforms.linux.limits.processes)")
        mem = self.groups.get("memory")
        if mem and (_event(os.path.join(mem, "memory.events"), "oom_kill")
                    or _event(os.path.join(mem, "memory.oom_control"), "oom_kill")):
            out.append(f"the command reached its memory limit ({_size(self.memory)}; "
                       "--max-memory, platforms.linux.limits.memory): the kernel ended it")
        return out

    def close(self) -> None:
        self._wait()  # the launcher out of the groups first (a start that failed early:
        if self.carried and not self._left:  # it never forked, never left)
            self._go_home()
            self._left = True
        for folder in dict.fromkeys(self.groups.values()):
            for _ in range(50):  # the last processes are leaving
                if _remove(folder):
                    break
                time.sleep(0.01)
        self.groups = {}

    def finish(self, returncode: int | None) -> list[str]:
        """After the run: what to say (``notes``, ``hit``), and the cgroup removed."""
        said = self.notes + self.hit(returncode)
        self.close()
        return said

    def before(self, then: Callable[[], None]) -> Callable[[], None]:
        """A child's pre-exec: these limits (made by ``prepare``), then ``then``
        (the seccomp installer). Waits for the launcher to be in the groups when it
        carries them (``carry``)."""
        self._wait()
        inside = self.carried

        def pre_exec() -> None:
            self.apply(inside=inside)
            then()
        return pre_exec


def _event(path: str, key: str) -> bool:
    try:
        with open(path) as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == key and value.strip().isdigit() and int(value) > 0:
                    return True
    except OSError:
        pass
    return False


def _remove(folder: str) -> bool:
    try:
        os.rmdir(folder)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False  # a process is still inside: the next run's start removes it


def _size(n: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _write_values(folder: str, values: dict[str, int]) -> None:
    """A group's limit files (``pids.max``, ``memory.max`` ...) set to ``values``."""
    for key, value in values.items():
        with open(os.path.join(folder, key), "w") as fh:
            fh.write(str(value))


def _join(folder: str) -> None:
    """This process, all its threads, into the group ``folder`` (cgroup.procs)."""
    fd = os.open(os.path.join(folder, "cgroup.procs"), os.O_WRONLY)
    try:
        os.write(fd, b"0")
    finally:
        os.close(fd)


_EARLY: list[Limits] = []  # groups made at the start of ``sandbox exec``, not yet a run's


def start_early() -> None:
    """``sandbox exec``, once its arguments parse: the run's groups made with the
    default limits and the launcher moved in from a thread while the settings are
    read and the run is planned, the move's wait hidden behind them (``for_run``
    adopts the groups; ``discard_early`` removes them when no run comes)."""
    early = Limits()
    early.prepare()
    early.carry()
    _EARLY.append(early)


def for_run(processes: int | None, memory: int | None, file_size: int | None) -> Limits:
    """One run's limits: the early groups with this run's values, or groups made
    now (the launcher carrying them where it may)."""
    while _EARLY:
        early = _EARLY.pop()
        if early.adopt(processes, memory, file_size):
            return early
        early.close()
    made = Limits(processes, memory, file_size)
    made.prepare()
    made.carry()
    return made


def discard_early() -> None:
    """Early groups no run adopted (a start that failed first): the launcher out,
    the groups gone."""
    while _EARLY:
        _EARLY.pop().close()
