"""The copies of Gemini CLI's settings ``sandbox agent`` shows the client
(``agent.gemini_settings``): what switches a protected hook off is removed,
everything else is kept, and a file that cannot be checked stops the run.
The real client reading the copies is in ``test_agent_command``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent_sandbox.agent import gemini_settings as gs
from agent_sandbox.runtime.failures import SandboxStartError

OURS = {"agent-sandbox-pre-tool-use", "/usr/bin/python3 -I -m agent_sandbox hook gemini x"}


@pytest.mark.parametrize("entry", [
    "agent-sandbox-pre-tool-use",
    "/usr/bin/python3 -I -m agent_sandbox hook gemini x",
    "$NAME", "${NAME}", "agent-sandbox-${EVENT:-pre-tool-use}", "${UNSET:-x}",
])
def test_entries_that_name_a_protected_hook_are_removed(entry: str) -> None:
    doc = {"hooksConfig": {"disabled": [entry, "my-own-hook"]}}
    assert gs.keep_hooks_on(doc, OURS)["hooksConfig"]["disabled"] == ["my-own-hook"]


@pytest.mark.parametrize("enabled", [False, None, 0, "false", [], {}])
def test_hooks_cannot_be_switched_off_as_a_whole(enabled: object) -> None:
    doc = {"hooksConfig": {"enabled": enabled}, "ui": {"theme": "x"}}
    out = gs.keep_hooks_on(doc, OURS)
    assert "enabled" not in out["hooksConfig"] and out["ui"] == {"theme": "x"}
    assert doc["hooksConfig"] == {"enabled": enabled}  # the input is not changed


@pytest.mark.parametrize("disabled", ["agent-sandbox-pre-tool-use", {"a": 1}, 7, None])
def test_a_disabled_list_of_another_type_is_dropped(disabled: object) -> None:
    out = gs.keep_hooks_on({"hooksConfig": {"disabled": disabled}}, OURS)
    assert "disabled" not in out["hooksConfig"]


def test_everything_else_is_kept() -> None:
    doc = {"security": {"auth": {"selectedType": "gemini-api-key"}},
           "hooksConfig": {"enabled": True, "disabled": ["mine"], "notifications": False},
           "hooks": {"BeforeTool": [{"hooks": [{"type": "command", "command": "x"}]}]},
           "mcpServers": {"a": {"command": "b"}}}
    assert gs.keep_hooks_on(doc, OURS) == doc


def test_hook_names_read_as_gemini_compares_them() -> None:
    doc = {"hooks": {"BeforeTool": [{"hooks": [{"type": "command", "name": "n1",
                                                "command": "c1"},
                                               {"type": "command", "command": "c2"},
                                               "junk", {"name": 3}]}],
                     "AfterTool": "junk", "X": [7, {"hooks": "junk"}]}}
    assert gs.hook_names(doc) == {"n1", "c1", "c2"}


def _guard(tmp_path: Path, workspace: bytes | None) -> tuple[gs.Guard, Path, Path]:
    home, cwd, held = tmp_path / "home", tmp_path / "repo", tmp_path / "held"
    for d in (home / ".gemini", cwd, held):
        d.mkdir(parents=True)
    if workspace is not None:
        (cwd / ".gemini").mkdir()
        (cwd / ".gemini" / "settings.json").write_bytes(workspace)
    return gs.prepare(str(home), str(cwd), str(held)), home, cwd


def test_workspace_file_is_overlaid_and_its_own_hooks_protected(tmp_path: Path) -> None:
    ws = {"hooks": {"BeforeTool": [{"hooks": [{"type": "command", "name": "repo-hook",
                                               "command": "c"}]}]},
          "hooksConfig": {"disabled": ["repo-hook", "other"]}}
    g, home, cwd = _guard(tmp_path, json.dumps(ws).encode())
    target = str(cwd / ".gemini" / "settings.json")
    assert [o[:2] for o in g.overlays] == [(target, target)]
    copy = g.filters[target](target)
    assert os.path.dirname(copy) == str(tmp_path / "held")
    assert json.loads(Path(copy).read_text())["hooksConfig"]["disabled"] == ["other"]
    assert g.filters[target](target) == copy  # content-addressed: made once
    assert str(home / ".gemini" / "settings.json") in g.filters
    assert g.env == gs.PINNED_ENV


def test_no_workspace_file_no_overlay(tmp_path: Path) -> None:
    g, _, _ = _guard(tmp_path, None)
    assert g.overlays == []


def test_in_the_home_folder_the_user_file_is_the_only_one(tmp_path: Path) -> None:
    home, held = tmp_path / "home", tmp_path / "held"
    (home / ".gemini").mkdir(parents=True)
    held.mkdir()
    (home / ".gemini" / "settings.json").write_text("{}")
    g = gs.prepare(str(home), str(home), str(held))
    assert g.overlays == [] and list(g.filters) == [str(home / ".gemini" / "settings.json"),
                                                    str(home / ".gemini" / ".env")]


@pytest.mark.parametrize("content,message", [
    (b'{"a": 1 // a comment\n}', "not plain JSON"),
    (b'{"a": 1,}', "not plain JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b"\xff\xfe", "not plain JSON"),
    (b" " * (gs.MAX_BYTES + 1), "over"),
])
def test_a_file_that_cannot_be_checked_stops_the_run(tmp_path: Path, content: bytes,
                                                      message: str) -> None:
    with pytest.raises(SandboxStartError, match=message):
        _guard(tmp_path, content)


def test_a_link_or_a_fifo_is_not_read_as_the_copy(tmp_path: Path) -> None:
    g, _, _ = _guard(tmp_path, None)
    secret = tmp_path / "secret.json"
    secret.write_text('{"auths": "SECRET"}')
    link = tmp_path / "link.json"
    link.symlink_to(secret)
    with pytest.raises(SandboxStartError, match="cannot read"):
        g.copy(str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SandboxStartError, match="not a regular file"):
        g.copy(str(fifo))  # opened without blocking, refused without reading


# -- the environment: trust and .env files ------------------------------------


def test_trust_is_pinned_where_a_dotenv_file_cannot_reach_it(tmp_path: Path) -> None:
    g, _, _ = _guard(tmp_path, None)
    assert g.env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert g.env["GEMINI_RESTRICTED_MODE"] == "false"


@pytest.mark.parametrize("advanced", [None, {"ignoreLocalEnv": False}, {"x": 1}, "junk"])
def test_the_copies_ignore_plain_dotenv_files(advanced: object) -> None:
    doc = {"ui": {"theme": "x"}} if advanced is None else {"advanced": advanced}
    out = gs.checked(doc, OURS, set())
    assert out["advanced"]["ignoreLocalEnv"] is True
    if isinstance(advanced, dict) and "x" in advanced:
        assert out["advanced"]["x"] == 1


def test_a_dotenv_copy_keeps_only_the_api_variables() -> None:
    data = (b"GEMINI_API_KEY=k1\n"
            b"export GOOGLE_CLOUD_PROJECT = 'proj-1'\n"
            b"GEMINI_CLI_TRUST_WORKSPACE=false\nGEMINI_RESTRICTED_MODE=true\n"
            b"LD_PRELOAD=/repo/x.so\nBASH_ENV=/repo/rc\nGEMINI_CLI_HOME=/repo\n"
            b"GOOGLE_API_KEY=\"a'b\"\n"  # a quote the plain form cannot hold: dropped
            b"GOOGLE_CLOUD_LOCATION=\"x\nLD_PRELOAD=/y\"\n"  # dotenv: one multi-line value
            b"GEMINI_API_KEY=k2 # the last one wins, as in dotenv\n")
    assert gs.checked_env(data) == b"GEMINI_API_KEY='k2'\nGOOGLE_CLOUD_PROJECT='proj-1'\n"


def test_every_dotenv_file_gemini_may_load_is_a_checked_copy(tmp_path: Path) -> None:
    g, home, cwd = _guard(tmp_path, None)
    sub = cwd / "a" / "b"
    sub.mkdir(parents=True)
    for d in (cwd, sub):
        (d / ".gemini").mkdir(exist_ok=True)
        (d / ".gemini" / ".env").write_text("GEMINI_CLI_TRUST_WORKSPACE=false\nGEMINI_API_KEY=k\n")
    (cwd / ".env").write_text("X=1\n")  # a plain .env: never loaded, not overlaid
    g = gs.prepare(str(home), str(sub), str(tmp_path / "held"))
    found = [str(sub / ".gemini" / ".env"), str(cwd / ".gemini" / ".env")]
    assert [o[:2] for o in g.overlays] == [(f, f) for f in found]
    for f in [*found, str(home / ".gemini" / ".env")]:
        assert f in g.filters
    copy = g.filters[found[0]](found[0])
    assert Path(copy).read_bytes() == b"GEMINI_API_KEY='k'\n"
    link = tmp_path / "link.env"
    link.symlink_to(found[0])
    with pytest.raises(SandboxStartError, match="cannot read"):
        g.copy_env(str(link))


def test_a_system_file_that_lets_dotenv_files_in_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "system.json"
    monkeypatch.setattr(gs, "SYSTEM_SETTINGS", str(system))
    system.write_text(json.dumps({"advanced": {"ignoreLocalEnv": True}}))
    _guard(tmp_path, None)  # on: fine
    system.write_text(json.dumps({"advanced": {"ignoreLocalEnv": False}}))
    with pytest.raises(SandboxStartError, match="ignoreLocalEnv"):
        gs.prepare(str(tmp_path / "home"), str(tmp_path / "repo"), str(tmp_path / "held"))


def test_only_our_before_tool_hooks_are_kept() -> None:
    ours = gs.our_commands({"sys-cmd"})
    rendered = next(c for c in ours if " gemini before-tool" in c)
    # exactly what ``sandbox init`` renders for this interpreter
    import sys

    from agent_sandbox.inventory import HostFacts
    from agent_sandbox.render.agents import hook_command

    facts = HostFacts(name="h", os="linux", python=sys.executable)
    assert rendered == hook_command(facts, "gemini", "before-tool")
    doc = {"hooks": {
        "BeforeTool": [
            {"matcher": "x", "hooks": [{"type": "command", "command": "rewrite"},
                                       {"type": "command", "command": rendered}]},
            {"hooks": [{"type": "command", "command": "rewrite"}]},
            {"hooks": [{"type": "runtime", "name": "r", "command": "sys-cmd"}]},
            "junk"],
        "AfterTool": [{"hooks": [{"type": "command", "command": "log"}]}]}}
    out = gs.only_our_hooks(doc, ours, frozenset({"BeforeTool"}))
    assert out["hooks"]["BeforeTool"] == [
        {"matcher": "x", "hooks": [{"type": "command", "command": rendered}]}]
    assert out["hooks"]["AfterTool"] == doc["hooks"]["AfterTool"]
    assert len(doc["hooks"]["BeforeTool"]) == 4  # the input is not changed


def test_the_repository_copy_starts_no_program_but_ours() -> None:
    ours = gs.our_commands(set())
    session = next(c for c in ours if c.endswith("session-start"))
    doc = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "evil"},
                                                 {"type": "command", "command": session}]}],
                     "AfterTool": [{"hooks": [{"type": "command", "command": "evil"}]}]},
           "tools": {"discoveryCommand": "evil", "callCommand": "evil", "exclude": ["x"]},
           "advanced": {"bugCommand": {"urlTemplate": "x"}},
           "mcpServers": {"agent-sandbox": {"command": "kept"}}}
    out = gs.checked(doc, OURS, ours, workspace=True)
    assert out["hooks"] == {"SessionStart": [{"hooks": [{"type": "command",
                                                          "command": session}]}],
                            "AfterTool": []}
    assert out["tools"] == {"exclude": ["x"]}
    assert out["advanced"] == {"ignoreLocalEnv": True}
    assert out["mcpServers"] == doc["mcpServers"]
    user = gs.checked(doc, OURS, ours)  # the user's own hooks of other events stay
    assert user["hooks"]["AfterTool"] == doc["hooks"]["AfterTool"]
    assert user["tools"] == doc["tools"]
