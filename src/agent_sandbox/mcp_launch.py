"""``sandbox mcp DIR``: hand the session to this user's resident MCP server, or
serve it here.

A client waits for the server's ``initialize`` answer before its first turn, and
importing the SDK alone costs more than the 300 ms goal. So the command the
client starts is this launcher (stdlib only, a few milliseconds): it asks the
resident server (``mcp_resident``), which imported the SDK and
``mcp_server`` before any client asked, for a session. The resident forks one
child per session; the child takes this process's stdin, stdout and stderr
(``SCM_RIGHTS``), its working folder, environment and resource limits, and runs
the same ``mcp_server.main`` a cold start runs. This process then only waits
for the child's exit status and exits with it.

On any failure before the child takes the session (no resident folder, no
socket, refused, a resident of other code, a resident that does not answer in
``HANDSHAKE_SECONDS``, or one that dies mid-handshake: before ``T`` below) the
launcher serves the session itself, cold, exactly as before: a client is never
left waiting or failed because of the resident. When there was none, or a
stale one, it also starts a fresh resident, detached, for the next session.

The handshake, over a unix stream socket in the user's state folder
(``contract.mcp_resident_dir``, 0700, hidden in every sandbox; one per
installation, ``resident_file``):

1. launcher -> resident: a frame (4-byte big-endian length, then JSON: the
   protocol version, the package identity, the arguments, the environment, the
   umask and the resource limits) with the descriptors 0, 1, 2 and the working
   folder attached;
2. resident -> launcher: ``R`` (a child is ready, nothing read yet), or ``S``
   (the resident runs other code: it exits) or nothing (refused);
3. launcher -> child: ``G``: from here on the session is the child's; the
   launcher never serves it as well (without ``G`` the child exits untouched);
4. child -> launcher: ``T`` as it takes the session, before it reads anything
   (a child that dies before ``T`` leaves the session to the launcher, cold);
5. child -> launcher: ``X`` and the exit status when the session ends.

``identity()`` names the installed code: the interpreter, the package's
version and path, every file of the package (size, inode, mtime), and what the
installation's folders on ``sys.path`` hold (names, and the inode of each
distribution's record folder, made anew by every install, upgrade or removal). A resident compares
the launcher's with its own, taken when it imported everything; a mismatch
makes it answer ``S`` and exit, so code replaced by an upgrade is never served.
"""

from __future__ import annotations

import os
import sys

from agent_sandbox import contract

PROTOCOL = 1
HANDSHAKE_SECONDS = 2.0
MAX_FRAME = 1 << 20
START_DELAY = 1.0


def identity() -> str:
    """A digest of the installed code this interpreter would run (see the module
    doc). Two processes agree on it only if they would import the same files."""
    import agent_sandbox

    pkg = os.path.dirname(os.path.abspath(agent_sandbox.__file__))
    parts = [str(PROTOCOL), agent_sandbox.__version__, os.path.realpath(sys.executable),
             sys.version, pkg]
    # the installation's own folders (the standard library, the virtualenv's site
    # folder): the same whether or not this interpreter runs isolated, as the
    # resident does and a launcher started by hand (``sandbox mcp``) may not
    prefixes = tuple(dict.fromkeys(os.path.join(p, "") for p in (
        sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)))
    # not isolated, the first entry is the script's folder or the current one
    searched = sys.path if sys.flags.safe_path else sys.path[1:]
    for entry in searched:  # what is installed: a distribution's record folder is
        if not os.path.join(entry, "").startswith(prefixes):
            continue
        try:  # made anew by every install, upgrade or reinstall
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")):
                with _suppressed():
                    name += f":{os.stat(os.path.join(entry, name)).st_ino}"
            parts.append(f"{entry}/{name}")
    stack = [pkg]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.name == "__pycache__":
                continue
            if e.is_dir(follow_symlinks=False):
                parts.append(f"{e.path}/")
                stack.append(e.path)
                continue
            st = e.stat(follow_symlinks=False)
            parts.append(f"{e.path}:{st.st_mode}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}")
    return _sha256_hex("\n".join(parts))


def _sha256_hex(text: str) -> str:
    data = text.encode("utf-8", "surrogateescape")
    for name in ("_sha2", "_sha256"):  # 3.12+, then 3.11 (as audit.canonical)
        try:
            return str(__import__(name).sha256(data).hexdigest())
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256(data).hexdigest()


def resident_file(suffix: str) -> str:
    """The resident's socket (``.sock``), lock or log of this installation: one
    resident per interpreter and package path, so that two installations of one
    user (two virtualenvs) each keep theirs instead of replacing each other's."""
    import agent_sandbox

    key = _sha256_hex(os.path.realpath(sys.executable) + "\0"
                      + os.path.dirname(os.path.abspath(agent_sandbox.__file__)))[:16]
    return os.path.join(resident_dir(), key + suffix)


