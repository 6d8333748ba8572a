"""Where the bound pathname unix sockets are, as paths of this process's view.

seccomp cannot read the path of a ``connect()``, so when unix sockets are
allowed by path the planner (``bwrap.plan``) masks every socket the sandbox
could see that the settings do not list. This module answers the question it
asks: which sockets exist. The kernel lists every bound unix socket of a
network namespace (``/proc/<pid>/net/unix``); this reads that list for every
network namespace it can see (the host's, and those of containers and services
whose processes it may inspect), keeps the pathname sockets (abstract ones live
in the host's network namespace, which no sandbox shares), resolves each name
(symlinks followed) and adds every other path a bind mount of this mount
namespace shows the same socket file at.

What it cannot see, and the planner's documentation says so: a socket bound
after the question is asked, a socket bound with a relative name (the list
shows the name as given, relative to a folder nobody records), and sockets of
network namespaces whose processes this user may not inspect.

Read-only: it never creates, changes or connects to anything, and it never
decides what to mask.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

_HEX = frozenset("0123456789abcdefABCDEF")


def _entry(line: str) -> tuple[bool, str | None]:
    """(whether a line of ``/proc/net/unix`` starts an entry, its name or None).

    An entry is "Num: RefCount Protocol Flags Type St Inode[ Name]" with fixed
    hexadecimal fields and the inode padded to five places; a line that is not
    one continues the name of the entry before it (a name holding a newline)."""
    head, sep, rest = line.partition(": ")
    if not sep or not head or not set(head) <= _HEX:
        return False, None
    fields = rest.split(" ", 5)
    if len(fields) < 6 or not all(f and set(f) <= _HEX for f in fields[:5]):
        return False, None
    inode, space, name = fields[5].lstrip(" ").partition(" ")
    if not inode.isdigit():
        return False, None
    return True, name if space else None


def parse_net_unix(text: str) -> list[str]:
    """The pathname socket names in the text of ``/proc/net/unix`` (pure): not the
    unnamed ones, not abstract ones (shown with a leading ``@``)."""
    names: list[str | None] = []
    for line in text.split("\n")[1:]:
        start, name = _entry(line)
        if start:
            names.append(name)
        elif names and names[-1] is not None and line:
            names[-1] += "\n" + line  # a name that holds a newline
    return [n for n in names if n and not n.startswith("@")]


def listed_names(proc: str = "/proc") -> set[str]:
    """Every pathname socket name the kernel lists, in every network namespace
    this process can see (each namespace read once)."""
    names: set[str] = set()
    seen: set[str] = set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        pids = []
    for pid in ["self", *pids]:
        try:
            ns = os.readlink(f"{proc}/{pid}/ns/net")
        except OSError:
            continue
        if ns in seen:
            continue
        try:
            with open(f"{proc}/{pid}/net/unix", "rb") as fh:
                text = os.fsdecode(fh.read())
        except OSError:
            continue
        seen.add(ns)
        names.update(parse_net_unix(text))
    return names


def _unescape(field: str) -> str:
    """A path of ``/proc/self/mountinfo`` (octal escapes for space, tab, newline
    and backslash)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and i + 4 <= len(field):
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """(device, root inside the filesystem, mount point) of each mount (pure)."""
    out: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        f = line.split(" ")
        if len(f) >= 5:
            out.append((f[2], _unescape(f[3]), _unescape(f[4])))
    return out


def _under(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


def aliases(path: str, mounts: list[tuple[str, str, str]]) -> list[str]:
    """Every path at which the mounts show the file at ``path`` (pure): the mount
    holding it gives its device and its path inside that filesystem, and every
    mount of the same device whose root holds that path shows it too."""
    holding = [m for m in mounts if _under(path, m[2])]
    if not holding:
        return [path]
    dev, root, point = max(holding, key=lambda m: len(m[2].rstrip("/")))
    rel = path[len(point.rstrip("/")):]
    inside = root.rstrip("/") + rel or "/"
    out = [path]
    for d, r, p in mounts:
        if d == dev and _under(inside, r):
            out.append(p.rstrip("/") + inside[len(r.rstrip("/")):] or "/")
    return list(dict.fromkeys(out))


def bound_sockets(names: Iterable[str] | None = None) -> list[str]:
    """The paths of this view at which a listed socket can be reached: each
    absolute name resolved, kept when it is a socket, with every bind mount
    alias that shows the same file."""
    mounts: list[tuple[str, str, str]] = []
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            mounts = parse_mountinfo(os.fsdecode(fh.read()))
    except OSError:
        pass
    out: list[str] = []
    for name in sorted(listed_names() if names is None else names):
        if not name.startswith("/") or "\0" in name:
            continue
        real = os.path.realpath(name)
        try:
            st = os.lstat(real)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        for alias in aliases(real, mounts):
            try:
                other = os.lstat(alias)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                out.append(alias)
    return list(dict.fromkeys(out))
