"""Where the bound pathname unix sockets are, as paths of this process's view.

seccomp cannot read the path of a ``connect()``, so when unix sockets are
allowed by path the planner (``bwrap.plan``) masks every socket the sandbox
could see that the settings do not list. This module answers the question it
asks: which sockets exist. The kernel lists every bound unix socket of a
network namespace (``/proc/<pid>/net/unix``); this reads that list for every
network namespace it can see (the host's, and those of containers and services
whose processes it may inspect), keeps the pathname sockets (an abstract one
lives in its network namespace, which no sandbox shares), resolves each name
(symlinks followed) and adds every other path a bind mount of this mount
namespace shows the same socket file at. A name bound in another mount
namespace (a container) is looked up through that process's root and mapped
through both mount tables to where this view shows the same file (compared by
device and inode). A name is only ever a path to look at: one that a sandboxed
command chose can add a mask where a socket really is, never remove one.

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


def listed(proc: str = "/proc") -> list[tuple[str, list[str]]]:
    """Every pathname socket name the kernel lists, in every network namespace
    this process can see, with the view the names are paths of: "self" (this
    process's mount namespace), or the pid of a process of that network
    namespace in another mount namespace (a container). Each list is read once."""
    def ns(pid: str, kind: str) -> str | None:
        try:
            return os.readlink(f"{proc}/{pid}/ns/{kind}")
        except OSError:
            return None

    mine = ns("self", "mnt")
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        pids = []
    views: dict[str, dict[str, str]] = {}  # net namespace -> {mount namespace: pid}
    for pid in ["self", *pids]:
        net, mnt = ns(pid, "net"), ns(pid, "mnt")
        if net is not None:
            views.setdefault(net, {}).setdefault(mnt or "", pid)
    out: list[tuple[str, list[str]]] = []
    for by_mnt in views.values():
        names: list[str] | None = None
        for pid in by_mnt.values():
            try:
                with open(f"{proc}/{pid}/net/unix", "rb") as fh:
                    names = parse_net_unix(os.fsdecode(fh.read()))
                break
            except OSError:
                continue
        if not names:
            continue
        for mnt, pid in by_mnt.items():
            out.append(("self" if mnt == mine else pid, names))
    return list({(v, tuple(n)): (v, n) for v, n in out}.values())


def listed_names(proc: str = "/proc") -> set[str]:
    """Every pathname socket name the kernel lists (in any view)."""
    return {n for _, names in listed(proc) for n in names}


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


def aliases(path: str, mounts: list[tuple[str, str, str]],
            target: list[tuple[str, str, str]] | None = None) -> list[str]:
    """Every path at which the ``target`` mounts (default: ``mounts``) show the file
    that the ``mounts`` show at ``path`` (pure): the mount holding it gives its
    device and its path inside that filesystem, and every target mount of the
    same device whose root holds that path shows it too."""
    target = mounts if target is None else target
    holding = [m for m in mounts if _under(path, m[2])]
    if not holding:
        return [path] if target is mounts else []
    dev, root, point = max(holding, key=lambda m: len(m[2].rstrip("/")))
    rel = path[len(point.rstrip("/")):]
    inside = root.rstrip("/") + rel or "/"
    out = [path] if target is mounts else []
    for d, r, p in target:
        if d == dev and _under(inside, r):
            out.append(p.rstrip("/") + inside[len(r.rstrip("/")):] or "/")
    return list(dict.fromkeys(out))


def _mountinfo(where: str) -> list[tuple[str, str, str]]:
    try:
        with open(f"/proc/{where}/mountinfo", "rb") as fh:
            return parse_mountinfo(os.fsdecode(fh.read()))
    except OSError:
        return []


def _socket_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def bound_sockets(views: list[tuple[str, list[str]]] | None = None) -> list[str]:
    """The resolved paths of this view at which a listed socket can be reached: each
    absolute name resolved, kept when it is a socket, with every bind mount that
    shows the same file; a name of another mount namespace is looked up through
    that process's root and its mounts, and kept where this view shows the same
    socket (compared by device and inode). Folders are resolved and mapped once
    (a socket's own name is never a link: bind() made it)."""
    mine = _mountinfo("self")
    out: list[str] = []
    for view, names in (listed() if views is None else views):
        theirs = mine if view == "self" else _mountinfo(view)
        folders: dict[str, list[str]] = {}  # a folder of the view -> its resolved places here
        for name in sorted(names):
            if not name.startswith("/") or "\0" in name:
                continue
            folder, base = os.path.split(os.path.normpath(name))
            if not base:
                continue
            if folder not in folders:
                if view == "self":
                    places = aliases(os.path.realpath(folder), mine)
                else:
                    places = aliases(folder, theirs, mine)
                # resolved: a mount must not be aimed through a symlink (a name in
                # another view can hold one that this view resolves elsewhere)
                folders[folder] = list(dict.fromkeys(os.path.realpath(x) for x in places))
            where = name if view == "self" else f"/proc/{view}/root{name}"
            wanted = _socket_id(where)
            if wanted is None:
                continue
            for place in folders[folder]:
                alias = os.path.join(place, base)
                try:
                    st = os.lstat(alias)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) == wanted and stat.S_ISSOCK(st.st_mode):
                    out.append(alias)
    return list(dict.fromkeys(out))
