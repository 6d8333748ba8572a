"""Probe run inside a sandbox by the srt conformance suite (test_srt_conformance.py).

Each subcommand tries one thing srt's own tests try (a unix connect, a bind, a
datagram, a syscall) and prints ``<label>: ok`` or ``<label>: <ERRNO>``. The
suite judges from the host wherever it can (a listener's counter, a file on
the host); the printed line is the judge only for syscalls whose effect has no
host-side trace. Run with the system interpreter and ``-I``; it imports only
the standard library and must never be imported by the tests.

With ``CONFORMANCE_CONTROL=1`` (the unsandboxed control run) the process
probes aim at a child of the probe instead of PID 1, and ``umount-proc``
works in a private mount namespace of its own, so the control can show the
judge fire without touching the host's init or its /proc.
"""

from __future__ import annotations

import base64
import ctypes
import errno
import os
import platform
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

CONTROL = os.environ.get("CONFORMANCE_CONTROL") == "1"
libc = ctypes.CDLL(None, use_errno=True)
X86 = platform.machine() == "x86_64"


def report(label: str, fn: Callable[[], object]) -> None:
    try:
        fn()
        print(f"{label}: ok", flush=True)
    except OSError as e:
        print(f"{label}: {errno.errorcode.get(e.errno or 0, e.errno)}", flush=True)


def check(r: int) -> int:
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def target_pid() -> int:
    """PID 1 inside a sandbox; a child of this probe in the control run."""
    if not CONTROL:
        return 1
    # its output is not the run's: the run would otherwise end only when the
    # sleep does (the test reads the run's output to its end)
    child = subprocess.Popen(["sleep", "30"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    return child.pid


def unix_connect(path: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(path)
    s.sendall(b"Test message\n")
    s.close()


def connect_via_proxy(host: str, port: int, payload: str) -> None:
    """An HTTPS client's CONNECT through $HTTPS_PROXY (credentials in the URL sent
    as Basic auth, as srt's variables carry them); direct without a proxy."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    if proxy:
        u = urlsplit(proxy)
        s = socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), 5)
        auth = ""
        if u.username:
            cred = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            auth = f"Proxy-Authorization: Basic {base64.b64encode(cred).decode()}\r\n"
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        print("proxy said:", status, flush=True)
        if " 200" not in status:
            raise OSError(errno.ECONNREFUSED, status)
    else:
        s = socket.create_connection((host, port), 5)
    s.settimeout(5)
    s.sendall(payload.encode() + b"\n")
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()


def autobind_listen(path: str) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    try:
        s.connect(path)
    except OSError:
        pass
    s.listen(5)


def new_listener() -> None:
    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    allow = ctypes.create_string_buffer(struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000))
    prog = Fprog(1, ctypes.cast(allow, ctypes.c_void_p))
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    check(libc.syscall(317 if X86 else 277, 1, 1 << 3, ctypes.byref(prog)))


def tcp_loopback() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    c = socket.socket()
    c.connect(srv.getsockname())
    c.close()
    srv.close()


def ptrace_attach() -> None:
    check(libc.ptrace(16, target_pid(), 0, 0))


def proc_mem_write() -> None:
    open(f"/proc/{target_pid()}/mem", "r+b").close()


def umount_proc() -> None:
    if CONTROL:  # a private mount namespace: the host's /proc is never touched
        check(libc.unshare(0x00020000))
        check(libc.mount(None, b"/", None, 0x4000 | 0x40000, None))  # MS_REC|MS_PRIVATE
    check(libc.umount2(b"/proc", 2))  # MNT_DETACH


def io_uring_setup() -> None:
    params = (ctypes.c_byte * 256)()
    os.close(check(libc.syscall(425, 4, params)))


def io_uring_enter() -> None:
    r = libc.syscall(426, 99, 0, 0, 0, 0, 0)
    if r < 0 and ctypes.get_errno() == errno.EPERM:
        raise OSError(errno.EPERM, "filtered")  # EBADF means the call reached the kernel


def vm_writev() -> None:
    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    buf = ctypes.create_string_buffer(b"x")
    local = Iovec(ctypes.cast(buf, ctypes.c_void_p).value, 1)
    remote = Iovec(0x1000, 1)
    r = libc.process_vm_writev(target_pid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    e = ctypes.get_errno()
    if r < 0 and e in (errno.EPERM, errno.ESRCH, errno.EACCES):
        raise OSError(e, os.strerror(e))  # refused; any other outcome reached the target


def seek(a: str, b: str) -> None:
    """Whether any process visible here has a+b in its command line (given in two
    parts so that this probe's own command line does not match)."""
    needle = (a + b).encode()
    seen = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
            and needle in _cmdline(p)]
    if not seen:
        raise OSError(errno.ESRCH, "not visible")


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def main(argv: list[str]) -> None:
    cmd, args = argv[0], argv[1:]
    if cmd == "connect":
        if len(args) > 1:
            os.chdir(args[1])
        report("connect", lambda: unix_connect(args[0]))
    elif cmd == "abstract":
        report("abstract", lambda: unix_connect("\0" + args[0]))
    elif cmd == "bind":
        report("bind", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(args[0]))
    elif cmd == "socket-unix":
        report("socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
    elif cmd == "dgram-pair":
        report("dgram-pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0]
               .sendto(b"datagram", args[0]))
    elif cmd == "dgram":
        report("dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
               .sendto(b"datagram", args[0]))
    elif cmd == "autobind-listen":
        report("listen", lambda: autobind_listen(args[0]))
    elif cmd == "new-listener":
        report("new_listener", new_listener)
    elif cmd == "tcp":
        report("tcp-connect", tcp_loopback)
    elif cmd == "inet-socket":  # tcp, udp or tcp6
        family = socket.AF_INET6 if args[0] == "tcp6" else socket.AF_INET
        kind = socket.SOCK_DGRAM if args[0] == "udp" else socket.SOCK_STREAM
        report(args[0], lambda: socket.socket(family, kind).close())
    elif cmd == "connect-via-proxy":
        report("tunnel", lambda: connect_via_proxy(args[0], int(args[1]), args[2]))
    elif cmd == "udp":
        report("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
               .sendto(args[2].encode(), (args[0], int(args[1]))))
    elif cmd == "ptrace":
        report("ptrace", ptrace_attach)
    elif cmd == "proc-mem":
        report("proc-mem", proc_mem_write)
    elif cmd == "umount-proc":
        report("umount", umount_proc)
    elif cmd == "io-uring-setup":
        report("io_uring_setup", io_uring_setup)
    elif cmd == "io-uring-enter":
        report("io_uring_enter", io_uring_enter)
    elif cmd == "vm-writev":
        report("vm_writev", vm_writev)
    elif cmd == "seek":
        report("seen", lambda: seek(args[0], args[1]))
    else:
        raise SystemExit(f"unknown probe {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
