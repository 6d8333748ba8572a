"""Differential check of our Seatbelt profiles against srt's own generator.

For one spec and one macOS user, ``compare`` renders our profile
(``render.seatbelt.seatbelt_profile``) and srt's (its exported
``wrapCommandWithSandboxMacOS``, run under node by ``srt_macos_profile.mjs`` on
the srt-format settings we derive from the same spec), then asks both the same
questions (``probes``) with Seatbelt's rule, the last matching rule wins
(``sbpl.Profile``). Each answer where ours allows and srt denies is *looser*;
where ours denies and srt allows, *stricter*.

srt resolves every path on the host (``realpath``); run here, ``/tmp`` stays
``/tmp``. ``macos_spelling`` rewrites srt's path filters the way a Mac's
``realpath`` would (``/tmp`` -> ``/private/tmp``), and every probe is asked in
the resolved spelling, as Seatbelt sees it.

``python -m tests.platforms.srt_diff`` prints the counts for the settings matrix.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from agent_sandbox.render import seatbelt, srt
from agent_sandbox.spec import paths
from agent_sandbox.spec.models import Spec

from .sbpl import Profile, Query

REPO = Path(__file__).resolve().parents[2]
SRT_PACKAGE = REPO / ".tools" / "node_modules" / "@anthropic-ai" / "sandbox-runtime"
DRIVER = Path(__file__).resolve().parent / "srt_macos_profile.mjs"
HOME = "/Users/erin"
CWD = f"{HOME}/src/app"
_PRIVATE_LINKS = ("/tmp", "/var", "/etc")


def srt_version() -> str:
    return str(json.loads((SRT_PACKAGE / "package.json").read_text())["version"])


def srt_settings_for(spec: Spec, home: str) -> dict:
    """What we would hand srt for this spec: srt-format settings, ``~`` expanded."""
    return srt.srt_settings(spec, home)


def srt_profile(spec: Spec, home: str = HOME, cwd: str = CWD) -> str:
    """The profile srt's own generator writes for the settings derived from ``spec``."""
    node = shutil.which("node")
    if node is None or not SRT_PACKAGE.exists():
        raise RuntimeError("node and the sandbox-runtime npm package (make setup) are needed")
    net = spec.network
    request = {
        "package": str(SRT_PACKAGE),
        "home": home,
        "cwd": cwd,
        "settings": srt_settings_for(spec, home),
        "httpProxyPort": spec.platforms.macos.proxy_port,
        "socksProxyPort": net.socks_proxy_port or None,
        "allowMachLookup": list(spec.platforms.macos.allow_mach_lookup),
        "allowPty": spec.platforms.macos.allow_pty,
    }
    out = subprocess.run([node, str(DRIVER)], input=json.dumps(request), capture_output=True,
                         text=True, timeout=60, check=False,
                         env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    if out.returncode != 0:
        raise RuntimeError(f"srt's generator failed: {out.stderr[-2000:]}")
    argv = shlex.split(json.loads(out.stdout)["wrapped"])
    return macos_spelling(argv[argv.index("-p") + 1])


def macos_spelling(profile: str) -> str:
    """srt's profile with its path filters as a Mac's realpath would have spelled them."""
    for link in _PRIVATE_LINKS:
        profile = re.sub(r'"' + re.escape(link) + r'(?=["/])', '"/private' + link, profile)
        profile = re.sub(r'"\^' + re.escape(link) + r'(?=[/"(\\])', '"^/private' + link,
                         profile)
    return profile


def private(path: str) -> str:
    for link in _PRIVATE_LINKS:
        if path == link or path.startswith(link + "/"):
            return "/private" + path
    return path


# ------------------------------------------------------------------- probes

FILE_OPS = (
    ("read", Query("file-read-data")),
    ("stat", Query("file-read-metadata")),
    ("write", Query("file-write-data")),
    ("create", Query("file-write-create")),
    ("symlink", Query("file-write-create", vnode="SYMLINK")),
    ("mkdir", Query("file-write-create", vnode="DIRECTORY")),
    ("unlink", Query("file-write-unlink")),  # rm, and the source side of a rename
)

MACH = ("com.apple.trustd.agent", "com.apple.cfprefsd.daemon", "com.apple.cfprefsd.agent",
        "com.apple.diagnosticd", "com.apple.analyticsd", "com.apple.logd",
        "com.apple.system.logger", "com.apple.SecurityServer", "com.apple.pasteboard.1",
        "com.apple.windowserver.active", "com.apple.coreservices.appleevents",
        "com.apple.system.opendirectoryd.libinfo", "com.apple.lsd.mapdb",
        "com.apple.FontObjectsServer", "com.apple.audio.systemsoundserver")
SYSCTL = ("kern.procargs2", "kern.procargs", "kern.proc.pid.1", "kern.proc.all", "hw.ncpu",
          "hw.memsize", "kern.hostname", "kern.osversion", "kern.boottime", "kern.uuid",
          "security.mac.sandbox.sentinel", "machdep.cpu.brand_string", "vm.swapusage",
          "net.routetable.0")
IPC = ("ipc-posix-sem-create", "ipc-posix-sem-open", "ipc-posix-shm-write-create",
       "ipc-posix-shm-read-data", "ipc-posix-shm-write-data")


def sample_paths(spec: Spec, home: str = HOME, cwd: str = CWD) -> list[str]:
    """Paths around every rule and every protected name, at the repository and below it."""
    fs = spec.filesystem
    out = {home, f"{home}/notes.txt", f"{home}/src", cwd, f"{cwd}/main.py",
           f"{cwd}/build/out.o", f"{cwd}/sub/deep/file.txt", "/usr/bin/git", "/etc/passwd",
           "/tmp/x/y", "/opt/other", "/", "/Users", "/dev/null", "/dev/ttys003", "/dev/ptmx"}
    rules = [*fs.deny_read, *fs.allow_read, *fs.allow_write, *fs.deny_write,
             *seatbelt.protected_rules(home)]
    for rule in rules:
        exp = paths.expand(rule, home=home, cwd=cwd)
        if exp.startswith("**"):
            tail = exp.replace("**/", "").replace("/**", "").replace("*", "x")
            for base in (cwd, f"{cwd}/sub", home):
                out |= {f"{base}/{tail}", f"{base}/{tail}/inner", f"{base}/{tail}.bak"}
                parent = posixpath.dirname(f"{base}/{tail}")
                out.add(parent)
            continue
        lit = exp.replace("**", "a/b").replace("*", "x").replace("?", "q")
        out |= {lit, f"{lit}/child", lit + "-sibling", posixpath.dirname(lit) or "/",
                posixpath.dirname(posixpath.dirname(lit)) or "/"}
    return sorted(p for p in out if p.startswith("/"))


@dataclass(frozen=True)
class Probe:
    what: str
    query: Query


def probes(spec: Spec, home: str = HOME, cwd: str = CWD) -> list[Probe]:
    out: list[Probe] = []
    for p in sample_paths(spec, home, cwd):
        for label, q in FILE_OPS:
            out.append(Probe(f"{label} {p}", Query(q.op, path=private(p), vnode=q.vnode)))
    out.append(Probe("stat dir /Users", Query("file-read-metadata", path="/Users",
                                              vnode="DIRECTORY")))
    ports = sorted({spec.platforms.macos.proxy_port, spec.network.socks_proxy_port or 1080,
                    22, 80, 443, 5432, 8080})
    for port in ports:
        out.append(Probe(f"connect localhost:{port}",
                         Query("network-outbound", remote=f"localhost:{port}")))
        out.append(Probe(f"bind localhost:{port}",
                         Query("network-bind", local=f"localhost:{port}")))
    out.append(Probe("connect *:443", Query("network-outbound", remote="*:443")))
    socks = ["/private/var/run/docker.sock", f"{home}/.ssh/agent.sock",
             *[private(s) for s in spec.network.allow_unix_sockets]]
    for s in socks:
        out.append(Probe(f"connect unix {s}", Query("network-outbound", unix_socket=s)))
        out.append(Probe(f"bind unix {s}", Query("network-bind", unix_socket=s)))
    for domain in ("AF_UNIX", "AF_INET", "AF_INET6", "AF_SYSTEM", "AF_ROUTE"):
        out.append(Probe(f"socket {domain}", Query("system-socket", domain=domain, protocol=0)))
    for name in MACH:
        out.append(Probe(f"mach {name}", Query("mach-lookup", name=name)))
    for name in SYSCTL:
        out.append(Probe(f"sysctl {name}", Query("sysctl-read", name=name)))
    out.append(Probe("sysctl-write kern.maxproc", Query("sysctl-write", name="kern.maxproc")))
    out.append(Probe("pseudo-tty", Query("pseudo-tty")))
    out.append(Probe("ioctl /dev/ptmx", Query("file-ioctl", path="/dev/ptmx")))
    out.append(Probe("ioctl /dev/ttys003", Query("file-ioctl", path="/dev/ttys003")))
    for op in IPC:
        out.append(Probe(op, Query(op, name="/mp-sem-1")))
    out.append(Probe("signal other", Query("signal")))
    out.append(Probe("signal same", Query("signal", same_sandbox=True)))
    out.append(Probe("process-info other", Query("process-info-pidinfo")))
    out.append(Probe("iokit-open", Query("iokit-open", name="AppleKeyStoreUserClient")))
    return out


@dataclass
class Diff:
    name: str
    total: int
    looser: list[str]
    stricter: list[str]


def compare(name: str, spec: Spec, home: str = HOME, cwd: str = CWD) -> Diff:
    ours = Profile(seatbelt.seatbelt_profile(spec, home), {"CWD": cwd})
    theirs = Profile(srt_profile(spec, home, cwd))
    looser, stricter = [], []
    all_probes = probes(spec, home, cwd)
    for probe in all_probes:
        a, b = ours.decide(probe.query), theirs.decide(probe.query)
        if a == "allow" and b == "deny":
            looser.append(probe.what)
        elif a == "deny" and b == "allow":
            stricter.append(probe.what)
    return Diff(name, len(all_probes), looser, stricter)


def settings_matrix() -> dict[str, Spec]:
    """Specs covering every looser cause the comparison found, and the fleet's own."""
    from agent_sandbox.fleet import FleetRenderer
    from agent_sandbox.spec.loader import load_layer, load_stack

    here = Path(__file__).resolve().parent
    fleet = FleetRenderer.from_path(str(REPO / "inventories" / "example-fleet"))
    out: dict[str, Spec] = {}
    for host in fleet.inventory:
        if fleet.facts(host).os == "macos":
            out[f"fleet:{host}"] = fleet.spec_for(host)
    out["golden"] = load_stack([load_layer(str(here / "golden" / "spec.yml"))])
    v = Spec.model_validate
    out["home-wide-deny"] = v({"filesystem": {
        "deny_read": ["~"], "allow_read": [CWD, "~/.gitconfig"],
        "allow_write": [CWD, "/tmp"]}})
    out["glob-deny-longer-allow"] = v({"filesystem": {
        "deny_read": ["**/.env", "~/**/*.pem", "~/.aws"], "allow_read": [CWD, "~/.aws/config"],
        "allow_write": [CWD]}})
    out["absent-parents"] = v({"filesystem": {
        "allow_write": [CWD, "~/work"],
        "deny_write": [f"{CWD}/config/prod/secrets.yml", "~/work/keys/signing.key"]}})
    out["sockets-pty"] = v({"network": {
        "allow_local_binding": True, "allow_unix_sockets": ["/var/run/app.sock"],
        "socks_proxy_port": 1080}, "platforms": {"macos": {"allow_pty": True}},
        "filesystem": {"allow_write": [CWD]}})
    out["relative-deny-home-root"] = v({"filesystem": {
        "allow_write": ["~"], "deny_read": ["secrets"], "deny_write": ["deploy/keys"]}})
    out["no-trustd"] = v({"platforms": {"macos": {"allow_mach_lookup": []}},
                          "filesystem": {"allow_write": [CWD, "/tmp"]}})
    return out


def main() -> None:
    import sys

    allowed = set(readme_exceptions())
    total = looser = stricter = 0
    for name, spec in settings_matrix().items():
        d = compare(name, spec)
        total += d.total
        looser += len(d.looser)
        stricter += len(d.stricter)
        print(f"{name}: {d.total} probes, ours looser {len(d.looser)}, "
              f"stricter {len(d.stricter)}")
        for what in d.looser:
            mark = " (listed)" if what in allowed else ""
            print(f"  looser: {what}{mark}")
        if "-v" in sys.argv:
            for what in d.stricter:
                print(f"  stricter: {what}")
    print(f"srt {srt_version()}: {total} probe results, ours looser in {looser}, "
          f"stricter in {stricter}")


def readme_exceptions() -> list[str]:
    """Probes docs/provisioning.md lists as deliberately looser than srt (with a reason), exactly.

    Its macOS section carries them as lines ``- looser than srt: `PROBE` ...``.
    """
    text = (REPO / "docs" / "provisioning.md").read_text()
    return re.findall(r"^- looser than srt: `([^`]+)`", text, re.M)


if __name__ == "__main__":
    main()