class _suppressed:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> bool:
        return isinstance(exc, OSError)


def resident_dir() -> str:
    from agent_sandbox.state_paths import account_home

    return contract.mcp_resident_dir(account_home())


def _private(folder: str) -> bool:
    """Whether ``folder`` is this user's private folder (not a link, mode 0700)."""
    import stat

    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & 0o077)


def _peer_uid(sock: object) -> int:
    import _socket

    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # type: ignore[attr-defined]
    return int.from_bytes(raw[4:8], sys.byteorder)  # struct ucred: pid, uid, gid


def _limits() -> list[list[int]]:
    import resource

    out = []
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            num = getattr(resource, name)
            soft, hard = resource.getrlimit(num)
            out.append([num, soft, hard])
    return out


def _recv_exact(sock: object, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))  # type: ignore[attr-defined]
        if not chunk:
            break
        buf += chunk
    return buf


def try_resident(argv: list[str]) -> tuple[int | None, bool]:
    """(the session's exit status, or None to serve it here; whether to start a
    fresh resident). Never raises for anything the resident does."""
    import _socket

    from agent_sandbox.quickjson import dumps

    folder = resident_dir()
    if not _private(folder):
        return None, True
    path = resident_file(".sock")
    if not os.path.exists(path):  # no resident: nothing to ask
        return None, True
    # the whole frame before connecting: the resident gives a connection
    # HANDSHAKE_SECONDS to send it, and reading the installed code (``identity``) is
    # this launcher's own work, which a loaded machine can stretch past that
    body = dumps({"protocol": PROTOCOL, "identity": identity(), "argv": argv,
                  "env": dict(os.environ), "umask": _umask(),
                  "limits": _limits()}).encode("utf-8", "surrogateescape")
    if len(body) > MAX_FRAME:
        return None, False
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    except OSError:  # no unix sockets here (a sandbox's seccomp filter): serve it here
        return None, False
    cwd = -1
    try:
        sock.settimeout(HANDSHAKE_SECONDS)
        try:
            sock.connect(path)
        except OSError:
            return None, True
        if _peer_uid(sock) != os.geteuid():
            return None, False
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
        frame = len(body).to_bytes(4, "big") + body
        sent = sock.sendmsg([frame], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        if sent < len(frame):
            sock.sendall(frame[sent:])
        os.close(cwd)
        cwd = -1
        reply = sock.recv(1)
        if reply != b"R":
            return None, reply == b"S"
        sock.sendall(b"G")
        sock.settimeout(None)  # past G the child serves: waiting for it is the session
        if sock.recv(1) != b"T":  # it died before reading anything: serve it here
            return None, True
        # committed: the child may have read the client's input
        end = _recv_exact(sock, 2)
        if len(end) == 2 and end[:1] == b"X":
            return end[1], False
        sys.stderr.write("agent-sandbox mcp: the session's server ended without a status\n")
        return 1, False
    except OSError:
        return None, False
    finally:
        if cwd >= 0:
            os.close(cwd)
        sock.close()


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def start_resident() -> None:
    """Start this user's resident server detached (its own session, from ``/``,
    isolated interpreter, ``START_DELAY`` seconds later); it exits at once if
    another holds its lock. Nothing here waits for it to be ready."""
    folder = resident_dir()
    parent = os.path.dirname(folder)
    try:  # a read-only state folder (inside a sandbox): no resident can live there
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return
    if not _private(folder) or not os.access(folder, os.W_OK):
        return
    import time

    argv = contract.self_argv(sys.executable, "mcp", "--resident")
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:  # pragma: no cover - runs in the forked child
        try:
            os.setsid()
            if os.fork() == 0:
                # let this launcher's cold start import the SDK first: on a small
                # machine the two imports at once slow the client's session
                time.sleep(START_DELAY)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.chdir("/")
                os.execv(argv[0], argv)  # noqa: S606 - our interpreter, isolated
        finally:
            os._exit(0)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def main(argv: list[str]) -> int:
    """``sandbox mcp [DIRECTORY]``: the resident's session, else a cold one."""
    if len(argv) > 1:
        sys.stderr.write("usage: sandbox mcp [DIRECTORY]\n")
        return 2
    if os.environ.get(contract.MCP_RESIDENT_ENV) != "off":
        status, start = try_resident(argv)
        if status is not None:
            return status
        if start:
            start_resident()
    from agent_sandbox.mcp_server import main as cold

    return cold(argv)
