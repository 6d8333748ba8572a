"""``sandbox mcp --resident``: this user's resident MCP server (see ``mcp_launch``).

Started detached by a launcher that found none (``mcp_launch.start_resident``:
``contract.self_argv``, so an isolated interpreter, from ``/``). It takes the
lock of its folder (another resident holds it: exit), imports the SDK and
``mcp_server`` (nothing from a path a sandbox can write: ``-I``, ``/``), then
listens on its installation's socket (``mcp_launch.resident_file``) in
``contract.mcp_resident_dir`` (0700, the socket 0600), a folder every sandbox
gets hidden (``contract.private_paths``).

Each connection is checked before anything it sent is used:

- the peer (``SO_PEERCRED``) is this uid, and it runs confined exactly as this
  process is: the same namespaces (every sandbox has its own network and mount
  namespaces), the same ``NoNewPrivs``, seccomp mode, capability bounding set
  and security label (a process under a seccomp, Landlock or AppArmor sandbox of
  another tool differs in at least one). A child of ours serves with our
  confinement, so a peer confined more than we are would escape through us; it is
  refused and serves itself, confined, as before;
- the protocol and the identity of the installed code match ours; otherwise the
  answer is ``S`` and this process exits (it runs replaced code).

Then it forks. No thread runs in this process before a fork (checked: a
thread would make the fork unsafe; the resident exits instead). The child takes
the descriptors, working folder, environment, umask and (lowered) resource limits
the launcher sent, answers ``R``, waits for ``G``, answers ``T`` and runs
``mcp_server.main`` exactly as a cold start does. A thread then watches the
connection: when the launcher goes away (the client ended it) the session ends
too.

It exits when no session started for ``IDLE_SECONDS``, and within
``CHECK_SECONDS`` of its socket being removed or replaced (a socket whose folder
is gone cannot be located, and the planner refuses runs that allow unix sockets
by path while one is bound).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import stat
import sys
import threading
import time

from agent_sandbox import mcp_launch

IDLE_SECONDS = 12 * 3600.0
# how often it checks that its socket is still where launchers (and the sandbox
# planner, which must locate every bound socket to mask it) look for it
CHECK_SECONDS = 10.0
LOCK_WAIT = 3.0
_STATUS_FIELDS = ("NoNewPrivs:", "Seccomp:", "CapBnd:")
_NAMESPACES = ("net", "mnt", "pid", "user", "ipc", "uts")
# what a session's child must not keep: the listening socket (a connection queued
# on it after this resident died would wait for nobody) and the lock (the next
# resident could not start while any session lasts)
_INHERITED: list[int] = []


def _log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {msg}\n")
    sys.stderr.flush()


def confinement(pid: int | str) -> tuple[str, ...]:
    """What confines process ``pid`` (``self`` for this one): its namespaces, its
    no_new_privs and seccomp state, its capability bounding set, its LSM label."""
    out = [os.readlink(f"/proc/{pid}/ns/{ns}") for ns in _NAMESPACES]
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
        lines = {line.split(None, 1)[0]: line.strip() for line in fh if line.strip()}
    out += [lines.get(f, f + " ?") for f in _STATUS_FIELDS]
    try:
        with open(f"/proc/{pid}/attr/current", "rb") as fh:
            out.append(fh.read().decode("utf-8", "replace").strip("\0\n"))
    except OSError:
        out.append("-")
    return tuple(out)


def peer_allowed(conn: socket.socket, mine: tuple[str, ...]) -> str:
    """Why the peer of ``conn`` is refused, or '' when it may have a session."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    pid = int.from_bytes(creds[0:4], sys.byteorder)
    uid = int.from_bytes(creds[4:8], sys.byteorder)
    if uid != os.geteuid():
        return f"uid {uid}"
    if pid <= 0:
        return "no peer process"
    try:
        theirs = confinement(pid)
    except OSError as exc:
        return f"cannot inspect pid {pid}: {exc.strerror}"
    if theirs != mine:
        diff = [f"{a} != {b}" for a, b in zip(theirs, mine, strict=True) if a != b]
        return f"pid {pid} is confined otherwise: {'; '.join(diff)}"
    return ""


def _recv_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    """The launcher's frame and the descriptors that came with it (closed again
    and ValueError on anything malformed)."""
    from agent_sandbox.quickjson import loads

    fds: list[int] = []
    msg, anc, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 4))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[i:i + 4], sys.byteorder)
                    for i in range(0, len(data) - len(data) % 4, 4)]
    try:
        if len(fds) != 4 or len(msg) < 4:
            raise ValueError("want 4 descriptors and a frame")
        size = int.from_bytes(msg[:4], "big")
        if size > mcp_launch.MAX_FRAME:
            raise ValueError("frame too large")
        body = msg[4:]
        while len(body) < size:
            chunk = conn.recv(size - len(body))
            if not chunk:
                raise ValueError("short frame")
            body += chunk
        req = loads(body[:size])
        if not isinstance(req, dict):
            raise ValueError("not an object")
        if not stat.S_ISDIR(os.fstat(fds[3]).st_mode):
            raise ValueError("the working folder is not a folder")
        return req, fds
    except (ValueError, OSError):
        for fd in fds:
            os.close(fd)
        raise


Request = tuple[list[str], dict[str, str], int, list[list[int]]]


def _checked(req: dict[str, object]) -> Request:
    argv, env, umask, limits = req.get("argv"), req.get("env"), req.get("umask"), \
        req.get("limits")
    if not (isinstance(argv, list) and len(argv) <= 1 and all(isinstance(a, str) for a in argv)
            and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            and isinstance(umask, int) and 0 <= umask <= 0o777 and isinstance(limits, list)
            and all(isinstance(x, list) and len(x) == 3 and all(isinstance(i, int) for i in x)
                    for x in limits)):
        raise ValueError("malformed request")
    return argv, env, umask, limits


