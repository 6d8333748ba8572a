"""``sandbox validate`` / ``render`` / ``schema`` as a user runs them: a real
subprocess, one ``file:line:col: key: message`` line per problem, exit 1, and
never a traceback."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import jsonschema

from .conftest import EXAMPLE_FLEET, run_cli, write

LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<key>[^:]+): (?P<msg>.+)$")


def problem_lines(stderr: str) -> list[tuple[str, int, int, str, str]]:
    out = []
    for raw in stderr.splitlines():
        m = LINE.match(raw)
        if m:
            out.append((Path(m["file"]).name, int(m["line"]), int(m["col"]), m["key"], m["msg"]))
    return out


def test_broken_spec_gives_one_precise_line_per_problem(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", """
        filesystem:
          deny_read: ["~/.ssh", "**/.env"]
        network:
          allowed_domains: [github.com]
    """)
    repo = write(tmp_path / "repo.yml", """
        # a repository layer with four different mistakes
        network:
          allowed_domains:
            - github.com
            - "https://pypi.org/simple"
          allow_local_bind: true
        filesystem:
          allow_read: ["~/.ssh/id_rsa"]
        approvals:
          ttl: [30m]
    """)
    result = run_cli("validate", str(fleet), str(repo))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    found = problem_lines(result.stderr)
    assert [(f, line, col, key) for f, line, col, key, _ in found] == [
        ("repo.yml", 5, 7, "network.allowed_domains[1]"),
        ("repo.yml", 6, 3, "network.allow_local_bind"),
        ("repo.yml", 10, 3, "approvals.ttl"),
    ]
    assert "no scheme" in found[0][4]
    assert found[1][4] == "unknown key"
    assert "duration" in found[2][4]
    assert result.stderr.strip().endswith("3 problems found")
    # the per-layer problems hide the merge; fix them and the loosening shows up
    write(repo, """
        network:
          allowed_domains: [github.com]
        filesystem:
          allow_read: ["~/.ssh/id_rsa"]
    """)
    result = run_cli("validate", str(fleet), str(repo))
    assert result.returncode == 1
    [(f, line, col, key, msg)] = problem_lines(result.stderr)
    assert (f, line, col, key) == ("repo.yml", 4, 16, "filesystem.allow_read[0]")
    assert f"{fleet}:1:1 (its default)" in msg
    assert "Traceback" not in result.stderr


def test_repo_layer_loosening_a_managed_deny(tmp_path: Path) -> None:
    fleet = write(tmp_path / "fleet.yml", """
        filesystem:
          deny_read: ["~/.aws"]
        commands:
          default: deny
    """)
    repo = write(tmp_path / "repo.yml", """
        filesystem:
          allow_read: ["~/.aws/credentials"]
        commands:
          default: escalate
    """)
    result = run_cli("validate", str(fleet), str(repo))
    assert result.returncode == 1
    found = problem_lines(result.stderr)
    assert [(f, line, key) for f, line, _, key, _ in found] == [
        ("repo.yml", 2, "filesystem.allow_read[0]"), ("repo.yml", 4, "commands.default"),
    ]
    assert f"{fleet}:4:3" in found[1][4]


def test_each_flag_checks_files_separately(tmp_path: Path) -> None:
    good = write(tmp_path / "good.yml", "network: {allowed_domains: [github.com]}\n")
    bad = write(tmp_path / "bad.yml", "network: {allowed_domains: ['*.com']}\n")
    result = run_cli("validate", "--each", str(good), str(bad))
    assert result.returncode == 1
    assert [f for f, *_ in problem_lines(result.stderr)] == ["bad.yml"]
    assert run_cli("validate", str(good)).returncode == 0


def test_unreadable_inputs_are_problems_not_tracebacks(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    result = run_cli("validate", str(tmp_path / "missing.yml"), str(binary), str(tmp_path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    msgs = result.stderr
    assert "missing.yml:1:1: <document>: file not found" in msgs
    assert "not UTF-8" in msgs
    assert "no hosts.yml" in msgs


def test_example_fleet_validates() -> None:
    result = run_cli("validate", str(EXAMPLE_FLEET))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok:")


def test_render_writes_files_and_manifest(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("render", str(EXAMPLE_FLEET), "--host", "dev-linux-01", "--out", str(out))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    entries = manifest["artifacts"]
    targets = [e["target"] for e in entries]
    assert "/etc/claude-code/managed-settings.json" in targets
    assert "/home/alice/src/app/.claude/settings.json" in targets
    assert targets == sorted(targets)
    files = {p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert len(files) == len(entries)
    for e in entries:
        path = out / e["target"].lstrip("/")
        assert hashlib.sha256(path.read_bytes()).hexdigest() == e["sha256"]
        assert int(e["mode"], 8) == path.stat().st_mode & 0o777
        assert e["kind"] and isinstance(e["kind"], str)


def test_render_windows_host_maps_drive_letters(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_cli("render", str(EXAMPLE_FLEET), "--host", "dev-win-01", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "c" / "Program Files" / "ClaudeCode" / "managed-settings.json").is_file()
    assert (out / "c" / "Users" / "grace" / "src" / "app" / ".claude" / "settings.json").is_file()


def test_render_unknown_host_and_broken_spec(tmp_path: Path) -> None:
    result = run_cli("render", str(EXAMPLE_FLEET), "--host", "nope", "--out", str(tmp_path / "o"))
    assert result.returncode == 1
    assert "host 'nope' is not in the inventory" in result.stderr
    assert not (tmp_path / "o").exists()
    bad = write(tmp_path / "bad.yml", "network: {allowed_domains: ['*']}\n")
    result = run_cli("render", str(bad), "--host", "h", "--out", str(tmp_path / "o"))
    assert result.returncode == 1
    assert "bad.yml:1:29: network.allowed_domains[0]:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_schema_is_a_valid_json_schema(tmp_path: Path) -> None:
    result = run_cli("schema")
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    validator = jsonschema.validators.validator_for(schema)
    assert validator is jsonschema.Draft202012Validator
    validator.check_schema(schema)  # against the draft 2020-12 meta-schema
    v = validator(schema)
    good = {"network": {"allowed_domains": ["github.com"]}, "agents": {"codex": {}}}
    assert not list(v.iter_errors(good))
    assert list(v.iter_errors({"network": {"allowed_domain": []}}))  # unknown key
    assert list(v.iter_errors({"commands": {"default": "sometimes"}}))
    assert "filesystem" in schema["properties"]


def test_validate_inventory_checks_host_facts_and_every_stack(tmp_path: Path) -> None:
    inv = tmp_path / "fleet"
    shutil.copytree(EXAMPLE_FLEET, inv)
    hosts = (inv / "hosts.yml").read_text().replace("sandbox_os: windows", "sandbox_os: win11")
    (inv / "hosts.yml").write_text(hosts)
    write(inv / "sandbox" / "hosts" / "ds-mac-01.yml",
          "network: {allowed_domains: [example.org]}\n")
    result = run_cli("validate", str(inv))
    assert result.returncode == 1
    found = problem_lines(result.stderr)
    assert sorted(key for *_, key, _ in found) == [
        "dev-win-01.sandbox_os", "ds-win-01.sandbox_os", "network.allowed_domains[0]"]
    loosen = next(msg for f, *_, msg in found if f == "ds-mac-01.yml")
    assert "groups/data_science.yml:4:3" in loosen


def test_render_never_follows_a_link_out_of_the_output_folder(tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "etc").symlink_to(elsewhere)
    result = run_cli("render", str(EXAMPLE_FLEET), "--host", "dev-linux-01", "--out", str(out))
    assert result.returncode == 1
    assert "is a symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert not any(elsewhere.rglob("*"))
