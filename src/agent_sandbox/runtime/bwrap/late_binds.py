"""The plan's read-only binds of files, made once bubblewrap has set the rest up.

bwrap reads the whole mount table (``/proc/self/mountinfo``, every mount of the
host twice over by then, plus its own) again for each bind it makes, to find the
flags to apply: the kernel formatting that table is most of what bwrap spends,
and its cost grows with every mount on the host and every bind of the plan. A
plan has one bind per protected name of every writable root (the protected
names alone are about fifty), so most of a
run's start went there.

Which binds: ``bwrap.argv.late_binds`` (pure), the read-only binds of files (a
protected file onto itself, ``/dev/null`` over a hidden file or a
masked socket) whose place in the order cannot change what the command sees.
``bwrap.argv.build_argv`` leaves exactly those out of bwrap's command line, and
a ``Binder`` makes them while the command is still held at the start gate
(``bwrap.argv.GATE_SCRIPT``): after
bwrap's setup is complete and before the word that lets the command run. Nothing
of the command's runs in the sandbox yet, and a failure ends the sandbox before
it does (``SandboxStartError``).

How: a short-lived child of this process joins the user namespace that owns the
sandbox's mount namespace (its owner, this user, has every capability there; the
command has none: bwrap dropped them and forbids new user namespaces) and then
that mount namespace, takes the sandbox's root as its own, and for each path
binds its source on it and remounts the bind read-only, nosuid and nodev, keeping
the flags the kernel locks (``statvfs``): what bwrap does for ``--ro-bind``, in
two calls and no table read. The mounts are the sandbox's like bwrap's own, with
the same protection: no process inside can unmount or remount them.

Nothing here decides what is mounted: the plan did (``bwrap.plan``).
"""

from __future__ import annotations

import os

from ..failures import SandboxStartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND = 0x20, 0x400, 0x800, 0x1000
MS_RELATIME, MS_STRICTATIME = 0x200000, 0x1000000
ST_NOEXEC, ST_NOATIME, ST_NODIRATIME, ST_RELATIME = 0x8, 0x400, 0x800, 0x1000
CLONE_NEWNS, CLONE_NEWUSER = 0x20000, 0x10000000
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace

_MOUNT: int | None = None


def remount_flags(st_flag: int) -> int:
    """The flags that make a bind read-only, nosuid and nodev while keeping the
    ones the kernel locks on a mount copied into a user namespace (noexec and the
    access-time mode: a remount that dropped them would be refused)."""
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    if st_flag & ST_NOEXEC:
        flags |= MS_NOEXEC
    if st_flag & ST_NODIRATIME:
        flags |= MS_NODIRATIME
    if st_flag & ST_NOATIME:
        flags |= MS_NOATIME
    elif st_flag & ST_RELATIME:
        flags |= MS_RELATIME
    else:
        flags |= MS_STRICTATIME
    return flags


def load() -> None:
    """Look ``mount`` (and ``setns``) up now: called while bwrap sets up."""
    global _MOUNT
    import _ctypes

    from .netns import load as load_setns

    load_setns()
    if _MOUNT is None:
        _MOUNT = _ctypes.dlsym(_ctypes.dlopen(None, 0), "mount")  # type: ignore[arg-type]


def _mount(source: bytes | None, target: bytes, flags: int) -> None:
    import _ctypes

    load()
    assert _MOUNT is not None
    if _ctypes.call_function(_MOUNT, (source, target, None, flags, None)) != 0:
        import ctypes  # only to say why (the call above keeps no errno)

        libc = ctypes.CDLL(None, use_errno=True)
        again = libc.mount(source, target, None, ctypes.c_ulong(flags), None)
        reason = os.strerror(ctypes.get_errno()) if again != 0 else "failed once"
        raise OSError(f"{'bind' if source else 'remount'} {os.fsdecode(target)}: {reason}")


def _in_sandbox(mnt: int, owner: int, root: int, binds: Sequence[tuple[str, str]]) -> None:
    """In the forked child: join the sandbox's namespaces and root, then bind."""
    from .netns import _setns

    _setns(owner, CLONE_NEWUSER)
    _setns(mnt, CLONE_NEWNS)
    os.fchdir(root)
    os.chroot(".")
    for source, path in binds:
        target = os.fsencode(path)
        _mount(os.fsencode(source), target, MS_BIND)
        _mount(None, target, remount_flags(os.statvfs(target).f_flag))


