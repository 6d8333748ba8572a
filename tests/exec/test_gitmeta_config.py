"""What a run may write in a git configuration it owns, judged by its text
(``gitmeta.config_text_why``): the keys git writes itself, a submodule's record,
and a submodule's ``core.worktree`` only inside its superproject's work tree."""

from __future__ import annotations

import pytest

from agent_sandbox.runtime.bwrap import gitmeta

MODULE = "/w/r/.git/modules/s"


@pytest.mark.parametrize(("text", "gitdir", "ok"), [
    ("[core]\n\tbare = false\n", None, True),
    ('[submodule "s"]\n\turl = /src\n\tactive = true\n', "/w/r/.git", True),
    ('[submodule "s"]\n\tupdate = !touch /tmp/x\n', "/w/r/.git", False),
    ('[submodule "s"]\n\tupdate = checkout\n', "/w/r/.git", False),
    ("[core]\n\tworktree = ../../../s\n", MODULE, True),
    ("[core]\n\tworktree = ../../../deep/s\n", "/w/r/.git/modules/deep/s", False),
    ("[core]\n\tworktree = ../../../../deep/s\n", "/w/r/.git/modules/deep/s", True),
    ("[core]\n\tworktree = ../../../../elsewhere\n", MODULE, False),
    ("[core]\n\tworktree = ..\n", MODULE, False),
    ("[core]\n\tworktree = ../../../s/.git/x\n", MODULE, False),
    ("[core]\n\tworktree = /etc\n", MODULE, False),
    ("[core]\n\tworktree = ../../../s\n", "/w/r/.git", False),
    ("[core]\n\tworktree = ../../../s\n", None, False),
    ("[core]\n\tworktree\n", MODULE, False),
    ("[core]\n\tfsmonitor = x\n", MODULE, False),
])
def test_config_text(text: str, gitdir: str | None, ok: bool) -> None:
    why = gitmeta.config_text_why(text.encode(), "config", gitdir)
    assert (why is None) == ok, why
