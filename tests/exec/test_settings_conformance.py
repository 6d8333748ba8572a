"""The settings parser against srt's own schema: every case goes to both.

Each document is given to srt's zod schema (``SandboxRuntimeConfigSchema`` from
the installed npm package, run under node, ``safeParse``) and to
``runtime.settings.parse``. A case marked ``refuse`` must be refused by both,
an ``accept`` control accepted by both (as ``load`` reads a file: every
required list present); the table is checked against srt's
verdict, never assumed, and each refusal has a valid control beside it that
proves our parser is not refusing everything.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from typing import Any

import pytest
from conftest import REPO

from agent_sandbox.runtime.settings import SettingsError, parse

SCHEMA = REPO / ".tools/node_modules/@anthropic-ai/sandbox-runtime/dist/sandbox/sandbox-config.js"
CHECK = """
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
const { SandboxRuntimeConfigSchema } = await import(pathToFileURL(process.argv[1]).href);
const docs = JSON.parse(readFileSync(0, 'utf-8'));
process.stdout.write(JSON.stringify(docs.map(d => {
  const r = SandboxRuntimeConfigSchema.safeParse(d);
  return r.success ? '' : r.error.issues.map(i => `${i.path.join('.')}: ${i.message}`).join('; ');
})));
"""

BASE: dict[str, Any] = {
    "network": {"allowedDomains": ["example.com"], "deniedDomains": []},
    "filesystem": {"denyRead": [], "allowWrite": ["/tmp/w"], "denyWrite": []},
}
TLS = {"caCertPath": "/etc/ca.pem", "caKeyPath": "/etc/ca.key"}


def _doc(*edits: tuple[str, Any]) -> dict[str, Any]:
    """BASE with ``("a.b", value)`` set (``None``: removed)."""
    doc = copy.deepcopy(BASE)
    for path, value in edits:
        *parents, last = path.split(".")
        at = doc
        for p in parents:
            at = at.setdefault(p, {})
        if value is None:
            at.pop(last, None)
        else:
            at[last] = value
    return doc


def _masked(mode: str, where: str = "envVars") -> dict[str, Any]:
    entry = {"name": "TOKEN", "mode": mode} if where == "envVars" else {
        "path": "/home/u/.netrc", "mode": mode}
    return {where: [entry]}


# (case id, document, "refuse" or "accept")
CASES: list[tuple[str, dict[str, Any], str]] = [
    ("valid-base", _doc(), "accept"),
    # missing required sections and lists
    ("no-network", _doc(("network", None)), "refuse"),
    ("no-filesystem", _doc(("filesystem", None)), "refuse"),
    ("empty-document", {}, "refuse"),
    ("no-allowedDomains", _doc(("network.allowedDomains", None)), "refuse"),
    ("no-deniedDomains", _doc(("network.deniedDomains", None)), "refuse"),
    ("no-denyRead", _doc(("filesystem.denyRead", None)), "refuse"),
    ("no-allowWrite", _doc(("filesystem.allowWrite", None)), "refuse"),
    ("no-denyWrite", _doc(("filesystem.denyWrite", None)), "refuse"),
    ("allowRead-optional", _doc(("filesystem.allowRead", None)), "accept"),
    ("network-not-object", _doc(("network", ["example.com"])), "refuse"),
    ("allowedDomains-string", _doc(("network.allowedDomains", "example.com")), "refuse"),
    # binaries
    ("bwrapPath-relative", _doc(("bwrapPath", "bin/bwrap")), "refuse"),
    ("bwrapPath-bare-name", _doc(("bwrapPath", "bwrap")), "refuse"),
    ("bwrapPath-empty", _doc(("bwrapPath", "")), "refuse"),
    ("bwrapPath-absolute", _doc(("bwrapPath", "/usr/bin/bwrap")), "accept"),
    ("socatPath-relative", _doc(("socatPath", "./socat")), "refuse"),
    ("javaAgentJarPath-relative", _doc(("javaAgentJarPath", "agent.jar")), "refuse"),
    ("bwrapPath-number", _doc(("bwrapPath", 7)), "refuse"),
    # credentials: masking needs tlsTerminate
    ("mask-env-without-tls", _doc(("credentials", _masked("mask"))), "refuse"),
    ("mask-file-without-tls", _doc(("credentials", _masked("mask", "files"))), "refuse"),
    ("mask-with-tls", _doc(("credentials", _masked("mask")), ("network.tlsTerminate", TLS)),
     "accept"),
    ("mask-plaintext-opt-in", _doc(("credentials", {**_masked("mask"),
                                                    "allowPlaintextInject": True})), "accept"),
    ("deny-without-tls", _doc(("credentials", _masked("deny"))), "accept"),
    ("mask-folder", _doc(("credentials", {"files": [{"path": "/home/u/.aws/", "mode": "mask"}]}),
                         ("network.tlsTerminate", TLS)), "refuse"),
    ("credentials-unknown-key", _doc(("credentials", {"injectHosts": ["x"]})), "refuse"),
    ("credential-bad-mode", _doc(("credentials", {"envVars": [{"name": "A", "mode": "hide"}]})),
     "refuse"),
    ("allowPlaintextInject-string", _doc(("credentials", {"allowPlaintextInject": "yes"})),
     "refuse"),
    # IPv6 literals
    ("ipv6-unbracketed-with-port", _doc(("network.allowedDomains", ["2001:db8::1:443"])),
     "refuse"),
    ("ipv6-unbracketed", _doc(("network.allowedDomains", ["::1"])), "refuse"),
    ("ipv6-unbracketed-denied", _doc(("network.deniedDomains", ["fe80::1:22"])), "refuse"),
    ("ipv6-bracketed-with-port", _doc(("network.allowedDomains", ["[2001:db8::1]:443"])),
     "accept"),
    ("ipv6-bracketed", _doc(("network.allowedDomains", ["[::1]"])), "accept"),
    # domain patterns
    ("allow-star", _doc(("network.allowedDomains", ["*"])), "refuse"),
    ("allow-tld-wildcard", _doc(("network.allowedDomains", ["*.com"])), "refuse"),
    ("allow-url", _doc(("network.allowedDomains", ["https://example.com/"])), "refuse"),
    ("deny-star", _doc(("network.deniedDomains", ["*"])), "accept"),
    ("deny-star-port", _doc(("network.deniedDomains", ["*:22"])), "accept"),
    ("allow-port-0", _doc(("network.allowedDomains", ["example.com:0"])), "refuse"),
    # allowMachLookup
    ("mach-inner-star", _doc(("network.allowMachLookup", ["com.*.agent"])), "refuse"),
    ("mach-two-stars", _doc(("network.allowMachLookup", ["com.example.**"])), "refuse"),
    ("mach-leading-star", _doc(("network.allowMachLookup", ["*.example"])), "refuse"),
    ("mach-not-list", _doc(("network.allowMachLookup", "com.example.*")), "refuse"),
    ("mach-trailing-star", _doc(("network.allowMachLookup", ["com.example.*", "*"])), "accept"),
    # ports and numbers
    ("httpProxyPort-0", _doc(("network.httpProxyPort", 0)), "refuse"),
    ("httpProxyPort-70000", _doc(("network.httpProxyPort", 70000)), "refuse"),
    ("socksProxyPort-float", _doc(("network.socksProxyPort", 1080.5)), "refuse"),
    ("socksProxyPort-string", _doc(("network.socksProxyPort", "1080")), "refuse"),
    ("proxy-ports", _doc(("network.httpProxyPort", 3128), ("network.socksProxyPort", 1080)),
     "accept"),
    ("depth-0", _doc(("mandatoryDenySearchDepth", 0)), "refuse"),
    ("depth-11", _doc(("mandatoryDenySearchDepth", 11)), "refuse"),
    # other typed keys
    ("allowLocalBinding-string", _doc(("network.allowLocalBinding", "true")), "refuse"),
    ("weaker-nested-string", _doc(("enableWeakerNestedSandbox", "yes")), "refuse"),
    ("allowPty-number", _doc(("allowPty", 1)), "refuse"),
    ("allowGitConfig-string", _doc(("filesystem.allowGitConfig", "no")), "refuse"),
    ("disabled-string", _doc(("filesystem.disabled", "true")), "refuse"),
    ("ripgrep-no-command", _doc(("ripgrep", {"args": ["-u"]})), "refuse"),
    ("ripgrep-valid", _doc(("ripgrep", {"command": "rg", "args": ["-u"]})), "accept"),
    ("seccomp-number", _doc(("seccomp", {"applyPath": 3})), "refuse"),
    ("ignoreViolations-not-lists", _doc(("ignoreViolations", {"*": "/tmp"})), "refuse"),
    ("ignoreViolations-valid", _doc(("ignoreViolations", {"*": ["/tmp"]})), "accept"),
    ("git-safe-not-list", _doc(("git", {"safeDirectories": "/repo"})), "refuse"),
    ("empty-path", _doc(("filesystem.allowWrite", [""])), "refuse"),
    ("deniedResolvedAddresses-bad", _doc(("network.deniedResolvedAddresses", ["10.0.0.0/33"])),
     "refuse"),
    ("deniedDomainReasons-empty-reason", _doc(("network.deniedDomains", ["x.com"]),
                                              ("network.deniedDomainReasons", {"x.com": ""})),
     "refuse"),
    ("mitm-no-domains", _doc(("network.mitmProxy", {"socketPath": "/run/m.sock",
                                                    "domains": []})), "refuse"),
    ("parent-not-url", _doc(("network.parentProxy", {"http": "not a url"})), "refuse"),
    ("tls-cert-without-key", _doc(("network.tlsTerminate", {"caCertPath": "/etc/ca.pem"})),
     "refuse"),
    ("deny-glob-trailing-slash", _doc(("filesystem.denyRead", ["/home/*/"])), "refuse"),
    ("deny-glob-at-any-depth", _doc(("filesystem.denyRead", ["/home/**/.env"])), "accept"),
    ("allow-glob-trailing-slash", _doc(("filesystem.allowWrite", ["/tmp/*/"])), "accept"),
]


@pytest.fixture(scope="module")
def srt_verdicts() -> dict[str, str]:
    node = shutil.which("node")
    if node is None or not SCHEMA.exists():
        pytest.skip("srt's schema needs node and the npm package (make setup)")
    out = subprocess.run([node, "--input-type=module", "-e", CHECK, str(SCHEMA)],
                         input=json.dumps([doc for _, doc, _ in CASES]).encode(),
                         capture_output=True, check=True, timeout=60)
    return dict(zip([c for c, _, _ in CASES], json.loads(out.stdout), strict=True))


def _ours(doc: dict[str, Any]) -> str:
    try:
        parse(doc, source="settings.json", complete=True)  # as load() reads a file
    except SettingsError as exc:
        return str(exc)
    return ""


@pytest.mark.parametrize("case,doc,want", CASES, ids=[c for c, _, _ in CASES])
def test_refused_by_srt_and_by_us_alike(srt_verdicts: dict[str, str], case: str,
                                        doc: dict[str, Any], want: str) -> None:
    srt, ours = srt_verdicts[case], _ours(doc)
    if want == "refuse":
        assert srt, f"srt accepts {case}: the table is wrong"
        assert ours, f"srt refuses {case} ({srt}) but we accept it"
    else:
        assert not srt, f"srt refuses the control {case}: {srt}"
        assert not ours, f"we refuse the control {case}: {ours}"


def test_canonical_settings_are_still_a_file_srt_accepts(srt_verdicts: dict[str, str]) -> None:
    """``Settings.to_srt`` (what the srt backend is given) passes srt's schema:
    IPv6 entries go back in brackets."""
    node = shutil.which("node")
    assert node is not None
    doc = _doc(("network.allowedDomains", ["[::1]", "[2001:db8::1]:443", "Example.COM"]),
               ("network.deniedDomains", ["[fe80::1]"]))
    again = parse(doc).to_srt()
    out = subprocess.run([node, "--input-type=module", "-e", CHECK, str(SCHEMA)],
                         input=json.dumps([again]).encode(), capture_output=True, check=True,
                         timeout=60)
    assert json.loads(out.stdout) == [""]
    assert again["network"]["allowedDomains"] == ["[::1]", "[2001:db8::1]:443", "example.com"]
    assert parse(again).network == parse(doc).network