class Binder:
    """The helper for one run's late binds: forked as soon as bwrap is started (its
    cost falls in the time bwrap takes to set up), told the sandbox and the binds
    (``request``), it reads the start gate's "ready" itself (bwrap's setup is then
    complete), makes the binds and answers (``wait``); the live caller still gives
    the gate its word. ``close`` lets it go without binding anything, or reaps it
    once it has. It keeps no descriptor of this process but its two pipes and the
    gate's "ready" pipe."""

    def __init__(self, ready: int | None) -> None:
        """``ready``: the read end of the gate's "ready" pipe; None: no helper."""
        self.kid = 0
        self._cmd = self._result = -1
        if ready is None:
            return
        load()
        cmd_r, self._cmd = os.pipe()
        self._result, res_w = os.pipe()
        kid = os.fork()
        if kid == 0:  # pragma: no cover - runs in the forked child
            _child(cmd_r, res_w, ready)
        os.close(cmd_r)
        os.close(res_w)
        self.kid = kid

    def request(self, pid: int, binds: Sequence[tuple[str, str]]) -> None:
        """Each (source, target) of ``binds`` to bind read-only in the mount namespace
        of ``pid`` (the sandbox's init) once the gate says "ready", as the sandbox
        sees them (a source is the target itself or ``/dev/null``)."""
        request = os.fsencode("\0".join([str(pid), *(x for b in binds for x in b)]))
        try:
            view = memoryview(request)
            while view:
                view = view[os.write(self._cmd, view):]
        except OSError:
            pass  # the helper is gone: its (empty) answer says so
        os.close(self._cmd)
        self._cmd = -1

    def wait(self) -> bool:
        """True once the gate said "ready" and every bind is made; False when the gate
        never said it (bwrap failed before the command); ``SandboxStartError`` when a
        bind could not be made (the caller then ends the sandbox before its command
        runs)."""
        msg = os.read(self._result, 512)
        if msg in (b"ok", b"nr"):
            return msg == b"ok"  # the helper is reaped by ``close`` (the run's cleanup)
        while chunk := os.read(self._result, 512):
            msg += chunk
        self.close()
        raise SandboxStartError(
            "cannot make the protected files read-only in the sandbox: "
            + (msg[2:].decode(errors="replace") or "the helper died"))

    def close(self) -> None:
        """End the helper (it binds nothing once its pipe is closed) and reap it."""
        if not self.kid:
            return
        for fd in (self._cmd, self._result):
            if fd >= 0:
                os.close(fd)
        self._cmd = self._result = -1
        os.waitpid(self.kid, 0)
        self.kid = 0


def _child(cmd_r: int, res_w: int, ready: int) -> None:  # pragma: no cover - the child
    """The helper's life: wait for the sandbox's pid and the binds, then for the gate's
    "ready", bind, answer, exit."""
    code = 1
    try:
        keep = sorted({cmd_r, res_w, ready})
        low = 3
        for fd in keep:  # nothing of the run's (its gate's word above all) stays open
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        data = b""
        while chunk := os.read(cmd_r, 65536):
            data += chunk
        if not data:
            os._exit(0)  # let go: nothing to bind
        pid, *flat = os.fsdecode(data).split("\0")
        binds = list(zip(flat[0::2], flat[1::2], strict=True))
        said = b""
        while not said.endswith(b"\n") and len(said) < 64 and (chunk := os.read(ready, 64)):
            said += chunk
        if said != b"ready\n":  # bwrap failed before the command
            os.write(res_w, b"nr")
            os._exit(0)
        if binds:
            import fcntl

            mnt = os.open(f"/proc/{int(pid)}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            owner = fcntl.ioctl(mnt, NS_GET_USERNS)  # not the nested one init is in by now
            root = os.open(f"/proc/{int(pid)}/root",
                           os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            _in_sandbox(mnt, owner, root, binds)
        os.write(res_w, b"ok")
        code = 0
    except BaseException as exc:
        try:
            os.write(res_w, f"er{exc}".encode(errors="replace")[:500])
        except OSError:
            pass
    os._exit(code)
