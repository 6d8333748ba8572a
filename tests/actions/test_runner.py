"""The one-shot container of an infrastructure action, against real podman and
runsc: each property judged from the host (what a listener on the host
received, what podman still lists, what is left in the broker's folder, the
kernel that answered compared with the host's), with a control where a
property could pass vacuously."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_sandbox.actions import runner
from agent_sandbox.actions.container_options import (
    ContainerOptionsError,
    api_arguments,
    container_options,
)
from agent_sandbox.actions.runner import (
    ActionImageMissing,
    ActionRunnerError,
    run_action_container,
)
from agent_sandbox.actions.secret_files import SecretFilesError, check_env, relative_path
from agent_sandbox.runtime.containers.net import endpoint_ports
from agent_sandbox.runtime.output import BoundedOutput, output_digest
from agent_sandbox.spec.actions import ActionLimits

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"
pytestmark = pytest.mark.slow


# -- pure parts -----------------------------------------------------------------


def test_container_options_are_locked_down() -> None:
    opts = container_options("img", ["psql", "-c", "select 1"], ActionLimits(
        cpus=0.5, memory_mb=64, pids=16), env={"PGHOST": "127.0.0.1"}, labels={"a.b": "c"},
        proxy_env={"HTTP_PROXY": "http://127.0.0.1:3128"})
    assert opts["entrypoint"] == ["psql"] and opts["command"] == ["-c", "select 1"]
    assert opts["user"] == "65534:65534" and opts["read_only"] is True
    assert opts["cap_drop"] == ["ALL"] and opts["security_opt"] == ["no-new-privileges"]
    assert opts["network_mode"] == "none" and "runtime" not in opts
    assert opts["mem_limit"] == opts["memswap_limit"] == "64m"
    assert opts["nano_cpus"] == 500_000_000
    assert {"name": "nproc", "soft": 16, "hard": 16} in opts["ulimits"]
    assert opts["working_dir"] == "/work" and "/work" in opts["tmpfs"]
    assert opts["environment"]["HTTP_PROXY"] == "http://127.0.0.1:3128"
    for bad in ({"env": {"A=B": "x"}}, {"env": {"A": "x\0"}}, {"labels": {"-x": "y"}}):
        with pytest.raises(ContainerOptionsError):
            container_options("img", ["true"], ActionLimits(), **{"env": {}, "labels": {},
                                                                  **bad})
    with pytest.raises(ContainerOptionsError):
        container_options("img", [], ActionLimits(), env={}, labels={})


def test_api_arguments_place_every_option() -> None:
    opts = container_options("img", ["psql", "-c", "select 1"], ActionLimits(memory_mb=64),
                             env={}, labels={"a.b": "c"},
                             mounts=[{"Type": "bind", "Source": "/s", "Target": "/t"}])
    create, host = api_arguments(opts)
    assert create["image"] == "img" and create["entrypoint"] == ["psql"]
    assert create["command"] == ["-c", "select 1"] and create["user"] == "65534:65534"
    assert create["use_config_proxy"] is False and "runtime" not in create
    assert host["read_only"] is True and host["network_mode"] == "none"
    assert host["mem_limit"] == "64m" and host["mounts"][0]["Target"] == "/t"
    assert set(create) | set(host) | {"detach"} == set(opts) | {"use_config_proxy"}
    with pytest.raises(ContainerOptionsError, match="privileged"):
        api_arguments({**opts, "privileged": True})


def test_secret_file_names_and_environment_checks() -> None:
    assert relative_path("db/password") == "db/password"
    for bad in ("/etc/passwd", "../x", "a/../../b", "a//b", ".", "", "a/\nb"):
        with pytest.raises(SecretFilesError):
            relative_path(bad)
    check_env({"PGPASSFILE": "/run/agent-sandbox/credential/pgpass"},
              {"pgpass": b"h:5432:*:u:pw-0123456789"})
    with pytest.raises(SecretFilesError, match="PGPASSWORD"):
        check_env({"PGPASSWORD": "pw-0123456789"}, {"pgpass": b"pw-0123456789\n"})


def test_endpoint_ports() -> None:
    assert endpoint_ports(["127.0.0.1:5432", "[::1]:6443"], proxy=False) == [
        (5432, "127.0.0.1", 5432), (6443, "::1", 6443)]
    for bad, proxy in ((["db:3128"], True), (["a:5432", "b:5432"], False), (["nope"], False)):
        with pytest.raises(ValueError):
            endpoint_ports(bad, proxy)
    assert endpoint_ports(["db:3128"], proxy=False) == [(3128, "db", 3128)]


def test_bounded_output_digest_covers_everything_produced() -> None:
    out = BoundedOutput(4)
    out.feed(0, b"abcdef")
    out.feed(1, b"xy")
    assert out.stdout == b"abcd" and out.stderr == b"xy" and out.truncated
    assert out.digest() == output_digest(b"abcdef", b"xy") != output_digest(b"abcd", b"xy")


# -- real containers -------------------------------------------------------------


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, gvisor_image: str, tmp_path: Path) -> Path:
    """The project's containers.conf, and a broker folder of the test's own."""
    monkeypatch.setenv("CONTAINERS_CONF", str(REPO / "containers.conf"))
    broker = tmp_path / "broker"
    monkeypatch.setenv("AGENT_SANDBOX_BROKER_DIR", str(broker))
    return broker


def podman_ps(label: str) -> list[str]:
    r = subprocess.run(["podman", "ps", "-a", "-q", "--filter", f"label={label}"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CONTAINERS_CONF=str(REPO / "containers.conf")))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.fixture
def labels(env: Path) -> Iterator[dict[str, str]]:
    """Labels unique to the test; afterwards podman lists no container with them."""
    tag = secrets.token_hex(6)
    yield {"agent-sandbox.test": tag}
    assert podman_ps(f"agent-sandbox.test={tag}") == [], "a container was left behind"


class HostListener:
    """A TCP listener on the host's loopback recording what each connection sent."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    data = conn.recv(1024)
                    conn.sendall(b"pong " + data)
                except OSError:
                    data = b"<error>"
                self.received.append(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listeners() -> Iterator[tuple[HostListener, HostListener]]:
    a, b = HostListener(), HostListener()
    yield a, b
    a.close()
    b.close()


def run(gvisor_image: str, argv: list[str], labels: dict[str, str], **kw: object
        ) -> runner.ActionRun:
    args: dict[str, object] = {"limits": ActionLimits(timeout=60), "files": None, "env": None,
                               "egress": [], "connect": [], "labels": labels, **kw}
    return run_action_container(gvisor_image, argv, **args)  # type: ignore[arg-type]


PROBE = textwrap.dedent("""
    import os, socket, sys
    for port in map(int, sys.argv[1:]):
        try:
            s = socket.create_connection(("127.0.0.1", port), 3)
            s.sendall(b"hello %d" % port)
            print("reached", port, s.recv(100).decode(), flush=True)
        except OSError as e:
            print("refused", port, e.errno, flush=True)
""")


def test_runs_on_gvisor_read_only_and_unprivileged(gvisor_image: str,
                                                   labels: dict[str, str]) -> None:
    m = secrets.token_hex(4)
    script = (f"dmesg > /work/kmsg; head -n 1 /work/kmsg; cat /proc/version; id -u; "
              f"if touch /root-{m} 2>/dev/null; then echo root-writable; fi; "
              f"if touch /etc/x-{m} 2>/dev/null; then echo etc-writable; fi; "
              f"echo {m} > /work/f && cat /work/f; grep CapEff /proc/self/status")
    r = run(gvisor_image, ["sh", "-c", script], labels)
    out = r.stdout.decode()
    assert r.exit_code == 0, (out, r.stderr)
    assert r.runtime == "runsc" and not r.timed_out and len(r.container_id) == 64
    lines = out.splitlines()
    assert "Starting gVisor" in lines[0]
    host_version = Path("/proc/version").read_text().strip()
    assert lines[1] != host_version  # another kernel answered
    assert lines[2] == "65534"
    assert "writable" not in out and m in lines  # / is read-only, the work folder is not
    assert "CapEff:\t0000000000000000" in out
    assert subprocess.run(["podman", "container", "exists", r.container_id],
                          env=dict(os.environ), timeout=60).returncode == 1


def test_no_network_without_egress_or_connect(gvisor_image: str, labels: dict[str, str],
                                              listeners: tuple[HostListener, HostListener]
                                              ) -> None:
    a, _ = listeners
    r = run(gvisor_image, ["python3", "-c", PROBE, str(a.port), "3128", "1080"], labels)
    out = r.stdout.decode()
    assert r.exit_code == 0, r.stderr
    assert out.count("refused") == 3 and "reached" not in out
    assert a.received == []  # judged from the host: nothing arrived
    # the control: the same probe on the host reaches the listener
    host = subprocess.run([sys.executable, "-c", PROBE, str(a.port)], capture_output=True,
                          text=True, timeout=30)
    assert f"reached {a.port}" in host.stdout


def test_connect_endpoint_reaches_its_listener_and_nothing_else(
        gvisor_image: str, labels: dict[str, str],
        listeners: tuple[HostListener, HostListener]) -> None:
    a, b = listeners
    r = run(gvisor_image, ["python3", "-c", PROBE, str(a.port), str(b.port), "3128"], labels,
            connect=[f"127.0.0.1:{a.port}"])
    out = r.stdout.decode()
    assert r.exit_code == 0, r.stderr
    assert f"reached {a.port} pong hello {a.port}" in out
    assert f"refused {b.port}" in out and "refused 3128" in out
    assert a.received == [f"hello {a.port}".encode()] and b.received == []


def test_egress_goes_only_through_the_proxy_to_the_actions_domains(
        gvisor_image: str, labels: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_sandbox.hostcheck.netlab import upstream_network

    if os.geteuid() != 0:
        pytest.skip("needs root to create a network namespace")
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "audit"))
    m = secrets.token_hex(4)
    client = textwrap.dedent(f"""
        import socket, sys, urllib.error, urllib.request
        for name in ("up.action.test", "other.action.test"):
            try:
                body = urllib.request.urlopen(f"http://{{name}}:8080/{m}", timeout=10).read()
                print("got", name, body.decode())
            except urllib.error.HTTPError as e:
                print("refused", name, e.code, e.headers.get("X-Proxy-Error"))
        try:
            socket.create_connection((sys.argv[1], 8080), 3)
            print("raw reached")
        except OSError as e:
            print("raw refused", e.errno)
    """)
    with upstream_network(str(tmp_path), sys.executable,
                          ["up.action.test", "other.action.test"]) as up:
        monkeypatch.setenv("AGENT_SANDBOX_HOSTS", up.hosts)
        r = run(gvisor_image, ["python3", "-c", client, up.ip], labels,
                egress=["up.action.test"])
        seen = up.requests()
    out = r.stdout.decode()
    assert r.exit_code == 0, (out, r.stderr)
    assert f"got up.action.test upstream-ok /{m}" in out
    assert "refused other.action.test 403 blocked-by-allowlist" in out
    assert "raw refused" in out
    assert seen.splitlines() == [f"up.action.test:8080 /{m}"]


