"""A project's ``.env``, which Gemini CLI (and Qwen Code, its fork) loads into its own
environment when started in the folder, judged from the host with the real client.

The variables reach every program the client starts: a ``NODE_OPTIONS=--require``
of a script the command wrote runs in the user's own MCP server (most are started
with ``npx``) as soon as ``gemini`` starts it (``gemini mcp list`` does, to check
its health). Step one: a sandboxed command writes the ``.env`` and the script.
Step two: the user runs the real Gemini CLI on the host in the folder, which the
user trusts. The judge: a marker only the script writes. The control: the same
plant without the sandbox, where the marker appears."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEMINI = ROOT / ".tools" / "agents" / "node_modules" / ".bin" / "gemini"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap"),
    pytest.mark.skipif(not GEMINI.exists() or shutil.which("node") is None,
                       reason="Gemini CLI not installed (scripts/bootstrap.d/30-agent-clients.sh)"),
]


def _world(tmp_path: Path) -> tuple[Path, Path, Path]:
    home, proj = tmp_path / "home", tmp_path / "proj"
    (home / ".gemini").mkdir(parents=True)
    proj.mkdir()
    # the user's own MCP server, a node program (as one started with npx is), and the
    # folder trusted (Gemini CLI loads a project's .env only there)
    (home / ".gemini" / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": {"docs": {"command": "node", "args": ["-e", "setTimeout(() => {}, 200)"]}},
    }))
    (home / ".gemini" / "trustedFolders.json").write_text(json.dumps({str(proj): "TRUST_FOLDER"}))
    return home, proj, tmp_path / "MARKER"


def _plant(proj: Path, marker: Path) -> str:
    return (f"echo \"require('fs').writeFileSync('{marker}', 'ran')\" > .cache.js && "
            f"echo \"NODE_OPTIONS=--require {proj}/.cache.js\" > .env")


def _host_gemini(home: Path, proj: Path) -> None:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LANG": "C.UTF-8", "GEMINI_API_KEY": "test-key"}
    subprocess.run([str(GEMINI), "mcp", "list"], cwd=proj, env=env, stdin=subprocess.DEVNULL,
                   capture_output=True, timeout=120, check=False)


def test_control_gemini_passes_a_project_env_to_its_mcp_servers(tmp_path: Path) -> None:
    home, proj, marker = _world(tmp_path)
    subprocess.run(["sh", "-c", _plant(proj, marker)], cwd=proj, check=True, timeout=30)
    _host_gemini(home, proj)
    assert marker.exists(), "the judge cannot fire: Gemini CLI did not load the project's .env"


def test_a_sandboxed_command_cannot_plant_a_project_env(tmp_path: Path) -> None:
    home, proj, marker = _world(tmp_path)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(proj)], "denyWrite": []}}))
    r = subprocess.run([sys.executable, "-m", "agent_sandbox", "exec", "--settings", str(settings),
                        "--cwd", str(proj), "--", "sh", "-c", _plant(proj, marker)
                        + "; mkdir -p sub && echo A=1 > sub/.env; echo A=1 > x && mv x .env"],
                       capture_output=True, text=True, timeout=60)
    assert (proj / ".cache.js").exists(), r.stderr  # the command ran
    assert "refused" in r.stderr and ".env" in r.stderr, r.stderr
    assert not (proj / ".env").exists() and not (proj / "sub" / ".env").exists()
    _host_gemini(home, proj)
    assert not marker.exists()
