"""Unix sockets allowed by path: only the listed sockets are reachable.

A host daemon listens on a socket in places a sandbox can see (a home folder, a
service's state folder below /var/lib, a writable root, a folder reached through
a symlink); the sandboxed command, with ``allowUnixSockets`` naming another
socket, tries to connect. Judged from the host: the daemon's listening socket
is non-blocking, and ``accept()`` after the run says whether a connection came.
Each case has its control: the same run with the daemon's socket listed does
reach it, so no case passes because its judge cannot see a connection. The
two-step cases prepare a link in one run (a symlink, or a hard link made in a
run where unix sockets are refused) and connect through it in the next.

Every ``connect()`` is judged when it is made (``brokered_connect``), by where
the socket file really is, so the cases also cover what no list made before the
run could know: a socket bound after the start, one bound through ``/proc``, a
real container's, and a command that changes the address while it is judged.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PY, needs_bwrap, write_settings

from agent_sandbox.runtime.run import run_sandboxed

pytestmark = [needs_bwrap]

CONNECT = ("import socket, sys\n"
           "s = socket.socket(socket.AF_UNIX)\n"
           "try:\n"
           "    s.connect(sys.argv[1]); s.sendall(b'hello'); print('connected')\n"
           "except OSError as e:\n"
           "    print('refused', e.errno)\n")


@dataclass
class Place:
    base: Path  # outside every folder hidden for sockets
    home: Path
    work: Path  # the writable root
    settings_dir: Path


@pytest.fixture
def place(monkeypatch: pytest.MonkeyPatch) -> Iterator[Place]:
    parent = "/var/lib" if os.access("/var/lib", os.W_OK) else os.path.expanduser("~")
    base = Path(tempfile.mkdtemp(prefix="asx-", dir=parent))
    p = Place(base, base / "home", base / "w", base / "s")
    for d in (p.home, p.work, p.settings_dir):
        d.mkdir()
    monkeypatch.setenv("HOME", str(p.home))
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(base / "state"))
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(base / "audit"))
    try:
        yield p
    finally:
        shutil.rmtree(base, ignore_errors=True)


class Daemon:
    """A host process's listening socket; ``reached()`` says whether anything connected."""

    def __init__(self, path: Path, bind_as: Path | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(bind_as or path))
        os.chmod(path, 0o777)
        self.sock.listen(8)
        self.sock.setblocking(False)

    def reached(self) -> bool:
        try:
            c, _ = self.sock.accept()
        except BlockingIOError:
            return False
        c.close()
        return True

    def close(self) -> None:
        self.sock.close()


def settings(p: Place, allowed: list[str], name: str | None = None) -> Path:
    return write_settings(p.settings_dir / (name or f"{secrets.token_hex(4)}.json"), {
        "network": {"allowUnixSockets": allowed},
        "filesystem": {"allowWrite": [str(p.work)]}})


def connect(p: Place, s: Path, target: str) -> bytes:
    r = run_sandboxed([PY, "-I", "-c", CONNECT, target], s, p.work, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


# where the daemon listens: (name, socket path relative to the base, bound as)
PLACES = {
    "home-folder": ("home/.cache/app/d.sock", None),
    "var-lib-like": ("srv/lib/svc/d.sock", None),
    "writable-root": ("w/run/d.sock", None),
    "symlinked-folder": ("real/d.sock", "linked/d.sock"),  # bound through the link
}


def daemon_at(p: Place, where: str) -> tuple[Daemon, list[str]]:
    """The daemon, and the paths a command would connect to."""
    rel, via = PLACES[where]
    path = p.base / rel
    if via:
        path.parent.mkdir(parents=True)
        (p.base / via).parent.symlink_to(path.parent)
        d = Daemon(path, bind_as=p.base / via)
        return d, [str(p.base / via), str(path)]
    d = Daemon(path)
    return d, [str(path)]


@pytest.mark.parametrize("where", PLACES)
def test_unlisted_socket_is_unreachable(place: Place, where: str) -> None:
    other = Daemon(place.base / "ok" / "other.sock")
    daemon, targets = daemon_at(place, where)
    try:
        s = settings(place, [str(other.path)])
        for target in targets:
            out = connect(place, s, target)
            assert not daemon.reached(), f"{where}: {target} reached ({out!r})"
            assert b"refused" in out
        # the listed socket is reachable in the same mode (the sandbox is not simply
        # refusing every unix socket)
        assert b"connected" in connect(place, s, str(other.path))
        assert other.reached()
    finally:
        daemon.close()
        other.close()


@pytest.mark.parametrize("where", PLACES)
def test_control_listed_socket_is_reachable(place: Place, where: str) -> None:
    """The judge fires: with the daemon's own socket listed, the command reaches it
    (a socket in a writable root is the exception: srt's rule drops an entry the
    command could replace, so there the control is an unsandboxed connect)."""
    daemon, targets = daemon_at(place, where)
    try:
        if where == "writable-root":
            c = socket.socket(socket.AF_UNIX)
            c.connect(targets[0])
            c.close()
        else:
            out = connect(place, settings(place, [str(daemon.path)]), targets[0])
            assert b"connected" in out, out
        assert daemon.reached()
    finally:
        daemon.close()


def test_two_step_symlink_to_the_socket(place: Place) -> None:
    """Run 1 leaves a symlink to the daemon's socket in the writable root; run 2
    connects through it, and through a link to the folder."""
    other = Daemon(place.base / "ok" / "other.sock")
    daemon, (target,) = daemon_at(place, "home-folder")
    try:
        s = settings(place, [str(other.path)])
        r = run_sandboxed(["sh", "-c", f"ln -s {target} l.sock && ln -s "
                           f"{os.path.dirname(target)} ldir"], s, place.work, timeout=60)
        assert r.returncode == 0, r.stderr
        for via in ("l.sock", "ldir/d.sock"):
            out = connect(place, s, str(place.work / via))
            assert not daemon.reached(), f"reached through {via}: {out!r}"
        # control: the same links, unsandboxed, lead to the daemon
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(place.work / "l.sock"))
        c.close()
        assert daemon.reached()
    finally:
        daemon.close()
        other.close()


