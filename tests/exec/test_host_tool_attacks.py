"""Red-team cases, fourth round: attacks by a hostile sandboxed command, judged
from the host.

Each case runs the attack through ``sandbox exec`` and judges what a host-side
tool then does with what the command left behind. Each has a control: the same
bytes written without the sandbox (or the attack weakened) make the judge fire,
so a pass is not a judge that cannot see. A case whose attack still succeeds is
``xfail(strict=True)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FLIPPER

PY = sys.executable
SANDBOX = [PY, "-m", "agent_sandbox"]

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git missing"),
]


def settings_for(tmp: Path, work: Path, **fs: list[str]) -> Path:
    """srt settings outside the writable root: ``work`` writable, nothing else."""
    data = {"network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": fs.get("deny_read", []),
                           "allowWrite": [str(work), *fs.get("allow_write", [])],
                           "denyWrite": fs.get("deny_write", [])}}
    path = tmp / "settings.json"
    path.write_text(json.dumps(data))
    return path


def sandboxed(work: Path, settings: Path, script: str, env: dict | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                           script], cwd=work, capture_output=True, text=True,
                          timeout=timeout, env=env)


def unsandboxed(work: Path, script: str) -> None:
    subprocess.run(["sh", "-c", script], cwd=work, check=True, timeout=30)


def host_env(home: Path) -> dict[str, str]:
    """A host user's environment for the judge: a clean home, no system git config."""
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C"}


def host_git(where: Path, home: Path, *args: str, tty: bool = False) -> None:
    """What a user does on the host later: git in that folder (a terminal when tty)."""
    cmd = ["git", *args]
    if tty:
        cmd = ["script", "-qec", " ".join(cmd), "/dev/null"]
    subprocess.run(cmd, cwd=where, env=host_env(home), capture_output=True, timeout=30,
                   stdin=subprocess.DEVNULL)


def evil(work: Path, marker: Path) -> str:
    """Shell that writes a program into the writable root which, run on the host,
    leaves ``marker``."""
    return (f"printf '#!/bin/sh\\necho ran > {marker}\\n' > {work}/evil.sh; "
            f"chmod +x {work}/evil.sh; ")


# --- 1. git config: a line break Python sees and git does not -----------------

# The sweep judges a repository made during the run with ``gitmeta.parse_config``,
# which splits lines with str.splitlines(): a lone CR (or \x0b, \x0c, \x1c-\x1e)
# ends a line for it but not for git. A comment line that hides a section header
# after a CR moves the keys below it into a "safe" remote section for the judge;
# git reads them as [core].
CR_CONFIG = ("printf '[core]\\n\\trepositoryformatversion = 0\\n#{sep}[remote \"y\"]\\n"
             "\\tfsmonitor = {work}/evil.sh\\n' > {repo}/.git/config")


def _cr_attack(work: Path, repo: str, marker: Path, sep: str = "\\r") -> str:
    return (evil(work, marker) + f"mkdir -p {repo} && git -C {repo} init -q && "
            + CR_CONFIG.format(work=work, repo=repo, sep=sep))


