"""The gVisor backend's private layers, seen from the host.

A gVisor run writes to an overlay whose upper layer lives outside the tree; after
the command, what it wrote is published, each change judged by the broker's
rules (``runtime/broker/publish.py``). Each case runs real ``sandbox exec
--backend gvisor`` processes (one runsc container each) over a tree the user (this
test, on the host) changes meanwhile, fires what the command planted with a real
host tool, and judges from the host: the tree while the command runs, the tree
after, a marker file a planted program would write. The attacks have controls
(the same plant without a sandbox), so none passes because its judge cannot fire.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_settings

pytestmark = pytest.mark.slow
SANDBOX = str(Path(sys.executable).parent / "sandbox")
GIT = shutil.which("git") or "git"


def gvisor(settings: Path, cwd: Path, script: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([SANDBOX, "exec", "--backend", "gvisor", "--settings",
                             str(settings), "--", "sh", "-c", script], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def finish(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=300)
    return proc.returncode, (out + err).decode(errors="replace")


def wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def git(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GIT, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def world(tmp_path: Path, gvisor_env: None) -> dict[str, Path]:
    root = tmp_path / "repo"
    root.mkdir()
    settings = write_settings(tmp_path / "s.json", {"filesystem": {"allowWrite": [str(root)]}})
    return {"root": root, "settings": settings, "base": tmp_path}


def host_env(base: Path) -> dict[str, str]:
    home = base / "home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def test_nothing_reaches_the_tree_while_the_command_runs_and_what_it_wrote_after(
        world: dict[str, Path]) -> None:
    """While the command runs, the tree is as the user left it (``git status`` and a
    listing); after it, exactly what it wrote is there: new and changed files with
    their modes and times, a removed file gone, a folder removed whole, a link."""
    root = world["root"]
    env = host_env(world["base"])
    git("init", "-q", cwd=root, env=env)
    (root / "keep.txt").write_text("kept\n")
    (root / "change.txt").write_text("one\n")
    (root / "gone.txt").write_text("bye\n")
    (root / "build" / "obj").mkdir(parents=True)
    (root / "build" / "obj" / "a.o").write_bytes(b"\0" * 10)
    git("add", "-A", cwd=root, env=env)
    git("commit", "-qm", "base", cwd=root, env=env)
    listing = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                     if ".git" not in p.parts)
    script = ("echo new > new.txt; chmod 750 new.txt; touch -d @1000000000 new.txt; "
              "echo two >> change.txt; rm gone.txt; rm -rf build; mkdir -p out/deep; "
              "echo x > out/deep/x; ln -s keep.txt link; touch started.flag; sleep 6")
    proc = gvisor(world["settings"], root, script)
    layers = Path(os.environ["AGENT_SANDBOX_STATE_DIR"]) / "layers"
    wait_for_any(layers, "started.flag")
    during = sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                    if ".git" not in p.parts)
    status = git("status", "--porcelain", cwd=root, env=env).stdout
    rc, said = finish(proc)
    assert rc == 0, said
    assert during == listing and status == "", (during, status)
    assert (root / "new.txt").read_text() == "new\n"
    assert (root / "new.txt").stat().st_mode & 0o777 == 0o750
    assert int((root / "new.txt").stat().st_mtime) == 1000000000
    assert (root / "change.txt").read_text() == "one\ntwo\n"
    assert not (root / "gone.txt").exists() and not (root / "build").exists()
    assert (root / "out" / "deep" / "x").read_text() == "x\n"
    assert os.readlink(root / "link") == "keep.txt"
    assert (root / "keep.txt").read_text() == "kept\n"
    assert not list(layers.iterdir()) if layers.exists() else True


def wait_for_any(base: Path, name: str, timeout: float = 120) -> None:
    """Until a file ``name`` is in some layer below ``base`` (the command is running)."""
    deadline = time.monotonic() + timeout
    while not (base.exists() and list(base.glob(f"*/*/upper/{name}"))):
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never appeared in a layer")
        time.sleep(0.05)


def test_what_the_user_makes_during_a_run_stays_as_written(world: dict[str, Path]) -> None:
    """During a long run the user makes ``.idea/``, ``.vscode/settings.json``,
    ``.envrc`` and a repository; the command writes its own ``.envrc`` and a
    configuration at that repository's place. Fired: the user's ``git status`` in
    that repository, after the run. Judged: the user's files exactly as written, the
    planted ``core.fsmonitor`` never ran, the refusals said, nothing quarantined.
    Control: the same configuration written unsandboxed fires the marker."""
    root = world["root"]
    env = host_env(world["base"])
    marker = world["base"] / "marker"
    plant = (f"printf '[core]\\n\\tfsmonitor = \"touch {marker}; false\"\\n' >> "
             "mine/.git/config")
    script = ("touch started.flag; sleep 4; echo 'echo theirs' > .envrc; mkdir -p mine/.git; "
              f"{plant}; echo done > done.txt")
    proc = gvisor(world["settings"], root, script)
    layers = Path(os.environ["AGENT_SANDBOX_STATE_DIR"]) / "layers"
    wait_for_any(layers, "started.flag")
    (root / ".idea").mkdir()
    (root / ".vscode").mkdir()
    (root / ".vscode" / "settings.json").write_text('{"a": 1}\n')
    (root / ".envrc").write_text("echo user\n")
    git("init", "-q", "mine", cwd=root, env=env)
    config = (root / "mine" / ".git" / "config").read_bytes()
    rc, said = finish(proc)
    assert rc == 0, said
    assert (root / "done.txt").read_text() == "done\n"
    assert (root / ".envrc").read_text() == "echo user\n"
    assert (root / ".vscode" / "settings.json").read_text() == '{"a": 1}\n'
    assert (root / ".idea").is_dir() and not list((root / ".idea").iterdir())
    assert (root / "mine" / ".git" / "config").read_bytes() == config
    git("status", cwd=root / "mine", env=env)
    assert not marker.exists()
    assert "refused" in said and ".envrc" in said and "mine/.git/config" in said, said
    assert not list(root.glob("*sandbox-quarantine*"))
    # control: the same configuration written without a sandbox fires the judge
    subprocess.run(["sh", "-c", plant], cwd=root, check=True)
    git("status", cwd=root / "mine", env=env)
    assert marker.exists()


def test_a_virtualenv_made_in_a_run_works_on_the_host_and_the_users_stays_theirs(
        world: dict[str, Path]) -> None:
    """A run makes a virtualenv and puts an editable install's path line in it: after
    the run the user's ``activate`` and the venv's Python import the package. A
    second run appends code to the ``.pth`` of the user's own virtualenv: refused,
    and the user's Python never runs it. Control: the same append unsandboxed."""
    root = world["root"]
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    made = ("python3 -m venv v && sp=$(echo v/lib/python3*/site-packages) && "
            "echo \"$PWD/src\" > $sp/__editable__.pkg.pth")
    rc, said = finish(gvisor(world["settings"], root, made))
    assert rc == 0, said
    out = subprocess.run(["sh", "-c", ". v/bin/activate && python -c "
                          "'import pkg, sys; print(pkg.VALUE, sys.prefix)'"],
                         cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.split()[0] == "42", out
    # the user's own virtualenv, made on the host
    subprocess.run(["python3", "-m", "venv", "--without-pip", "uv"], cwd=root, check=True)
    site = next((root / "uv" / "lib").glob("python3*/site-packages"))
    marker = world["base"] / "marker"
    plant = f"echo 'import os; open(\"{marker}\", \"w\")' >> {site.relative_to(root)}/x.pth"
    rc, said = finish(gvisor(world["settings"], root, plant))
    subprocess.run([str(root / "uv" / "bin" / "python"), "-c", "pass"], check=True)
    assert not marker.exists() and "refused" in said, said
    subprocess.run(["sh", "-c", plant], cwd=root, check=True)  # control
    subprocess.run([str(root / "uv" / "bin" / "python"), "-c", "pass"], check=True)
    assert marker.exists()


def test_a_killed_run_publishes_nothing_and_its_layer_is_kept(
        world: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The container outlives a killed caller (it runs under the podman service).
    Prepared: a gVisor run whose command writes, then plants protected names after a
    pause; its caller is killed. Fired: the next start (bwrap, elsewhere), then the
    next gVisor start. Judged on the host: the container was ended, nothing of the
    killed run reached the tree, then or later, and its layer is kept and said."""
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(tmp_path / "state"))  # its own layers
    root = world["root"]
    other = tmp_path / "o"
    other.mkdir()
    so = write_settings(tmp_path / "so.json", {"filesystem": {"allowWrite": [str(other)]}})
    # .bashrc comes 8 s after .envrc: time enough for the next start to end the
    # container on a loaded machine; the test waits past it before judging
    script = ("echo x > started.flag; sleep 3; mkdir -p sub; echo 'echo planted' > "
              "sub/.envrc; sleep 8; echo 'echo planted' > sub/.bashrc")
    caller = subprocess.Popen([SANDBOX, "exec", "--backend", "gvisor", "--settings",
                               str(world["settings"]), "--", "sh", "-c", script], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    layers = Path(os.environ["AGENT_SANDBOX_STATE_DIR"]) / "layers"
    wait_for_any(layers, "started.flag")
    started = time.monotonic()
    caller.send_signal(signal.SIGKILL)
    caller.wait(30)
    time.sleep(3.5)  # the command has written .envrc by now, in its layer
    assert subprocess.run([SANDBOX, "exec", "--settings", str(so), "--", "true"],
                          cwd=other, timeout=120).returncode == 0  # the next start
    # and would have written .bashrc by now, had its container lived on
    time.sleep(max(0.0, 13.0 - (time.monotonic() - started)))
    assert sorted(p.name for p in root.iterdir()) == []
    rc, said = finish(gvisor(so, other, "true"))
    assert rc == 0 and "kept in" in said, said
    kept = [p for p in layers.iterdir() if p.name.startswith("kept-")]
    assert kept and (next(kept[0].glob("*/upper")) / "sub" / ".envrc").exists()
    assert not (next(kept[0].glob("*/upper")) / "sub" / ".bashrc").exists()
    assert sorted(p.name for p in root.iterdir()) == []
