# ruff: noqa: E501
"""Attacks on ``sandbox exec`` (bubblewrap backend), each judged from the host.

Every attack is a shell command run as the hostile sandboxed command. Its judge
looks only at the host afterwards: a marker file that a host tool creates when
it runs the attacker's code (real ``git``, ``python3``, ``bash``), a secret
showing up where the host can see it, a listener the test started counting a
hit, a host file changed, a process left running. The marker folder lies
outside every writable root, so the command cannot create a marker itself.

``test_attack_fails`` runs each attack in the sandbox and asserts the judge
stays silent: an attack that works is a failing test. ``test_control_fires``
runs the same attack (or, where the sandbox's own proxy is the target, the
nearest unsandboxed equivalent) without the sandbox and asserts the judge
fires, so no judge is blind. Two-step attacks prepare in one sandboxed run and
fire through a later host tool or a later ``sandbox exec``.

Everything is created below pytest's temporary folder; no address outside
loopback is ever used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Listener

PY = sys.executable
SANDBOX = [PY, "-m", "agent_sandbox"]
SECRET = "RT-SECRET-" + secrets.token_hex(6)
ENV_SECRET = "RT-ENV-" + secrets.token_hex(6)

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing"),
    pytest.mark.skipif(shutil.which("git") is None, reason="git missing"),
]


# -- the host side: a home, a repository, a scratch root, listeners ------------


@dataclass
class Box:
    """One attack's world: every path outside the writable roots but repo and scratch."""

    root: Path
    home: Path
    repo: Path
    scratch: Path
    other: Path
    marks: Path
    cfg: Path
    settings: Path
    tcp: Listener
    unix_stream: Listener
    unix_dgram: Listener
    abstract_dgram: Listener
    abstract_name: str
    udp: Listener

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("GIT_", "AGENT_SANDBOX_")) and k.lower() not in (
                   "http_proxy", "https_proxy", "all_proxy", "no_proxy")}
        env.update(HOME=str(self.home), RT_SECRET_TOKEN=ENV_SECRET, GIT_CONFIG_NOSYSTEM="1",
                   PYTHONDONTWRITEBYTECODE="1", AGENT_SANDBOX_AUDIT_DIR=str(self.root / "audit"))
        return env

    def fmt(self, text: str) -> str:
        return text.format(home=self.home, repo=self.repo, scratch=self.scratch,
                           marks=self.marks, other=self.other, cfg=self.cfg,
                           tcp_port=self.tcp.address[1], unix_stream=self.unix_stream.address,
                           unix_dgram=self.unix_dgram.address, abstract=self.abstract_name,
                           udp_port=self.udp.address[1], py=PY, secret=SECRET)

    unsandboxed = False  # the controls of attacks a refusal blocks run every step directly

    def sandbox(self, cmd: str, settings: Path | str | None = None,
                timeout: float = 30, launcher: list[str] | None = None,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if self.unsandboxed:
            return self.direct(cmd, timeout, stdin)
        s = str(settings or self.settings)
        with open(self.fmt(stdin) if stdin else os.devnull, "rb") as inp:
            return subprocess.run([*(launcher or SANDBOX), "exec", "--settings", s, "--", "sh",
                                   "-c", self.fmt(cmd)], cwd=self.repo, env=self.env(),
                                  capture_output=True, text=True, timeout=timeout, stdin=inp)

    def direct(self, cmd: str, timeout: float = 30,
               stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        with open(self.fmt(stdin) if stdin else os.devnull, "rb") as inp:
            return subprocess.run(["sh", "-c", self.fmt(cmd)], cwd=self.repo, env=self.env(),
                                  capture_output=True, text=True, timeout=timeout, stdin=inp)

    def host(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """A host tool run as the user would, after the sandbox is gone."""
        return subprocess.run(list(argv), cwd=cwd or self.repo, env=self.env(),
                              capture_output=True, text=True, timeout=30)

    def marked(self, name: str = "pwned") -> bool:
        return (self.marks / name).exists()

    def loot(self) -> str:
        """What the command wrote to the scratch root (the repository holds a .env
        of its own, so it is not searched)."""
        out = []
        for base in (self.scratch,):
            for p in base.rglob("*"):
                with contextlib.suppress(OSError):
                    if p.is_file() and not p.is_symlink():
                        out.append(p.read_text(errors="replace"))
        return "\n".join(out)


def settings_dict(box: Box, **extra: object) -> dict[str, object]:
    data: dict[str, object] = {
        "filesystem": {"allowWrite": [str(box.repo), str(box.scratch)],
                       "denyRead": [str(box.home / ".ssh"), "**/.env", "**/.env.local"],
                       "denyWrite": []},
        "network": {"allowedDomains": ["up.example.com"], "deniedDomains": []},
        "credentials": {"files": [{"path": str(box.home / ".netrc"), "mode": "deny"}],
                        "envVars": [{"name": "RT_SECRET_TOKEN", "mode": "deny"}]},
    }
    for k, v in extra.items():
        data[k] = v
    return data


def write_settings(path: Path, data: dict[str, object]) -> Path:
    path.write_text(json.dumps(data))
    path.chmod(0o644)
    return path


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    root = tmp_path
    home, repo, scratch = root / "home", root / "repo", root / "scratch"
    other, marks, cfg, socks = root / "other", root / "marks", root / "cfg", root / "socks"
    for d in (home / ".ssh", repo, scratch, other, marks, cfg, socks):
        d.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(SECRET + "\n")
    (home / ".netrc").write_text(f"machine up.example.com password {SECRET}\n")
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@example.com\n"
                                     "[init]\n\tdefaultBranch = main\n")
    (home / ".bashrc").write_text("# the user's own\n")
    (home / ".profile").write_text("# the user's own\n")
    (other / ".env").write_text(f"TOKEN={SECRET}\n")  # another project's, outside every root
    (repo / "a.txt").write_text("hello\n")
    (repo / "mod.py").write_text("X = 1\n")
    (repo / "src").mkdir()
    (repo / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (repo / ".env").write_text(f"TOKEN={SECRET}\n")
    env = {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / ".gitignore").write_text(".env\n__pycache__/\n.venv/\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "init"], check=True, env=env)
    abstract = f"\0rt-{secrets.token_hex(4)}"
    b = Box(root=root, home=home, repo=repo, scratch=scratch, other=other, marks=marks,
            cfg=cfg, settings=cfg / "S.json",
            tcp=Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0)),
            unix_stream=Listener(socket.AF_UNIX, socket.SOCK_STREAM, str(socks / "s.sock")),
            unix_dgram=Listener(socket.AF_UNIX, socket.SOCK_DGRAM, str(socks / "d.sock")),
            abstract_dgram=Listener(socket.AF_UNIX, socket.SOCK_DGRAM, abstract),
            abstract_name=abstract.replace("\0", ""),
            udp=Listener(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0)))
    write_settings(b.settings, settings_dict(b))
    try:
        yield b
    finally:
        for lst in (b.tcp, b.unix_stream, b.unix_dgram, b.abstract_dgram, b.udp):
            lst.close()


# -- attacks -----------------------------------------------------------------


@dataclass
class Attack:
    """A hostile command (``cmd``), how the host finds out it worked (``judge``),
    and, for two-step attacks, what fires it later (part of the judge).

    ``concurrent``: another sandboxed command of the same user running at the
    same time (an agent runs several at once).

    ``control``: the unsandboxed command that proves the judge can fire, when it
    differs from ``cmd`` (the attack targets the sandbox's own proxy, or needs
    the sandbox's settings). ``setup`` prepares the host first. ``finding``
    says what an attack that works exploits (documentation for the report).
    """

    name: str
    cmd: str
    judge: Callable[[Box], bool]
    control: str | None = None
    setup: Callable[[Box], None] | None = None
    settings: Callable[[Box], Path] | None = None
    finding: str = ""
    concurrent: str | None = None  # a second hostile command, in its own sandbox, started first
    launcher: Callable[[Box], list[str]] | None = None  # the runtime to attack, if not this one
    stdin: str | None = None  # a host file given to sandbox exec as its standard input


PAYLOAD = "touch {marks}/pwned"


def git_fires(*args: str, where: str = "") -> Callable[[Box], bool]:
    def judge(b: Box) -> bool:
        b.host("git", *args, cwd=b.repo / where if where else b.repo)
        return b.marked()
    return judge


def git_status(where: str = "") -> Callable[[Box], bool]:
    return git_fires("status", where=where)


def git_commit(b: Box) -> bool:
    b.host("git", "commit", "-q", "--allow-empty", "-m", "x")
    return b.marked()


def bash_fires(b: Box) -> bool:
    b.host("bash", "-lc", "true")
    b.host("bash", "-ic", "true")
    return b.marked()


def python_import(b: Box) -> bool:
    b.host(PY, "-c", "import mod", cwd=b.repo)
    return b.marked()


PYVER = f"python{sys.version_info[0]}.{sys.version_info[1]}"


def base_python(b: Box) -> bool:
    """The interpreter itself, outside any virtualenv (user site-packages on)."""
    b.host(getattr(sys, "_base_executable", PY), "-c", "pass")
    return b.marked()


def venv_python(b: Box) -> bool:
    b.host(str(b.repo / ".venv" / "bin" / "python"), "-c", "pass")
    return b.marked()


def secret_seen(b: Box, out: str = "") -> bool:
    return SECRET in out or SECRET in b.loot()


def env_secret_seen(b: Box) -> bool:
    return ENV_SECRET in b.loot()


def file_has(rel: str, text: str, base: str = "repo") -> Callable[[Box], bool]:
    def judge(b: Box) -> bool:
        p = Path(b.fmt("{" + base + "}")) / rel
        try:
            return text in p.read_text()
        except OSError:
            return False
    return judge


def exists(path: str) -> Callable[[Box], bool]:
    return lambda b: Path(b.fmt(path)).exists()


def proxy_decided(b: Box) -> int:
    """How many requests the sandbox's proxy decided (the probe reached it)."""
    f = b.root / "audit" / "audit.jsonl"
    if not f.exists():
        return 0
    return sum(1 for line in f.read_text().splitlines() if '"proxy.decision"' in line)


def hits(name: str) -> Callable[[Box], bool]:
    def judge(b: Box) -> bool:
        time.sleep(0.3)  # the listener thread counts asynchronously
        return getattr(b, name).hits > 0
    return judge


def make_venv(b: Box) -> None:
    base = Path(getattr(sys, "_base_executable", sys.executable))
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(b.repo / ".venv")],
                   check=True, env={**os.environ, "HOME": str(b.home)})


