"""``bwrap.plan(opened=...)``: a client's state folder that ``sandbox agent``
opens inside the protected set is writable only when opened and listed in
``allowWrite``; what ``denyWrite`` names inside it, and the protected set's
names, stay read-only; an enclosing writable root's walk does not close it
again. Pure, over the fake filesystem."""

from __future__ import annotations

from test_bwrap_plan import BASE, CWD, HOME, FakeFs, ops

from agent_sandbox.runtime.bwrap import argv as bwargv
from agent_sandbox.runtime.bwrap import plan as bw
from agent_sandbox.runtime.settings import parse

GEMINI = {"/home/u/.gemini/settings.json": "f", "/home/u/.gemini/tmp/x/chat.json": "f",
          "/home/u/.gemini/tmp/x/.git/config": "f", "/home/u/.gemini/oauth_creds.json": "f"}


def plan(settings: dict, opened: tuple[str, ...] = ()) -> bw.Plan:
    fs = FakeFs({**BASE, **GEMINI})
    return bw.plan(parse(settings), home=HOME, cwd=CWD, fs=fs, opened=opened)


def test_a_protected_folder_is_writable_only_when_opened() -> None:
    settings = {"filesystem": {"allowWrite": ["~/.gemini"],
                               "denyWrite": ["~/.gemini/settings.json"]}}
    assert ("rw", "/home/u/.gemini") not in ops(plan(settings))  # the control
    o = ops(plan(settings, ("/home/u/.gemini",)))
    assert ("rw", "/home/u/.gemini") in o
    assert ("ro", "/home/u/.gemini/settings.json") in o
    assert o.index(("rw", "/home/u/.gemini")) < o.index(("ro", "/home/u/.gemini/settings.json"))
    assert ("ro", "/home/u/.gemini/tmp/x/.git/config") in o  # the protected set inside


def test_opening_needs_allow_write_and_never_beats_deny_write() -> None:
    assert ("rw", "/home/u/.gemini") not in ops(plan({}, ("/home/u/.gemini",)))
    denied = {"filesystem": {"allowWrite": ["~/.gemini"], "denyWrite": ["~/.gemini"]}}
    assert ("rw", "/home/u/.gemini") not in ops(plan(denied, ("/home/u/.gemini",)))


def test_an_enclosing_writable_root_does_not_close_an_opened_folder() -> None:
    settings = {"filesystem": {"allowWrite": ["~", "~/.gemini"],
                               "denyWrite": ["~/.gemini/settings.json"]}}
    o = ops(plan(settings, ("/home/u/.gemini",)))
    assert ("ro", "/home/u/.gemini") not in o
    assert ("ro", "/home/u/.gemini/settings.json") in o
    assert ("ro", "/home/u/.bashrc") in o  # the rest of the protected set is untouched
    closed = ops(plan(settings))
    assert ("ro", "/home/u/.gemini") in closed  # the control


def test_overlays_go_over_the_plan_and_hidden_inputs_get_their_placeholder() -> None:
    """``sandbox agent``'s private state folder (``BwrapRun(overlays=...)``): bound after
    every mount of the plan (so it covers the host's folder), the host's inputs read-only
    on top, and one the settings hide for reading replaced by its placeholder."""
    from agent_sandbox.runtime.bwrap.argv import overlay_binds

    settings = {"filesystem": {"denyRead": ["~/.gemini/oauth_creds.json"],
                               "allowWrite": [CWD]}}
    p = plan(settings)
    overlays = [("/state/view/.gemini", "/home/u/.gemini", None),
                ("/home/u/.gemini/settings.json", "/home/u/.gemini/settings.json", "/held/s"),
                ("/home/u/.gemini/oauth_creds.json", "/home/u/.gemini/oauth_creds.json",
                 "/held/o")]
    binds = overlay_binds(p, overlays)
    assert binds == [("/state/view/.gemini", "/home/u/.gemini", True),
                     ("/home/u/.gemini/settings.json", "/home/u/.gemini/settings.json", False),
                     ("/held/o", "/home/u/.gemini/oauth_creds.json", False)]
    argv = bwargv.build_argv(p, ["true"], cwd=CWD, overlays=binds)
    at = argv.index("/state/view/.gemini")
    assert argv[at - 1:at + 2] == ["--bind", "/state/view/.gemini", "/home/u/.gemini"]
    last_plan_mount = max(i for i, a in enumerate(argv) if a == CWD and argv[i - 1] != "--chdir")
    assert last_plan_mount < at < argv.index("/held/o")
    assert argv[argv.index("/held/o") - 1] == "--ro-bind"
    # the control: without the deny, the host's file itself is bound
    assert overlay_binds(plan({}), overlays[2:]) == [
        ("/home/u/.gemini/oauth_creds.json", "/home/u/.gemini/oauth_creds.json", False)]