def test_credential_file_is_mounted_for_that_container_only(
        gvisor_image: str, labels: dict[str, str], env: Path) -> None:
    secret = f"pw-{secrets.token_hex(16)}"
    path = "/run/agent-sandbox/credential/db/password"
    probe = textwrap.dedent(f"""
        import os
        st = os.stat("{path}")
        print("owner", st.st_uid, oct(st.st_mode & 0o777))
        print("content", open("{path}").read())
        print("env", sorted(os.environ.items()))
        try:
            open("{path}", "a").write("x")
            print("file-writable")
        except OSError as e:
            print("write refused", e.errno)
    """)
    r = run(gvisor_image, ["python3", "-c", probe], labels, files={"db/password":
            secret.encode()}, env={"PGPASSFILE": path})
    out = r.stdout.decode()
    assert r.exit_code == 0, (out, r.stderr)
    assert "owner 65534 0o400" in out and f"content {secret}" in out
    env_line = next(ln for ln in out.splitlines() if ln.startswith("env "))
    assert secret not in env_line and path in env_line
    assert "file-writable" not in out
    mounts = env / "mounts"
    assert mounts.is_dir() and list(mounts.iterdir()) == []  # gone from the host
    assert (mounts.stat().st_mode & 0o777) == 0o700
    # the next container does not see it
    r2 = run(gvisor_image, ["sh", "-c", f"cat {path} || echo absent"], labels)
    assert b"absent" in r2.stdout and secret.encode() not in r2.stdout + r2.stderr


