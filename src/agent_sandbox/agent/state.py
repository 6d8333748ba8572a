"""The client's private state folder under ``sandbox agent``.

A client's state folder (``~/.claude``, ``~/.codex``, ``~/.gemini``) is also
what the same client reads when it later runs on the host, outside our sandbox:
anything written there from inside (a legacy global configuration, an MCP
server, a shell snapshot, a memory injected into the next session) would reach
the host. So under ``sandbox agent`` each folder the client writes
(``Profile.private_dirs``) is replaced inside the sandbox by a private folder of
the user's (``<user state folder>/agents/<client>/view/...``), and the host's
own inputs the client needs (``Profile.config_files``: settings, hooks,
credentials, trust lists ...) are bound read-only from the host's real files on
top of it; an input the host does not have, or that the run's settings hide,
is bound read-only from an empty placeholder (``held/``) instead, so the
private folder never supplies a setting. Nothing the client writes reaches the
host's folder; what it writes persists only into its next sandboxed run.

The private view is hostile input: a command of an earlier run (or of a
concurrent one) may have put links or anything else in it. This module touches
it only through directory descriptors, never following a link: each entry it
needs (the mount points of the read-only inputs, the temporary folder) is
checked with ``lstat`` and replaced when it is not exactly what it must be. It
never reads a file there, and never writes outside the user's state folder but
for the empty folders a bind needs on the host (``~/.claude`` when absent).
"""

from __future__ import annotations

import os
import stat

from .profiles import absent_default, profile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TMP = ("tmp", "sandbox-agent")  # under the client's state folder: its TMPDIR


def private_root(client: str, home: str) -> str:
    """The private folder of ``client`` (in the user's state folder, read-only in
    every sandbox but for the view bound over the client's own folders)."""
    from agent_sandbox import contract

    return os.path.join(contract.user_state_dir(home), "agents", client)


def _remove_at(dfd: int, name: str) -> None:
    """Remove ``name`` in the folder ``dfd`` whatever it is, following no link."""
    import shutil

    st = os.lstat(name, dir_fd=dfd)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd)  # never follows links (rmtree's own guarantee)
    else:
        os.unlink(name, dir_fd=dfd)


def _entry_at(dfd: int, name: str, folder: bool, content: bytes = b"") -> None:
    """Make ``name`` in ``dfd`` a real folder (``folder``) or a regular file, keeping
    one that already is; anything else there (a link, a device, the other kind)
    is removed first."""
    try:
        st = os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        st = None
    if st is not None:
        if (stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)):
            return
        _remove_at(dfd, name)
    if folder:
        os.mkdir(name, 0o700, dir_fd=dfd)
        return
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(content)


def _ensure_path(top: str, parts: Sequence[str], folder: bool) -> None:
    """``top``/``parts``: every step a real folder (replaced when it is not), the last
    a folder or a file; ``top`` itself must be a real folder (ours)."""
    dfd = os.open(top, _DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            _entry_at(dfd, name, folder or not last)
            if last:
                break
            nfd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
    finally:
        os.close(dfd)


def placeholder_file(path: str, content: bytes) -> None:
    """``path`` (in ``held/``: ours) holding exactly ``content``; rewritten only when
    it differs (a concurrent run may have it bound)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if fh.read(len(content) + 1) == content:
                return
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(content)


def _real_folder(path: str) -> None:
    """Create ``path`` (in the user's state folder: not writable from a sandbox) and
    check that it is a real folder, not a link."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(path).st_mode):
        from agent_sandbox.runtime.failures import SandboxStartError

        raise SandboxStartError(f"{path} is not a folder")


class StateView:
    """What ``prepare`` made: the overlays for ``BwrapRun``, the client's TMPDIR
    (its path inside the sandbox) and the private folder."""

    __slots__ = ("held", "overlays", "root", "tmpdir")

    def __init__(self, root: str, overlays: list[tuple[str, str, str | None]],
                 tmpdir: str) -> None:
        self.root, self.overlays, self.tmpdir = root, overlays, tmpdir
        self.held = os.path.join(root, "held")  # the placeholders (ours, read-only inside)


def prepare(client: str, home: str) -> StateView:
    """The private view of ``client``'s state for one run (see the module doc).
    ``BwrapRun`` overlays: ``(private folder, host folder, None)`` writable, then
    ``(host input, its name in the view, placeholder)`` read-only."""
    p = profile(client)
    root = private_root(client, home)
    view, held = os.path.join(root, "view"), os.path.join(root, "held")
    for d in (root, view, held):
        _real_folder(d)
    overlays: list[tuple[str, str, str | None]] = []
    for rel in p.private_dirs:
        src = os.path.join(view, rel)
        _real_folder(src)  # its folders above are ours; only its contents are the client's
        dest = os.path.join(home, rel)
        os.makedirs(dest, mode=0o700, exist_ok=True)  # the bind's mount point on the host
        overlays.append((src, dest, None))
    for entry in p.config_files:
        rel = entry.rstrip("/")
        folder = entry.endswith("/")
        default = absent_default(entry)
        placeholder = os.path.join(held, rel.replace("/", "%"))
        if folder:
            _real_folder(placeholder)
        else:
            placeholder_file(placeholder, default or b"")
        host = os.path.join(home, rel)
        under = next((d for d in p.private_dirs if rel.startswith(d)), None)
        if under is None:
            continue  # beside the folders (~/.claude.json): ``hold_config`` holds it
        # its mount point in the view: exactly a folder or a file, never a link
        _ensure_path(os.path.join(view, under.rstrip("/")), rel[len(under):].split("/"),
                     folder)
        source = host if os.path.lexists(host) else placeholder
        overlays.append((source, host, placeholder))
    state = p.private_dirs[0].rstrip("/")
    _ensure_path(os.path.join(view, state), TMP, True)
    return StateView(root, overlays, os.path.join(home, state, *TMP))
