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

The kernel's list shows the name given to ``bind()``, which may no longer lead
to the socket: the file was renamed, or linked under another name and the first
one removed (OpenSSH's ControlMaster does that), its folder was renamed, or it
was bound through ``/proc/self/fd/N/NAME``. For the host's network namespace the
kernel's socket diagnostics (``NETLINK_SOCK_DIAG``, ``UNIX_DIAG_VFS``) also give
each bound socket's device and inode, so such a socket is looked for near its
old name (its folder, and the folders beside the nearest folder that still
exists); one whose folder is gone, or that was bound through ``/proc`` (conmon
binds every container's attach socket as ``/proc/self/fd/N/attach``), is looked
for in the folders its holders keep files open in (the diagnostics give the
socket's own inode, which ``/proc/PID/fd`` links name); one that still cannot
be found, asked about twice more within a quarter of a second (one closed
meanwhile is no longer listed), is reported as unlocated, and the planner
refuses to start rather than leave it reachable. One whose folder still exists but holds no name
of it is taken as removed (a daemon that unlinks its socket keeps listening).

What it cannot see, and the planner's documentation says so: a socket bound
after the question is asked, one renamed from a folder that still exists into a
distant folder (indistinguishable from a removed one), and sockets of network
namespaces whose processes this user may not inspect.

Read-only: it never creates, changes or connects to anything, and it never
decides what to mask.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import time

from .globs import under as _under

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


# --- the kernel's socket diagnostics: device and inode of every bound socket file ----

_SOCK_DIAG_BY_FAMILY = 20
_NETLINK_SOCK_DIAG = 4
_UDIAG_SHOW_NAME, _UDIAG_SHOW_VFS = 1, 2
_UNIX_DIAG_NAME, _UNIX_DIAG_VFS = 0, 1
_NLMSG_ERROR, _NLMSG_DONE = 2, 3


def parse_diag(data: bytes) -> tuple[list[tuple[str, int, int, int]], bool]:
    """(name, kernel device number, inode, the socket's own inode) of each socket
    with a file in a ``SOCK_DIAG_BY_FAMILY`` answer, and whether the dump ended
    (pure). The socket's own inode is what ``/proc/PID/fd`` links name
    (``socket:[N]``): it tells which processes hold the socket."""
    out: list[tuple[str, int, int, int]] = []
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16 or off + length > len(data):
            raise ValueError("a truncated netlink message")
        if kind == _NLMSG_DONE:
            return out, True
        if kind == _NLMSG_ERROR:
            raise OSError(-struct.unpack_from("=i", data, off + 16)[0], "sock_diag refused")
        if kind == _SOCK_DIAG_BY_FAMILY and length >= 32:
            (sock_ino,) = struct.unpack_from("=I", data, off + 20)  # unix_diag_msg.udiag_ino
            name: str | None = None
            vfs: tuple[int, int] | None = None
            a = off + 32  # nlmsghdr (16) + unix_diag_msg (16)
            while a + 4 <= off + length:
                alen, atype = struct.unpack_from("=HH", data, a)
                if alen < 4 or a + alen > off + length:
                    break
                body = data[a + 4:a + alen]
                if atype == _UNIX_DIAG_NAME and body and body[:1] != b"\0":
                    name = os.fsdecode(body.split(b"\0", 1)[0])
                elif atype == _UNIX_DIAG_VFS and len(body) >= 8:
                    ino, dev = struct.unpack_from("=II", body)
                    vfs = (dev, ino)
                a += (alen + 3) & ~3
            if name is not None and vfs is not None:
                out.append((name, vfs[0], vfs[1], sock_ino))
        off += (length + 3) & ~3
    return out, False


def kernel_socket_files() -> list[tuple[str, int, int]] | None:
    """(bind-time name, st_dev, inode's low 32 bits) of every pathname unix socket of
    this network namespace, from the kernel's socket diagnostics; None when they
    cannot be asked (no netlink here, a kernel without unix_diag)."""
    found = _kernel_sockets()
    return None if found is None else [(n, d, i) for n, d, i, _ in found]


def _kernel_sockets() -> list[tuple[str, int, int, int]] | None:
    """``kernel_socket_files`` with each socket's own inode (``parse_diag``)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
    except (OSError, AttributeError):
        return None
    with sock:
        sock.settimeout(5)
        req = struct.pack("=BBHIIIII", socket.AF_UNIX, 0, 0, 0xFFFFFFFF, 0,
                          _UDIAG_SHOW_NAME | _UDIAG_SHOW_VFS, 0xFFFFFFFF, 0xFFFFFFFF)
        hdr = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY,
                          0x1 | 0x300, 1, 0)  # NLM_F_REQUEST | NLM_F_DUMP
        out: list[tuple[str, int, int, int]] = []
        try:
            sock.sendto(hdr + req, (0, 0))
            while True:
                items, done = parse_diag(sock.recv(1 << 16))
                out.extend(items)
                if done:
                    break
        except (OSError, ValueError):
            return None
    # the kernel's dev_t (major << 20 | minor) as stat() shows it
    return [(n, os.makedev(d >> 20, d & 0xFFFFF), i, s) for n, d, i, s in out]


def _same(st: os.stat_result, dev: int, ino: int) -> bool:
    return stat.S_ISSOCK(st.st_mode) and st.st_dev == dev and st.st_ino & 0xFFFFFFFF == ino


_SEARCH_LIMIT = 4096  # entries looked at for one moved socket


def _search(folders: list[str], dev: int, ino: int) -> list[str]:
    """The paths in ``folders`` (and their subfolders, one level) showing that socket."""
    found: list[str] = []
    seen = 0
    queue = [(f, 1) for f in folders]
    while queue and seen < _SEARCH_LIMIT:
        folder, depth = queue.pop(0)
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            seen += 1
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if _same(st, dev, ino):
                found.append(e.path)
            elif depth > 0 and stat.S_ISDIR(st.st_mode):
                queue.append((e.path, depth - 1))
    return found


def _holders(sock_inodes: set[int], proc: str = "/proc") -> dict[int, list[int]]:
    """The processes holding each of ``sock_inodes`` (by their ``/proc/PID/fd``
    links), among those this process may inspect."""
    wanted = {f"socket:[{i}]": i for i in sock_inodes}
    out: dict[int, list[int]] = {}
    try:
        pids = [e for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return out
    for pid in pids:
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target in wanted:
                out.setdefault(wanted[target], []).append(int(pid))
    return out


def _holder_folders(pid: int, proc: str = "/proc") -> list[str]:
    """The folders a process has open or works in, and those of the files it has
    open, as this view shows them; none for a process of another mount namespace
    (its paths are not ours)."""
    try:
        if os.stat(f"{proc}/{pid}/ns/mnt").st_ino != os.stat(f"{proc}/self/ns/mnt").st_ino:
            return []
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return []
    folders: list[str] = []
    for link in [*(f"{proc}/{pid}/fd/{fd}" for fd in fds), f"{proc}/{pid}/cwd"]:
        try:
            target = os.readlink(link)
        except OSError:
            continue
        if not target.startswith("/") or target.endswith(" (deleted)"):
            continue
        folder = target if os.path.isdir(target) else os.path.dirname(target)
        if folder != "/":  # the whole tree is no place to look
            folders.append(folder)
    return list(dict.fromkeys(folders))


def moved_sockets() -> tuple[list[str], list[tuple[str, int]]]:
    """Sockets of this network namespace that are no longer at their bind-time name:
    (the paths where they were found, the name and device of those that were not).
    A name this process may not look at (a folder of another user) is neither: this
    user, and so its sandbox, cannot reach it by that name either."""
    files = _kernel_sockets()
    if files is None:
        return [], []
    found: list[str] = []
    unplaced: list[tuple[str, int, int, int]] = []
    for name, dev, ino, sock_ino in files:
        if not name.startswith("/") or "\0" in name:
            unplaced.append((name, dev, ino, sock_ino))  # relative: bound in a folder
            continue
        try:
            if _same(os.stat(name), dev, ino):
                continue  # where it was bound: bound_sockets() has it
        except PermissionError:
            continue
        except (OSError, ValueError):
            pass
        parent = os.path.dirname(os.path.normpath(name))
        magic = parent == "/proc" or parent.startswith("/proc/")  # /proc/self/fd/N/NAME
        folder = parent
        while folder != "/" and not os.path.isdir(folder):
            folder = os.path.dirname(folder)
        places = _search([folder], dev, ino) if folder != "/" and not magic else []
        if places:
            found.extend(os.path.realpath(p) for p in places)
        elif folder == parent and not magic:
            # its folder is still there and holds no name of it (nor do its subfolders):
            # removed (a daemon that unlinks its socket keeps listening, unreachable by
            # name), or renamed into a distant folder, which no search can tell apart
            continue
        else:
            unplaced.append((name, dev, ino, sock_ino))
    # a socket bound through /proc/self/fd/N/NAME (conmon's attach socket) or whose
    # folder went: looked for where its holders keep their files (the folders of
    # their open files, their working folder). One not found is asked about again,
    # twice at most: a socket closed meanwhile (its last holder exited: a container
    # that stopped) is no longer listed and reachable by no one, and a holder that
    # was starting may have opened its other files since; only one still listed and
    # still not found is reported
    for pause in (0.0, 0.05, 0.2):
        if not unplaced:
            break
        if pause:
            time.sleep(pause)
            now = _kernel_sockets()
            if now is not None:  # not asked: each is still taken as listed
                alive = {s for _, _, _, s in now}
                unplaced = [u for u in unplaced if u[3] in alive]
        unplaced = _near_holders(unplaced, found)
    return list(dict.fromkeys(found)), [(name, dev) for name, dev, _, _ in unplaced]


def _near_holders(unplaced: list[tuple[str, int, int, int]],
                  found: list[str]) -> list[tuple[str, int, int, int]]:
    """Look for each socket in the folders its holders keep files in: the paths
    found are added to ``found``; those not found are returned."""
    holders = _holders({s for _, _, _, s in unplaced})
    left = []
    for name, dev, ino, sock_ino in unplaced:
        folders = [f for pid in holders.get(sock_ino, []) for f in _holder_folders(pid)]
        places = _search(list(dict.fromkeys(folders)), dev, ino) if folders else []
        if places:
            found.extend(os.path.realpath(p) for p in places)
        else:
            left.append((name, dev, ino, sock_ino))
    return left


def device_mount_points(dev: int) -> list[str]:
    """Where this view mounts the filesystem of a device number."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    return [point for d, _, point in _mountinfo("self") if d == want]
