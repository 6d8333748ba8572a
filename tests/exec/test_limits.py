"""A run cannot exhaust the host: processes, memory and file size are bounded.

Each case runs a real hostile command under ``sandbox exec`` with a limit (set
low, as ``--max-*`` allows) and judges from the host: the command is ended or
its write stopped, the message names the limit and how to raise it, what it
wrote is no larger than the limit, and a second run starts and finishes while
the first one presses on its limit. The defaults hold without any option.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_bwrap

from agent_sandbox.runtime.limits import Limits, parse_size

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
def _groups() -> set[str]:
    """The controllers a run really gets here (a cgroup made and removed again)."""
    probe = Limits()
    probe.prepare()
    try:
        return set(probe.groups)
    finally:
        probe.close()


GROUPS = _groups()


def settings(tmp_path: Path) -> Path:
    """Settings beside the writable root ``w`` (never inside it)."""
    (tmp_path / "w").mkdir(exist_ok=True)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "denyWrite": [], "allowWrite": [str(tmp_path / "w")]}}))
    return path


def sandbox(tmp_path: Path, *args: str, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    opts, cmd = args[:args.index("--")], args[args.index("--") + 1:]
    return subprocess.run([SANDBOX, "exec", "--settings", str(settings(tmp_path)), *opts,
                           "--", *cmd], cwd=tmp_path / "w", capture_output=True, text=True,
                          timeout=timeout)


def test_a_file_stops_at_its_size_limit(tmp_path: Path) -> None:
    r = sandbox(tmp_path, "--max-file-size", "10M", "--",
                "dd", "if=/dev/zero", "of=big", "bs=1M", "count=10240")
    assert (tmp_path / "w/big").stat().st_size <= 10 << 20
    assert "a file reached the size limit (10 MiB; --max-file-size" in r.stderr, r.stderr


@pytest.mark.skipif("memory" not in GROUPS, reason="no memory cgroup this user may make: "
                    "RLIMIT_DATA holds memory instead (the program sees MemoryError)")
def test_a_memory_hog_is_ended_at_its_limit(tmp_path: Path) -> None:
    r = sandbox(tmp_path, "--max-memory", "64M", "--", sys.executable, "-c",
                "b = bytearray(1 << 30); open('done', 'w')")
    assert not (tmp_path / "w/done").exists()
    assert r.returncode != 0
    assert "reached its memory limit (64 MiB; --max-memory" in r.stderr, r.stderr


@pytest.mark.skipif("pids" not in GROUPS and os.geteuid() == 0,
                    reason="no pids cgroup, and the kernel does not apply RLIMIT_NPROC to root: "
                           "a fork bomb here would not be bounded")
def test_a_fork_bomb_is_bounded_and_the_host_stays_usable(tmp_path: Path) -> None:
    (tmp_path / "bomb").mkdir()
    proc = subprocess.Popen([SANDBOX, "exec", "--settings", str(settings(tmp_path / "bomb")),
                             "--max-processes", "64", "--timeout", "8", "--",
                             "bash", "-c", "b() { b | b & }; b; sleep 8"],
                            cwd=tmp_path / "bomb/w", stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)  # pressing on its limit by now
        started = time.monotonic()
        second = sandbox(tmp_path, "--", "echo", "second")
        assert second.returncode == 0 and second.stdout == "second\n", second.stderr
        assert time.monotonic() - started < 30
    finally:
        _, err = proc.communicate(timeout=120)
    assert "reached its process limit (64; --max-processes" in err, err


def test_the_defaults_hold_without_options(tmp_path: Path) -> None:
    r = sandbox(tmp_path, "--", "sh", "-c", "ulimit -f")
    assert r.stdout.strip() == str(16 << 30 >> 9), r.stdout  # 512-byte blocks


@pytest.mark.parametrize(("opt", "value"), [("--max-memory", "12X"), ("--max-file-size", "0"),
                                           ("--max-processes", "-1"), ("--max-memory", "")])
def test_a_bad_limit_is_a_usage_error_and_nothing_runs(tmp_path: Path, opt: str,
                                                      value: str) -> None:
    r = sandbox(tmp_path, opt, value, "--", "touch", "ran")
    assert r.returncode == 2 and opt in r.stderr, r.stderr
    assert not (tmp_path / "w/ran").exists()


def test_sizes_read_as_people_write_them() -> None:
    assert parse_size("512M") == 512 << 20
    assert parse_size("8G") == 8 << 30
    assert parse_size("8GiB") == 8 << 30
    assert parse_size("1048576") == 1 << 20
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_a_file_grown_by_truncate_and_mmap_holds_the_limit(tmp_path: Path) -> None:
    """``truncate(2)`` by path is made by the broker, outside the command's rlimit:
    it holds the run's limit itself (then ``mmap`` has nothing past it to write)."""
    script = ("import os, mmap\nos.close(os.open('big', os.O_CREAT | os.O_RDWR))\n"
              "try:\n    os.truncate('big', 50 << 20)\nexcept OSError as e:\n"
              "    print('refused', e.errno)\n"
              "size = os.path.getsize('big')\nif size:\n"
              "    m = mmap.mmap(os.open('big', os.O_RDWR), size)\n    m[:] = b'A' * size\n")
    r = sandbox(tmp_path, "--max-file-size", "5M", "--", sys.executable, "-c", script)
    assert "refused 27" in r.stdout, r.stdout + r.stderr  # EFBIG
    assert (tmp_path / "w/big").stat().st_size <= 5 << 20


