"""The real srt (@anthropic-ai/sandbox-runtime, installed by scripts/bootstrap.sh
under .tools/) accepts the settings we render, and enforces them as written.

If srt could not start sandboxes on a machine, the parse check alone still
proves srt read our file: srt refuses an invalid settings file with a config
error before it tries to sandbox anything."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import render
from agent_sandbox.render.srt import SYSTEM_SETTINGS
from agent_sandbox.spec.loader import load_stack, parse_yaml

from .conftest import EXAMPLE_FLEET, SRT

pytestmark = pytest.mark.slow

CONFIG_ERROR = "does not hold a valid config"


@pytest.fixture(scope="module")
def srt() -> Path:
    if not SRT.exists():
        subprocess.run(["bash", str(SRT.parents[3] / "scripts" / "bootstrap.sh")], check=False,
                       capture_output=True, timeout=900)
    assert SRT.exists(), "srt is missing: run `make setup` (scripts/bootstrap.sh installs it)"
    return SRT


def run_srt(srt: Path, settings: Path, command: str) -> subprocess.CompletedProcess[str]:
    """srt in the settings file's own folder: srt mounts its mandatory-deny
    placeholders in the working directory, and two runs sharing one (the
    checkout, where pytest runs) race on them ("Can't find source path")."""
    return subprocess.run([str(srt), "-s", str(settings), "-c", command],
                          capture_output=True, text=True, timeout=120, cwd=settings.parent)


def test_srt_rejects_an_invalid_file(srt: Path, tmp_path: Path) -> None:
    """The control: srt really validates the file it is given."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"network": {"allowedDomains": ["https://x.com/"],
                                           "deniedDomains": []},
                               "filesystem": {"denyRead": [], "allowWrite": [],
                                              "denyWrite": []}}))
    result = run_srt(srt, bad, "true")
    assert result.returncode != 0
    assert CONFIG_ERROR in result.stderr


@pytest.mark.parametrize("host", ["dev-linux-01", "ds-linux-01", "ci-runner-01"])
def test_srt_accepts_every_rendered_settings_file(srt: Path, tmp_path: Path, host: str) -> None:
    arts = FleetRenderer.from_path(str(EXAMPLE_FLEET)).render_host(host)
    files = [a for a in arts.values() if a.kind == "srt-settings"]
    assert any(a.target == SYSTEM_SETTINGS for a in files)
    assert len(files) >= 2  # system-wide and per user
    for i, art in enumerate(files):
        path = tmp_path / f"{i}.json"
        path.write_bytes(art.content)
        result = run_srt(srt, path, "true")
        assert CONFIG_ERROR not in result.stderr, (art.target, result.stderr)
        assert result.returncode == 0, (art.target, result.stderr)


def test_srt_enforces_what_we_rendered(srt: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("top secret\n")
    out = tmp_path / "out"
    out.mkdir()
    spec = load_stack([parse_yaml(
        f"filesystem:\n  deny_read: [{secret}]\n  allow_write: [{out}]\n"
        "network:\n  allowed_domains: [github.com]\n", "spec.yml")])
    facts = HostFacts("h", "linux", (User("u", str(tmp_path)),), ())
    settings = tmp_path / "settings.json"
    settings.write_bytes(render(spec, facts)[f"{tmp_path}/.srt-settings.json"].content)
    result = run_srt(srt, settings, f"cat {secret}/key")
    assert "top secret" not in result.stdout and result.returncode != 0
    result = run_srt(srt, settings, f"echo ok > {out}/f && echo ok > {tmp_path}/outside")
    assert (out / "f").read_text() == "ok\n"
    assert not (tmp_path / "outside").exists()
    assert result.returncode != 0


def test_srt_accepts_what_our_backend_hands_it(srt: Path, tmp_path: Path) -> None:
    """The srt backend passes srt its own keys through (``Settings.to_srt``): srt
    validates the result, port entries, credentials and all, and enforces it."""
    from agent_sandbox.runtime.settings import parse

    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "token").write_text("TOPSECRET\n")
    doc = parse({
        "network": {"allowedDomains": ["GitHub.com.:443", "*.npmjs.org"],
                    "deniedDomains": ["*:22", "[2001:db8::1]:443"],
                    "deniedDomainReasons": {"*:22": "use https"},
                    "deniedResolvedAddresses": ["10.0.0.0/8", "fc00::/7"],
                    "strictAllowlist": True},
        "filesystem": {"denyRead": [], "allowWrite": [str(out)], "denyWrite": []},
        "credentials": {"files": [{"path": str(tmp_path / "token"), "mode": "deny"}],
                        "envVars": [{"name": "API_TOKEN", "mode": "deny"}]},
        "mandatoryDenySearchDepth": 6,
    }).to_srt()
    assert doc["network"]["allowedDomains"][0] == "github.com:443"
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(doc))
    result = subprocess.run([str(srt), "-s", str(settings), "-c",
                             f"echo token=${{API_TOKEN-unset}}; cat {tmp_path}/token"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env={**os.environ, "API_TOKEN": "TOPSECRET"})
    assert CONFIG_ERROR not in result.stderr, result.stderr
    assert "token=unset" in result.stdout
    assert "TOPSECRET" not in result.stdout
