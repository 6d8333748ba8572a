"""A configuration file read as the paths it names, once per identity
(``NamedText``): ``envrc`` and ``configs`` parse different texts the same way.

The file is opened without following a link and read up to 64 KiB; its identity
(device, inode, modification time, size) says when to read it again. Paths come
back joined to the folder the file serves and normalised."""

from __future__ import annotations

import os
import posixpath

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

READ_LIMIT = 1 << 16


class NamedText:
    """``names(path, folder)``: what the file at ``path`` names, by ``parse``."""

    def __init__(self, parse: Callable[[str], list[str]]) -> None:
        self._parse = parse
        self._cache: dict[str, tuple[tuple[int, ...], list[str]]] = {}

    def names(self, path: str, folder: str) -> list[str]:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return []
        try:
            st = os.fstat(fd)
            ident = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._cache.get(path)
            if cached is not None and cached[0] == ident:
                return cached[1]
            data = os.read(fd, READ_LIMIT)
        finally:
            os.close(fd)
        found = [posixpath.normpath(posixpath.join(folder, n)) for n in
                 self._parse(data.decode("utf-8", "replace"))]
        self._cache[path] = (ident, found)
        return found
