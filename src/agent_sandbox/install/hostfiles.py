"""Files the install steps read and the records they keep.

``trusted_bytes`` reads a file that only root may have written (when the step
runs as root): the installed unit, settings and profiles. ``read_record`` /
``write_record`` keep one-line records (a digest, a pid) replaced atomically.
Nothing here follows a symbolic link at the last component.
"""

from __future__ import annotations

import os

from agent_sandbox.errors import InstallError


def trusted_bytes(path: str) -> bytes:
    """The bytes of a file only root may have written (when we are root)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InstallError(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
            raise InstallError(f"{path} must be owned by root and writable by root only")
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_record(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def write_record(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    from agent_sandbox.atomic_file import replace_file

    replace_file(path, (text + "\n").encode(), 0o644)