@pytest.mark.parametrize("where", [".", "x/y/.git", ".git/objects/ab", "a/.git/b/.git"])
def test_two_step_hard_link_made_while_sockets_were_refused(place: Place, where: str) -> None:
    """Run 1, with unix sockets refused (nothing masked: seccomp refuses socket()),
    hard-links a daemon's socket that lies in the writable root to another name
    there (a link across mounts fails: EXDEV), also inside a ``.git`` folder (whose
    insides the planner's walks leave to ``gitmeta``, and which the sweep keeps when
    it holds no HEAD); run 2, with sockets allowed by path, connects to the new name."""
    other = Daemon(place.base / "ok" / "other.sock")
    daemon, (target,) = daemon_at(place, "writable-root")
    try:
        plain = write_settings(place.settings_dir / "plain.json",
                               {"filesystem": {"allowWrite": [str(place.work)]}})
        r = run_sandboxed(["sh", "-c", f"mkdir -p {where} && ln {target} {where}/h.sock; "
                                       f"ln {other.path} o.sock; true"],
                          plain, place.work, timeout=60)
        assert r.returncode == 0, r.stderr
        hidden = place.work / where / "h.sock"
        assert hidden.is_socket()
        assert not (place.work / "o.sock").exists()  # EXDEV: another mount
        out = connect(place, settings(place, [str(other.path)]), str(hidden))
        assert not daemon.reached(), out
        c = socket.socket(socket.AF_UNIX)  # control: the link leads to the daemon
        c.connect(str(hidden))
        c.close()
        assert daemon.reached()
    finally:
        daemon.close()
        other.close()


def test_two_step_listed_path_replaced_by_a_link(place: Place) -> None:
    """A listed path inside a writable root is dropped (srt's rule), even when run 1
    makes it a symlink to a socket outside every writable root."""
    daemon, (target,) = daemon_at(place, "home-folder")
    try:
        listed = str(place.work / "api.sock")
        s = settings(place, [listed])
        r = run_sandboxed(["ln", "-s", target, "api.sock"], s, place.work, timeout=60)
        assert r.returncode == 0, r.stderr
        out = connect(place, s, listed)
        assert not daemon.reached(), out
    finally:
        daemon.close()


OTHER_WAYS = r"""
import ctypes, socket, sys
stream, dgram = sys.argv[1], sys.argv[2]
def attempt(name, f):
    try:
        f()
        print(name, "done")
    except OSError as e:
        print(name, "refused", e.errno)
def plain():
    socket.socket(socket.AF_UNIX).connect(stream)
def sendto_stream():  # an address on an unconnected stream socket
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).sendto(b"x", stream)
def sendmsg_stream():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).sendmsg([b"x"], [], 0, stream)
def seqpacket():
    socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).connect(stream)
def datagram():
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", dgram)
def pair_datagram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"x", dgram)
def pair_stream_sendto():  # a connected pair ignores no address: EISCONN
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.sendto(b"x", stream)
def vsock():
    socket.socket(40, socket.SOCK_STREAM).connect((2, 1024))
def io_uring():
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)
    if libc.syscall(425, 8, params) < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
    print("io_uring_setup succeeded")
for name, f in list(globals().items()):
    if callable(f) and name != "attempt" and getattr(f, "__module__", "") == "__main__":
        attempt(name, f)
"""


