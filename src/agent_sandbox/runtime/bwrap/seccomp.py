"""The seccomp filter loaded by bubblewrap (``--seccomp FD``), as classic BPF.

Written by hand (``struct sock_filter`` records) so no libseccomp binding is
needed. What it refuses, with ``EPERM`` unless noted:

- ``socket()`` of any family but IPv4 and IPv6 (``EAFNOSUPPORT``): an allowlist,
  so AF_VSOCK (which leaves the network namespace for the hypervisor), netlink,
  packet, and every family a kernel adds later are refused; ``AF_UNIX`` is
  allowed only when the settings allow unix sockets; of the allowed families only
  stream sockets (no UDP, no DNS, no raw sockets, no unix datagrams);
- ``bind()`` when the settings allow unix sockets by path and not local binding;
- ``socketpair(AF_UNIX)`` of a datagram type: a datagram pair can be pointed at
  any socket path with ``sendto()`` or ``connect()`` (a stream or sequenced-packet
  pair cannot);
- ``io_uring_*`` (it would bypass this filter), ``clone3`` (``ENOSYS``, so libc
  falls back to ``clone``, whose flags are checked), ``clone``/``unshare``/
  ``setns`` with namespace flags, every mount-API call, ``ptrace``, keyrings,
  ``bpf``, ``perf_event_open``, ``userfaultfd``, ``ioctl(TIOCSTI/TIOCLINUX)``;
- ``setxattr`` and its kin (``EOPNOTSUPP``, as a file system without extended
  attributes answers): the broker marks the folders sandboxed runs make with
  one (``broker.files.MARK``), which the command must not set on the user's;
- a foreign architecture or x32 syscall numbers: the process is killed.

It must never allow by default on an architecture it does not know: ``program()``
raises ``SeccompError`` there and the sandbox refuses to start.
"""

from __future__ import annotations

import os
import sys

from agent_sandbox.errors import SandboxError

# BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_ALU_AND_K = 0x54

RET_ALLOW = 0x7FFF0000
RET_KILL = 0x80000000
RET_ERRNO = 0x00050000
EPERM = 1
ENOSYS = 38
EAFNOSUPPORT = 97
EOPNOTSUPP = 95

AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCK_STREAM = 1
SOCK_SEQPACKET = 5
NS_FLAGS = 0x10000000 | 0x20000 | 0x40000000 | 0x08000000 | 0x04000000 | 0x20000000 | 0x02000000
# CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID
# | CLONE_NEWCGROUP
TIOCSTI, TIOCLINUX = 0x5412, 0x541C


class SeccompError(SandboxError, RuntimeError):
    """No filter can be built for this machine."""


ARCHES: dict[str, dict[str, object]] = {
    "x86_64": {
        "audit": 0xC000003E,
        "x32": True,
        "nr": {
            "socket": 41, "socketpair": 53, "bind": 49, "clone": 56, "clone3": 435,
            "unshare": 272,
            "setns": 308,
            "ioctl": 16, "mount": 165, "umount2": 166, "pivot_root": 155,
            "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
            "fsmount": 432, "fspick": 433, "mount_setattr": 442,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "ptrace": 101, "keyctl": 250, "add_key": 248, "request_key": 249,
            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
            "process_vm_writev": 311, "kexec_load": 246, "init_module": 175,
            "finit_module": 313, "name_to_handle_at": 303, "open_by_handle_at": 304,
            "chroot": 161, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
            "setxattrat": 463,
        },
    },
    "aarch64": {
        "audit": 0xC00000B7,
        "x32": False,
        "nr": {
            "socket": 198, "socketpair": 199, "bind": 200, "clone": 220, "clone3": 435,
            "unshare": 97,
            "setns": 268,
            "ioctl": 29, "mount": 40, "umount2": 39, "pivot_root": 41,
            "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
            "fsmount": 432, "fspick": 433, "mount_setattr": 442,
            "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
            "ptrace": 117, "keyctl": 219, "add_key": 217, "request_key": 218,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
            "process_vm_writev": 271, "kexec_load": 104, "init_module": 105,
            "finit_module": 273, "name_to_handle_at": 264, "open_by_handle_at": 265,
            "chroot": 51, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "setxattrat": 463,
        },
    },
}

_DENIED_ALWAYS = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "ptrace", "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd", "process_vm_writev", "kexec_load",
    "init_module", "finit_module", "name_to_handle_at", "open_by_handle_at", "chroot",
)


_NO_XATTRS = ("setxattr", "lsetxattr", "fsetxattr", "setxattrat")

Insn = tuple[int, int | str, int | str, int]


def ins(code: int, jt: int | str = 0, jf: int | str = 0, k: int = 0) -> Insn:
    return (code, jt, jf, k)


def _rel(target: int | str, here: int, labels: dict[str, int]) -> int:
    if isinstance(target, str):
        off = labels[target] - here - 1
        if not 0 <= off <= 255:
            raise SeccompError(f"jump to {target} out of range")
        return off
    return target


