"""Run the real agent clients (from .tools/agents) against the scripted model
server, each in a throwaway HOME and repository.

A ``World`` is one temporary root holding ``home/`` (the client's HOME, with a
planted ``~/.ssh/id_ed25519`` and the client's own login/model settings),
``repo/`` (a git repository with a bare ``remote.git`` beside it as ``origin``)
and ``etc/``, the world's own managed agent and sandbox folders. Every client and
every ``sandbox`` command runs in a mount namespace (bubblewrap) that shows a
read-only copy of the host's /etc without those folders (``shared_etc``), and the
world's own folders over them, so what this machine has installed system-wide
never leaks into a test, and a test can install managed files at their real
system paths (``World.install_system``).
Roots live under /var/tmp: Codex refuses to put its sandbox helpers under the
system temporary folder, and its sandbox then cannot start.

Test support only.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agent_sandbox import contract

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".tools" / "agents" / "node_modules" / ".bin"
CLIENTS = ("claude", "codex", "gemini")
SECRET = "SECRET-KEY-MATERIAL-4711"
# System folders the clients and the runtime read managed files from.
MANAGED_ETC = ("agent-sandbox", "claude-code", "codex", "gemini-cli")
PROMPT = "Follow the scripted plan."


@functools.cache
def shared_etc() -> Path:
    """The host's /etc without the managed folders (each there, empty, as a place
    for a world's own): copied once per process and shown read-only to every world
    (a copy per test cost about a second of CPU: 1,300 files made and removed)."""
    root = Path(tempfile.mkdtemp(prefix="agent-sandbox-e2e-etc-", dir="/var/tmp"))
    etc = root / "etc"
    etc.mkdir()
    subprocess.run(["cp", "-a", "-t", str(etc), *(str(p) for p in sorted(Path("/etc").iterdir())
                                                  if p.name not in MANAGED_ETC)], check=True)
    for name in MANAGED_ETC:
        (etc / name).mkdir()
    atexit.register(shutil.rmtree, root, True)
    return etc


def client_bin(client: str) -> Path:
    return BIN / client


def missing_clients() -> list[str]:
    return [c for c in CLIENTS if not os.access(client_bin(c), os.X_OK)]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null",
                        "GIT_CONFIG_NOSYSTEM": "1"})


@dataclass
class World:
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def repo(self) -> Path:
        return self.root / "repo"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def remote(self) -> Path:
        return self.root / "remote.git"

    @classmethod
    def create(cls) -> World:
        base = Path("/var/tmp")
        root = Path(tempfile.mkdtemp(prefix="agent-sandbox-e2e-", dir=base))
        w = cls(root)
        for name in MANAGED_ETC:  # this world's own, bound over the shared copy's
            (root / "etc" / name).mkdir(parents=True)
        (w.home / ".ssh").mkdir(parents=True, mode=0o700)
        (w.home / ".ssh" / "id_ed25519").write_text(SECRET + "\n")
        (w.home / ".gitconfig").write_text(
            "[user]\n\tname = Test\n\temail = test@example.invalid\n"
            "[init]\n\tdefaultBranch = main\n")
        w.repo.mkdir()
        _git(root, "init", "-q", "--bare", "-b", "main", str(w.remote))
        _git(w.repo, "init", "-q", "-b", "main")
        _git(w.repo, "-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit",
             "-q", "--allow-empty", "-m", "first")
        _git(w.repo, "remote", "add", "origin", str(w.remote))
        return w

    def install_system(self, target: str, content: bytes, mode: int = 0o644) -> None:
        """Install a managed file at its system path (inside the world's /etc)."""
        assert target.startswith("/etc/") and target.split("/")[2] in MANAGED_ETC, target
        path = self.root / target[1:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)

    def wrap(self, argv: list[str]) -> list[str]:
        own = [a for name in MANAGED_ETC
               for a in ("--bind", str(self.root / "etc" / name), f"/etc/{name}")]
        return ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(shared_etc()), "/etc",
                *own, "--die-with-parent", "--", *argv]

    def sandbox(self, *args: str, check: bool = True, timeout: float = 60,
                on_path: str | None = None, python: str = sys.executable
                ) -> subprocess.CompletedProcess[str]:
        """Our own CLI, as the user would run it in this world (``on_path``: with that
        client on PATH, as a user who installed it has it; ``python``: the interpreter
        it runs under, which the hooks it renders name)."""
        env = {**self.env("claude", ""), "COLUMNS": "200"}
        if on_path:
            env["PATH"] = f"{client_bin(on_path).parent}:{env['PATH']}"
        for _ in range(2):
            r = subprocess.run(self.wrap([python, "-m", "agent_sandbox", *args]),
                               env=env, capture_output=True, text=True, timeout=timeout)
            if not world_not_set_up(r.stderr):
                break
        if check and r.returncode != 0:
            raise AssertionError(f"sandbox {' '.join(args)} failed: {r.stdout}{r.stderr}")
        return r

    def cleanup(self) -> None:
        stop_residents(self.state, self.home)  # before its folder goes (mcp_resident)
        shutil.rmtree(self.root, ignore_errors=True)

    def snapshot_home(self) -> dict[str, bytes]:
        """Every file under HOME with its bytes (for restore checks)."""
        out = {}
        for p in sorted(self.home.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out[str(p.relative_to(self.home))] = p.read_bytes()
        return out

    # -- each client's own settings (what a user has before `sandbox init`) --

    def configure(self, client: str, model_url: str) -> None:
        if client == "codex":
            d = self.home / ".codex"
            d.mkdir(exist_ok=True)
            cfg = d / "config.toml"
            rendered = cfg.read_text() if cfg.exists() else ""  # the fleet's user config
            cfg.write_text(
                'model = "gpt-5.1-codex"\n'
                'model_provider = "scripted"\n' + rendered + "\n"
                "[model_providers.scripted]\n"
                'name = "scripted"\n'
                f'base_url = "{model_url}/v1"\n'
                'wire_api = "responses"\n')
        elif client == "gemini":
            d = self.home / ".gemini"
            d.mkdir(exist_ok=True)
            (d / "settings.json").write_text(json.dumps(
                {"security": {"auth": {"selectedType": "gemini-api-key"}}}))

    def env(self, client: str, model_url: str) -> dict[str, str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "NO_COLOR": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            # this world's own state folder (keys, pins, the host-level queue,
            # the clients' private folders): not the account's, shared by all
            contract.STATE_DIR_ENV: str(self.state),
        }
        if client == "claude":
            env.update(ANTHROPIC_BASE_URL=model_url, ANTHROPIC_API_KEY="sk-scripted",
                       CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
                       DISABLE_TELEMETRY="1", ENABLE_TOOL_SEARCH="false",
                       MCP_TIMEOUT="30000")
        elif client == "codex":
            env.update(CODEX_HOME=str(self.home / ".codex"))
        else:
            env.update(GEMINI_API_KEY="scripted", GOOGLE_GEMINI_BASE_URL=model_url,
                       GEMINI_CLI_NO_RELAUNCH="true")
        return env

    def argv(self, client: str, extra: list[str] | None = None) -> list[str]:
        extra = extra or []
        if client == "claude":
            return [str(client_bin("claude")), "-p", PROMPT, "--output-format", "json", *extra]
        if client == "codex":
            return [str(client_bin("codex")), "exec", *extra, PROMPT]
        return [str(client_bin("gemini")), "-p", PROMPT, "-o", "json", *extra]

    def agent_argv(self, client: str, model_url: str, extra: list[str] | None = None,
                   options: list[str] | None = None, program: Path | None = None) -> list[str]:
        """The client run through ``sandbox agent`` (the model server forwarded)."""
        return [sys.executable, "-m", "agent_sandbox", "agent", client, *(options or []),
                "--model-endpoint", model_url, "--program", str(program or client_bin(client)),
                "--", *self.argv(client, extra)[1:]]

    def run_agent(self, client: str, model_url: str, *, extra: list[str] | None = None,
                  options: list[str] | None = None, timeout: float = 240,
                  env_extra: dict[str, str] | None = None,
                  program: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``sandbox agent CLIENT [options] -- ARGS`` as the user would run it
        (``program``: another program than the client's own, started in its place)."""
        return _start_client(self.wrap(self.agent_argv(client, model_url, extra, options,
                                                       program)),
                             cwd=self.repo, env={**self.env(client, model_url),
                                                 **(env_extra or {})}, timeout=timeout)

    def run(self, client: str, model_url: str, *, extra: list[str] | None = None,
            timeout: float = 240, cwd: Path | None = None,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return _start_client(self.wrap(self.argv(client, extra)), cwd=cwd or self.repo,
                             env={**self.env(client, model_url), **(env_extra or {})},
                             timeout=timeout)


# Codex's own sandbox makes mount points in the repository for names it protects
# below a writable root (strace of a run: repo/.agents, repo/.aws). Once in three
# full runs a Codex helper walking the repository found such an entry gone and
# Codex ended before its session started ("failed to enumerate unreadable glob
# paths ... No such file or directory"), having asked the model nothing and run
# nothing. That start, and only that one, is tried once more.
CODEX_START_RACE = "failed to enumerate unreadable glob paths"


def _start_client(argv: list[str], *, cwd: Path, env: dict[str, str],
                  timeout: float) -> subprocess.CompletedProcess[str]:
    def start() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)

    proc = start()
    if proc.returncode != 0 and (world_not_set_up(proc.stderr) or (
            CODEX_START_RACE in proc.stderr and "Failed to create session" in proc.stderr)):
        proc = start()
    return proc


def world_not_set_up(stderr: str) -> bool:
    """Whether the world's own bwrap stopped before it ran anything because a mount
    of this machine went away while bwrap bound the whole tree (another test's
    container stopping: its overlay's ``merged`` folder), so that running it again
    is the same test. The product's bwrap reports through ``sandbox exec``, never
    with bwrap's bare message first."""
    return stderr.startswith("bwrap: Can't bind mount /oldroot/") and \
        "Unable to apply mount flags" in stderr


def residents(state: Path, home: Path | None = None) -> list[int]:
    """The resident MCP servers (``mcp_resident``) a ``sandbox mcp`` started for
    the state folder ``state``, or with the home ``home`` (a client that passes
    its MCP servers only some variables, as Codex does)."""
    want = {f"{contract.STATE_DIR_ENV}={state}".encode()}
    if home is not None:
        want.add(f"HOME={home}".encode())
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and (d / "cmdline").read_bytes().split(b"\0")[-3:-1] == [
                    b"mcp", b"--resident"] and want & set(
                        (d / "environ").read_bytes().split(b"\0")):
                out.append(int(d.name))
        except OSError:
            continue
    return out


def stop_residents(state: Path, home: Path | None = None) -> None:
    import signal

    for pid in residents(state, home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