def test_every_other_way_to_address_a_socket(place: Place) -> None:
    """sendto/sendmsg with an address on a stream socket, seqpacket and datagram
    sockets, a datagram socketpair, AF_VSOCK and io_uring reach neither a stream
    nor a datagram daemon in the home folder."""
    other = Daemon(place.base / "ok" / "other.sock")
    stream, _ = daemon_at(place, "home-folder")
    dpath = place.home / ".cache" / "app" / "g.sock"
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(str(dpath))
    os.chmod(dpath, 0o777)
    dgram.setblocking(False)

    def dgram_reached() -> bool:
        try:
            dgram.recv(64)
            return True
        except BlockingIOError:
            return False

    try:
        r = run_sandboxed([PY, "-I", "-c", OTHER_WAYS, str(stream.path), str(dpath)],
                          settings(place, [str(other.path)]), place.work, timeout=60)
        assert b"succeeded" not in r.stdout + r.stderr and b"plain refused" in r.stdout
        assert not stream.reached() and not dgram_reached(), r.stdout
        for name in (b"seqpacket", b"datagram", b"pair_datagram", b"vsock", b"io_uring"):
            assert name + b" refused" in r.stdout, r.stdout
        # the control: unsandboxed, the same script reaches both daemons
        import subprocess

        subprocess.run([PY, "-I", "-c", OTHER_WAYS, str(stream.path), str(dpath)],
                       capture_output=True, timeout=60, check=False)
        assert stream.reached() and dgram_reached()
    finally:
        stream.close()
        dgram.close()
        other.close()


def test_a_socket_bound_after_the_start_is_judged_when_reached(place: Place) -> None:
    """Sockets bound while the command runs: the listed one (its daemon started late)
    is reached, an unlisted one beside it is not, and one removed and bound again
    at a listed path is reached again (nothing was decided before the run)."""
    import subprocess
    import time

    listed, unlisted = place.base / "late" / "api.sock", place.base / "late" / "other.sock"
    script = (f"while [ ! -e {place.work}/go ]; do sleep 0.05; done; "
              f"for s in {listed} {unlisted} {listed}; do {PY} -I -c \"$CONNECT\" $s; "
              f"[ -e {place.work}/again ] || touch {place.work}/first-done; "
              f"while [ ! -e {place.work}/again ]; do sleep 0.05; done; done")
    proc = subprocess.Popen(
        [str(Path(PY).parent / "sandbox"), "exec", "--settings",
         str(settings(place, [str(listed)])), "--", "sh", "-c", script],
        cwd=place.work, env={**os.environ, "CONNECT": CONNECT}, stdout=subprocess.PIPE)
    daemons: list[Daemon] = []
    try:
        time.sleep(0.5)
        daemons = [Daemon(listed), Daemon(unlisted)]
        (place.work / "go").touch()
        for _ in range(400):
            if (place.work / "first-done").exists():
                break
            time.sleep(0.05)
        first = daemons[0].reached()
        daemons[0].close()
        os.unlink(listed)
        daemons[0] = Daemon(listed)  # bound again, a new socket at the same path
        (place.work / "again").touch()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        assert first and daemons[0].reached(), out
        assert not daemons[1].reached(), out
        assert out.count(b"connected") == 2 and out.count(b"refused") == 1, out
    finally:
        proc.kill()
        for d in daemons:
            d.close()


FLIPPER = r"""
import ctypes, os, socket, sys, threading
listed, unlisted = sys.argv[1].encode(), sys.argv[2].encode()
size = 2 + max(len(listed), len(unlisted)) + 1
buf = ctypes.create_string_buffer(size)
def put(path):
    ctypes.memmove(buf, socket.AF_UNIX.to_bytes(2, sys.byteorder) + path + b"\0", len(path) + 3)
put(listed)
stop = False
def flip():
    while not stop:
        put(unlisted)
        put(listed)
threading.Thread(target=flip, daemon=True).start()
libc = ctypes.CDLL(None, use_errno=True)
ok = 0
for _ in range(300):
    s = socket.socket(socket.AF_UNIX)
    if libc.connect(s.fileno(), buf, size) == 0:
        ok += 1
    s.close()
stop = True
print("connected", ok)
"""