@pytest.mark.skipif(not GROUPS, reason="no cgroup this user may make here")
def test_the_command_is_born_in_the_runs_group_and_the_launcher_goes_home(
        tmp_path: Path) -> None:
    """The launcher carries the group (``Limits.carry``): the sandboxed command's
    host-side cgroup is the run's, seen from outside while it runs, and the
    launcher's own cgroup is what it was before, once the run is over."""
    from agent_sandbox.runtime.run import run_sandboxed

    before = Path("/proc/self/cgroup").read_text()
    seen: dict[str, str] = {}
    duration = f"29.{os.getpid()}{time.monotonic_ns() % 100000}"  # this test's own sleep
    wanted = b"sleep\x00" + duration.encode() + b"\x00"

    def watch() -> None:  # from the host: the command's cgroup while it sleeps
        for _ in range(500):
            pids = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
            for p in pids:
                try:
                    if (p / "cmdline").read_bytes() == wanted:
                        seen["cgroup"] = (p / "cgroup").read_text()
                        # the launcher (this process) already out of the run's groups
                        seen["launcher"] = Path("/proc/self/cgroup").read_text()
                        os.kill(int(p.name), 9)
                        return
                except OSError:
                    continue
            time.sleep(0.02)

    import threading

    t = threading.Thread(target=watch)
    t.start()
    run_sandboxed(["sleep", duration], str(settings(tmp_path)), cwd=str(tmp_path / "w"),
                  capture=True, timeout=60)
    t.join()
    lines = seen["cgroup"].splitlines()
    v1 = [line for line in lines if any(c in line.split(":")[1].split(",") for c in GROUPS)]
    groups = v1 or [line for line in lines if line.startswith("0::")]  # v2: one hierarchy
    assert groups and all("/agent-sandbox-" in line for line in groups), seen["cgroup"]
    assert seen["launcher"] == before  # while the command ran
    assert Path("/proc/self/cgroup").read_text() == before
    # and the run's groups are gone
    for line in groups:
        name = line.split(":", 2)[2].rsplit("/", 1)[1]
        assert not any(Path("/sys/fs/cgroup").rglob(name)), name


@pytest.mark.skipif(not GROUPS, reason="no cgroup this user may make here")
def test_a_start_that_fails_first_leaves_no_group(tmp_path: Path) -> None:
    """``sandbox exec`` makes the run's group before it reads the settings
    (``limits.start_early``): settings it then refuses leave no group behind."""
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = subprocess.Popen([SANDBOX, "exec", "--settings", str(bad), "--", "true"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 125, err
    prefix = f"agent-sandbox-{p.pid}-"
    left = [str(g) for root in ("/sys/fs/cgroup",) for g in Path(root).rglob(prefix + "*")]
    assert left == []


HOLDER = """
import os, socket, time
host, port = os.environ["HTTP_PROXY"].rsplit("/", 1)[-1].rsplit(":", 1)
held, closed = [], 0
for _ in range(600):
    s = socket.create_connection((host, int(port)))
    held.append(s)
time.sleep(1)
for s in held:  # over the bound: closed by the proxy at once
    s.setblocking(False)
    try:
        closed += s.recv(1) == b""
    except BlockingIOError:
        pass
print("closed", closed, flush=True)
open("held", "w").close()
time.sleep(3)
"""


def test_idle_proxy_connections_are_bounded_and_the_launcher_stays_small(
        tmp_path: Path) -> None:
    """A command opens 600 idle connections to its proxy and holds them: the
    launcher, outside the run's process limit, serves 256 at once (each holds a
    thread) and closes the rest; its threads stay bounded while they are held."""
    from agent_sandbox.runtime.proxy.relay import MAX_CONNECTIONS

    proc = subprocess.Popen([SANDBOX, "exec", "--settings", str(settings(tmp_path)), "--",
                             sys.executable, "-c", HOLDER], cwd=tmp_path / "w",
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break
        most = max(most, int(status.split("Threads:")[1].split()[0]))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=60)
    assert "closed" in out, err
    assert int(out.split()[1]) >= 600 - MAX_CONNECTIONS - 8, out
    assert most <= 2 * MAX_CONNECTIONS + 32, most


FLOOD = """
import os
for i in range(3000):
    try:
        open(".envrc\\\\nsandbox: all clear" if i == 0 else ".envrc", "w")
    except OSError:
        pass
    try:
        os.mkdir(".envrc")
    except OSError:
        pass
"""


def test_a_flood_of_refused_calls_is_said_in_bounded_lines(tmp_path: Path) -> None:
    """A command refused 6,000 times in a loop: the first refusals are said one a
    line, the rest counted in one line, and a name with a line break in it forges
    no line of the sandbox's own."""
    from agent_sandbox.runtime.bwrap.run import REFUSALS_SAID

    r = sandbox(tmp_path, "--", sys.executable, "-c", FLOOD.replace("\\\\n", "\\n"))
    said = [line for line in r.stderr.splitlines() if line.startswith("sandbox:")]
    assert len(said) <= REFUSALS_SAID + 2, said[-3:]
    assert any(line.endswith("are said above)") and "more calls" in line for line in said), \
        said[-3:]
    assert not any(line.startswith("sandbox: all clear") for line in said)
