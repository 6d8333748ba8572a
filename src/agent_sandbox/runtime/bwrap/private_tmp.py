"""A run's own temporary folder, when it would have none it may write.

Programs put their temporary files in ``$TMPDIR`` or ``/tmp``; where neither is
writable, Python's ``tempfile`` falls back to the working folder (``pip install
-e .`` of a flat project then takes its build folder for one of the project's
packages, and ``virtualenv`` unpacks its seed wheels into the project). So when
the caller names no ``TMPDIR`` and the settings do not make ``/tmp`` writable,
the run gets a folder of its own under ``/tmp`` (mode 0700), writable as a root
of the run's, named in ``TMPDIR``, and removed once the run has ended (nothing a
host tool reads later is left in it)."""

from __future__ import annotations

import os

from agent_sandbox.spec.paths import expand

from ..settings import FilesystemSettings, Settings
from .globs import under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

SHARED_TMP = "/tmp"


def needed(settings: Settings, env: Mapping[str, str], home: str, cwd: str) -> bool:
    """No ``TMPDIR`` given, and ``/tmp`` not among the settings' writable folders."""
    if env.get("TMPDIR") or not os.path.isdir(SHARED_TMP):
        return False
    return not any(under(SHARED_TMP, expand(rule, home=home, cwd=cwd))
                   for rule in settings.filesystem.allow_write)


def make(settings: Settings) -> tuple[Settings, str]:
    """The folder made, and the settings with it writable."""
    for _ in range(16):
        folder = os.path.join(os.path.realpath(SHARED_TMP),
                              f"agent-sandbox-tmp-{os.urandom(8).hex()}")
        try:
            os.mkdir(folder, 0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free name for a temporary folder in {SHARED_TMP}")
    f = settings.filesystem
    fs = FilesystemSettings(deny_read=f.deny_read, allow_read=f.allow_read,
                            allow_write=(*f.allow_write, folder), deny_write=f.deny_write)
    values = {n: getattr(settings, n) for n in settings.__slots__}
    values["filesystem"] = fs
    return Settings(**values), folder


def remove(folder: str) -> None:
    """The folder and what the run left in it (links are removed, never followed)."""
    try:
        for _, dirs, files, fd in os.fwalk(folder, topdown=False, follow_symlinks=False):
            for name in files:
                os.unlink(name, dir_fd=fd)
            for name in dirs:
                try:
                    os.rmdir(name, dir_fd=fd)
                except NotADirectoryError:  # a link to a folder
                    os.unlink(name, dir_fd=fd)
        os.rmdir(folder)
    except OSError:
        pass  # what is left is the user's temporary folder's, as any program's
