"""A gVisor run's private layers: each writable root brought into the container as
an overlay whose upper layer lives outside the tree.

The command writes to its layers alone, so nothing it writes reaches the tree,
another run or the user while it runs; nothing is made in the tree before the
run (no placeholder) and nothing is walked. After the command,
``broker.publish`` replays each upper layer into the tree, every change judged
by the broker's rules; then the layers go.

Each run's layers sit in a private folder of this user (``contract.layers_dir``,
hidden in every sandbox; the host's state folder where a writable root holds
that one), one folder a run (named by its run record), one a writable root:
``upper`` and ``work`` (overlayfs's own), and ``merged``, where the overlay is
mounted in the host's mount namespace for the podman service to bind. The
overlay's folders are given to the kernel as ``/proc/self/fd/N``, so no name in
a path is ever parsed as an option.

Mounting needs root (the rootful podman service the gVisor backend runs under);
a user without it is told so. A run killed before publishing leaves its layers:
the next gVisor start of the user (``settle``) detaches their mounts and keeps
the upper layers, named ``kept-*``, for the user to review; nothing in them is
published unjudged.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import time

from ... import contract
from ..failures import SandboxStartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def layers_dir(home: str, roots: Sequence[str]) -> str:
    """This user's folder of layers, not below any of ``roots`` (an overlay's
    upper layer may not lie inside its lower one); made private (0700)."""
    for base in (contract.layers_dir(home),
                 os.path.join(contract.host_state_dir(), "layers")):
        real = os.path.realpath(base)
        if not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            from ..bwrap.run_records import private_dir

            return private_dir(base)
    raise SandboxStartError("every folder for the gVisor backend's layers lies in a writable "
                            "root; write below a narrower folder, or use the default backend")


class Layers:
    """The layers of one run, mounted (``mount``) until ``unmount``; ``merged``:
    each writable root's overlay, as the container's mount source."""

    def __init__(self, base: str, run: str, roots: Sequence[str]) -> None:
        self.folder = os.path.join(base, run)
        self.roots = list(roots)
        self.merged: dict[str, str] = {}
        self._mounted: list[str] = []
        self.since_ns = 0  # when they were mounted (``broker.publish``: what changed after)

    def upper(self, root: str) -> str:
        return os.path.join(self.folder, str(self.roots.index(root)), "upper")

    def mount(self) -> dict[str, str]:
        """Mount every root's overlay; (root -> merged folder). Any failure undoes
        what was mounted and refuses the start."""
        try:
            os.mkdir(self.folder, 0o700)
            self.since_ns = time.time_ns()
            for i, root in enumerate(self.roots):
                here = os.path.join(self.folder, str(i))
                os.mkdir(here, 0o700)
                for part in ("upper", "work", "merged"):
                    os.mkdir(os.path.join(here, part), 0o755 if part == "upper" else 0o700)
                merged = os.path.join(here, "merged")
                st = os.stat(root)  # the overlay's root looks as the writable root does
                os.chown(os.path.join(here, "upper"), st.st_uid, st.st_gid)
                os.chmod(os.path.join(here, "upper"), st.st_mode & 0o7777)
                _overlay(root, os.path.join(here, "upper"), os.path.join(here, "work"), merged)
                self._mounted.append(merged)
                self.merged[root] = merged
        except BaseException:
            self.unmount()
            self.remove()
            raise
        return dict(self.merged)

    def unmount(self) -> None:
        for merged in reversed(self._mounted):
            _libc.umount2(os.fsencode(merged), _MNT_DETACH)
        self._mounted = []

    def remove(self) -> None:
        """The run's layers gone (after ``unmount``)."""
        shutil.rmtree(self.folder, ignore_errors=True)

    def keep(self) -> str:
        """The run's layers kept for review (after ``unmount``), as ``settle`` keeps a
        killed run's; where they are."""
        kept = os.path.join(os.path.dirname(self.folder), f"kept-{os.path.basename(self.folder)}")
        try:
            os.rename(self.folder, kept)
        except OSError:
            return self.folder
        return kept


def _overlay(lower: str, upper: str, work: str, at: str) -> None:
    fds = []
    try:
        for path in (lower, upper, work):
            fds.append(os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        opts = "lowerdir=/proc/self/fd/{},upperdir=/proc/self/fd/{},workdir=/proc/self/fd/{}" \
            .format(*fds)
        if _libc.mount(b"overlay", os.fsencode(at), b"overlay", 0, opts.encode()) != 0:
            err = ctypes.get_errno()
            hint = (" (the gVisor backend mounts its layers as root, for the rootful podman "
                    "service it runs under)") if os.geteuid() != 0 else ""
            raise SandboxStartError(f"cannot mount the private layer of {lower}: "
                                    f"{os.strerror(err)}{hint}")
    except OSError as exc:
        raise SandboxStartError(f"cannot prepare the private layer of {lower}: "
                                f"{exc.strerror}") from None
    finally:
        for fd in fds:
            os.close(fd)


def settle(base: str, alive: Callable[[str], bool]) -> list[str]:
    """The layers of runs that no longer run (killed before publishing): their mounts
    detached, their upper layers kept for review; what to say."""
    notes: list[str] = []
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return notes
    for name in names:
        if name.startswith("kept-") or alive(name):
            continue
        folder = os.path.join(base, name)
        with contextlib.suppress(OSError):
            for part in sorted(os.listdir(folder)):
                _libc.umount2(os.fsencode(os.path.join(folder, part, "merged")), _MNT_DETACH)
        kept = os.path.join(base, f"kept-{name}")
        try:
            os.rename(folder, kept)
        except OSError:
            continue
        notes.append(f"sandbox: an earlier gVisor run ended before what it wrote was "
                     f"published; nothing of it was, and it is kept in {kept}\n")
    return notes
