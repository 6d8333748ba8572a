"""``sandbox status`` reports a client that would skip our hooks, and each
finding is checked against what the real client then does (the control: the
reported gap is real, and it goes away once closed)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from .harness import SECRET, World
from .model_server import ModelServer, Shell


def findings(world: World) -> list[dict[str, str]]:
    out = world.sandbox("status", str(world.repo), "--json").stdout
    return list(json.loads(out)["clients"])


def test_untrusted_codex_hooks_are_reported_and_really_skipped(world: World) -> None:
    with ModelServer([Shell("cat ~/.ssh/id_ed25519")]) as model:
        world.configure("codex", model.url)
        r = world.sandbox("init", str(world.repo), "--codex", check=False)  # no --trust
        # installed, but init says the hooks are skipped and names what completes it
        assert r.returncode == 3, r.stdout + r.stderr
        assert f"sandbox init --codex --trust {world.repo.resolve()}" in r.stderr, r.stderr
        got = [f for f in findings(world) if f["problem"] == "skips-hooks"]
        assert got and got[0]["client"] == "codex", got
        world.run("codex", model.url, extra=["--sandbox", "danger-full-access"])
        # the report was true: without trust Codex ran the denied read
        assert SECRET in "".join(model.results())
    world.sandbox("init", str(world.repo), "--codex", "--trust")
    assert not [f for f in findings(world) if f["problem"] == "skips-hooks"]


def test_gemini_hooks_disabled_by_a_lower_settings_file(world: World) -> None:
    world.configure("gemini", "http://127.0.0.1:9")
    world.sandbox("init", str(world.repo), "--gemini", "--trust")
    assert not [f for f in findings(world) if f["problem"] == "skips-hooks"]
    settings = json.loads((world.repo / ".gemini" / "settings.json").read_text())
    command = settings["hooks"]["BeforeTool"][0]["hooks"][0]["command"]
    user = world.home / ".gemini" / "settings.json"
    doc = json.loads(user.read_text())
    doc["hooksConfig"] = {"disabled": [command]}
    user.write_text(json.dumps(doc))
    got = [f for f in findings(world) if f["problem"] == "skips-hooks"]
    assert got and "hooksConfig.disabled" in got[0]["detail"], got


def test_claude_hooks_disabled_in_local_settings(world: World) -> None:
    world.sandbox("init", str(world.repo), "--claude")
    (world.repo / ".claude" / "settings.local.json").write_text('{"disableAllHooks": true}')
    got = [f for f in findings(world) if f["client"] == "claude"]
    assert any("disableAllHooks" in f["detail"] for f in got), got


def _break_our_hooks(world: World, keep_on_failure: bool) -> None:
    """The hook's interpreter is gone (as after an upgrade that moved it): every entry
    of ours now names a program that cannot start."""
    path = world.repo / ".claude" / "settings.json"
    doc = json.loads(path.read_text())
    for groups in doc["hooks"].values():
        for g in groups:
            for h in g["hooks"]:
                # the command as rendered before it blocked on its own failure: what
                # blocks here is the client's onFailure alone
                bare = h["command"].split(" || ")[0]
                h["command"] = "/nonexistent/agent-sandbox-python " + bare
                if not keep_on_failure:
                    h.pop("onFailure", None)
    path.write_text(json.dumps(doc))


def test_a_hook_that_cannot_start_blocks_the_call_where_the_client_reads_it(
        world: World) -> None:
    """init finds the installed Claude Code (2.1.295 or later reads onFailure) and
    writes ``onFailure: block``; with the hook's interpreter gone the real client
    then refuses the call. The control: the same broken hook without the key lets
    the call run, and ``sandbox status`` reports that gap."""
    marker = world.repo / "ran.txt"
    for blocks in (False, True):
        with ModelServer([Shell("echo x > ran.txt")]) as model:
            world.configure("claude", model.url)
            world.sandbox("init", str(world.repo), "--claude", on_path="claude")
            settings = json.loads((world.repo / ".claude" / "settings.json").read_text())
            entries = [h for groups in settings["hooks"].values() for g in groups
                       for h in g["hooks"]]
            assert all(h.get("onFailure") == "block" for h in entries), entries
            _break_our_hooks(world, keep_on_failure=blocks)
            if not blocks:
                got = [f for f in findings(world) if f["problem"] == "fails-open"]
                assert got and "onFailure" in got[0]["detail"], got
            # the user allows shell calls (Claude Code's own rule): only our hook judges
            run = world.run("claude", model.url, extra=["--allowedTools", "Bash"])
            said = model.results()
        assert marker.exists() == (not blocks), (blocks, run.stdout[-1500:], run.stderr[-1500:],
                                                 said)
        marker.unlink(missing_ok=True)
        world.sandbox("uninstall", str(world.repo))


def test_cursor_hooks_that_would_fail_open_are_reported(tmp_path: Path) -> None:
    """Cursor runs a call when a hook entry without ``failClosed: true`` crashes or
    times out: such an entry of ours is a finding, in the project's file and the
    user's; the rendered entries are none. (Cursor does not run here.)"""
    import json

    from agent_sandbox import contract
    from agent_sandbox.agent.client_checks import cursor

    repo, home = tmp_path / "repo", tmp_path / "home"
    ours = contract.hook_command("/usr/bin/python3", "cursor", "before-shell-execution")
    for where, entry in ((repo, {"command": ours, "timeout": 60, "failClosed": True}),
                         (home, {"command": "/opt/other-hook"})):
        (where / ".cursor").mkdir(parents=True)
        (where / ".cursor/hooks.json").write_text(json.dumps(
            {"version": 1, "hooks": {"beforeShellExecution": [entry]}}))
    assert cursor(str(repo), str(home)) == []  # ours fail closed; another's is not ours
    (home / ".cursor/hooks.json").write_text(json.dumps(
        {"version": 1, "hooks": {"beforeShellExecution": [{"command": ours}]}}))
    found = cursor(str(repo), str(home))
    assert [(f.client, f.problem) for f in found] == [("cursor", "fails-open")]
    assert str(home / ".cursor/hooks.json") in found[0].detail