def test_secret_in_the_environment_is_refused_before_anything_runs(
        gvisor_image: str, labels: dict[str, str]) -> None:
    secret = f"pw-{secrets.token_hex(8)}"
    with pytest.raises(ActionRunnerError, match="never in the environment"):
        run(gvisor_image, ["true"], labels, files={"pw": secret.encode()},
            env={"PGPASSWORD": secret})


def test_deadline_kills_and_removes(gvisor_image: str, labels: dict[str, str]) -> None:
    r = run(gvisor_image, ["sleep", "600"], labels, limits=ActionLimits(timeout=3))
    assert r.timed_out and r.exit_code is None
    assert 3 <= r.duration < 15
    assert podman_ps(f"agent-sandbox.test={labels['agent-sandbox.test']}") == []


def test_output_beyond_the_limit_is_cut_and_flagged(gvisor_image: str,
                                                   labels: dict[str, str]) -> None:
    code = "import sys; sys.stdout.write('a' * 300000); sys.stderr.write('e' * 10)"
    r = run(gvisor_image, ["python3", "-c", code], labels,
            limits=ActionLimits(output_bytes=4096, timeout=60))
    assert r.exit_code == 0 and r.truncated
    assert r.stdout == b"a" * 4096 and r.stderr == b"e" * 10
    assert r.output_digest == output_digest(b"a" * 300000, b"e" * 10)
    small = run(gvisor_image, ["echo", "hi"], labels)
    assert not small.truncated and small.output_digest == output_digest(b"hi\n", b"")