def test_an_address_changed_while_it_is_judged_never_reaches_another_socket(
        place: Place) -> None:
    """A second thread rewrites the address between the listed socket and an
    unlisted one, without pause, while the first connects 300 times: what was
    judged is what was connected, so the unlisted daemon is never reached (judged
    from the host) while the listed one is, many times (the control)."""
    listed = Daemon(place.base / "ok" / "api.sock")
    other = Daemon(place.base / "secret" / "d.sock")
    listed.sock.listen(512)
    other.sock.listen(512)
    try:
        r = run_sandboxed([PY, "-I", "-c", FLIPPER, str(listed.path), str(other.path)],
                          settings(place, [str(listed.path)]), place.work, timeout=120)
        assert r.returncode == 0, r.stderr
        assert not other.reached(), r.stdout
        assert listed.reached() and int(r.stdout.split()[-1]) > 0, r.stdout
    finally:
        listed.close()
        other.close()


def test_relative_and_abstract_addresses(place: Place) -> None:
    """A relative path is resolved from the command's working folder, as the kernel
    would; an abstract address reaches only the sandbox's own namespace."""
    daemon = Daemon(place.base / "ok" / "api.sock")
    script = ("import os, socket, sys\n"
              "os.chdir(sys.argv[1])\n"
              "s = socket.socket(socket.AF_UNIX); s.connect('api.sock'); print('relative ok')\n"
              "srv = socket.socket(socket.AF_UNIX); srv.bind(b'\\0asx-abstract'); srv.listen(1)\n"
              "c = socket.socket(socket.AF_UNIX); c.connect(b'\\0asx-abstract')\n"
              "print('abstract ok')\n")
    s = write_settings(place.settings_dir / "rel.json", {
        "network": {"allowUnixSockets": [str(daemon.path)], "allowLocalBinding": True},
        "filesystem": {"allowWrite": [str(place.work)]}})
    try:
        r = run_sandboxed([PY, "-I", "-c", script, str(daemon.path.parent)], s, place.work,
                          timeout=60)
        assert r.returncode == 0 and b"relative ok" in r.stdout, r.stderr
        assert b"abstract ok" in r.stdout, r.stderr
        assert daemon.reached()
    finally:
        daemon.close()


CONTAINER_SERVER = r"""
import os, socket, sys
path, hits = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
print("ready", flush=True)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(os.path.join(hits, f"hit-{n}"), "w").close()
    c.recv(64)  # the hello first: closed before it, the send of the client fails (EPIPE)
    c.close()
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare to make a container's namespaces")
@pytest.mark.parametrize("listed", [False, True], ids=["unlisted", "listed-control"])
def test_container_socket_in_a_folder_bound_into_it(place: Place, listed: bool) -> None:
    """A daemon in its own mount and network namespace (a container) binds its socket
    in a folder the host bound into it: the kernel lists the name as the container
    sees it; the host shows the socket elsewhere, where the sandbox could reach it."""
    import subprocess

    shared, inside, hits = place.base / "shared", place.base / "inside", place.base / "hits"
    for d in (shared, inside, hits):
        d.mkdir()
    script = (f"mount --bind {shared} {inside} && exec {PY} -I -c '{CONTAINER_SERVER}' "
              f"{inside}/c.sock {hits}")
    container = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private",
                                  "sh", "-c", script], stdout=subprocess.PIPE)
    other = Daemon(place.base / "ok" / "other.sock")
    try:
        assert container.stdout is not None and container.stdout.readline() == b"ready\n"
        host_path = str(shared / "c.sock")
        assert not (inside / "c.sock").exists() and os.path.exists(host_path)
        allowed = [str(other.path), host_path] if listed else [str(other.path)]
        out = connect(place, settings(place, allowed), host_path)
        reached = any(hits.iterdir())
        assert reached == listed, out
    finally:
        container.kill()
        container.wait()
        other.close()


def test_a_listed_folder_is_not_writable(place: Place) -> None:
    """allowUnixSockets naming a folder outside the writable roots: its sockets are
    reachable, and nothing can be written there (it is no writable root)."""
    folder = place.base / "sockets"
    daemon = Daemon(folder / "api.sock")
    try:
        s = settings(place, [str(folder)])
        r = run_sandboxed(["sh", "-c", f"echo x > {folder}/planted; rm -f {folder}/api.sock; "
                           f"mv {folder}/api.sock {folder}/moved; true"], s, place.work,
                          timeout=60)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(folder)) == ["api.sock"]
        assert b"connected" in connect(place, s, str(folder / "api.sock"))
        assert daemon.reached()
    finally:
        daemon.close()


def test_sockets_of_a_folder_bound_before_and_during_the_run_are_refused(place: Place) -> None:
    """A folder that holds only sockets (outside the writable roots) is hidden as a
    whole: none of them is reachable, nor one bound there after the sandbox started;
    the listed socket elsewhere still is."""
    other = Daemon(place.base / "ok" / "other.sock")
    folder = place.base / "srv" / "many"
    daemons = [Daemon(folder / f"s{i}.sock") for i in range(3)]
    late_path = folder / "late.sock"
    script = (f"while [ ! -e {place.work}/go ]; do sleep 0.05; done; "
              f"for s in {folder}/s0.sock {folder}/s2.sock {late_path}; do "
              f"{PY} -I -c \"$CONNECT\" $s; done")
    import subprocess

    proc = subprocess.Popen(
        [str(Path(PY).parent / "sandbox"), "exec", "--settings",
         str(settings(place, [str(other.path)])), "--", "sh", "-c", script],
        cwd=place.work, env={**os.environ, "CONNECT": CONNECT}, stdout=subprocess.PIPE)
    late = None
    try:
        import time

        time.sleep(1.0)  # the sandbox is up (or about to be); bind one more now
        late = Daemon(late_path)
        (place.work / "go").touch()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and out.count(b"refused") == 3, out
        assert not any(d.reached() for d in [*daemons, late])
    finally:
        proc.kill()
        for d in [*daemons, other, *([late] if late else [])]:
            d.close()


# conmon's way: bind through /proc/self/fd/N/NAME, close N, keep other files of that
# folder open (its control fifo, its log), and listen
PROC_FD_SERVER = r"""
import os, socket, sys
folder, hits = sys.argv[1], sys.argv[2]
fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
s = socket.socket(socket.AF_UNIX)
s.bind(f"/proc/self/fd/{fd}/attach")
os.close(fd)
kept = open(os.path.join(folder, "ctl"), "w")
s.listen(8)
print("ready", flush=True)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(os.path.join(hits, f"hit-{n}"), "w").close()
    c.recv(64)  # the hello first: closed before it, the send of the client fails (EPIPE)
    c.close()