def _interpreter_to_lose(world: World) -> Path:
    """An interpreter of its own for the hooks (a virtualenv's layout around the
    base interpreter, with the project's packages): removing it later leaves the
    rendered hook commands, and the trust the clients keep for them, unchanged."""
    import sysconfig

    base = world.root / "hook-python"
    (base / "bin").mkdir(parents=True)
    site = base / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site.mkdir(parents=True)
    (site / "site-packages").symlink_to(sysconfig.get_paths()["purelib"])
    (base / "pyvenv.cfg").write_text((Path(sys.prefix) / "pyvenv.cfg").read_text())
    python = base / "bin" / "python"
    python.symlink_to(os.path.realpath(sys.executable))
    return python


@pytest.mark.parametrize("client", ["codex", "gemini"])
def test_a_hook_whose_interpreter_is_gone_blocks_the_call(world: World, client: str) -> None:
    """The hooks' interpreter goes after ``sandbox init`` (an upgrade moved it): the
    rendered command, and the trust the client keeps for it, are unchanged, and the
    next call is blocked. Codex CLI 0.171.0 on its own runs a call whose PreToolUse
    hook cannot start; the rendered command's exit status 2 blocks it. The control:
    with the interpreter there, the same call runs."""
    python = _interpreter_to_lose(world)
    marker = world.repo / "ran.txt"
    world.sandbox("init", str(world.repo), f"--{client}", "--trust", python=str(python))
    config = world.home / ".codex" / "config.toml"  # the trust init wrote
    trusted = config.read_text() if config.exists() else None
    for present in (True, False):
        if not present:
            python.unlink()
        with ModelServer([Shell("echo x > ran.txt")]) as model:
            if trusted is not None:
                config.write_text(trusted)  # configure adds the model server to it
            world.configure(client, model.url)
            run = world.run(client, model.url)
            said = model.results()
        assert marker.exists() == present, (present, run.stdout[-1500:],
                                            run.stderr[-1500:], said)
        marker.unlink(missing_ok=True)
    told = run.stdout + run.stderr + str(said)
    assert "the call is blocked" in told, (run.stdout[-1500:], run.stderr[-1500:], said)