FORKS = textwrap.dedent("""
    import os, time
    n = 0
    try:
        for _ in range(2000):
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            n += 1
    except OSError as e:
        print("fork refused", e.errno)
    print("forked", n, flush=True)
""")


def test_process_and_memory_limits_hold(gvisor_image: str, labels: dict[str, str]) -> None:
    r = run(gvisor_image, ["python3", "-c", FORKS], labels,
            limits=ActionLimits(pids=32, timeout=60))
    out = r.stdout.decode()
    assert "fork refused 11" in out, (out, r.stderr)  # EAGAIN
    forked = int(out.split("forked ")[1])
    assert 0 < forked < 32
    hog = ("b = []\nwhile True:\n    b.append(bytearray(16 << 20))\n"
           "    print(len(b) * 16, flush=True)")
    r = run(gvisor_image, ["python3", "-c", hog], labels,
            limits=ActionLimits(memory_mb=96, timeout=60))
    assert not r.timed_out and r.exit_code not in (0, None)
    reached = int(r.stdout.split()[-1]) if r.stdout.split() else 0
    assert reached <= 96, r.stdout[-200:]
    # the control: a larger limit lets the same program get further
    r2 = run(gvisor_image, ["python3", "-c", hog.replace("while True", "for _ in range(12)")],
             labels, limits=ActionLimits(memory_mb=512, timeout=60))
    assert r2.exit_code == 0 and int(r2.stdout.split()[-1]) == 192


def test_a_shell_fork_bomb_is_contained(gvisor_image: str, labels: dict[str, str]) -> None:
    r = run(gvisor_image, ["sh", "-c", "b() { b | b & }; b; sleep 5; echo survived"], labels,
            limits=ActionLimits(pids=64, timeout=20))
    assert not r.timed_out and b"Cannot fork" in r.stderr  # the limit was hit, and held
    assert podman_ps(f"agent-sandbox.test={labels['agent-sandbox.test']}") == []
    probe = run(gvisor_image, ["echo", "host fine"], labels)  # the host still starts more
    assert probe.stdout == b"host fine\n"