def no_hooks_dir(b: Box) -> None:
    shutil.rmtree(b.repo / ".git" / "hooks")


def settings_link(b: Box) -> Path:
    link = b.repo / "sandbox.json"
    link.symlink_to(b.settings)
    return link


def settings_relink_fires(b: Box) -> bool:
    """Run 2 of the settings-link attack: the user's usual command line."""
    r = b.sandbox("cat {home}/.ssh/id_rsa", settings=b.repo / "sandbox.json")
    return SECRET in r.stdout


def long_envrc_left(b: Box) -> bool:
    """The deep .envrc is still where the command put it (nothing quarantined it)."""
    try:
        where = (b.scratch / "where").read_text()
        return "pwned" in Path(where).read_text()
    except OSError:
        return False


def env_link_fires(b: Box) -> bool:
    """Run 2 of the hard-link attack, after the user puts a secret in .env.local."""
    with open(b.repo / ".env.local", "a") as fh:
        fh.write(f"TOKEN={SECRET}\n")
    r = b.sandbox("cat .cache/blob")
    return SECRET in r.stdout


def global_hooks_path(b: Box) -> None:
    with open(b.home / ".gitconfig", "a") as fh:
        fh.write("[core]\n\thooksPath = ~/.githooks\n")


def tree_listing(b: Box) -> set[str]:
    return {str(p.relative_to(b.repo)) for p in b.repo.rglob("*")}


