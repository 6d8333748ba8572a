"""Files below a trusted root folder, reached without following any link.

A repository is a folder a sandboxed command may have written: any folder in
it may have been replaced by a link to somewhere else (``.codex`` pointing at
the user's own ``~/.codex``). Joining a path and opening it would follow such a
link in every component but the last. Here a path is taken relative to a root
the caller trusts and walked one component at a time, each folder opened with
``O_NOFOLLOW | O_DIRECTORY`` relative to the one before, so nothing is ever
reached outside the root: a link or a non-folder in the way is refused with
``NotBelowRoot`` naming it, and ``..``, absolute and empty components are refused
as they are read. The file itself is opened (or replaced, or removed) relative
to its open folder, never through a link either. Stdlib only; needs
``dir_fd`` support (every POSIX system).
"""

from __future__ import annotations

import errno
import os
import stat

from .errors import SandboxError

_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) \
    | os.O_CLOEXEC
_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC
_CHUNK = 1 << 16


class NotBelowRoot(SandboxError, OSError):
    """A path does not stay below the root: a component is a link or not what it
    should be (a folder on the way, a regular file at the end), or the path has
    a ``..``, empty or absolute component. Nothing was read or written through it."""

    def __init__(self, path: str, what: str, code: int = errno.ELOOP) -> None:
        super().__init__(code, f"{path} is {what}; refusing to go through it "
                               "(move it away, then try again)", path)

    def __str__(self) -> str:
        return str(self.strerror)


def _parts(rel: str) -> list[str]:
    """The components of ``rel``; ``""`` and ``"."`` are the root itself."""
    if rel in ("", "."):
        return []
    if os.path.isabs(rel) or rel.startswith(("/", os.sep)):
        raise NotBelowRoot(rel, "absolute, not a path below the root", errno.EINVAL)
    parts = rel.replace(os.sep, "/").split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise NotBelowRoot(rel, f"a path with a {part!r} component, not a plain path "
                                    "below the root", errno.EINVAL)
    return parts


def _refuse(root: str, parts: list[str], dfd: int, name: str, folder: bool) -> NotBelowRoot:
    """The error for ``name`` in ``dfd`` that could not be opened as it should."""
    path = os.path.join(root, *parts)
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return NotBelowRoot(path, "not reachable")
    if stat.S_ISLNK(st.st_mode):
        return NotBelowRoot(path, "a link")
    return NotBelowRoot(path, "not a folder" if folder else "not a regular file")