@pytest.mark.parametrize(("repo", "sep"), [("sub", "\\r"), (".", "\\014"), ("a/b", "\\034")])
def test_new_repo_config_cr_hides_core_section(tmp_path: Path, repo: str, sep: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    r = sandboxed(work, settings_for(tmp_path, work), _cr_attack(work, repo, marker, sep))
    assert r.returncode != 125, r.stderr  # refused when written, or disarmed after
    host_git(work / repo, tmp_path / "home", "status")
    assert not marker.exists(), "host git status ran the command's fsmonitor"


def test_new_repo_config_cr_control(tmp_path: Path) -> None:
    """Control: written without a sandbox, host git runs it (the judge can fire);
    and with a plain newline the sweep quarantines the repository."""
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    unsandboxed(work, _cr_attack(work, "sub", marker))
    host_git(work / "sub", tmp_path / "home", "status")
    assert marker.exists()
    marker.unlink()
    work2 = tmp_path / "work2"
    work2.mkdir()
    plain = (evil(work2, marker) + "git init -q sub && printf '[core]\\n\\tfsmonitor = "
             f"{work2}/evil.sh\\n' > sub/.git/config")
    r = sandboxed(work2, settings_for(tmp_path, work2), plain)
    assert r.returncode != 125, r.stderr  # refused when written, or disarmed after
    host_git(work2 / "sub", tmp_path / "home", "status")
    assert not marker.exists()


# --- 2. a folder git takes for a git directory, not recognised as one ---------

# ``bwrap._protected_entries`` recognises a bare git directory by HEAD (a file),
# objects/ and refs/ (folders), all by lstat. git's is_git_directory() follows
# symlinks (access()) and takes objects/ and refs/ from ``commondir`` when that
# file exists. Either form escapes the sweep, and host git run in that folder
# reads its config (core.pager on a terminal).
BARE_FORMS = {
    "objects-link": ("mkdir -p src/refs .store/objects && ln -s ../.store/objects src/objects"
                     " && echo 'ref: refs/heads/main' > src/HEAD && "
                     "printf '[core]\\n\\tpager = {work}/evil.sh\\n' > src/config"),
    "commondir": ("mkdir -p src common/objects common/refs && "
                  "echo 'ref: refs/heads/main' > src/HEAD && echo ../common > src/commondir && "
                  "printf '[core]\\n\\tpager = {work}/evil.sh\\n' > common/config"),
    "head-link": ("mkdir -p src/refs/heads src/objects && ln -s refs/heads/main src/HEAD && "
                  "printf '[core]\\n\\tpager = {work}/evil.sh\\n' > src/config"),
    "plain": ("mkdir -p src/refs src/objects && echo 'ref: refs/heads/main' > src/HEAD && "
              "printf '[core]\\n\\tpager = {work}/evil.sh\\n' > src/config"),
}


@pytest.mark.parametrize("form", sorted(BARE_FORMS))
def test_unrecognised_git_directory(tmp_path: Path, form: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    r = sandboxed(work, settings_for(tmp_path, work),
                  evil(work, marker) + BARE_FORMS[form].format(work=work))
    assert r.returncode != 125, r.stderr  # refused when written, or disarmed after
    host_git(work / "src", tmp_path / "home", "branch", tty=True)
    assert not marker.exists(), "host git in the folder ran the command's pager"


@pytest.mark.parametrize("form", sorted(BARE_FORMS))
def test_unrecognised_git_directory_control(tmp_path: Path, form: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    unsandboxed(work, evil(work, marker) + BARE_FORMS[form].format(work=work))
    host_git(work / "src", tmp_path / "home", "branch", tty=True)
    assert marker.exists()


# --- 3. a linked worktree's config.worktree that did not exist ----------------

# ``gitmeta.protect_git_dir`` keeps a worktree's config.worktree read-only only
# when it exists, and ``sweep._new_inside`` skips everything under worktrees/.
# With extensions.worktreeConfig on (``git sparse-checkout init`` sets it), git
# reads .git/worktrees/NAME/config.worktree for that worktree.
def _worktree_repo(work: Path, home: Path) -> None:
    env = host_env(home)
    for cmd in (["git", "init", "-q", "repo"],
                ["git", "-C", "repo", "-c", "user.name=u", "-c", "user.email=u@x",
                 "commit", "-q", "--allow-empty", "-m", "i"],
                ["git", "-C", "repo", "worktree", "add", "-q", "../wt"],
                ["git", "-C", "repo", "config", "extensions.worktreeConfig", "true"]):
        subprocess.run(cmd, cwd=work, env=env, check=True, capture_output=True)


def _worktree_attack(work: Path, marker: Path) -> str:
    return (evil(work, marker) + "printf '[core]\\n\\tfsmonitor = "
            f"{work}/evil.sh\\n' > repo/.git/worktrees/wt/config.worktree")


def test_linked_worktree_config_worktree(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    _worktree_repo(work, tmp_path / "home")
    r = sandboxed(work, settings_for(tmp_path, work),
                  _worktree_attack(work, marker) + " || echo refused")
    assert r.returncode == 0, r.stderr
    host_git(work / "wt", tmp_path / "home", "status")
    assert not marker.exists(), "host git status in the worktree ran the command's fsmonitor"


def test_linked_worktree_config_worktree_control(tmp_path: Path) -> None:
    """Control: written without the sandbox, git runs it; and the main worktree's
    config.worktree, written in the sandbox, is refused or quarantined."""
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "ran"
    _worktree_repo(work, tmp_path / "home")
    unsandboxed(work, _worktree_attack(work, marker))
    host_git(work / "wt", tmp_path / "home", "status")
    assert marker.exists()
    marker.unlink()
    (work / "repo/.git/worktrees/wt/config.worktree").unlink()
    r = sandboxed(work, settings_for(tmp_path, work), evil(work, marker) + "printf "
                  f"'[core]\\n\\tfsmonitor = {work}/evil.sh\\n' > repo/.git/config.worktree"
                  " || echo refused")
    assert r.returncode == 0, r.stderr
    host_git(work / "repo", tmp_path / "home", "status")
    assert not marker.exists()


# --- 4. bytecode Python runs instead of the source beside it -------------------

# The sweep removes a __pycache__ file whose identity changed during the run;
# (device, inode) alone was none: rewriting the file in place kept it, and so
# did a freed inode number handed back. A sourceless ``NAME.pyc`` beside a
# script (importable when no NAME.py is there, and hidden from ``git status`` by
# the usual ``*.pyc`` ignore) is outside __pycache__ and quarantined.
PYC_WRITER = """
import importlib._bootstrap_external as be, importlib.util, os, sys
mode, marker = sys.argv[1], sys.argv[2]
payload = "open(%r, 'w').write('ran')\\nX = 1\\n" % marker
if mode == "beside":
    code = compile(payload + "from _json import *\\n", "json.py", "exec")
    open("json.pyc", "wb").write(be._code_to_timestamp_pyc(code, 0, 0))
    sys.exit(0)
st = os.stat("mod.py")
data = be._code_to_timestamp_pyc(compile(payload, "mod.py", "exec"), st.st_mtime, st.st_size)
path = importlib.util.cache_from_source("mod.py")
if mode == "inplace":
    with open(path, "r+b") as fh:
        fh.write(data)
        fh.truncate()
    sys.exit(0)
if mode == "replace":  # a new inode, renamed over the old name
    with open(path + ".new", "wb") as fh:
        fh.write(data)
    os.rename(path + ".new", path)
    sys.exit(0)
# reuse: unlink, then create until the file system hands out the freed inode again
# (tmpfs never does: its inode numbers only grow; the last try then stays, a new inode)
old = os.stat(path).st_ino
os.unlink(path)
held = []
for i in range(500):
    with open(path, "wb") as fh:
        fh.write(data)
    if os.stat(path).st_ino == old:
        break
    held.append("%s.%d" % (path, i))
    os.rename(path, held[-1])
else:
    os.rename(held.pop(), path)
for h in held:
    os.unlink(h)
"""


def _py_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _pyc_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mod.py").write_text("X = 1\n")
    (work / "run.py").write_text("import json\nimport mod\n")
    (work / ".gitignore").write_text("*.pyc\n__pycache__/\n")
    subprocess.run([PY, "run.py"], cwd=work, env=_py_env(), check=True)  # the cache
    writer = tmp_path / "writer.py"
    writer.write_text(PYC_WRITER)
    return work, writer, tmp_path / "ran"


def _pyc_judge(work: Path) -> None:
    subprocess.run([PY, "run.py"], cwd=work, env=_py_env(), capture_output=True, timeout=30)


@pytest.mark.parametrize("mode", ["inplace", "beside", "reuse", "replace"])
def test_bytecode_written_in_the_run(tmp_path: Path, mode: str) -> None:
    work, writer, marker = _pyc_setup(tmp_path)
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings_for(tmp_path, work)),
                        "--", PY, str(writer), mode, str(marker)], cwd=work,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 125, r.stderr
    _pyc_judge(work)
    assert not marker.exists(), "host python ran bytecode the command wrote"
    assert "refused" in r.stderr, r.stderr  # when it was written, not after the run


@pytest.mark.parametrize("mode", ["inplace", "beside", "reuse", "replace"])
def test_bytecode_written_in_the_run_control(tmp_path: Path, mode: str) -> None:
    work, writer, marker = _pyc_setup(tmp_path)
    subprocess.run([PY, str(writer), mode, str(marker)], cwd=work, check=True)
    _pyc_judge(work)
    assert marker.exists()


# --- 5. an approved file write, its folder swapped for a link while it runs ----

# ``approval.executor.apply_write`` (run on the host by the executor) resolves the
# approved path once, checks it against the protected set, then opens and
# replaces it by path. A sandboxed command that keeps exchanging the approved
# folder with a link (three renames) gets the approved bytes
# written wherever the link points: here the repository's .git/config.
PAYLOAD = "[core]\n\tfsmonitor = echo pwned\n"


def _write_request(repo: Path) -> dict:
    return {"id": "20261201-write", "tool": "Write", "cwd": str(repo), "kind": "write",
            "params": {"file_path": "src/x/config", "content": PAYLOAD}}


def _repo_for_write(tmp_path: Path) -> Path:
    """A git repository connected as ``sandbox init`` leaves it for the executor:
    its own srt settings (the repository writable) under ``.sandbox/``."""
    repo = tmp_path / "repo"
    (repo / "src/x").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=host_env(tmp_path / "h"))
    (repo / ".sandbox/escalations").mkdir(parents=True)
    (repo / ".sandbox/srt-settings.json").write_text(json.dumps(
        {"network": {"allowedDomains": [], "deniedDomains": []},
         "filesystem": {"denyRead": [], "allowWrite": [str(repo)], "denyWrite": []}}))
    return repo


def test_approved_write_folder_swapped(tmp_path: Path) -> None:
    from agent_sandbox.approval.executor import apply_write

    repo = _repo_for_write(tmp_path)
    flipper = tmp_path / "flip.py"
    flipper.write_text(FLIPPER)
    proc = subprocess.Popen([*SANDBOX, "exec", "--settings",
                             str(settings_for(tmp_path, repo)), "--", PY, str(flipper),
                             str(repo), "8"], cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60  # a loaded machine starts sandboxes slowly
        while not (repo / "ready").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "flipper did not start"
            time.sleep(0.02)
        end = time.monotonic() + 5
        while time.monotonic() < end and "fsmonitor" not in (repo / ".git/config").read_text():
            with contextlib.suppress(OSError):
                apply_write(str(repo), _write_request(repo))
    finally:
        (repo / "stop").touch()
        proc.wait(timeout=30)
    assert "fsmonitor" not in (repo / ".git/config").read_text(), \
        "the approved write to src/x/config landed in .git/config"
    # and the write itself works once nothing moves: it lands where it was approved
    for name in ("src/x", "src/y"):  # the flipper may have left them exchanged
        p = repo / name
        if p.is_symlink():
            p.unlink()
    (repo / "src/x").mkdir(exist_ok=True)
    result = apply_write(str(repo), _write_request(repo))
    assert result["status"] == "completed", result
    assert (repo / "src/x/config").read_text() == PAYLOAD


def test_approved_write_folder_swapped_control(tmp_path: Path) -> None:
    """Control: a link in place before the write is refused (the check works when
    nothing moves), and the judge sees the payload when it is in .git/config."""
    from agent_sandbox.approval.executor import apply_write

    repo = _repo_for_write(tmp_path)
    (repo / "src/x").rmdir()
    (repo / "src/x").symlink_to("../.git")
    r = apply_write(str(repo), _write_request(repo))
    assert r["status"] == "refused"
    assert "fsmonitor" not in (repo / ".git/config").read_text()
    (repo / ".git/config").write_text(PAYLOAD)
    assert "fsmonitor" in (repo / ".git/config").read_text()


def test_approved_write_temporary_names_occupied(tmp_path: Path) -> None:
    """Two steps: a sandboxed run fills the approved folder with every temporary name
    it can predict (the writer's pid in the sandbox's pid namespace is the same on
    each run); the approved write, applied later, still lands, judged on the host."""
    from agent_sandbox.approval.executor import apply_write

    repo = _repo_for_write(tmp_path)
    plant = ("for n in $(seq 1 300); do echo squat > src/x/.config.sandbox-tmp-$n; "
             "ln -s ../../.git/config src/x/.config.sandbox-tmp-l$n; done")
    r = sandboxed(repo, settings_for(tmp_path, repo), plant)
    assert r.returncode == 0, r.stderr
    assert (repo / "src/x/.config.sandbox-tmp-2").read_text() == "squat\n"
    result = apply_write(str(repo), _write_request(repo))
    assert result["status"] == "completed", result
    assert (repo / "src/x/config").read_text() == PAYLOAD
    assert "fsmonitor" not in (repo / ".git/config").read_text()


def test_host_write_temporary_name_linked(tmp_path: Path) -> None:
    """Two steps: a sandboxed run links every temporary name ``sandbox init`` could
    give its new ``.mcp.json`` (the pid, which a command can cover: pids are handed
    out in order) to a file outside the writable roots; the host's ``sandbox init``
    later writes neither that file nor its mode, and leaves a regular file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    with open("/proc/sys/kernel/ns_last_pid") as fh:  # the judge's shortcut for the guess
        base = int(fh.read())
    plant = ("import os\n"  # one process: the planting itself spends no pids
             f"for n in range({base}, {base + 3000}):\n"
             "    for name in ('.mcp.json.sandbox-init-%d', '.mcp.json.%d.tmp',\n"
             "                 '.mcp.json.tmp-%d'):\n"
             f"        os.symlink({str(victim)!r}, name % n)\n")
    (tmp_path / "plant.py").write_text(plant)
    r = sandboxed(repo, settings_for(tmp_path, repo), f"{PY} {tmp_path / 'plant.py'}",
                  timeout=120)
    assert r.returncode == 0, r.stderr
    assert (repo / f".mcp.json.sandbox-init-{base + 1}").is_symlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    p = subprocess.run([PY, "-I", "-m", "agent_sandbox", "init", str(repo), "--claude",
                        "--mcp"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n", "sandbox init wrote through a planted link"
    assert victim.stat().st_mode & 0o777 == 0o600, "sandbox init changed a planted link's target"
    mcp = repo / ".mcp.json"
    assert mcp.is_file() and not mcp.is_symlink()
    assert "mcpServers" in json.loads(mcp.read_text())
    subprocess.run([PY, "-I", "-m", "agent_sandbox", "uninstall", str(repo)],
                   capture_output=True, timeout=120, env=env)


# --- 6. a project virtualenv: start-up code for every use of its interpreter ---

# A repository's own ``.venv`` lies in the writable root: a ``.pth`` file in its
# site-packages runs whenever that interpreter starts on the host (an editor's
# Python extension starts it on its own when the folder is opened; ``source
# .venv/bin/activate`` is shell code).
def _venv(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([PY, "-m", "venv", "--without-pip", str(work / ".venv")], check=True,
                   timeout=60)
    site = next((work / ".venv/lib").glob("python3*/site-packages"))
    return work, site


def _pth(site: Path, marker: Path) -> str:
    return f"echo \"import os; open('{marker}', 'w').close()\" > {site}/zz-rt.pth"


def test_project_venv_pth(tmp_path: Path) -> None:
    work, site = _venv(tmp_path)
    marker = tmp_path / "ran"
    r = sandboxed(work, settings_for(tmp_path, work), _pth(site, marker))
    assert r.returncode != 0 and "refused" in r.stderr, r.stderr
    subprocess.run([str(work / ".venv/bin/python"), "-c", "pass"], timeout=30)
    assert not marker.exists(), "the project's interpreter ran a .pth the command wrote"


def test_project_venv_pth_control(tmp_path: Path) -> None:
    work, site = _venv(tmp_path)
    marker = tmp_path / "ran"
    unsandboxed(work, _pth(site, marker))
    subprocess.run([str(work / ".venv/bin/python"), "-c", "pass"], timeout=30)
    assert marker.exists()


@pytest.mark.parametrize("how", ["interpreter-link", "pyvenv-home"])
def test_venv_interpreter_from_another_writable_place(tmp_path: Path, how: str) -> None:
    """Two steps over two repositories: a run in B leaves an ordinary file named
    ``python3`` (nothing protected); a run in A makes the virtualenv the user made
    there use it (the interpreter link, or ``home`` in ``pyvenv.cfg``). B is outside
    A's roots and still a sandbox's to write: the host's next use of A's interpreter
    must not run it. (A virtualenv a run makes is the command's, as its code is.)"""
    a, b, marker = tmp_path / "a", tmp_path / "b", tmp_path / "ran"
    a.mkdir()
    subprocess.run([PY, "-m", "venv", "--without-pip", str(a / ".venv")], check=True,
                   timeout=60)
    (b / "tools").mkdir(parents=True)
    r = sandboxed(b, settings_for(tmp_path, b),
                  f"printf '#!/bin/sh\\ntouch {marker}\\nexec {PY} \"$@\"\\n' > tools/python3 "
                  "&& chmod +x tools/python3")
    assert r.returncode == 0, r.stderr
    plant = (f"rm -f .venv/bin/python3; ln -sf {b}/tools/python3 .venv/bin/python3" if
             how == "interpreter-link" else
             f"printf 'home = {b}/tools\\n' > .venv/pyvenv.cfg")
    r = sandboxed(a, settings_for(tmp_path, a), plant)
    assert r.returncode != 125, r.stderr
    with contextlib.suppress(FileNotFoundError):  # quarantined: nothing there to run
        subprocess.run([str(a / ".venv/bin/python3"), "-c", "pass"], capture_output=True,
                       timeout=30)
    assert not marker.exists(), "the host ran an interpreter another sandbox wrote"
    assert "refused" in r.stderr, r.stderr


def test_venv_made_in_a_run_stays_usable(tmp_path: Path) -> None:
    """Control: a virtualenv made inside a run with the host's interpreter is kept."""
    work = tmp_path / "w"
    work.mkdir()
    r = sandboxed(work, settings_for(tmp_path, work), f"{PY} -m venv --without-pip .venv")
    assert r.returncode == 0, r.stderr
    ok = subprocess.run([str(work / ".venv/bin/python"), "-c", "print('ok')"],
                        capture_output=True, text=True, timeout=30)
    assert ok.stdout == "ok\n", r.stderr + ok.stderr


# --- 7. sockets and raw networking from inside (blocked) -----------------------

PROBE = """
import socket, sys
out = []
for fam, kind in ((socket.AF_UNIX, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW),
                  (socket.AF_PACKET, socket.SOCK_RAW)):
    try:
        s = socket.socket(fam, kind)
        if fam == socket.AF_UNIX:
            s.connect(sys.argv[1].encode().replace(b"@", b"\\0", 1))
        out.append("open %d" % fam)
    except OSError:
        pass
for addr in sys.argv[2:]:
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), 1)
        out.append("connected " + addr)
    except OSError:
        pass
print(" ".join(out))
"""


def test_host_abstract_socket_and_loopback(tmp_path: Path) -> None:
    import socket

    work = tmp_path / "work"
    work.mkdir()
    name = "@rt4-" + os.urandom(4).hex()
    ab = socket.socket(socket.AF_UNIX)
    ab.bind(name.replace("@", "\0", 1))
    ab.listen(4)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(4)
    tcp6 = socket.socket(socket.AF_INET6)
    tcp6.bind(("::1", 0))
    tcp6.listen(4)
    targets = [name, f"127.0.0.1:{tcp.getsockname()[1]}", f"[::1]:{tcp6.getsockname()[1]}"]
    try:
        probe = tmp_path / "probe.py"
        probe.write_text(PROBE)
        # control: the probe itself reaches all three from the host
        host = subprocess.run([PY, str(probe), *targets], capture_output=True, text=True,
                              timeout=30)
        assert host.stdout.count("connected") == 2 and "open 1" in host.stdout
        r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings_for(tmp_path, work)),
                            "--", PY, str(probe), *targets], cwd=work, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "", r.stdout
    finally:
        for s in (ab, tcp, tcp6):
            s.close()


# --- 8. a placeholder made below a folder an earlier run turned into a link ----

# A denyWrite path that does not exist yet gets a read-only placeholder, made on
# the host before the command starts, with the folders above it. A run under
# other settings of the same tree replaces one of those folders by a link; the
# next run's placeholders were made wherever the link led, outside every root.
def test_placeholder_never_made_through_a_planted_link(tmp_path: Path) -> None:
    work, victim = tmp_path / "w", tmp_path / "victim"
    (work / "config").mkdir(parents=True)
    victim.mkdir()
    plain = settings_for(tmp_path, work)
    r = sandboxed(work, plain, f"rm -rf config && ln -s {victim} config")
    assert r.returncode == 0, r.stderr
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)],
                       "denyWrite": [str(work / "config/new/dir/prod.yml")]}}))
    seen: set[str] = set()
    proc = subprocess.Popen([*SANDBOX, "exec", "--settings", str(strict), "--", "true"],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while proc.poll() is None:  # the host watches the victim while the run starts
        seen.update(str(p) for p in victim.rglob("*"))
    _, err = proc.communicate()
    seen.update(str(p) for p in victim.rglob("*"))
    assert not seen, f"made outside the writable root: {sorted(seen)}"
    # nothing is made before a run any more (runtime.broker): the link refuses no start
    assert proc.returncode == 0, err


# The same, with the folder swapped for the link while the run starts: a command
# of another run over the tree keeps exchanging ``config`` (a folder) with a link
# to the victim (renameat2 RENAME_EXCHANGE), so a folder that was looked at and
# found real can be the link a moment later, when the placeholder is made in it.
EXCHANGER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
os.symlink(sys.argv[1], "cfg")
open("ready", "w").close()
while not os.path.exists("stop"):
    try:  # the folder and a link to the victim, swapped by two renames (each judged)
        os.rename("config", "cfg.tmp"); os.rename("cfg", "config")
        os.rename("config", "cfg"); os.rename("cfg.tmp", "config")
    except OSError:
        pass
"""


def _strict(tmp_path: Path, work: Path) -> Path:
    strict = tmp_path / "strict.json"
    strict.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)],
                       "denyWrite": [str(work / "config/new/dir/prod.yml")]}}))
    return strict


def test_nothing_is_made_outside_the_root_while_another_run_swaps_a_folder_for_a_link(
        tmp_path: Path) -> None:
    """A run swaps a folder of the tree with a link to a folder outside it, over and
    over, while other runs start with a ``denyWrite`` rule below that folder: no
    start makes anything through the link (no placeholder is made at all)."""
    work, victim = tmp_path / "w", tmp_path / "victim"
    (work / "config").mkdir(parents=True)
    victim.mkdir()
    strict = _strict(tmp_path, work)
    (tmp_path / "x.py").write_text(EXCHANGER)
    flipper = subprocess.Popen([*SANDBOX, "exec", "--settings",
                                str(settings_for(tmp_path, work)), "--", PY,
                                str(tmp_path / "x.py"), str(victim)], cwd=work)
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 60
        while not (work / "ready").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(40):
            run = subprocess.run([*SANDBOX, "exec", "--settings", str(strict), "--", "true"],
                                 cwd=work, capture_output=True, text=True, timeout=60)
            assert run.returncode in (0, 125), run.stderr  # ran, or refused to start
            assert "internal error" not in run.stderr, run.stderr
            seen.update(str(p) for p in victim.rglob("*"))
    finally:
        (work / "stop").touch()
        flipper.wait(timeout=60)
    seen.update(str(p) for p in victim.rglob("*"))
    assert not seen, f"made outside the writable root: {sorted(seen)}"
