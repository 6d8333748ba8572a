"""A sandboxed command cannot reach ``sandbox serve`` nor read its token: both judged
from the host, each with an unsandboxed control that shows the probe itself works."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent_sandbox import contract

from .conftest import Server, env

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

PROBE = """
import socket, sys
host, port, token_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    with socket.create_connection((host, port), timeout=3) as s:
        s.sendall(b"GET /api/status HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
        print("CONNECTED", s.recv(64)[:12])
except OSError as exc:
    print("NO-CONNECTION", type(exc).__name__)
try:
    with open(token_file) as fh:
        print("TOKEN", fh.read().strip())
except OSError as exc:
    print("NO-TOKEN", type(exc).__name__)
"""


def run_probe(server: Server, work: Path, sandboxed: Path | None) -> str:
    host, port = server.url.split("//")[1].rstrip("/").rsplit(":", 1)
    argv = [sys.executable, "-I", "-c", PROBE, host, port, str(server.token_file)]
    if sandboxed is not None:
        argv = [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings",
                str(sandboxed), "--", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=work, env=env(), timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_sandboxed_command_cannot_reach_the_server_or_read_its_token(
        server: Server, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    settings = tmp_path / "settings.json"
    # the most the settings can open: local binding allowed, the state folder listed
    # for reading; the token stays hidden and the host's loopback out of reach
    settings.write_text(json.dumps({
        "network": {"allowedDomains": ["localhost", "127.0.0.1"], "deniedDomains": [],
                    "allowLocalBinding": True},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": [],
                       "allowRead": [str(server.token_file.parent)]},
    }))
    control = run_probe(server, work, None)
    assert "CONNECTED" in control and f"TOKEN {server.token}" in control
    inside = run_probe(server, work, settings)
    assert "NO-CONNECTION" in inside, inside
    assert "NO-TOKEN" in inside and server.token not in inside, inside
    # the folder itself is there, empty: hidden, not merely unreadable
    listing = subprocess.run(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", str(settings), "--",
         "ls", "-a", str(server.token_file.parent)], capture_output=True, text=True,
        cwd=work, env=env(), timeout=60)
    assert "token" not in listing.stdout, listing.stdout
    assert os.path.exists(server.token_file)  # and on the host it is untouched


def test_a_sandbox_started_before_the_first_serve_never_reads_the_token_made_later(
        tmp_path: Path) -> None:
    """The token folder first made while a sandbox runs (the account's first ``sandbox
    serve``) must be hidden in that sandbox too: the launcher makes every private
    folder before it plans, so there is always one to hide."""
    state = tmp_path / "state"
    state.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    web = Path(contract.web_dir(str(tmp_path)).replace(
        contract.user_state_dir(str(tmp_path)), str(state)))
    assert not web.exists()
    token = web / "token"
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}}))
    e = {**env(), contract.STATE_DIR_ENV: str(state)}
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", str(settings), "--",
         "sh", "-c", f"echo started; sleep 3; cat {token} 2>&1; ls -a {web}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work, env=e)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    web.mkdir(mode=0o700, exist_ok=True)     # what serve's first start does, meanwhile
    token.write_text("late-secret-token\n")
    out, err = proc.communicate(timeout=60)
    assert token.read_text() == "late-secret-token\n"  # the control: it is there
    assert "late-secret-token" not in out and "token" not in out.split("No such")[-1], out + err


def test_rotating_the_token_keeps_it_hidden_from_a_running_sandbox(tmp_path: Path) -> None:
    """``sandbox serve --rotate-token`` writes the new token into the existing folder,
    which every running sandbox hides where it is: a sandbox running across the rotation
    never reads the old token nor the new one (removing the folder, as rotation once
    meant, dropped the hiding mount with it)."""
    state = tmp_path / "state"
    state.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    e = {**env(), contract.STATE_DIR_ENV: str(state)}
    rotate = [sys.executable, "-I", "-m", "agent_sandbox", "serve", "--rotate-token"]
    first = subprocess.run(rotate, capture_output=True, text=True, env=e, timeout=60)
    assert first.returncode == 0, first.stderr
    token = Path(first.stdout.split("a new token in ", 1)[1].split()[0])
    web = token.parent
    old, folder = token.read_text().strip(), os.stat(web).st_ino
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": [],
                       "allowRead": [str(web)]}}))
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", str(settings), "--",
         "sh", "-c", f"echo started; for i in 1 2 3 4 5 6; do cat {token} 2>/dev/null; "
                     f"ls -a {web}; sleep 0.5; done"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work, env=e)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    again = subprocess.run(rotate, capture_output=True, text=True, env=e, timeout=60)
    assert again.returncode == 0, again.stderr
    out, err = proc.communicate(timeout=60)
    new = token.read_text().strip()
    assert new != old and len(new) >= 40  # the control: rotated on the host
    assert os.stat(web).st_ino == folder  # the same folder, never made again
    assert stat.S_IMODE(os.stat(token).st_mode) == 0o600
    assert old not in out and new not in out and "token" not in out, out + err
    assert [p.name for p in web.iterdir()] == ["token"]  # no temporary file left


def test_every_refusal_of_the_token_file_repairs_in_place(tmp_path: Path) -> None:
    from agent_sandbox.web.auth import AuthError, load_or_create

    web = tmp_path / "web"
    web.mkdir(mode=0o700)
    token = web / "token"
    token.write_text("short\n")
    token.chmod(0o600)
    messages = []
    for prepare in (lambda: None, lambda: token.chmod(0o644), lambda: web.chmod(0o755)):
        prepare()
        with pytest.raises(AuthError) as refused:
            load_or_create(str(token))
        messages.append(str(refused.value))
    assert "--rotate-token" in messages[0]
    assert "chmod 0600" in messages[1] and "chmod 0700" in messages[2]
    for m in messages:
        assert "remove it" not in m and "rm " not in m, m
