"""``bwrap.plan(opened=...)``: a client's state folder that ``sandbox agent``
opens inside the protected set is writable only when opened and listed in
``allowWrite``; what ``denyWrite`` names inside it, and the protected set's
names, stay read-only; an enclosing writable root's walk does not close it
again. Pure, over the fake filesystem."""

from __future__ import annotations

from test_bwrap_plan import BASE, CWD, HOME, FakeFs, ops

from agent_sandbox.runtime import bwrap as bw
from agent_sandbox.runtime.settings import parse

GEMINI = {"/home/u/.gemini/settings.json": "f", "/home/u/.gemini/tmp/x/chat.json": "f",
          "/home/u/.gemini/tmp/x/.git/config": "f"}


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