"""


@pytest.mark.parametrize("listed", [False, True], ids=["unlisted", "listed-control"])
def test_a_socket_bound_through_proc_fd_is_found_where_its_holder_keeps_files(
        place: Place, listed: bool) -> None:
    """The kernel names such a socket ``/proc/self/fd/N/attach``, a name that leads
    nowhere: the run starts, and the socket is judged where its file is (reachable
    only when listed)."""
    import subprocess

    folder, hits = place.base / "userdata", place.base / "hits"
    folder.mkdir()
    hits.mkdir()
    holder = subprocess.Popen([PY, "-I", "-c", PROC_FD_SERVER, str(folder), str(hits)],
                              stdout=subprocess.PIPE)
    other = Daemon(place.base / "ok" / "other.sock")
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        real = str(folder / "attach")
        allowed = [str(other.path), real] if listed else [str(other.path)]
        out = connect(place, settings(place, allowed), real)
        assert any(hits.iterdir()) == listed, out
        assert (b"connected" in out) == listed
    finally:
        holder.kill()
        holder.wait()
        other.close()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("podman") is None,
                    reason="needs root and podman")
def test_a_running_containers_conmon_socket_no_longer_refuses_runs(
        place: Place, gvisor_image: str) -> None:
    """A real container under runc: conmon binds its attach socket through /proc; a
    run that allows sockets by path starts, and that socket is refused."""
    import subprocess

    env = {**os.environ, "CONTAINERS_CONF": str(Path(__file__).resolve().parents[2]
                                               / "containers.conf")}
    name = f"asx-conmon-{secrets.token_hex(4)}"
    subprocess.run(["podman", "run", "-d", "--name", name, "--runtime", "runc", "--network",
                    "none", gvisor_image, "sleep", "120"], env=env, check=True,
                   capture_output=True, timeout=120)
    other = Daemon(place.base / "ok" / "other.sock")
    try:
        userdata = subprocess.run(["podman", "inspect", "--format", "{{.StaticDir}}", name],
                                  env=env, check=True, capture_output=True, text=True,
                                  timeout=60).stdout.strip()
        attach = os.path.realpath(os.path.join(userdata, "attach"))
        assert os.path.exists(attach)
        out = connect(place, settings(place, [str(other.path)]), attach)
        assert b"refused" in out, out
    finally:
        other.close()
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True,
                       timeout=120, check=False)