def _session(conn: socket.socket, fds: list[int], argv: list[str], env: dict[str, str],
             umask: int, limits: list[list[int]]) -> int:  # pragma: no cover - child
    """In the forked child: take the launcher's place and serve its session."""
    import resource

    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd in _INHERITED:
        os.close(fd)
    for i, fd in enumerate(fds[:3]):
        os.dup2(fd, i)
    os.fchdir(fds[3])
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.umask(umask)
    for num, soft, hard in limits:  # never above ours: only lowering succeeds
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(num, (soft, hard))
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                      closefd=False)
    conn.settimeout(mcp_launch.HANDSHAKE_SECONDS)
    conn.sendall(b"R")
    if conn.recv(1) != b"G":  # the launcher serves it itself: touch nothing
        return -1
    conn.settimeout(None)
    conn.sendall(b"T")  # taken: from here on this process reads the client's input

    def watch() -> None:  # the launcher gone: the client ended the session
        with contextlib.suppress(OSError):
            conn.recv(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="mcp-launcher", daemon=True).start()
    from agent_sandbox.mcp_server import main

    status = main(argv)
    return status


def _child(conn: socket.socket, fds: list[int], req: Request) -> None:  # pragma: no cover
    status = 1
    try:
        status = _session(conn, fds, *req)
    except BaseException as exc:  # the session's own errors went to its stderr
        if isinstance(exc, SystemExit) and isinstance(exc.code, int):
            status = exc.code
        else:
            with contextlib.suppress(Exception):
                sys.stderr.write(f"agent-sandbox mcp: {exc!r}\n")
    finally:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
        if status >= 0:
            with contextlib.suppress(OSError):
                conn.sendall(b"X" + bytes([status & 0xFF]))
        os._exit(max(status, 0))


def _leave(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def _reap(_signum: int = 0, _frame: object = None) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _lock() -> int | None:
    fd = os.open(mcp_launch.resident_file(".lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    deadline = time.monotonic() + LOCK_WAIT  # a stale resident may still be leaving
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def _listen(path: str) -> socket.socket:
    """Bind ``path`` (replacing a dead resident's socket), 0600 from the start."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.listen(64)
    return sock


def _build_models() -> None:
    """Build now what the SDK's import deferred (``mcp_server._sdk_server_class``):
    each session's child then finds its protocol models built, as a cold start
    without ``defer_build`` would have them. The same models, built earlier."""
    from pydantic import BaseModel

    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] not in ("mcp", "mcp_types") or module is None:
            continue
        for value in list(vars(module).values()):
            if (isinstance(value, type) and issubclass(value, BaseModel)
                    and not value.__pydantic_complete__):
                with contextlib.suppress(Exception):  # one that cannot: built on use
                    value.model_rebuild()


def _still_bound(path: str, ino: int) -> bool:
    try:
        return os.stat(path).st_ino == ino
    except OSError:
        return False


def serve() -> int:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")  # as mcp_server.serve
    from agent_sandbox import mcp_server

    mcp_server._sdk_server_class()  # the SDK, imported before any client asks
    _build_models()
    ident = mcp_launch.identity()
    mine = confinement("self")
    path = mcp_launch.resident_file(".sock")
    listener = _listen(path)
    _INHERITED.append(listener.fileno())
    bound = os.stat(path).st_ino
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGTERM, _leave)  # through the finally below: the socket goes
    listener.settimeout(CHECK_SECONDS)
    _log(f"listening on {path}")
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if not _still_bound(path, bound):
                    _log("the socket was removed or replaced: exiting")
                    return 0
                if time.monotonic() - last > IDLE_SECONDS:
                    _log("idle: exiting")
                    return 0
                continue
            last = time.monotonic()
            with conn:
                if not _one(conn, mine, ident):
                    return 0
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == bound:
                os.unlink(path)
        listener.close()


def _one(conn: socket.socket, mine: tuple[str, ...], ident: str) -> bool:
    """Handle one connection; False when this resident must exit (stale code)."""
    conn.settimeout(mcp_launch.HANDSHAKE_SECONDS)
    why = peer_allowed(conn, mine)
    if why:
        _log(f"refused: {why}")
        return True
    try:
        raw, fds = _recv_request(conn)
    except (ValueError, OSError) as exc:
        _log(f"refused: {exc}")
        return True
    try:
        if raw.get("protocol") != mcp_launch.PROTOCOL or raw.get("identity") != ident:
            _log("the installed code changed: exiting")
            with contextlib.suppress(OSError):
                conn.sendall(b"S")
            return False
        req = _checked(raw)
    except ValueError as exc:
        _log(f"refused: {exc}")
        for fd in fds:
            os.close(fd)
        return True
    if threading.active_count() != 1:  # fork with a thread running is unsafe
        _log("a thread is running: exiting")
        for fd in fds:
            os.close(fd)
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the session's child
        _child(conn, fds, req)
    _log(f"session {pid}: {req[0][0] if req[0] else '.'}")
    for fd in fds:
        os.close(fd)
    return True


def main() -> int:
    folder = mcp_launch.resident_dir()
    try:
        st = os.lstat(folder)
    except OSError:
        return 1
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return 1
    lock = _lock()
    if lock is None:
        return 0  # another resident runs (or is starting)
    _INHERITED.append(lock)
    log = os.open(mcp_launch.resident_file(".log"),
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if os.fstat(log).st_size > 1 << 20:
        os.ftruncate(log, 0)
    os.dup2(log, 2)
    os.close(log)
    try:
        return serve()
    except Exception as exc:
        _log(f"failed: {exc!r}")
        return 1
    finally:
        os.close(lock)
