"""srt-format settings parsing, and the hand-written seccomp program."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from agent_sandbox.runtime.bwrap import seccomp
from agent_sandbox.runtime.run import default_path
from agent_sandbox.runtime.settings import SettingsError, load, parse

SRT_EXAMPLE = {
    "network": {
        "allowedDomains": ["github.com", "*.github.com", "registry.npmjs.org"],
        "deniedDomains": ["gist.github.com"],
        "allowLocalBinding": False,
        "allowUnixSockets": ["/var/run/docker.sock"],
    },
    "filesystem": {
        "denyRead": ["~/.ssh", "**/.env"],
        "allowWrite": [".", "/tmp"],
        "denyWrite": [".env"],
    },
    "ignoreViolations": {"*": ["/usr/bin"]},
    "enableWeakerNestedSandbox": False,
}


def test_srt_file_accepted_unchanged(tmp_path: Path) -> None:
    f = tmp_path / "srt.json"
    f.write_text(json.dumps(SRT_EXAMPLE))
    s = load(str(f))
    assert s.network.allowed_domains == ("github.com", "*.github.com", "registry.npmjs.org")
    assert s.network.denied_domains == ("gist.github.com",)
    assert s.network.allow_unix_sockets == ("/var/run/docker.sock",)
    assert s.filesystem.deny_read == ("~/.ssh", "**/.env")
    assert s.filesystem.allow_write == (".", "/tmp")


def test_round_trip() -> None:
    s = parse(SRT_EXAMPLE)
    assert parse(s.to_srt()) == parse(s.to_srt())
    assert s.to_srt()["network"]["allowedDomains"] == SRT_EXAMPLE["network"]["allowedDomains"]


def test_domains_are_canonicalised() -> None:
    s = parse({"network": {"allowedDomains": ["GitHub.COM.", "Bücher.example"]}})
    assert s.network.allowed_domains == ("github.com", "xn--bcher-kva.example")


@pytest.mark.parametrize("doc,fragment", [
    ([], "must be a JSON object"),
    ({"network": []}, "network: expected an object"),
    ({"network": {"allowedDomains": "github.com"}}, "allowedDomains: expected a list"),
    ({"network": {"allowedDomains": ["*"]}}, "would allow every domain"),
    ({"network": {"allowedDomains": ["*.com"]}}, "too broad"),
    ({"network": {"allowedDomains": ["https://github.com"]}}, "no scheme"),
    ({"network": {"allowLocalBinding": "yes"}}, "allowLocalBinding: expected true or false"),
    ({"network": {"httpProxyPort": 70000}}, "httpProxyPort: expected a port"),
    ({"filesystem": {"denyRead": [""]}}, "empty entry"),
    ({"filesystem": {"allowWrite": ["~bob/x"]}}, "only '~' and '~/...'"),
    ({"filesystem": {"denyWrite": ["a\x00b"]}}, "NUL"),
])
def test_bad_settings_are_refused_with_the_key(doc: object, fragment: str) -> None:
    with pytest.raises(SettingsError) as err:
        parse(doc, source="s.json")
    assert fragment in str(err.value)


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text("{nope")
    with pytest.raises(SettingsError, match="not valid JSON"):
        load(str(f))
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load(str(tmp_path / "missing.json"))


def test_default_path_prefers_system_then_user(tmp_path: Path) -> None:
    from agent_sandbox.contract import SYSTEM_SRT_SETTINGS

    if Path(SYSTEM_SRT_SETTINGS).exists():
        pytest.skip("a system settings file exists on this host")
    with pytest.raises(SettingsError, match="--settings FILE"):
        default_path(str(tmp_path))
    (tmp_path / ".srt-settings.json").write_text("{}")
    assert default_path(str(tmp_path)) == str(tmp_path / ".srt-settings.json")


# -- seccomp ---------------------------------------------------------------------


def decode(prog: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_program_checks_arch_first_and_ends_in_returns(machine: str) -> None:
    ins = decode(seccomp.program(machine=machine))
    assert ins[0] == (0x20, 0, 0, 4)  # load arch
    assert ins[1][0] == 0x15 and ins[1][3] == seccomp.ARCHES[machine]["audit"]
    assert ins[2] == (0x06, 0, 0, seccomp.RET_KILL)
    assert ins[-1][0] == 0x06
    assert len(ins) < 255


def test_unix_sockets_rule_depends_on_settings() -> None:
    strict = decode(seccomp.program(machine="x86_64"))
    loose = decode(seccomp.program(machine="x86_64", allow_unix=True))
    # the loose program has exactly one more test: domain == AF_UNIX -> the stream check
    assert len(loose) == len(strict) + 1
    extra = [i for i in loose if i not in strict or loose.count(i) != strict.count(i)]
    assert any(i[0] == 0x15 and i[3] == seccomp.AF_UNIX for i in extra)


def test_unknown_architecture_refuses() -> None:
    with pytest.raises(seccomp.SeccompError, match="x86_64 and aarch64"):
        seccomp.program(machine="riscv64")


def test_jumps_stay_in_range() -> None:
    ins = decode(seccomp.program(machine="x86_64"))
    for n, (code, jt, jf, _) in enumerate(ins):
        if code & 0x07 == 0x05:  # BPF_JMP
            assert n + 1 + jt < len(ins) and n + 1 + jf < len(ins)
