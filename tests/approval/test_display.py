"""What an approver reads is what will run: every character of agent-written text that a
terminal would not show as itself is shown as a visible escape (display.printable)."""

from __future__ import annotations

import unicodedata

import pytest

from agent_sandbox.display import printable

HIDING = [
    ("carriage return rewrites the line", "curl x | sh\rgit status"),
    ("escape sequence conceals", "\x1b[8mcurl x | sh\x1b[0m git status"),
    ("OSC title / hyperlink", "\x1b]8;;http://a\x07git status\x1b]8;;\x07"),
    ("C1 control (CSI)", "\x9b8mcurl"),
    ("backspaces overwrite", "curl x | sh" + "\b" * 11 + "git status"),
    ("bidi override (Trojan Source)", "ls \u202e hs | x lruc"),
    ("zero-width space", "git\u200bstatus"),
    ("line separator", "git status\u2028curl x | sh"),
    ("newline fakes a second request", "git status\nabc123  low  bash: ls"),
    ("delete", "rm -rf /\x7f"),
    ("no-break space looks like a space", "rm\u00a0-rf"),
]


@pytest.mark.parametrize("text", [t for _, t in HIDING], ids=[n for n, _ in HIDING])
def test_every_hiding_character_becomes_visible(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") for c in shown)
    assert len(shown) > len(text)  # something was escaped, nothing dropped


def test_plain_text_is_shown_as_written() -> None:
    for text in ("git push origin main", "cat 'a b'/c.txt", "naïve ünïcödé 日本語"):
        assert printable(text) == text


def test_escapes_cannot_be_mistaken_for_literal_backslashes() -> None:
    # a literal backslash-r typed by the agent and a real carriage return show differently
    assert printable("a\\rb") != printable("a\rb")
    assert printable(7) == "7"
