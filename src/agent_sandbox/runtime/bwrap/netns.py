"""Open the proxy's listening sockets inside the sandbox's network namespace.

The sandbox's only network is its own loopback. Its proxy ports (127.0.0.1:3128
HTTP, :1080 SOCKS5) are listening sockets created *in that namespace* and then
carried over a unix socket (``SCM_RIGHTS``) to the host side, which serves them:
a connection a sandboxed process makes to its loopback proxy port is accepted
by the host proxy, and nothing else in the sandbox can reach the host.

The sockets are created before the command is released (``bwrap --block-fd``),
so the ports are ready when the command starts. Creating them needs to enter the
namespace: directly when this process may (root), otherwise in a short-lived
child that first joins the sandbox's user namespace (its owner has every
capability there). This module must never leave the calling process in another
namespace: the in-process path switches back before returning, or fails.
"""

from __future__ import annotations

# ``socket`` and ``ctypes`` cost more to import than the sandbox takes to start;
# their C halves do all that is needed here.
import _socket as socket
import os

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace


class NamespaceError(SandboxError, OSError):
    """The sandbox's network namespace could not be entered."""


_SETNS: int | None = None


def load() -> int:
    """Look ``setns`` up now (an import and a symbol lookup): called while bwrap
    starts, so that opening the ports later costs only the calls."""
    global _SETNS
    import _ctypes

    if _SETNS is None:
        _SETNS = _ctypes.dlsym(_ctypes.dlopen(None, 0), "setns")  # type: ignore[arg-type]
    return _SETNS


def _setns(fd: int, nstype: int) -> None:
    import _ctypes

    if _ctypes.call_function(load(), (fd, nstype)) != 0:
        raise PermissionError(1, f"setns({nstype:#x}) failed")


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _loopback_up() -> None:
    """Bring this namespace's ``lo`` up (a container runtime may leave it down)."""
    import fcntl
    import struct

    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifreq = struct.pack("16sH22x", b"lo", 0)  # struct ifreq: name, flags, padding
        flags = struct.unpack("16sH22x", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq))[1]
        if not flags & IFF_UP:
            fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def _listeners(ports: Sequence[int], loopback_up: bool = False) -> list[socket.socket]:
    if loopback_up:
        _loopback_up()
    out = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IP, 15, 1)  # IP_FREEBIND: lo may come up a moment later
        s.bind(("127.0.0.1", port))
        s.listen(128)
        out.append(s)
    return out


def _in_process(pid: int, ports: Sequence[int],
                loopback_up: bool = False) -> list[socket.socket]:
    own = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, CLONE_NEWNET)
        try:
            return _listeners(ports, loopback_up)
        finally:
            try:
                _setns(own, CLONE_NEWNET)
            except OSError:
                os._exit(125)  # never keep running inside the sandbox's namespace
    finally:
        os.close(own)
        os.close(target)


def _via_child(pid: int, ports: Sequence[int],
               loopback_up: bool = False) -> list[socket.socket]:
    import fcntl

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    netns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    # the user namespace that owns the network namespace, not the one ``pid`` is in
    # by now: an unprivileged bwrap moves its init into a nested one once its mounts
    # are made, and joining that one gives no right to enter the network namespace
    userns = fcntl.ioctl(netns, NS_GET_USERNS)
    kid = os.fork()
    if kid == 0:  # pragma: no cover - runs in the forked child
        code = 1
        try:
            parent.close()
            _setns(userns, CLONE_NEWUSER)
            _setns(netns, CLONE_NEWNET)
            socks = _listeners(ports, loopback_up)
            payload = b"".join(s.fileno().to_bytes(4, "little", signed=True) for s in socks)
            child.sendmsg([b"ok"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, payload)])
            code = 0
        except BaseException as exc:
            try:
                child.sendall(f"er{exc}".encode()[:500])
            except OSError:
                pass
        os._exit(code)
    os.close(userns)
    os.close(netns)
    child.close()
    try:
        msg, anc, _, _ = parent.recvmsg(512, socket.CMSG_SPACE(4 * len(ports)))
    finally:
        parent.close()
        os.waitpid(kid, 0)
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(int.from_bytes(data[i:i + 4], "little", signed=True)
                       for i in range(0, usable, 4))
    if not msg.startswith(b"ok") or len(fds) != len(ports):
        for fd in fds:
            os.close(fd)
        raise NamespaceError(f"cannot open the proxy ports in the sandbox: {msg[2:].decode()}")
    return [socket.socket(fileno=fd) for fd in fds]


def open_listeners(pid: int, ports: Sequence[int],
                   loopback_up: bool = False) -> list[socket.socket]:
    """Listening TCP sockets on 127.0.0.1:<ports> in the network namespace of ``pid``
    (``loopback_up``: bring its ``lo`` up first, for a namespace bwrap did not make)."""
    if os.geteuid() == 0:
        try:
            return _in_process(pid, ports, loopback_up)
        except PermissionError:
            pass
        except OSError as exc:  # the sandbox's first process is gone (bwrap failed)
            raise NamespaceError(f"cannot open the proxy ports in the sandbox: {exc}"
                                 ) from None
    try:
        return _via_child(pid, ports, loopback_up)
    except OSError as exc:
        raise NamespaceError(f"cannot open the proxy ports in the sandbox: {exc}") from None
