"""An action's credential files on the host, for the one container they are
mounted into (read-only, at ``/run/agent-sandbox/credential/<relative path>``).

They are written into a new folder of their own, mode 0700, inside the broker's
private folder (``contract.broker_dir``, hidden in every sandbox); below it the
files are readable by the container's user alone (0400, folders 0500, owned by
uid 65534), and the whole folder is removed as soon as the run ends. A secret
is never put in an environment variable: ``check_env`` refuses an environment
that carries a file's content.

Never writes outside that folder (relative paths only, no ``..``, no links
followed) and never leaves a file behind silently: a removal that fails
raises.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

from ..errors import SandboxError

MOUNT_POINT = "/run/agent-sandbox/credential"
ACTION_UID = 65534
MAX_FILES = 32
MAX_FILE_BYTES = 1024 * 1024
SHORTEST_CHECKED = 8  # a file shorter than this is not looked for in the environment


class SecretFilesError(SandboxError):
    """The credential files could not be staged, or were not removed."""


def relative_path(path: str) -> str:
    """``path`` as a clean relative path below the mount point (pure); raises
    ``SecretFilesError`` for an absolute path, ``..``, empty or odd parts."""
    if not isinstance(path, str) or not path or len(path) > 255:
        raise SecretFilesError(f"credential file name {path!r}: 1-255 characters")
    parts = path.split("/")
    for part in parts:
        if part in ("", ".", "..") or any(ord(c) < 32 or c == "\x7f" for c in part):
            raise SecretFilesError(
                f"credential file name {path!r}: a relative path of plain names "
                "(no leading /, no . or .., no empty or control characters)")
    return "/".join(parts)


def check_env(env: Mapping[str, str], files: Mapping[str, bytes]) -> None:
    """Refuse an environment that names a secret: every value must be free of
    each credential file's content (pure). Pointers such as a file's path are
    fine."""
    for name, content in files.items():
        text = content.decode("utf-8", "replace").strip()
        if len(text) < SHORTEST_CHECKED:
            continue
        for key, value in env.items():
            if text in value:
                raise SecretFilesError(
                    f"the environment variable {key} carries the content of the credential "
                    f"file {name!r}: a secret goes in a file, never in the environment")


class StagedFiles:
    """The files of one run, staged on the host until ``remove``."""

    def __init__(self, files: Mapping[str, bytes], parent: str, uid: int = ACTION_UID) -> None:
        if len(files) > MAX_FILES:
            raise SecretFilesError(f"{len(files)} credential files: at most {MAX_FILES}")
        clean = {relative_path(k): v for k, v in files.items()}
        for name, content in clean.items():
            if not isinstance(content, bytes) or len(content) > MAX_FILE_BYTES:
                raise SecretFilesError(f"credential file {name!r}: bytes, at most "
                                       f"{MAX_FILE_BYTES} of them")
        names = sorted(clean)
        for a in names:  # a file may not also be a folder of another
            if any(b.startswith(a + "/") for b in names):
                raise SecretFilesError(f"credential file {a!r} is also a folder of another")
        from ..runtime.bwrap.run_records import private_dir

        try:
            self.root = tempfile.mkdtemp(prefix="run-", dir=private_dir(parent))
        except OSError as exc:
            raise SecretFilesError(f"cannot create a private folder for the credential "
                                   f"files in {parent}: {exc}") from None
        self.source = os.path.join(self.root, "files")
        try:
            self._write(clean, uid)
        except OSError as exc:
            self.remove()
            raise SecretFilesError(
                f"cannot stage the credential files for uid {uid} ({exc.strerror}); files "
                "owned by the container's user need root (a rootful podman)") from None
        except BaseException:
            self.remove()
            raise

    def _write(self, files: Mapping[str, bytes], uid: int) -> None:
        os.mkdir(self.source, 0o700)
        folders = {self.source}
        for name, content in files.items():
            path = os.path.join(self.source, *name.split("/"))
            parent = os.path.dirname(path)
            os.makedirs(parent, mode=0o700, exist_ok=True)
            d = parent
            while d != self.source:
                folders.add(d)
                d = os.path.dirname(d)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o400)
            try:
                os.fchown(fd, uid, uid)
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        for folder in sorted(folders, key=len, reverse=True):
            os.chown(folder, uid, uid, follow_symlinks=False)
            os.chmod(folder, 0o500, follow_symlinks=False)

    def mount(self) -> dict[str, Any]:
        """The Docker ``Mounts`` entry: the folder, read-only, at the mount point."""
        return {"Type": "bind", "Source": self.source, "Target": MOUNT_POINT, "ReadOnly": True}

    def remove(self) -> None:
        """Remove every staged file; raises ``SecretFilesError`` when any is left."""
        shutil.rmtree(self.root, ignore_errors=True)
        if os.path.lexists(self.root):
            raise SecretFilesError(f"the credential files in {self.root} could not be "
                                   "removed: remove that folder by hand")