def test_missing_image_and_missing_api_are_errors(gvisor_image: str, labels: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    with pytest.raises(ActionImageMissing, match="not on this host"):
        run(f"localhost/no-such-image-{secrets.token_hex(4)}:x", ["true"], labels)

    class Gone:
        url = f"unix://{tmp_path}/no-podman.sock"

    from agent_sandbox.runtime.containers import podman

    monkeypatch.setattr(podman, "service", lambda network="none": Gone())
    monkeypatch.setattr(podman, "_API_VERSIONS", {})
    with pytest.raises(ActionRunnerError, match="Docker API"):
        run(gvisor_image, ["true"], labels)


def test_verify_gvisor_passes_here_and_fails_without_runsc(gvisor_image: str,
                                                           tmp_path: Path) -> None:
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "containers.conf"),
               AGENT_SANDBOX_BROKER_DIR=str(tmp_path / "broker"))
    r = subprocess.run([str(SANDBOX), "verify", "--gvisor"], capture_output=True, text=True,
                       env=env, timeout=180)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "PASS  gvisor" in r.stdout and "runsc" in r.stdout
    # the control: without runsc on PATH the same check fails, with the reason
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("podman", "conmon"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        if found:
            (bare / tool).symlink_to(found)
    r = subprocess.run([str(SANDBOX), "verify", "--gvisor"], capture_output=True, text=True,
                       env=dict(env, PATH=str(bare)), timeout=180)
    assert r.returncode == 1 and "FAIL  gvisor" in r.stdout
    assert "runsc (gVisor) is not installed" in r.stdout


def test_a_container_whose_runner_was_killed_is_removed_by_the_next_run(
        gvisor_image: str, labels: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    tag = labels["agent-sandbox.test"]
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "containers.conf"))
    dead = subprocess.Popen(["true"])
    dead.wait()  # a runner that is gone: its pid names no process with that start time
    orphan = subprocess.run(
        ["podman", "create", "--label", f"agent-sandbox.test={tag}", "--label",
         f"{runner.RUNNER_LABEL}={dead.pid}:1", gvisor_image, "sleep", "600"],
        capture_output=True, text=True, env=env, timeout=60)
    assert orphan.returncode == 0, orphan.stderr
    live = subprocess.run(
        ["podman", "create", "--label", f"agent-sandbox.test={tag}", "--label",
         f"{runner.RUNNER_LABEL}={runner._runner_id()}", gvisor_image, "sleep", "600"],
        capture_output=True, text=True, env=env, timeout=60)
    try:
        assert len(podman_ps(f"agent-sandbox.test={tag}")) == 2
        monkeypatch.setattr(runner, "_SWEPT", set())  # as in a new process
        run(gvisor_image, ["true"], labels)
        left = podman_ps(f"agent-sandbox.test={tag}")
        assert len(left) == 1 and live.stdout.strip().startswith(left[0])  # only the live one
    finally:
        subprocess.run(["podman", "rm", "-f", live.stdout.strip()], capture_output=True,
                       env=env, timeout=60)


def test_a_containers_conf_planted_by_a_sandbox_never_configures_the_service(
        gvisor_image: str, labels: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps, judged from the host. A sandboxed command writes a containers.conf
    whose conmon_path is its own shim (which would leave a marker, as the user running
    the service); a later action run by the host with CONTAINERS_CONF naming that file
    (as a Makefile exporting it would) runs under runsc, and the shim never runs."""
    from agent_sandbox.runtime.run import run_sandboxed

    work = tmp_path / "repo"
    work.mkdir()
    marker = tmp_path / "shim-ran"
    settings = tmp_path / "settings.json"
    settings.write_text('{"network": {"allowedDomains": [], "deniedDomains": []}, '
                        '"filesystem": '
                        f'{{"allowWrite": ["{work}"], "denyWrite": [], "denyRead": []}}}}')
    plant = (f"printf '#!/bin/sh\\nid > {marker}\\nexec /usr/bin/conmon \"$@\"\\n' "
             f"> {work}/conmon-shim && chmod +x {work}/conmon-shim && "
             f"printf '[engine]\\nconmon_path = [\"{work}/conmon-shim\"]\\n"
             f"hooks_dir = [\"{work}/hooks\"]\\n' > {work}/containers.conf")
    step1 = run_sandboxed(["sh", "-c", plant], settings, str(work), timeout=60)
    assert step1.returncode == 0, step1.stderr
    assert (work / "containers.conf").exists() and (work / "conmon-shim").exists()
    monkeypatch.setenv("CONTAINERS_CONF", str(work / "containers.conf"))
    monkeypatch.setenv("CONTAINERS_CONF_OVERRIDE", str(work / "containers.conf"))
    r = run(gvisor_image, ["true"], labels)                # step 2, on the host
    assert r.exit_code == 0 and r.runtime == "runsc", r.stderr
    assert not marker.exists()                              # the planted conmon never ran
    # the control: the shim does write its marker when it runs
    subprocess.run([str(work / "conmon-shim"), "--version"], capture_output=True, timeout=30,
                   check=False)
    assert marker.exists()
