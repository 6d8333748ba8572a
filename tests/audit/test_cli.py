"""`sandbox audit ...` end to end through the real entry point, and request correlation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from agent_sandbox.audit import AuditLog
from agent_sandbox.audit.trail import LIFECYCLE, Trail

from .conftest import make_log, read_lines, write_lines


def sandbox(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_sandbox", "audit", *args],
        capture_output=True, text=True, timeout=timeout,
    )


def test_verify_exit_codes_and_first_bad_record(logdir: Path) -> None:
    make_log(logdir, 6, checkpoint_every=5)
    r = sandbox("verify", str(logdir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OK: 6 records") and "checkpoints up to record 5" in r.stdout
    assert "not yet covered by a signed checkpoint" in r.stderr
    lines = read_lines(logdir)
    lines[2] = lines[2].replace(b"echo 3", b"echo 4")
    write_lines(logdir, lines)
    r = sandbox("verify", str(logdir))
    assert r.returncode == 1
    assert r.stdout.strip().startswith("FAIL: line 3 (seq 3): edited:")
    r = sandbox("verify", "--json", str(logdir))
    assert r.returncode == 1 and json.loads(r.stdout)["problem"]["line"] == 3


def test_bad_input_gives_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    for args in (["verify", str(tmp_path / "nope")], ["show", str(tmp_path)],
                 ["export", str(tmp_path), "--format", "xml"],
                 ["verify", str(tmp_path), "--key", "not-a-key"]):
        r = sandbox(*args)
        assert r.returncode == 2, args
        assert "Traceback" not in r.stderr and r.stderr.startswith("sandbox audit: "), r.stderr


def test_show_filters_by_request_time_and_verdict(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    t1 = Trail(log, actor="alice", agent="claude", session="s-1", cwd="/repo")
    t2 = Trail(log, actor="bob", agent="codex", session="s-2", cwd="/other")
    t1.emit("request", tool="Bash", command="ls")
    t2.emit("request", tool="Bash", command="rm -rf /")
    t1.emit("decision", verdict="allow")
    t2.emit("decision", verdict="deny", reason="destructive")
    middle = json.loads(read_lines(logdir)[-1])["ts"]
    time.sleep(0.01)
    t1.emit("result", exit_code=0)

    r = sandbox("show", str(logdir), "--request-id", t2.request_id, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [x["event"] for x in json.loads(r.stdout)] == ["request", "decision"]
    r = sandbox("show", str(logdir), "--verdict", "deny", "--format", "jsonl")
    assert [json.loads(x)["reason"] for x in r.stdout.splitlines()] == ["destructive"]
    r = sandbox("show", str(logdir), "--since", middle, "--format", "json")
    assert [x["event"] for x in json.loads(r.stdout)] == ["decision", "result"]
    r = sandbox("show", str(logdir), "--until", middle, "--format", "json")
    assert len(json.loads(r.stdout)) == 4
    r = sandbox("show", str(logdir))
    assert r.stdout.splitlines()[0].split()[:5] == ["SEQ", "TIME", "EVENT", "REQUEST", "VERDICT"]
    assert len(r.stdout.splitlines()) == 6
    r = sandbox("show", str(logdir), "--since", "yesterday")
    assert r.returncode == 2 and "RFC 3339" in r.stderr


def test_a_full_action_is_correlated_with_who_where_and_timing(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    trail = Trail(log, actor="alice", agent="claude", session="s-9", cwd="/repo")
    log.append("proxy_decision", host="pypi.org", verdict="allow")  # unrelated noise
    for event in LIFECYCLE:
        if event == "denial":
            continue  # approved, so no denial
        trail.emit(event, tool="Bash")
        if event == "sandbox_started":
            time.sleep(0.02)
    r = sandbox("show", str(logdir), "--request-id", trail.request_id, "--format", "json")
    got = json.loads(r.stdout)
    assert [x["event"] for x in got] == [e for e in LIFECYCLE if e != "denial"]
    for x in got:
        who = (x["actor"], x["agent"], x["session"], x["cwd"])
        assert who == ("alice", "claude", "s-9", "/repo")
    elapsed = [x["elapsed_ms"] for x in got]
    assert elapsed == sorted(elapsed)
    completed = next(x for x in got if x["event"] == "completed")
    assert completed["duration_ms"] >= 20


def test_tail_follow_prints_new_records(logdir: Path) -> None:
    make_log(logdir, 3)
    p = subprocess.Popen(
        [sys.executable, "-m", "agent_sandbox", "audit", "tail", "-f", "-n", "1", str(logdir)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert p.stdout is not None
        assert json.loads(p.stdout.readline())["seq"] == 3
        AuditLog(logdir, sync="none").append("denial", request_id="live", verdict="deny")
        rec = json.loads(p.stdout.readline())
        assert (rec["seq"], rec["request_id"]) == (4, "live")
    finally:
        p.terminate()
        p.wait(10)
    r = sandbox("tail", "-n", "2", str(logdir))
    assert [json.loads(x)["seq"] for x in r.stdout.splitlines()] == [3, 4]


def test_repair_seals_a_torn_write_and_refuses_other_damage(logdir: Path) -> None:
    make_log(logdir, 4)
    fd = os.open(logdir / "audit.jsonl", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b'{"event":"decision","pr')
    os.close(fd)
    r = sandbox("verify", str(logdir))
    assert r.returncode == 1 and "line 5: torn" in r.stdout
    r = sandbox("repair", str(logdir))
    assert r.returncode == 0 and "sealed 23 torn bytes" in r.stdout
    assert sandbox("verify", str(logdir)).returncode == 0
    assert "nothing to repair" in sandbox("repair", str(logdir)).stdout
    lines = read_lines(logdir)
    lines[0] = lines[0].replace(b"echo 1", b"echo 9")
    write_lines(logdir, lines)
    before = (logdir / "audit.jsonl").read_bytes()
    r = sandbox("repair", str(logdir))
    assert r.returncode == 1 and "refusing to repair" in r.stderr
    assert (logdir / "audit.jsonl").read_bytes() == before  # evidence untouched


def test_a_repository_path_finds_its_log(tmp_path: Path) -> None:
    make_log(tmp_path / ".sandbox" / "audit", 2)
    r = sandbox("verify", str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("OK: 2 records")


def test_checkpoint_command_signs_now(logdir: Path) -> None:
    make_log(logdir, 3)
    r = sandbox("checkpoint", str(logdir))
    assert r.returncode == 0 and r.stdout.split("\n")[1] == "3"
    assert sandbox("verify", str(logdir)).stdout.startswith("OK: 3 records")