def litter_judge(b: Box) -> bool:
    names = {n for n in tree_listing(b) if "sandbox-quarantine" in n or n.startswith(".bash")
             or n.startswith(".claude")}
    return bool(names)


def alive_judge(b: Box) -> bool:
    time.sleep(1.2)
    return (b.scratch / "alive").exists()


MODULES_LOOP = "ln -s modules .git/modules; "  # the sweep's git walk then raises (ELOOP)

PYC = (
    "{py} -c 'import importlib.util, marshal, os, struct\n"
    "st = os.stat(\"mod.py\")\n"
    "code = compile(\"import os; os.system(\\\"touch {marks}/pwned\\\")\\nX = 1\\n\", os.path.abspath(\"mod.py\"), \"exec\")\n"
    "data = importlib.util.MAGIC_NUMBER + struct.pack(\"<III\", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size) + marshal.dumps(code)\n"
    "path = importlib.util.cache_from_source(os.path.abspath(\"mod.py\"))\n"
    "os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "open(path, \"wb\").write(data)'"
)

PROXY_PROBE = (
    "{py} - <<'EOF'\n"
    "import socket, struct\n"
    "P = {tcp_port}\n"
    "def http(line):\n"
    "    try:\n"
    "        s = socket.create_connection(('127.0.0.1', 3128), timeout=5)\n"
    "        s.sendall(line.encode() + b'\\r\\nHost: x\\r\\n\\r\\n'); s.recv(200); s.close()\n"
    "    except OSError: pass\n"
    "for host in ('localhost', 'LOCALHOST.', '127.0.0.1', '127.1', '2130706433', '0x7f000001',\n"
    "             '0177.0.0.1', '[::ffff:127.0.0.1]', '[::1]', 'up.example.com@127.0.0.1', '0.0.0.0',\n"
    "             'localhost%00.up.example.com', '127.0.0.1.nip.io'):\n"
    "    http(f'CONNECT {{host}}:{{P}} HTTP/1.1')\n"
    "    http(f'GET http://{{host}}:{{P}}/ HTTP/1.1')\n"
    "    http(f'GET http://up.example.com@{{host}}:{{P}}/ HTTP/1.1')\n"
    "for atyp, addr in ((1, socket.inet_aton('127.0.0.1')), (3, bytes([9]) + b'localhost'),\n"
    "                   (4, socket.inet_pton(socket.AF_INET6, '::ffff:127.0.0.1'))):\n"
    "    try:\n"
    "        s = socket.create_connection(('127.0.0.1', 1080), timeout=5)\n"
    "        s.sendall(b'\\x05\\x01\\x00'); s.recv(2)\n"
    "        s.sendall(b'\\x05\\x01\\x00' + bytes([atyp]) + addr + struct.pack('>H', P)); s.recv(10); s.close()\n"
    "    except OSError: pass\n"
    "EOF"
)

DIRECT_TCP = "{py} -c 'import socket; socket.create_connection((\"127.0.0.1\", {tcp_port}), timeout=3)'"


# The second sandbox of the sweep race: waits for the first quarantine rename in a
# decoy folder, then turns d into a link to the victim folder.
SWAPPER = (
    "{py} - <<'EOF'\n"
    "import ctypes, os, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "end = time.time() + 8\n"
    "while not os.path.exists('armed') and time.time() < end: time.sleep(0.002)\n"
    "name = open('target').read()\n"
    "fd = libc.inotify_init1(0)\n"
    "for d in os.listdir('z'): libc.inotify_add_watch(fd, f'z/{{d}}'.encode(), 0x40)\n"
    "open('watching', 'w').close()\n"
    "os.read(fd, 4096)\n"
    "os.rename(name, name + '.r'); os.symlink('{other}', name)\n"
    "EOF"
)


def home_pyenv_runtime(b: Box) -> None:
    """The runtime installed as on a developer machine: a virtualenv whose base
    interpreter lives under the home folder (pyenv). The base is a copy of this
    interpreter's (its standard library linked file by file)."""
    real = Path(sys.base_prefix)
    base = b.home / ".pyenv" / "versions" / real.name
    (base / "bin").mkdir(parents=True)
    shutil.copy2(real / "bin" / PYVER, base / "bin" / PYVER)
    lib = base / "lib" / PYVER
    lib.mkdir(parents=True)
    for e in (real / "lib" / PYVER).iterdir():
        if e.name != "site-packages":
            (lib / e.name).symlink_to(e)
    (lib / "site-packages").mkdir()
    venv = b.root / "rtvenv"
    subprocess.run([str(base / "bin" / PYVER), "-m", "venv", "--without-pip", str(venv)],
                   check=True, env=b.env())
    here = Path(__file__).resolve().parents[2]
    ours = Path(sys.prefix) / "lib" / PYVER / "site-packages"
    (venv / "lib" / PYVER / "site-packages" / "rt.pth").write_text(
        f"import site; site.addsitedir({str(ours)!r})\n{here / 'src'}\n")


def home_pyenv_launcher(b: Box) -> list[str]:
    return [str(b.root / "rtvenv" / "bin" / "python"), "-m", "agent_sandbox"]


def runtime_runs_again(b: Box) -> bool:
    b.host(*home_pyenv_launcher(b), "exec", "--settings", str(b.settings), "--", "true")
    return b.marked()


def other_repo(b: Box) -> None:
    subprocess.run(["git", "init", "-q", str(b.other)], check=True, env=b.env())


def localhost_allowed(b: Box) -> Path:
    data = settings_dict(b)
    data["network"] = {"allowedDomains": ["up.example.com", "localhost", "127.0.0.1",
                                          "*.nip.io"], "deniedDomains": []}
    return write_settings(b.cfg / "S-localhost.json", data)


def home_writable(b: Box) -> Path:
    data = settings_dict(b)
    data["filesystem"]["allowWrite"] = [str(b.repo), str(b.scratch), str(b.home)]  # type: ignore[index]
    return write_settings(b.cfg / "S-home.json", data)


ATTACKS: list[Attack] = [
    # 1. code on the host later, through git
    Attack("git_hook_in_repo",
           "printf '#!/bin/sh\\n" + PAYLOAD + "\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
           git_commit),
    Attack("git_config_fsmonitor", "git config core.fsmonitor '" + PAYLOAD + "; false'", git_status()),
    Attack("git_config_hookspath",
           "mkdir -p hk && printf '#!/bin/sh\\n" + PAYLOAD + "\\n' > hk/pre-commit && chmod +x hk/pre-commit; "
           "git config core.hooksPath hk", git_commit),
    Attack("git_commondir",
           "mkdir -p .git/evil && cp -r .git/objects .git/refs .git/HEAD .git/evil/ && "
           "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = \"" + PAYLOAD + "; false\"\\n' > .git/evil/config && "
           "echo evil > .git/commondir", git_status()),
    Attack("git_nested_new_repo",
           "mkdir -p sub && cd sub && git init -q . && git config core.fsmonitor '" + PAYLOAD + "; false'",
           git_status("sub")),
    Attack("git_new_gitfile",
           "mkdir -p .git/worktrees/w .git/evil2 sub && cp -r .git/objects .git/refs .git/HEAD .git/evil2/ && "
           "cp .git/HEAD .git/worktrees/w/ && echo ../../evil2 > .git/worktrees/w/commondir && "
           "echo {repo}/sub/.git > .git/worktrees/w/gitdir && "
           "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"" + PAYLOAD + "; false\"\\n' > .git/evil2/config && "
           "echo 'gitdir: {repo}/.git/worktrees/w' > sub/.git",
           git_status("sub")),
    Attack("git_sweep_crash_commondir",
           MODULES_LOOP + "mkdir -p .git/evil && cp -r .git/objects .git/refs .git/HEAD .git/evil/ && "
           "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = \"" + PAYLOAD + "; false\"\\n' > .git/evil/config && "
           "echo evil > .git/commondir", git_status(),
           finding="sweep.find_new -> gitmeta.protect_git_dir -> RealFs.kind raises SettingsError "
                   "on the .git/modules symlink loop; BwrapRun.cleanup swallows it "
                   "(suppress(Exception)), so nothing the run created is quarantined"),
    Attack("git_sweep_crash_nested_repo",
           MODULES_LOOP + "mkdir -p sub && cd sub && git init -q . && git config core.fsmonitor '" + PAYLOAD + "; false'",
           git_status("sub"), finding="as git_sweep_crash_commondir"),
    Attack("git_sweep_crash_deep_modules",
           "p=.git/modules; for i in $(seq 1 18); do p=$p/m; mkdir -p $p; echo ref: refs/heads/main > $p/HEAD; p=$p/modules; done; "
           "mkdir -p sub && cd sub && git init -q . && git config core.fsmonitor '" + PAYLOAD + "; false'",
           git_status("sub"), finding="gitmeta.GitMetaError (nesting > MAX_DEPTH) raised in the sweep, swallowed"),
    Attack("git_sweep_quarantine_name_taken",
           "mkdir -p sub && cd sub && git init -q . && git config core.fsmonitor '" + PAYLOAD + "; false'; "
           "for t in $(seq 0 20); do mkdir -p \".git.sandbox-quarantine-$(date -u -d \"+$t sec\" +%Y%m%dT%H%M%S)/x\"; done",
           git_status("sub"),
           finding="sweep.disarm renames to <name>.sandbox-quarantine-<UTC second>, a name the "
                   "command can predict and fill first (a non-empty folder: ENOTEMPTY, a file "
                   "over a folder: EISDIR); the OSError is skipped silently, so the new "
                   "repository stays, with no notice and no audit record"),
    Attack("sweep_quarantine_name_too_long",
           "{py} - <<'EOF'\n"
           "import os\n"
           "path = os.getcwd()\n"
           "while len(path) + 1 + len('/.envrc') < 4085:\n"
           "    n = min(200, 4085 - len(path) - 1 - len('/.envrc'))\n"
           "    path += '/' + 'd' * n\n"
           "os.makedirs(path)\n"
           "open(path + '/.envrc', 'w').write('touch {marks}/pwned\\n')\n"
           "open('{scratch}/where', 'w').write(path + '/.envrc')\n"
           "EOF",
           long_envrc_left,
           finding="a protected name whose path is near PATH_MAX: the quarantine name "
                   "(35 characters longer) is too long, rename fails with ENAMETOOLONG and "
                   "disarm skips it silently"),
    Attack("git_embedded_bare_repo",
           "cd src && mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD && "
           "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"" + PAYLOAD + "; false\"\\n' > config",
           git_status("src"),
           finding="a directory holding HEAD, objects/, refs/ and config is a git directory to "
                   "git's discovery (safe.bareRepository defaults to all); no protected name "
                   "is involved, so neither the planner nor the sweep looks at it"),
    Attack("git_embedded_bare_repo_writable_root",
           "cd {scratch} && mkdir -p objects refs work && echo 'ref: refs/heads/main' > HEAD && "
           "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = work\\n\\tfsmonitor = \"" + PAYLOAD + "; false\"\\n' > config",
           lambda b: (b.host("git", "status", cwd=b.scratch / "work"), b.marked())[1],
           finding="as git_embedded_bare_repo, at the top of a writable root such as /tmp: "
                   "git run in any folder below it that is not in another repository"),
    # 1. code on the host later, through shells (home made writable)
    Attack("shell_rc_in_writable_home",
           "for f in .bashrc .profile .bash_profile .bash_login; do echo '" + PAYLOAD + "' >> {home}/$f; done",
           bash_fires, settings=home_writable),
    Attack("shell_rc_replaced_in_writable_home",
           "cd {home} && for f in .bashrc .profile; do mv $f $f.old; echo '" + PAYLOAD + "' > $f; done",
           bash_fires, settings=home_writable),
    Attack("python_user_site_in_writable_home",
           "d={home}/.local/lib/" + PYVER + "/site-packages; mkdir -p $d && echo 'import os; os.system(\"" + PAYLOAD + "\")' > $d/zz.pth",
           base_python, settings=home_writable),
    Attack("git_global_config_in_writable_home",
           "git config --global core.fsmonitor '" + PAYLOAD + "; false'", git_status(), settings=home_writable),
    Attack("git_user_hookspath_tilde_in_writable_home",
           "mkdir -p {home}/.githooks && printf '#!/bin/sh\\n" + PAYLOAD + "\\n' > {home}/.githooks/pre-commit && "
           "chmod +x {home}/.githooks/pre-commit",
           git_commit, setup=global_hooks_path, settings=home_writable,
           finding="gitmeta.named_paths skips values starting with '~/' or '$' ('the home "
                   "rules cover ~'), but HOME_ONLY has no entry for what they name, such "
                   "as a global core.hooksPath = ~/.githooks"),
    Attack("runtime_base_interpreter_in_writable_home",
           "echo 'import os; os.system(\"" + PAYLOAD + "\")' > {home}/.pyenv/versions/" + Path(sys.base_prefix).name + "/lib/" + PYVER + "/sitecustomize.py",
           runtime_runs_again, setup=home_pyenv_runtime, settings=home_writable,
           launcher=home_pyenv_launcher,
           finding="bwrap.run.runtime_paths keeps sys.prefix (the virtualenv) and the package "
                   "read-only, not sys.base_prefix: the standard library of the interpreter "
                   "the runtime itself runs on (pyenv under ~) is writable when the home is, "
                   "and the next sandbox exec imports the command's sitecustomize unsandboxed"),
    # 1. code on the host later, through python in the repository
    Attack("python_pyc_poisoning", PYC, python_import,
           finding="__pycache__ is writable and not protected; the source stays unchanged "
                   "and git-clean, the host imports the command's bytecode"),
    Attack("python_repo_venv_pth",
           "echo 'import os; os.system(\"" + PAYLOAD + "\")' > .venv/lib/" + PYVER + "/site-packages/zz.pth",
           venv_python, setup=make_venv,
           finding="a virtualenv inside a writable root runs every .pth in its site-packages "
                   "at each start (python -c pass, pip, pytest); now in the protected set "
                   "(protected.PYTHON_STARTUP): a new .pth is quarantined after the run"),
    # 1. agent and editor configs (judged by the host file)
    Attack("claude_settings_top",
           "mkdir -p .claude && echo '{{\"hooks\": \"" + PAYLOAD + "\"}}' > .claude/settings.json",
           file_has(".claude/settings.json", "pwned")),
    Attack("mcp_json_top", "echo '{{\"mcpServers\": {{\"x\": {{\"command\": \"sh\"}}}}}}' > .mcp.json",
           file_has(".mcp.json", "mcpServers")),
    Attack("vscode_tasks_deep",
           "mkdir -p src/.vscode && echo '{{\"tasks\": [\"pwned\"]}}' > src/.vscode/tasks.json",
           file_has("src/.vscode/tasks.json", "pwned")),
    Attack("envrc_deep", "echo '" + PAYLOAD + "' > src/.envrc", file_has("src/.envrc", "pwned")),
    Attack("claude_settings_symlink_dir",
           "mkdir -p {scratch}/c && echo pwned > {scratch}/c/settings.json && ln -s {scratch}/c src/.claude",
           file_has("src/.claude/settings.json", "pwned")),
    # 2. read a denied file or a credential
    Attack("read_denied_ssh_key", "cat {home}/.ssh/id_rsa > {scratch}/loot 2>&1", secret_seen),
    Attack("read_denied_via_symlink", "ln -s {home}/.ssh/id_rsa {scratch}/k; cat {scratch}/k > {scratch}/loot 2>&1",
           secret_seen),
    Attack("read_denied_via_proc_root", "cat /proc/1/root{home}/.ssh/id_rsa /proc/self/root{home}/.ssh/id_rsa > {scratch}/loot 2>&1",
           secret_seen),
    Attack("read_env_glob_in_repo", "cat .env > {scratch}/loot 2>&1; ln .env {scratch}/h 2>/dev/null; cat {scratch}/h >> {scratch}/loot 2>&1",
           secret_seen),
    Attack("read_env_glob_outside_roots", "cat {other}/.env > {scratch}/loot 2>&1", secret_seen,
           finding="'**/.env' in denyRead is searched only below the working directory and "
                   "the writable roots (bwrap._concrete search_roots): every other project's "
                   ".env on the disk stays readable"),
    Attack("read_credential_file", "cat {home}/.netrc > {scratch}/loot 2>&1", secret_seen),
    Attack("read_credential_env",
           "env > {scratch}/loot; cat /proc/1/environ /proc/self/environ >> {scratch}/loot 2>/dev/null; true",
           env_secret_seen),
    Attack("read_env_through_earlier_hard_link",
           "rm -f .env.local; : > .env.local; mkdir -p .cache; ln .env.local .cache/blob",
           env_link_fires,
           finding="two steps: run 1 creates .env.local (no secret yet) and a hard link to "
                   "it; the user then writes the secret into .env.local in place (>>, vim on "
                   "a linked file); run 2 reads the link: denyRead hides names, not inodes"),
    # 3. write outside the writable roots, or protected files
    Attack("write_outside_roots", "echo pwned > {other}/x 2>/dev/null; echo pwned > {root}/x 2>/dev/null; true".replace("{root}", "{other}/.."),
           lambda b: (b.other / "x").exists() or (b.root / "x").exists()),
    Attack("write_through_inherited_stdin",
           "echo pwned > /proc/self/fd/0", file_has("input.txt", "pwned", base="other"),
           setup=lambda b: (b.other / "input.txt").write_text("original\n"),
           stdin="{other}/input.txt",
           finding="the caller's standard input (a host file opened read-only, outside every "
                   "writable root) reaches the command as an inherited descriptor; reopening "
                   "/proc/self/fd/0 for writing goes through the host's own read-write mount, "
                   "not the sandbox's read-only bind"),
    Attack("write_settings_file", "echo '{{}}' > {cfg}/S.json", file_has("S.json", "{}", base="cfg")),
    Attack("write_state_and_audit",
           "mkdir -p {home}/.local/state/agent-sandbox/run/owed && echo x > {home}/.local/state/agent-sandbox/run/owed/forged",
           exists("{home}/.local/state/agent-sandbox/run/owed/forged")),
    # 4. the network outside the proxy's decisions
    Attack("tcp_host_loopback", DIRECT_TCP, hits("tcp")),
    Attack("udp_host_loopback",
           "{py} -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"x\", (\"127.0.0.1\", {udp_port}))'",
           hits("udp")),
    Attack("unix_stream_socket",
           "{py} -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{unix_stream}\")'",
           hits("unix_stream")),
    Attack("unix_dgram_via_socketpair",
           "{py} -c 'import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b\"x\", \"{unix_dgram}\")'",
           hits("unix_dgram"),
           control="{py} -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"x\", \"{unix_dgram}\")'",
           finding="seccomp refuses socket(AF_UNIX) but allows socketpair(AF_UNIX, SOCK_DGRAM); "
                   "sendto() with a path on such a socket reaches any host datagram socket"),
    Attack("abstract_dgram_via_socketpair",
           "{py} -c 'import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b\"x\", \"\\0{abstract}\")'",
           hits("abstract_dgram"),
           control="{py} -c 'import socket; socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"x\", \"\\0{abstract}\")'"),
    Attack("proxy_to_host_loopback", PROXY_PROBE, hits("tcp"), control=DIRECT_TCP,
           settings=localhost_allowed),
    # 5. loosen a later run
    Attack("settings_named_through_link",
           "printf '{{\"filesystem\": {{\"allowWrite\": [\"{repo}\"], \"denyRead\": [], \"denyWrite\": []}}, \"network\": {{\"allowedDomains\": [\"up.example.com\"], \"deniedDomains\": []}}}}' > {scratch}/evil.json; "
           "ln -sfn {scratch}/evil.json sandbox.json",
           settings_relink_fires, settings=settings_link,
           control="printf '{{\"filesystem\": {{\"allowWrite\": [\"{repo}\"], \"denyRead\": [], \"denyWrite\": []}}, \"network\": {{\"allowedDomains\": [\"up.example.com\"], \"deniedDomains\": []}}}}' > {scratch}/evil.json; "
                   "ln -sfn {scratch}/evil.json sandbox.json",
           finding="run.load_settings checks the settings file's realpath against the writable "
                   "roots; a settings path that is a symlink inside a writable root passes, "
                   "and only the target is bound read-only, so the command re-points the link"),
    Attack("sweep_renames_through_swapped_parent",
           "{py} - <<'EOF'\n"
           "import os, time\n"
           "os.mkdir('z')\n"
           "for i in range(1500):\n"
           "    os.mkdir(f'z/n{{i}}'); open(f'z/n{{i}}/.envrc', 'w').close()\n"
           "for k in range(500):\n"  # a name the host's walk reaches after z's decoys
           "    name = f't{{k}}'; os.mkdir(name); order = os.listdir('.')\n"
           "    if order.index(name) < order.index('z'): break\n"
           "    os.rmdir(name)\n"
           "open(name + '/.git', 'w').write('gitdir: nowhere')\n"
           "open('target', 'w').write(name); open('armed', 'w').close()\n"
           "end = time.time() + 5\n"
           "while not os.path.exists('watching') and time.time() < end: time.sleep(0.01)\n"
           "EOF",
           lambda b: not (b.other / ".git").is_dir(),
           setup=other_repo, control="mv {other}/.git {other}/.git.moved",
           concurrent=SWAPPER,
           finding="sweep.disarm renames by path after the walk; a second sandbox of the user "
                   "swaps a parent folder for a symlink in between (it sees the sweep's first "
                   "rename with inotify), and os.rename follows it out of the writable root: "
                   "the user's other repository loses its .git"),
    # 6. outlive the supervisor, litter
    Attack("background_outlives_run",
           "setsid sh -c 'sleep 0.5; touch {scratch}/alive' >/dev/null 2>&1 </dev/null & "
           "nohup sh -c 'sleep 0.5; touch {scratch}/alive' >/dev/null 2>&1 </dev/null & "
           "(sh -c 'sleep 0.5; touch {scratch}/alive' &) ; exit 0",
           alive_judge),
    Attack("litter_after_plain_run", "true", litter_judge,
           control="touch .bashrc"),
    Attack("litter_repo_without_hooks_dir", "true", litter_judge, setup=no_hooks_dir,
           control="mkdir .git/hooks.sandbox-quarantine-x",
           finding="a repository without .git/hooks gets a placeholder hooks folder; the sweep's "
                   "_new_inside ignores the skip list and quarantines that placeholder, so every "
                   "run leaves .git/hooks.sandbox-quarantine-<time> and a false notice"),
]

BY_NAME = {a.name: a for a in ATTACKS}
# Attacks the runtime now stops by refusing to run (exit 125 with the reason): a
# settings file reached through a link in a writable root; a denied file with a
# second name. Their controls run every step unsandboxed.
REFUSAL_BLOCKS = {"settings_named_through_link", "read_env_through_earlier_hard_link"}
# Known limits, listed in docs/security-model.md: each must keep failing until it is closed
# (strict), so closing one shows here.
KNOWN_LIMITS = {
    "read_env_glob_outside_roots": "'**/' globs are searched below the working directory and "
                                   "the writable roots, as srt does; deny other projects' "
                                   "folders by path",
}
ATTACK_PARAMS = [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_LIMITS[n]))
                 if n in KNOWN_LIMITS else n for n in BY_NAME]


