# ruff: noqa: E501, E741
"""Two-step attacks, by class: prepared in one run, fired in the next run or by a
later host tool (git, a login shell, python3, the runtime itself).

Every case is judged from the host only: a payload that writes the case's token
into ``pwned`` outside every writable root can only have run on the host, and
file contents and listener counters are read on the host. Each case also runs
unsandboxed (``test_control_fires``): the same steps with no sandbox must make
the judge fire, so no case passes because its judge cannot see anything.

The classes follow the boundary rule: the sandboxed command is hostile, and so
is everything it can write, to every host-side process that reads it later.
The same cases run against ``sandbox exec`` with the bwrap backend and again
with the gVisor backend (a runsc container each run); the side-by-side table
goes to build/escape-two-step.md. srt's results on them are recorded, never
asserted, by bench/bench_srt_escapes.py.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, REPO, SRT, needs_bwrap, write_results, write_settings

from agent_sandbox.runtime.failures import SandboxStartError
from agent_sandbox.runtime.run import run_sandboxed

GIT = shutil.which("git") or "git"
RESULTS: dict[str, dict[str, str]] = {}


@dataclass
class Ctx:
    root: Path
    W: Path  # the writable root, the working directory
    H: Path  # a home folder (writable only where a case says so)
    O: Path  # outside every writable root
    token: str
    state: dict[str, Any] = field(default_factory=dict)

    def vars(self) -> dict[str, str]:
        pwn = f"echo {self.token} > {self.root}/pwned"
        return {"W": str(self.W), "H": str(self.H), "O": str(self.O), "TOKEN": self.token,
                "PY": PY, "PWN": pwn, "ROOT": str(self.root),
                **{k: str(v) for k, v in self.state.items() if isinstance(v, str | int)}}

    def fill(self, text: str) -> str:
        for k, v in self.vars().items():
            text = text.replace("{" + k + "}", v)
        return text


@dataclass
class Case:
    name: str
    cls: str  # the class
    first: str  # run 1, sandboxed
    judge: Callable[[Ctx], bool]  # True when the attack succeeded
    second: str = ""  # run 2, sandboxed (fires what run 1 prepared)
    fire: str = ""  # then a host tool, unsandboxed, in W with HOME=H
    setup: Callable[[Ctx], None] | None = None
    settings: Callable[[Ctx, dict], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    refused_is_blocked: bool = False  # a run that refuses to start blocks the attack


def pwned(ctx: Ctx) -> bool:
    p = ctx.root / "pwned"
    return p.is_file() and ctx.token in p.read_text(errors="ignore")


def leaked(ctx: Ctx) -> bool:
    out = ctx.W / "out"
    return out.is_file() and ctx.token in out.read_text(errors="ignore")


def exists(rel: str) -> Callable[[Ctx], bool]:
    return lambda ctx: os.path.lexists(ctx.root / rel)


def has_token(rel: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        p = ctx.root / rel
        try:
            return p.is_file() and ctx.token in p.read_text(errors="ignore")
        except OSError:
            return False
    return judge


def changed(rel: str, original: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        p = ctx.root / rel
        try:
            return p.read_text() != original
        except OSError:
            return True
    return judge


def lost(rel: str, original: str) -> Callable[[Ctx], bool]:
    """The judge of an append-only file: what it held is no longer its start (the
    runtime itself may append records, such as the refusal of the attack)."""
    def judge(ctx: Ctx) -> bool:
        try:
            return not (ctx.root / rel).read_text().startswith(original)
        except OSError:
            return True
    return judge


def host_git(ctx: Ctx, *args: str, cwd: Path | None = None) -> None:
    subprocess.run([GIT, *args], cwd=cwd or ctx.W, env=host_env(ctx), capture_output=True,
                   timeout=30, check=False)


def host_env(ctx: Ctx) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(ctx.H), "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t"}


def repo(rel: str = "") -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        d = ctx.W / rel if rel else ctx.W
        d.mkdir(parents=True, exist_ok=True)
        host_git(ctx, "init", "-q", str(d))
        (d / "f").write_text("x\n")
        host_git(ctx, "add", "f", cwd=d)
        host_git(ctx, "commit", "-qm", "one", cwd=d)
    return setup


def both(*fns: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for f in fns:
            f(ctx)
    return setup


def write(rel: str, text: str, mode: int | None = None) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        p = ctx.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(ctx.fill(text))
        if mode is not None:
            p.chmod(mode)
    return setup


def home_writable(ctx: Ctx, s: dict) -> None:
    s["filesystem"]["allowWrite"].append(str(ctx.H))


def deny_read(*rules: str) -> Callable[[Ctx, dict], None]:
    def mod(ctx: Ctx, s: dict) -> None:
        s["filesystem"]["denyRead"] += [ctx.fill(r) for r in rules]
    return mod


def deny_write(*rules: str) -> Callable[[Ctx, dict], None]:
    def mod(ctx: Ctx, s: dict) -> None:
        s["filesystem"]["denyWrite"] += [ctx.fill(r) for r in rules]
    return mod


def allow_write_only(*rules: str) -> Callable[[Ctx, dict], None]:
    def mod(ctx: Ctx, s: dict) -> None:
        s["filesystem"]["allowWrite"] = [ctx.fill(r) for r in rules]
    return mod


def credential_env(name: str) -> Callable[[Ctx, dict], None]:
    def mod(ctx: Ctx, s: dict) -> None:
        s["credentials"] = {"envVars": [{"name": name, "mode": "deny"}]}
    return mod


def dgram_listener(ctx: Ctx) -> None:
    path = ctx.root / "journal.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    os.chmod(path, 0o777)
    s.setblocking(False)
    ctx.state["sock"] = s
    ctx.state["DGRAM"] = str(path)


def dgram_received(ctx: Ctx) -> bool:
    s: socket.socket = ctx.state["sock"]
    try:
        return ctx.token.encode() in s.recv(4096)
    except BlockingIOError:
        return False
    finally:
        s.close()


def stream_listener(where: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        d = Path(where) / f"agent-sandbox-test-{secrets.token_hex(4)}"
        d.mkdir()
        path = d / "svc.sock"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        os.chmod(path, 0o777)
        s.listen(4)
        s.setblocking(False)
        ctx.state["listener"] = s
        ctx.state["listener_dir"] = d
        ctx.state["SOCK"] = str(path)
        ok = ctx.root / "ok.sock"
        t = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        t.bind(str(ok))
        t.listen(1)
        ctx.state["ok"] = t
    return setup


def stream_connected(ctx: Ctx) -> bool:
    s: socket.socket = ctx.state["listener"]
    try:
        s.accept()
        return True
    except BlockingIOError:
        return False
    finally:
        s.close()
        ctx.state["ok"].close()
        shutil.rmtree(ctx.state["listener_dir"], ignore_errors=True)


def allow_unix(ctx: Ctx, s: dict) -> None:
    s["network"]["allowUnixSockets"] = [str(ctx.root / "ok.sock")]


EVIL_GITDIR = ("mkdir -p {W}/evil/objects {W}/evil/refs; echo 'ref: refs/heads/main' > {W}/evil/HEAD; "
               "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"{PWN}; false\"\\n' > {W}/evil/config; ")
FSMONITOR = "printf '[core]\\n\\tfsmonitor = \"{PWN}; false\"\\n'"
HOOK = "printf '#!/bin/sh\\n{PWN}\\n'"

CASES: list[Case] = [
    # 1. host-side helpers loading code from the sandbox's reach
    Case("helper-imports-planted-package", "1 helpers", "mkdir -p agent_sandbox && echo '{PWN}' > x; "
         "printf 'import os\\nos.system(\"{PWN}\")\\n' > agent_sandbox/__init__.py; "
         "cp agent_sandbox/__init__.py sitecustomize.py; cp sitecustomize.py usercustomize.py",
         pwned, fire=f"{REPO}/.venv/bin/sandbox exec --settings {{ROOT}}/s.json -- true"),
    # 2. plans and policy read back from the sandbox's reach
    Case("settings-file-in-writable-root", "2 policy",
         "echo '{\"filesystem\": {\"allowWrite\": [\"{W}\", \"{O}\"]}}' > {W}/s2.json",
         has_token("outside/ran"), setup=write("work/s2.json", '{"filesystem": {"allowWrite": ["{W}"]}}'),
         second="SETTINGS={W}/s2.json", refused_is_blocked=True),
    Case("state-folder-planted", "2 policy", "mkdir -p {H}/.local/state/agent-sandbox/run/owed && "
         "printf 'x' > {H}/.local/state/agent-sandbox/run/owed/1.1; echo {TOKEN} > {H}/.local/state/agent-sandbox/x",
         has_token("home/.local/state/agent-sandbox/x"), settings=home_writable),
    # 3. git metadata beyond hooks/ and config
    Case("git-commondir", "3 git", EVIL_GITDIR + "echo ../evil > .git/commondir", pwned,
         setup=repo(), fire="git status"),
    Case("git-gitfile-redirect", "3 git", EVIL_GITDIR + "mkdir -p d && echo 'gitdir: ../evil' > d/.git", pwned,
         fire="cd d && git status"),
    Case("git-module-config", "3 git", FSMONITOR + " >> .git/modules/sub/config", pwned,
         setup=both(repo(), repo("subsrc"), lambda ctx: _submodule(ctx)), fire="cd sub && git status"),
    Case("git-hookspath-husky", "3 git", "mkdir -p .husky && " + HOOK + " > .husky/pre-commit && chmod +x .husky/pre-commit",
         pwned, setup=both(repo(), lambda ctx: host_git(ctx, "config", "core.hooksPath", ".husky")),
         fire="echo y >> f && git commit -qam two"),
    Case("git-hookspath-custom", "3 git", "mkdir -p tools/hooks && " + HOOK + " > tools/hooks/pre-commit && chmod +x tools/hooks/pre-commit",
         pwned, setup=both(repo(), lambda ctx: host_git(ctx, "config", "core.hooksPath", "tools/hooks")),
         fire="echo y >> f && git commit -qam two"),
    Case("git-include-path", "3 git", FSMONITOR + " > {W}/inc.cfg", pwned,
         setup=both(repo(), write("work/inc.cfg", "[user]\n\tname = t\n"),
                    lambda ctx: host_git(ctx, "config", "include.path", "../inc.cfg")),
         fire="git status"),
    Case("git-init-fsmonitor-top", "3 git", "git init -q . && " + FSMONITOR + " >> .git/config", pwned,
         fire="git status"),
    Case("git-init-hook-deep", "3 git", "mkdir -p a/b/c/d/e/f && cd a/b/c/d/e/f && git init -q . && "
         + HOOK + " > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit", pwned,
         fire="cd a/b/c/d/e/f && echo y > f && git add f && git commit -qm x"),
    Case("git-worktree-gitfile", "3 git", EVIL_GITDIR + "echo 'gitdir: {W}/evil' > wt/.git", pwned,
         setup=both(repo(), lambda ctx: host_git(ctx, "worktree", "add", "-q", str(ctx.W / "wt"))),
         fire="cd wt && git status"),
    Case("git-config-two-step", "3 git", "mkdir -p .git/hooks", pwned, setup=repo("r"),
         second="cd r && " + FSMONITOR + " >> .git/config.worktree && git config extensions.worktreeConfig true",
         fire="cd r && git status"),
    # 4. files host tools execute that were outside the deny set
    Case("devcontainer-initialize", "4 auto-exec", "mkdir -p .devcontainer && echo '{{\"initializeCommand\": \"{PWN}\"}}' > .devcontainer/devcontainer.json",
         exists("work/.devcontainer/devcontainer.json")),
    Case("devcontainer-deep", "4 auto-exec", "mkdir -p pkg/.devcontainer && echo x > pkg/.devcontainer/devcontainer.json",
         exists("work/pkg/.devcontainer/devcontainer.json"), setup=write("work/pkg/keep", "")),
    Case("ripgreprc", "4 auto-exec", "echo '--pre={PWN}' > .ripgreprc", exists("work/.ripgreprc")),
    Case("bash-aliases", "4 auto-exec", "echo '{PWN}' >> {H}/.bash_aliases", pwned,
         settings=home_writable, fire="bash -c 'source ~/.bash_aliases'"),
    Case("python-usercustomize", "4 auto-exec", "d={H}/.local/lib/python3/site-packages; mkdir -p $d && "
         "printf 'import os\\nos.system(\"{PWN}\")\\n' > $d/usercustomize.py && echo 'import usercustomize' > $d/x.pth",
         exists("home/.local/lib/python3/site-packages/usercustomize.py"), settings=home_writable),
    Case("systemd-user-unit", "4 auto-exec", "mkdir -p {H}/.config/systemd/user && echo '[Service]' > {H}/.config/systemd/user/x.service",
         exists("home/.config/systemd/user/x.service"), settings=home_writable),
    Case("autostart-entry", "4 auto-exec", "mkdir -p {H}/.config/autostart && echo '[Desktop Entry]' > {H}/.config/autostart/x.desktop",
         exists("home/.config/autostart/x.desktop"), settings=home_writable),
    Case("local-bin-shadow", "4 auto-exec", "mkdir -p {H}/.local/bin && printf '#!/bin/sh\\n{PWN}\\n' > {H}/.local/bin/git && chmod +x {H}/.local/bin/git",
         exists("home/.local/bin/git"), settings=home_writable),
    Case("ssh-config-proxycommand", "4 auto-exec", "mkdir -p {H}/.ssh && echo 'ProxyCommand {PWN}' >> {H}/.ssh/config",
         has_token("home/.ssh/config"), settings=home_writable),
    Case("npmrc-yarnrc", "4 auto-exec", "echo 'yarnPath: x.js' > .yarnrc.yml; echo 'script-shell=/tmp/x' > .npmrc",
         lambda ctx: exists("work/.yarnrc.yml")(ctx) or exists("work/.npmrc")(ctx)),
    # 5. silent budgets
    Case("deny-glob-seven-deep", "5 budgets", "cat a/b/c/d/e/f/g/.env > out", leaked,
         setup=write("work/a/b/c/d/e/f/g/.env", "{TOKEN}"), settings=deny_read("**/.env")),
    Case("deny-glob-in-node-modules", "5 budgets", "cat node_modules/pkg/.env > out", leaked,
         setup=write("work/node_modules/pkg/.env", "{TOKEN}"), settings=deny_read("**/.env")),
    Case("deny-glob-big-tree", "5 budgets", "cat zz/.env > out", leaked,
         setup=lambda ctx: _big_tree(ctx, 21000), settings=deny_read("**/.env")),
    Case("mode-000-folder-two-step", "5 budgets", "chmod 000 a", pwned, setup=repo("a/b"),
         second="chmod 755 a && " + HOOK + " > a/b/.git/hooks/pre-commit && chmod +x a/b/.git/hooks/pre-commit",
         fire="cd a/b && echo y >> f && git commit -qam two"),
    # 6. the sweep's idea of "new"
    Case("sweep-moves-fresh-repo", "6 sweep", "true", lambda ctx: not (ctx.W / "fresh" / ".git").is_dir(),
         setup=repo("fresh")),
    Case("sweep-moves-its-own-placeholder", "6 sweep", "true",
         lambda ctx: any(".sandbox-quarantine" in p.name for p in (ctx.W / ".git").iterdir())
         or (ctx.W / ".git" / "hooks").exists(),
         setup=both(repo(), lambda ctx: shutil.rmtree(ctx.W / ".git" / "hooks"))),
    Case("sweep-steered-by-planted-marker", "6 sweep",
         "d={H}/.local/state/agent-sandbox/run/owed; mkdir -p $d; printf 'agent-sandbox-owed 2\\000H/\\000R{O}/keep' > $d/evil",
         lambda ctx: not (ctx.O / "keep" / ".vscode").is_dir(), second="true",
         setup=write("outside/keep/.vscode/s.json", "{}"), settings=home_writable),
    # 7. credentials still visible
    Case("credential-env-proc-1", "7 credentials", "cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n' > out", leaked,
         settings=credential_env("API_TOKEN"), env={"API_TOKEN": "{TOKEN}"}),
    # 8. unix sockets
    Case("unix-dgram-socketpair-sendto", "8 unix sockets",
         "{PY} -c \"import socket; a,b=socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'{TOKEN}', '{DGRAM}')\"",
         dgram_received, setup=dgram_listener),
    Case("unix-socket-outside-allowlist", "8 unix sockets",
         "{PY} -c \"import socket; socket.socket(socket.AF_UNIX).connect('{SOCK}')\"",
         stream_connected, setup=stream_listener("/var/tmp"), settings=allow_unix),
    # 9. filesystem semantics where srt is stricter
    Case("allow-write-symlink-target", "9 fs semantics", "echo {TOKEN} > link/target.txt",
         has_token("outside/target.txt"), setup=lambda ctx: _link(ctx, "work/link", ctx.O),
         settings=lambda ctx, s: s["filesystem"]["allowWrite"].append(str(ctx.W / "link"))),
    Case("deny-write-missing-parent", "9 fs semantics", "mkdir -p newdir && echo {TOKEN} > newdir/secret.cfg",
         has_token("work/newdir/secret.cfg"), settings=deny_write("{W}/newdir/secret.cfg")),
    Case("deny-write-dangling-link", "9 fs semantics", "echo {TOKEN} > later.cfg",
         has_token("work/later.cfg"), setup=lambda ctx: _link(ctx, "work/dl", ctx.W / "later.cfg"),
         settings=deny_write("{W}/dl")),
    Case("deny-read-parent-renamed", "9 fs semantics", "mv sub sub2; cat sub2/secret > out", leaked,
         setup=write("work/sub/secret", "{TOKEN}"), settings=deny_read("{W}/sub/secret")),
    Case("cyclic-claude-link", "9 fs semantics", "echo {TOKEN} > ran", has_token("work/ran"),
         setup=lambda ctx: _link(ctx, "work/.claude", ctx.W / ".claude"), refused_is_blocked=True),
    # 11. state the command can reach
    Case("audit-log-emptied", "11 state", ": > {H}/.local/state/agent-sandbox/audit/audit.jsonl",
         lost("home/.local/state/agent-sandbox/audit/audit.jsonl", "{\"kept\": 1}\n"),
         setup=write("home/.local/state/agent-sandbox/audit/audit.jsonl", "{\"kept\": 1}\n"),
         settings=home_writable),
    # 12. host litter
    Case("placeholders-left-behind", "12 litter", "true",
         lambda ctx: sorted(os.listdir(ctx.W)) != []),
]


def _submodule(ctx: Ctx) -> None:
    host_git(ctx, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
             str(ctx.W / "subsrc"), "sub")


def _link(ctx: Ctx, rel: str, target: Path) -> None:
    p = ctx.root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target)


def _big_tree(ctx: Ctx, n: int) -> None:
    """``n`` entries under ``big/``: hard links to one tree made once per worker
    (making 21,000 files costs about 4 CPU-s here, linking them a tenth of one)."""
    template = ctx.root.parent / f"big-tree-{n}"
    if not template.is_dir():
        part = ctx.root.parent / f"big-tree-{n}.part"
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
        for i in range(n // 100):
            sub = part / f"d{i}"
            sub.mkdir()
            for j in range(99):
                (sub / f"f{j}").touch()
        part.rename(template)
    subprocess.run(["cp", "-al", str(template), str(ctx.W / "big")], check=True)
    (ctx.W / "zz").mkdir()
    (ctx.W / "zz" / ".env").write_text(ctx.token)


def make(tmp: Path, case: Case) -> tuple[Ctx, dict]:
    ctx = Ctx(root=tmp, W=tmp / "work", H=tmp / "home", O=tmp / "outside",
              token="TOK" + secrets.token_hex(8))
    for d in (ctx.W, ctx.H, ctx.O):
        d.mkdir()
    (ctx.O / "target.txt").write_text("original\n")
    if case.setup:
        case.setup(ctx)
    s = {"network": {"allowedDomains": [], "deniedDomains": []},
         "filesystem": {"denyRead": [], "allowWrite": [str(ctx.W)], "denyWrite": []}}
    if case.settings:
        case.settings(ctx, s)
    (tmp / "s.json").write_text(json.dumps(s))
    return ctx, s


def run_step(engine: str, ctx: Ctx, script: str, settings: Path,
             monkeypatch: pytest.MonkeyPatch) -> None:
    if script.startswith("SETTINGS="):  # the run a loosened settings file would govern
        settings, script = Path(ctx.fill(script[len("SETTINGS="):])), "echo {TOKEN} > {O}/ran"
    script = ctx.fill(script)
    if engine == "gvisor":  # the container's root is the image: its own interpreter
        script = script.replace(PY, "python3")
    if engine == "none":
        subprocess.run(["sh", "-c", script], cwd=ctx.W, env={**os.environ, "HOME": str(ctx.H)},
                       capture_output=True, timeout=60, check=False)
    elif engine == "srt":
        subprocess.run([str(SRT), "-s", str(settings), "-c", script], cwd=ctx.W,
                       env={**os.environ, "HOME": str(ctx.H)}, capture_output=True, timeout=60,
                       check=False)
    else:
        monkeypatch.setenv("HOME", str(ctx.H))
        run_sandboxed(["sh", "-c", script], settings, ctx.W, timeout=60,
                      backend="gvisor" if engine == "gvisor" else "bwrap")


def attack(engine: str, case: Case, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> bool:
    ctx, _ = make(tmp, case)
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp / "audit"))
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(ctx.H / ".local/state/agent-sandbox"))
    if case.cls == "11 state":
        monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR",
                           str(ctx.H / ".local/state/agent-sandbox/audit"))
    for k, v in case.env.items():
        monkeypatch.setenv(k, ctx.fill(v))
    try:
        for script in (case.first, case.second):
            if script:
                run_step(engine, ctx, script, tmp / "s.json", monkeypatch)
    except SandboxStartError:
        if not case.refused_is_blocked:
            raise
    if case.fire:
        subprocess.run(["sh", "-c", ctx.fill(case.fire)], cwd=ctx.W, env=host_env(ctx),
                       capture_output=True, timeout=60, check=False)
    return case.judge(ctx)


pytestmark = [needs_bwrap]
IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_control_fires(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsandboxed, the same steps succeed: the judge can see the attack."""
    if case.name in ("sweep-moves-fresh-repo", "sweep-steered-by-planted-marker",
                     "sweep-moves-its-own-placeholder",
                     "placeholders-left-behind"):
        pytest.skip("a sabotage judge: it fires only on the runtime's own mistake")
    if case.name == "helper-imports-planted-package":
        ctx, _ = make(tmp_path, case)
        run_step("none", ctx, case.first, tmp_path / "s.json", monkeypatch)
        subprocess.run([PY, "-c", "import agent_sandbox"], cwd=ctx.W, env=host_env(ctx),
                       capture_output=True, timeout=60, check=False)  # cwd on sys.path
        assert pwned(ctx)
        return
    if case.name == "unix-dgram-socketpair-sendto":
        ctx, _ = make(tmp_path, case)
        subprocess.run([PY, "-c", ctx.fill(
            "import socket; a=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
            "a.sendto(b'{TOKEN}', '{DGRAM}')")], check=True)
        assert dgram_received(ctx)
        return
    if case.name in ("settings-file-in-writable-root", "cyclic-claude-link"):
        pytest.skip("the control is the refusal itself (test_refusals)")
    assert attack("none", case, tmp_path, monkeypatch), f"{case.name}: the judge cannot see it"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_ours_blocks(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    escaped = attack("bwrap", case, tmp_path, monkeypatch)
    RESULTS.setdefault(case.name, {})["ours"] = "ESCAPED" if escaped else "blocked"
    assert not escaped, f"{case.name}: the attack succeeded against sandbox exec"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gvisor_blocks(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       gvisor_env: None) -> None:
    """The same two steps against ``--backend gvisor``: each run its own runsc
    container over the same plan, judged from the host alike."""
    escaped = attack("gvisor", case, tmp_path, monkeypatch)
    RESULTS.setdefault(case.name, {})["gvisor"] = "ESCAPED" if escaped else "blocked"
    assert not escaped, f"{case.name}: the attack succeeded against the gVisor backend"


def test_refusals(tmp_path: Path) -> None:
    """The two cases a refusal blocks really are refused (and ran nothing)."""
    w = tmp_path / "w"
    w.mkdir()
    s = w / "s.json"
    write_settings(s, {"filesystem": {"allowWrite": [str(w)]}})
    with pytest.raises(SandboxStartError, match="its own writable root"):
        run_sandboxed(["touch", "ran"], s, w)
    s2 = tmp_path / "s2.json"
    write_settings(s2, {"filesystem": {"allowWrite": [str(w)]}})
    (w / ".claude").symlink_to(w / ".claude")
    with pytest.raises(SandboxStartError, match="symlink loop"):
        run_sandboxed(["touch", "ran"], s2, w)
    assert not (w / "ran").exists()


def test_a_marker_in_the_lock_folder_is_honoured(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of ``sweep-steered-by-planted-marker``: the same marker written by
    the host (where the runtime writes it) does steer the next run's sweep, so the
    case's judge would see a planted one; only the lock folder's protection stops it."""
    case = next(c for c in CASES if c.name == "sweep-steered-by-planted-marker")
    ctx, _ = make(tmp_path, case)
    state = ctx.H / ".local/state/agent-sandbox"
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(state))
    monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp_path / "audit"))
    monkeypatch.setenv("HOME", str(ctx.H))
    owed = state / "run" / "owed"
    owed.mkdir(parents=True)
    (owed / "evil").write_bytes(b"agent-sandbox-owed 2\0H/\0R" + str(ctx.O / "keep").encode())
    run_sandboxed(["true"], tmp_path / "s.json", ctx.W)
    assert case.judge(ctx)


def _sandbox(settings: Path, cwd: Path, script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(REPO / ".venv/bin/sandbox"), "exec", "--settings",
                             str(settings), "--", "sh", "-c", script], cwd=cwd)


def _wait_for(path: Path, tries: int = 300) -> None:
    import time

    for _ in range(tries):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _two_roots(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Folders ``a`` and ``b`` and the settings making each the writable root."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    sa, sb = tmp_path / "sa.json", tmp_path / "sb.json"
    write_settings(sa, {"filesystem": {"allowWrite": [str(a)]}})
    write_settings(sb, {"filesystem": {"allowWrite": [str(b)]}})
    return a, b, sa, sb


def test_the_users_names_stay_as_written_during_a_long_run(tmp_path: Path) -> None:
    """During a long run the tree shows only what its command wrote (no placeholder),
    and what the user makes meanwhile, protected names included (``.envrc``,
    ``.idea/``, ``.vscode/settings.json``), stays exactly where and as the user wrote
    it after the run and after a short run beside it."""
    a, b, sa, sb = _two_roots(tmp_path)
    long = subprocess.Popen([str(REPO / ".venv/bin/sandbox"), "exec", "--settings", str(sa),
                             "--", "sh", "-c", "echo x > ready; sleep 3"], cwd=a)
    try:
        _wait_for(a / "ready", tries=200)
        assert sorted(os.listdir(a)) == ["ready"]
        (a / ".envrc").write_text("export MINE=1\n")
        (a / ".idea").mkdir()
        (a / ".vscode").mkdir()
        (a / ".vscode" / "settings.json").write_text("{}\n")
        assert run_sandboxed(["true"], sb, b).returncode == 0
        assert sorted(os.listdir(b)) == []
    finally:
        long.wait(30)
    assert sorted(os.listdir(a)) == [".envrc", ".idea", ".vscode", "ready"]
    assert (a / ".envrc").read_text() == "export MINE=1\n"
    assert (a / ".vscode" / "settings.json").read_text() == "{}\n"


def test_a_killed_run_leaves_the_next_run_protected(tmp_path: Path) -> None:
    """Prepared: a run killed before its cleanup. Fired: the next run there writes
    ``.bashrc`` while a short run elsewhere ends. Judged on the host: nothing was left
    behind, and the next run's command wrote no ``.bashrc`` (refused when made)."""
    import signal

    a, b, sa, sb = _two_roots(tmp_path)

    def started(script: str) -> subprocess.Popen[bytes]:
        proc = _sandbox(sa, a, f"echo x > ready; {script}")
        _wait_for(a / "ready", tries=200)
        (a / "ready").unlink()
        return proc

    killed = started("sleep 30")
    killed.send_signal(signal.SIGKILL)
    killed.wait(30)
    assert not (a / ".bashrc").exists()  # no placeholder: nothing left behind
    long = started("sleep 2; (echo planted >> .bashrc) 2>/dev/null && echo y > wrote")
    try:
        assert run_sandboxed(["true"], sb, b).returncode == 0
    finally:
        long.wait(30)
    assert not (a / "wrote").exists()
    assert not (a / ".bashrc").exists() or b"planted" not in (a / ".bashrc").read_bytes()


OUTER_RUNS = {
    # a command whose root holds the inner root removes the inner run's placeholder
    "outer-command-removes": "for i in $(seq 200); do [ -e {a}/.bashrc ] && break; "
                             "sleep 0.05; done; sleep 0.5; rm -f {a}/.bashrc",
    # a harmless command: the outer run's own sweep meets the inner run's placeholders
    "outer-sweep": "sleep 2",
}


@pytest.mark.parametrize("outer", sorted(OUTER_RUNS))
def test_a_nested_run_keeps_its_protected_names_beside_an_outer_run(
        tmp_path: Path, outer: str) -> None:
    """Two runs at once, one's root inside the other's, the outer one started first.
    Prepared: the outer run ends while the inner one runs (its command, or its sweep,
    meets the placeholders the inner run made after it started). Fired: the inner
    command writes its protected names as soon as it can. Judged on the host after
    both: none of them holds what the command wrote."""
    import time

    sandbox = str(REPO / ".venv/bin/sandbox")
    x = tmp_path / "x"
    a = x / "a"
    a.mkdir(parents=True)
    sx, sa = tmp_path / "sx.json", tmp_path / "sa.json"
    write_settings(sx, {"filesystem": {"allowWrite": [str(x)]}})
    write_settings(sa, {"filesystem": {"allowWrite": [str(a)]}})
    first = subprocess.Popen([sandbox, "exec", "--settings", str(sx), "--", "sh", "-c",
                              OUTER_RUNS[outer].format(a=a)], cwd=x,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    inner = ("for i in $(seq 80); do (echo 'echo planted' > .bashrc) 2>/dev/null && break; "
             "sleep 0.1; done; mkdir -p .vscode; echo planted > .vscode/tasks.json; "
             "echo planted > .gitconfig; true")
    try:
        subprocess.run([sandbox, "exec", "--settings", str(sa), "--", "sh", "-c", inner],
                       cwd=a, capture_output=True, timeout=60)
    finally:
        first.wait(30)
    for name in (".bashrc", ".gitconfig", ".vscode/tasks.json"):
        path = a / name
        assert not path.exists() or b"planted" not in path.read_bytes(), name
    if outer == "outer-sweep":  # the inner run's placeholders were never the outer's
        moved = [p.name for p in a.rglob("*") if "quarantine" in p.name]
        assert moved == [], moved


def test_a_killed_outer_runs_owed_sweep_spares_a_nested_runs_placeholders(
        tmp_path: Path) -> None:
    """Prepared: an outer run, then a run inside its root; the outer run is killed, so
    its sweep is owed. Fired: the next start elsewhere does that sweep while the inner
    run goes on. Judged on the host: the inner run's placeholders stay where they are,
    and its command writes none of its protected names."""
    import signal
    import time

    sandbox = str(REPO / ".venv/bin/sandbox")
    x, other = tmp_path / "x", tmp_path / "other"
    a = x / "a"
    a.mkdir(parents=True)
    other.mkdir()
    sx, sa, so = tmp_path / "sx.json", tmp_path / "sa.json", tmp_path / "so.json"
    write_settings(sx, {"filesystem": {"allowWrite": [str(x)]}})
    write_settings(sa, {"filesystem": {"allowWrite": [str(a)]}})
    write_settings(so, {"filesystem": {"allowWrite": [str(other)]}})
    killed = subprocess.Popen([sandbox, "exec", "--settings", str(sx), "--", "sleep", "30"],
                              cwd=x, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    inner = subprocess.Popen(
        [sandbox, "exec", "--settings", str(sa), "--", "sh", "-c",
         "echo x > ready; for i in $(seq 40); do (echo 'echo planted' > .bashrc) "
         "2>/dev/null && break; sleep 0.1; done; true"],
        cwd=a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if (a / "ready").exists():
                break
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        assert run_sandboxed(["true"], so, other).returncode == 0  # settles the owed sweep
        moved = [p.name for p in a.rglob("*") if "quarantine" in p.name]
        assert moved == [], moved
    finally:
        inner.wait(30)
    assert b"planted" not in (a / ".bashrc").read_bytes() if (a / ".bashrc").exists() else True


@pytest.fixture(scope="module", autouse=True)
def table() -> Any:
    yield
    if not RESULTS:
        return
    lines = ["# Two-step escape suite: sandbox exec, bwrap and gVisor backends", "",
             "| case | class | sandbox exec | gVisor backend |", "| --- | --- | --- | --- |"]
    for c in CASES:
        r = RESULTS.get(c.name, {})
        lines.append(f"| {c.name} | {c.cls} | {r.get('ours', 'not run')} | "
                     f"{r.get('gvisor', 'not run')} |")
    totals = []
    for engine, label in (("ours", "sandbox exec"), ("gvisor", "gVisor backend")):
        got = [r[engine] for r in RESULTS.values() if engine in r]
        totals.append(f"{label}: {got.count('blocked')}/{len(got)} blocked")
    lines += ["", "; ".join(totals)]
    write_results("escape-two-step", "\n".join(lines) + "\n")