def program(*, allow_unix: bool = False, deny_bind: bool = False,
            machine: str | None = None) -> bytes:
    """The filter as bytes of ``struct sock_filter`` records (pure).

    ``deny_bind``: refuse ``bind()`` of every family (the filter cannot see a
    socket's family there): with unix sockets allowed by path, so the command
    cannot serve a socket of its own where a host process would look for one.
    """
    machine = machine or os.uname().machine
    arch = ARCHES.get(machine)
    if arch is None:
        raise SeccompError(
            f"no seccomp filter for architecture {machine!r}; "
            "the sandbox supports x86_64 and aarch64"
        )
    nr: dict[str, int] = arch["nr"]  # type: ignore[assignment]

    def errno(e: int) -> int:
        return RET_ERRNO | e

    code: list[Insn] = []
    labels: dict[str, int] = {}

    def label(name: str) -> None:
        labels[name] = len(code)

    code.append(ins(_LD_W_ABS, k=4))  # arch
    code.append(ins(_JEQ_K, 1, 0, int(arch["audit"])))  # type: ignore[call-overload]
    code.append(ins(_RET_K, k=RET_KILL))
    code.append(ins(_LD_W_ABS, k=0))  # nr
    if arch["x32"]:
        code.append(ins(_JGE_K, "kill", 0, 0x40000000))
    for name in _DENIED_ALWAYS:
        code.append(ins(_JEQ_K, "eperm", 0, nr[name]))
    code.append(ins(_JEQ_K, "enosys", 0, nr["clone3"]))
    for name in _NO_XATTRS:
        code.append(ins(_JEQ_K, "eopnotsupp", 0, nr[name]))
    if deny_bind:
        code.append(ins(_JEQ_K, "eperm", 0, nr["bind"]))
    code.append(ins(_JEQ_K, "socket", 0, nr["socket"]))
    code.append(ins(_JEQ_K, "socketpair", 0, nr["socketpair"]))
    code.append(ins(_JEQ_K, "clone", 0, nr["clone"]))
    code.append(ins(_JEQ_K, "ioctl", 0, nr["ioctl"]))
    code.append(ins(_RET_K, k=RET_ALLOW))
    # socket(domain, type, protocol): an allowlist of families, stream sockets only
    label("socket")
    code.append(ins(_LD_W_ABS, k=16))  # args[0] low word: domain
    code.append(ins(_JEQ_K, "stream", 0, AF_INET))
    code.append(ins(_JEQ_K, "stream", 0, AF_INET6))
    if allow_unix:
        code.append(ins(_JEQ_K, "stream", 0, AF_UNIX))
    code.append(ins(_RET_K, k=errno(EAFNOSUPPORT)))
    label("stream")
    code.append(ins(_LD_W_ABS, k=24))  # args[1] low word: type (with flags)
    code.append(ins(_ALU_AND_K, k=0xF))
    code.append(ins(_JEQ_K, "allow", "eperm", SOCK_STREAM))
    # socketpair(domain, type, protocol, sv): a connected pair reaches nothing but
    # itself, except an AF_UNIX datagram one, which sendto() or connect() can point
    # at any socket path; a stream or sequenced-packet pair stays connected (connect()
    # answers EISCONN, sendto() ignores an address): Rust's process spawning (cargo,
    # rustc calling the linker) makes a SOCK_SEQPACKET pair
    label("socketpair")
    code.append(ins(_LD_W_ABS, k=16))
    code.append(ins(_JEQ_K, 0, "allow", AF_UNIX))
    code.append(ins(_LD_W_ABS, k=24))
    code.append(ins(_ALU_AND_K, k=0xF))
    code.append(ins(_JEQ_K, "allow", 0, SOCK_STREAM))
    code.append(ins(_JEQ_K, "allow", "eperm", SOCK_SEQPACKET))
    # clone(flags, ...)
    label("clone")
    code.append(ins(_LD_W_ABS, k=16))
    code.append(ins(_JSET_K, "eperm", "allow", NS_FLAGS))
    # ioctl(fd, request, ...)
    label("ioctl")
    code.append(ins(_LD_W_ABS, k=24))
    code.append(ins(_JEQ_K, "eperm", 0, TIOCSTI))
    code.append(ins(_JEQ_K, "eperm", "allow", TIOCLINUX))
    label("allow")
    code.append(ins(_RET_K, k=RET_ALLOW))
    label("eperm")
    code.append(ins(_RET_K, k=errno(EPERM)))
    label("enosys")
    code.append(ins(_RET_K, k=errno(ENOSYS)))
    label("eafnosupport")
    code.append(ins(_RET_K, k=errno(EAFNOSUPPORT)))
    label("eopnotsupp")
    code.append(ins(_RET_K, k=errno(EOPNOTSUPP)))
    label("kill")
    code.append(ins(_RET_K, k=RET_KILL))

    return assemble(code, labels)


def assemble(code: list[Insn], labels: dict[str, int]) -> bytes:
    """``code`` as ``struct sock_filter`` records {u16 code; u8 jt; u8 jf; u32 k},
    native byte order (``struct`` would cost the cold start an import for this
    one loop), jumps to ``labels`` made relative."""
    order = sys.byteorder
    out = bytearray()
    for i, (c, jt, jf, k) in enumerate(code):
        out += (c.to_bytes(2, order) + _rel(jt, i, labels).to_bytes(1, order)
                + _rel(jf, i, labels).to_bytes(1, order) + k.to_bytes(4, order))
    return bytes(out)


def memfd(data: bytes) -> int:
    """A readable fd holding a built program (for ``bwrap --seccomp FD``)."""
    fd = os.memfd_create("agent-sandbox-seccomp", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
