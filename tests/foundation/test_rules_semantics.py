"""The pure rules the spec is made of: srt's path semantics, srt's domain
patterns, Claude Code command patterns and Codex prefixes."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_sandbox.spec import domains, paths
from agent_sandbox.spec.rules import Verdict, command_matches, prefix_matches

HOME, CWD = "/home/u", "/home/u/repo"


def exp(rules: list[str]) -> list[str]:
    return [paths.expand(r, home=HOME, cwd=CWD) for r in rules]


@pytest.mark.parametrize(("rule", "expanded"), [
    ("~", "/home/u"), ("~/.ssh", "/home/u/.ssh"), ("build", "/home/u/repo/build"),
    ("./a/../b", "/home/u/repo/b"), ("**/.env", "**/.env"), ("/etc//x/", "/etc/x"),
])
def test_expand(rule: str, expanded: str) -> None:
    assert paths.expand(rule, home=HOME, cwd=CWD) == expanded


def test_read_rules_follow_srt() -> None:
    deny = exp(["~/.ssh", "**/.env", "/srv/secrets/inner"])
    allow = exp(["~/.ssh/known_hosts", "/srv/secrets"])
    assert not paths.read_allowed("/home/u/.ssh/id_rsa", deny, allow)
    assert paths.read_allowed("/home/u/.ssh/known_hosts", deny, allow)  # allow more specific
    assert not paths.read_allowed("/srv/secrets/inner/key", deny, allow)  # deny more specific
    assert not paths.read_allowed("/home/u/repo/app/.env", deny, allow)  # glob at any depth
    assert paths.read_allowed("/home/u/repo/app/.envrc", deny, allow)
    assert paths.read_allowed("/home/u/.sshx", deny, allow)  # a sibling, not a child


def test_write_rules_follow_srt_and_protect_agent_config() -> None:
    allow, deny = exp(["."]), exp(["**/secrets/**"])
    assert paths.write_allowed("/home/u/repo/src/a.py", allow, deny)
    assert not paths.write_allowed("/home/u/other", allow, deny)  # only under allow_write
    assert not paths.write_allowed("/home/u/repo/secrets/x/y", allow, deny)  # deny beats allow
    for protected in (".claude/settings.json", ".mcp.json", ".git/hooks/pre-commit",
                      ".sandbox/escalations/x", ".vscode/mcp.json", "sub/.bashrc"):
        assert not paths.write_allowed(f"/home/u/repo/{protected}", allow, deny), protected
    assert paths.write_allowed("/home/u/repo/.claude-notes", allow, deny)


def test_globs() -> None:
    assert paths.covers("/a/*.pem", "/a/k.pem") and not paths.covers("/a/*.pem", "/a/b/k.pem")
    assert paths.covers("/a/**/k", "/a/k") and paths.covers("/a/**/k", "/a/b/c/k")
    assert paths.covers("/a/?.txt", "/a/x.txt") and not paths.covers("/a/?.txt", "/a/xy.txt")
    assert paths.rule_covers_rule("~/src", "~/src/app")
    assert not paths.rule_covers_rule("~/src/app", "~/src")


@pytest.mark.parametrize(("pattern", "host", "matches"), [
    ("*.example.com", "a.example.com", True),
    ("*.example.com", "a.b.example.com", True),
    ("*.example.com", "example.com", False),  # strict subdomains only
    ("*.example.com", "badexample.com", False),
    ("example.com", "www.example.com", False),
    ("*", "anything.org", True),
])
def test_domain_patterns(pattern: str, host: str, matches: bool) -> None:
    assert domains.pattern_matches(pattern, host) is matches


@pytest.mark.parametrize(("disguised", "canonical"), [
    ("GitHub.COM.", "github.com"), ("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"), ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("bücher.de", "xn--bcher-kva.de"),
])
def test_disguised_hosts_are_canonicalised(disguised: str, canonical: str) -> None:
    assert domains.canonical_host(disguised) == canonical


def test_denied_beats_allowed() -> None:
    ok, reason = domains.host_allowed("api.github.com", ["*.github.com"], ["api.github.com"])
    assert not ok and reason == "blocked-by-denylist"
    assert domains.host_allowed("x.github.com", ["*.github.com"], [])[0]
    assert domains.host_allowed("evil.com", ["*.github.com"], [])[1] == "blocked-by-allowlist"
    assert not domains.host_allowed("a\x00.github.com", ["*.github.com"], [])[0]


@pytest.mark.parametrize(("pattern", "command", "matches"), [
    ("npm run *", "npm run build", True), ("npm run *", "npm run", True),
    ("ls *", "lsof", False), ("git status", "git status", True),
    ("git status", "git status -s", False), ("curl * | *sh*", "curl x | bash", True),
    ("git *  main", "git push   main", True),  # white space is normalised
])
def test_command_patterns(pattern: str, command: str, matches: bool) -> None:
    assert command_matches(pattern, command) is matches


def test_codex_prefixes_and_verdict_order() -> None:
    assert prefix_matches(["git", ["push", "fetch"]], ["git", "fetch", "origin"])
    assert not prefix_matches(["git", ["push", "fetch"]], ["git", "pull"])
    assert not prefix_matches(["git", "push"], ["git"])
    assert Verdict.strictest([Verdict.ALLOW, Verdict.ESCALATE, Verdict.OBSERVE]) is Verdict.ESCALATE
    assert Verdict.strictest([]) is Verdict.DENY  # nothing known: fail closed


@pytest.mark.parametrize("rule", ["/a/[]", "**/[]x", "/a/[!]", "[]*", "/a/[]/b"])
def test_empty_bracket_is_literal_in_every_dialect(rule):
    """`[]` and `[!]` are no character class: the `[` is literal (as fnmatch reads
    it). Before, such a rule was accepted by validate and then crashed the matcher."""
    assert paths.validate_path_rule(rule) == rule
    from agent_sandbox.render.seatbelt import glob_to_ere
    from agent_sandbox.spec.paths import covers, glob_regex

    literal = rule.replace("**/", "/q/").replace("*", "zz")
    path = literal if literal.startswith("/") else "/q/" + literal
    assert covers(rule, path)
    assert covers(rule, path + "/below")
    assert not covers(rule, path.replace("[", "x"))
    assert glob_regex(rule).pattern  # compiles
    assert re.fullmatch(glob_to_ere(rule), path)  # the Seatbelt regex agrees


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="*?[]!/ab.-^", max_size=12))
@example("[^]-?")  # a literal caret first in a class once read as negation in one dialect
@example("[^a]")
@example("[^^]")
def test_every_glob_is_refused_or_compiles_and_both_dialects_agree(rule):
    """A glob the spec accepts compiles in both regex dialects with one meaning;
    any other is refused when the spec loads, with a message (never a crash later)."""
    from agent_sandbox.render.seatbelt import glob_to_ere
    from agent_sandbox.spec.paths import PathRuleError, glob_regex, validate_path_rule

    try:
        validate_path_rule(rule)
    except PathRuleError as exc:
        assert str(exc)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # our own dialect: future-proof
        rx = glob_regex(rule)
    with warnings.catch_warnings():  # Python only approximates POSIX brackets
        warnings.simplefilter("ignore", FutureWarning)
        ere = re.compile(glob_to_ere(rule))
    for path in ("/ab", "/a/b", "/a.b/ab", "/x/[a]", "/-/^", "/a/[]", "/!"):
        assert bool(rx.match(path)) == bool(ere.match(path)), (rule, path)


def test_a_caret_first_in_a_class_is_literal_as_in_fnmatch():
    """Only ``!`` negates a class; ``[^a]`` is the set {^, a}, in every dialect we emit."""
    import fnmatch

    from agent_sandbox.render.seatbelt import glob_to_ere
    from agent_sandbox.spec.paths import glob_regex

    for rule in ("/x/[^a]", "/x/[^]", "/x/[^^b]"):
        ere = re.compile(glob_to_ere(rule))
        for name in ("^", "a", "b", "c"):
            want = fnmatch.fnmatchcase(name, rule.rsplit("/", 1)[1])
            assert bool(glob_regex(rule).match("/x/" + name)) == want, (rule, name)
            assert bool(ere.match("/x/" + name)) == want, (rule, name)


def test_class_operators_stay_literal_without_warnings() -> None:
    """``[``, ``&&``, ``--``, ``~~`` and ``||`` in a class keep today's meaning (later
    Pythons may read them as set operations; 3.7+ warns) and compile silently."""
    from agent_sandbox.spec.paths import glob_regex

    cases = {"/w/[[a]": ("[", "a"), "/w/[a&&b]": ("&", "b"), "/w/[--0]": ("-", ".", "0"),
             "/w/[a||b~~c]": ("|", "~", "c")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rule, hits in cases.items():
            rx = glob_regex(rule)
            for ch in hits:
                assert rx.match("/w/" + ch), (rule, ch)
            assert not rx.match("/w/z"), rule


def test_posix_bracket_expressions_are_refused() -> None:
    """Seatbelt's regex would read ``[[:alpha:]]`` as a named class, the other
    matchers as characters: the spec refuses it rather than guess."""
    from agent_sandbox.spec.paths import PathRuleError, validate_path_rule

    for rule in ("/x/[[:alpha:]]", "**/[[=a=]]", "~/[[.-.]]"):
        with pytest.raises(PathRuleError, match="POSIX bracket expressions"):
            validate_path_rule(rule)
    assert validate_path_rule("/x/[[a]") == "/x/[[a]"