def _open_root(root: str) -> int:
    if not hasattr(os, "O_DIRECTORY") or os.open not in os.supports_dir_fd:
        raise OSError(errno.ENOTSUP, "folders cannot be opened relative to each other here")
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _walk(root: str, parts: list[str], create: bool, mode: int) -> int:
    dfd = _open_root(root)
    try:
        for i, name in enumerate(parts):
            try:
                try:
                    nfd = os.open(name, _FOLDER, dir_fd=dfd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, mode, dir_fd=dfd)
                    except FileExistsError:
                        pass  # made meanwhile: opened (and checked) like any other
                    nfd = os.open(name, _FOLDER, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _refuse(root, parts[:i + 1], dfd, name, True) from None
                raise
            os.close(dfd)
            dfd = nfd
    except BaseException:
        os.close(dfd)
        raise
    return dfd


def open_folder(root: str, rel_folder: str, *, create: bool = False, mode: int = 0o755) -> int:
    """``root/rel_folder`` open (the caller closes it), every component a real
    folder below ``root``. ``create`` makes missing folders with ``mode`` (less
    the umask); without it a missing one raises ``FileNotFoundError``."""
    return _walk(root, _parts(rel_folder), create, mode)


def _split(rel: str) -> tuple[list[str], str]:
    parts = _parts(rel)
    if not parts:
        raise NotBelowRoot(rel, "the root itself, not a file below it", errno.EINVAL)
    return parts[:-1], parts[-1]


def read_file_stat(root: str, rel: str, *, limit: int | None = None
                   ) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``root/rel`` and its status. A link, fifo,
    device or folder there raises ``NotBelowRoot``; more than ``limit`` bytes
    raises ``OSError`` (EFBIG); a missing file ``FileNotFoundError``."""
    folder, name = _split(rel)
    dfd = _walk(root, folder, False, 0)
    try:
        try:
            fd = os.open(name, _FILE, dir_fd=dfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
                raise _refuse(root, [*folder, name], dfd, name, False) from None
            raise
    finally:
        os.close(dfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotBelowRoot(os.path.join(root, rel), "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if limit is not None and size > limit:
                raise OSError(errno.EFBIG, f"{os.path.join(root, rel)} is larger than "
                                           f"{limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks), st
    finally:
        os.close(fd)


def read_file(root: str, rel: str, *, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``root/rel`` (see ``read_file_stat``)."""
    return read_file_stat(root, rel, limit=limit)[0]


def _parent(root: str, rel: str) -> tuple[int, str] | None:
    """The folder of ``root/rel`` open (the caller closes it) and the last name, or
    None when a folder on the way is missing."""
    folder, name = _split(rel)
    try:
        return _walk(root, folder, False, 0), name
    except FileNotFoundError:
        return None


def lstat(root: str, rel: str) -> os.stat_result | None:
    """The status of ``root/rel`` itself (a link's own), or None when it or a
    folder on the way is missing."""
    if (found := _parent(root, rel)) is None:
        return None
    dfd, name = found
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(dfd)


def replace_file(root: str, rel: str, data: bytes, mode: int = 0o600, *,
                 create: bool = False, folder_mode: int = 0o755,
                 times_ns: tuple[int, int] | None = None) -> None:
    """Write ``data`` as ``root/rel`` atomically (``atomic_file``), its folder
    reached below ``root`` and missing folders made when ``create``. A link at
    ``rel`` itself is replaced, never written through."""
    from .atomic_file import replace_file_at

    folder, name = _split(rel)
    dfd = _walk(root, folder, create, folder_mode)
    try:
        replace_file_at(dfd, name, data, mode, times_ns=times_ns)
    finally:
        os.close(dfd)


def unlink(root: str, rel: str) -> bool:
    """Remove the file (or link: never its target) ``root/rel``; False when it or
    its folder was missing already."""
    if (found := _parent(root, rel)) is None:
        return False
    dfd, name = found
    try:
        os.unlink(name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True


def remove_tree(root: str, rel: str) -> bool:
    """Remove ``root/rel`` and everything below it (a file or link there: only
    that). Links inside are removed, never followed. False when missing."""
    if (found := _parent(root, rel)) is None:
        return False
    dfd, name = found
    try:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            import shutil  # here: a run's start and end load this module, not shutil

            if not shutil.rmtree.avoids_symlink_attacks:
                raise OSError(errno.ENOTSUP, "no link-safe tree removal here")
            shutil.rmtree(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)
        return True
    finally:
        os.close(dfd)


def remove_empty_folders(root: str, rel: str) -> bool:
    """Remove the folder ``root/rel`` if it holds nothing but empty folders
    (removed too). True when it is gone; False when something (a file, a link)
    keeps it, or it was missing. A link at ``rel`` itself raises ``NotBelowRoot``."""
    try:
        dfd = _walk(root, _parts(rel), False, 0)
    except FileNotFoundError:
        return False
    try:
        empty = True
        for entry in list(os.scandir(dfd)):
            if entry.is_dir(follow_symlinks=False):
                empty = remove_empty_folders(root, f"{rel}/{entry.name}") and empty
            else:
                empty = False
    finally:
        os.close(dfd)
    if not empty:
        return False
    folder, name = _split(rel)
    pfd = _walk(root, folder, False, 0)
    try:
        os.rmdir(name, dir_fd=pfd)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
            return False
        raise
    finally:
        os.close(pfd)
    return True
