"""The policy for a call is the registered repository's, never a ``.sandbox/``
planted in a subfolder."""

from __future__ import annotations

import os
from pathlib import Path

from agent_sandbox.policy import registry

from .conftest import claude_pre, decision_of, make_repo, run_hook


def test_a_planted_sandbox_folder_is_not_the_policy(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".env").write_text("TOKEN=x\n")
    sub = repo / "sub"
    permissive = {"filesystem": {"allow_write": ["."]}, "commands": {"default": "allow"}}
    make_repo(sub, permissive)      # a complete .sandbox/ folder, as if planted
    registry.unregister(str(sub), os.path.expanduser("~"))
    (sub / ".env").write_text("TOKEN=x\n")
    p = run_hook("claude", "pre-tool-use", claude_pre("cat .env", sub))
    assert decision_of(p)[0] == "deny", p.stdout   # the repository's deny_read **/.env
    # control: the same call in a registered folder with that policy is allowed
    registry.register(str(sub), os.path.expanduser("~"))
    try:
        p = run_hook("claude", "pre-tool-use", claude_pre("cat .env", sub))
        assert decision_of(p)[0] == "allow", p.stdout
    finally:
        registry.unregister(str(sub), os.path.expanduser("~"))


def test_registry_finds_the_nearest_registered_ancestor(tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    a = tmp_path / "a"
    (a / "b" / "c").mkdir(parents=True)
    (a / "b" / ".sandbox").mkdir()           # exists, but was never registered
    assert registry.repository_of(str(a / "b" / "c"), home) is None
    registry.register(str(a), home)
    assert registry.repository_of(str(a / "b" / "c"), home) == str(a.resolve())
    os.symlink(a / "b", tmp_path / "link")
    assert registry.repository_of(str(tmp_path / "link"), home) == str(a.resolve())
    registry.unregister(str(a), home)
    assert registry.repository_of(str(a / "b"), home) is None
    # a broken registry counts as empty
    Path(registry.registry_path(home)).write_text("{not json")
    assert registry.repository_of(str(a), home) is None