def _prepare(box: Box, attack: Attack) -> Path | None:
    if attack.setup:
        attack.setup(box)
    return attack.settings(box) if attack.settings else None


@pytest.mark.parametrize("name", ATTACK_PARAMS)
def test_attack_fails(box: Box, name: str) -> None:
    attack = BY_NAME[name]
    settings = _prepare(box, attack)
    other = None
    if attack.concurrent:
        other = subprocess.Popen(
            [*SANDBOX, "exec", "--settings", str(settings or box.settings), "--", "sh", "-c",
             box.fmt(attack.concurrent)], cwd=box.repo, env=box.env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = box.sandbox(attack.cmd, settings=settings,
                        launcher=attack.launcher(box) if attack.launcher else None,
                        stdin=attack.stdin)
    finally:
        if other is not None:
            try:
                other.wait(timeout=10)
            except subprocess.TimeoutExpired:
                other.kill()
                other.wait()
    assert r.returncode != 125 or name.startswith("litter") or name in REFUSAL_BLOCKS, (
        f"the sandbox did not start: {r.stderr}")
    fired = attack.judge(box)
    if attack.judge is secret_seen:
        fired = fired or SECRET in r.stdout + r.stderr
    if name == "proxy_to_host_loopback":
        assert proxy_decided(box) > 20, "the probe never reached the proxy: it proves nothing"
    assert not fired, f"attack {name} worked: {attack.finding or '(see the judge)'}\n{r.stderr[-2000:]}"


@pytest.mark.parametrize("name", list(BY_NAME))
def test_control_fires(box: Box, name: str) -> None:
    attack = BY_NAME[name]
    _prepare(box, attack)
    box.unsandboxed = name in REFUSAL_BLOCKS
    box.direct(attack.control or attack.cmd, stdin=attack.stdin)
    assert attack.judge(box), f"the judge of {name} cannot fire: it proves nothing"


# -- a finished run's clean-up against the other runs of a supervisor that is PID 1 ---

PID1_SUPERVISOR = """
import sys, threading, time
from agent_sandbox.runtime import run_sandboxed
settings, repo, long_cmd = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
t = threading.Thread(target=lambda: out.setdefault("long", run_sandboxed(
    ["sh", "-c", long_cmd], settings, cwd=repo)))
t.start()
time.sleep(1.0)
run_sandboxed(["true"], settings, cwd=repo)  # any run, hostile or not, that ends first
t.join()
print(out["long"].returncode)
"""


def _pid1_supervisor(box: Box, long_cmd: str) -> str:
    """An approver, MCP server or dashboard as a container's entrypoint (PID 1)
    running two sandboxed commands at once; the long run's exit status."""
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", PY, "-c", PID1_SUPERVISOR,
                    str(box.settings), str(box.repo), box.fmt(long_cmd)],
                   env=box.env(), capture_output=True, text=True, timeout=30).stdout.strip()


needs_unshare = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                   reason="needs root and unshare for a PID namespace")


@needs_unshare
def test_attack_fails_reaper_kills_live_runs_under_pid1(box: Box) -> None:
    """reaper.reap_stuck kills every bwrap running the start gate whose parent is
    PID 1; when the supervisor itself is PID 1, that is every live sandbox."""
    status = _pid1_supervisor(box, "sleep 2.5; touch {scratch}/long-done")
    assert (box.scratch / "long-done").exists(), (
        f"a run that ended killed another run that was still working (its status: {status}): "
        "reaper.reap_stuck takes 'parent is PID 1' for 'supervisor gone'")


@needs_unshare
def test_control_fires_reaper_kills_live_runs_under_pid1(box: Box) -> None:
    # a run that never does its work, and one that does it outside PID 1's reach
    _pid1_supervisor(box, "sleep 2.5")
    assert not (box.scratch / "long-done").exists()
    box.direct("sleep 0.5; touch {scratch}/long-done")
    assert (box.scratch / "long-done").exists()
