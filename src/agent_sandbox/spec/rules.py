"""Command and tool rules: the matching half of the policy language.

A rule says which calls it matches (a tool kind and a pattern, or a Codex-style
argv prefix) and what verdict they get. Claude Code permission strings
(``Bash(npm run *)``, ``Read(./.env)``, ``WebFetch(domain:x.com)``) and Codex
``prefix_rule(...)`` calls are imported into the same form. Matching is pure;
splitting a compound shell command into segments is the policy engine's job.
"""

from __future__ import annotations

import enum
import functools
import re

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this module: keep typing and ast off its path
    from typing import Any


class Verdict(str, enum.Enum):  # noqa: UP042 - str() stays the member name
    """What happens to a call. Ordered: a stricter verdict wins."""

    ALLOW = "allow"
    OBSERVE = "observe"
    ESCALATE = "escalate"
    DENY = "deny"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @staticmethod
    def strictest(verdicts: list[Verdict]) -> Verdict:
        return max(verdicts, key=lambda v: v.rank) if verdicts else Verdict.DENY


_RANK = {Verdict.ALLOW: 0, Verdict.OBSERVE: 1, Verdict.ESCALATE: 2, Verdict.DENY: 3}


class ToolKind(str, enum.Enum):  # noqa: UP042
    """The classes of call a rule can be about."""

    BASH = "bash"
    READ = "read"
    WRITE = "write"  # Write, Edit, MultiEdit, NotebookEdit, apply_patch
    FETCH = "fetch"  # WebFetch, curl/wget targets, git remotes: by domain
    MCP = "mcp"  # mcp__server__tool
    ANY = "any"


class RuleSyntaxError(SandboxError, ValueError):
    """A rule string cannot be parsed; the message says what was expected."""


# Claude Code tool names -> our tool kinds
_CLAUDE_TOOLS = {
    "Bash": ToolKind.BASH,
    "Read": ToolKind.READ,
    "Grep": ToolKind.READ,
    "Glob": ToolKind.READ,
    "Edit": ToolKind.WRITE,
    "Write": ToolKind.WRITE,
    "MultiEdit": ToolKind.WRITE,
    "NotebookEdit": ToolKind.WRITE,
    "WebFetch": ToolKind.FETCH,
}

_CLAUDE_RULE = re.compile(r"^(?P<tool>[A-Za-z_][A-Za-z0-9_]*)(?:\((?P<arg>.*)\))?$", re.DOTALL)


def parse_claude_rule(text: str) -> tuple[ToolKind, str | None]:
    """``Bash(npm run *)`` -> (BASH, "npm run *"); ``mcp__github`` -> (MCP, "mcp__github")."""
    if not isinstance(text, str) or not text.strip():
        raise RuleSyntaxError("empty Claude Code rule")
    t = text.strip()
    if t.startswith("mcp__"):
        if not re.fullmatch(r"mcp__[A-Za-z0-9_-]+(?:__[A-Za-z0-9_*-]+)?", t):
            raise RuleSyntaxError(f"{text!r}: MCP rules look like mcp__server or mcp__server__tool")
        return ToolKind.MCP, t
    m = _CLAUDE_RULE.match(t)
    if not m:
        raise RuleSyntaxError(f"{text!r}: expected Tool or Tool(specifier), e.g. Bash(npm run *)")
    tool, arg = m.group("tool"), m.group("arg")
    if tool not in _CLAUDE_TOOLS:
        raise RuleSyntaxError(
            f"{text!r}: unknown tool {tool!r} (known: {', '.join(sorted(_CLAUDE_TOOLS))}, mcp__*)"
        )
    kind = _CLAUDE_TOOLS[tool]
    if arg is None or arg == "" or arg == "*":
        return kind, None
    if kind is ToolKind.FETCH:
        if not arg.startswith("domain:"):
            raise RuleSyntaxError(f"{text!r}: WebFetch rules take domain:NAME")
        return kind, arg[len("domain:") :]
    if kind is ToolKind.BASH and arg.endswith(":*"):
        arg = arg[:-2] + " *"  # legacy prefix form
    return kind, arg


@functools.lru_cache(maxsize=2048)
def command_regex(pattern: str) -> re.Pattern[str]:
    """Claude Code Bash pattern semantics: ``*`` matches anything; a trailing
    `` *`` also matches the bare command (``ls *`` matches ``ls`` and ``ls -la``
    but not ``lsof``); no wildcard means an exact match."""
    if pattern.endswith(" *"):
        head = pattern[:-2]
        body = ".*".join(re.escape(p) for p in head.split("*"))
        return re.compile(body + r"(?:\s.*)?\Z", re.DOTALL)
    body = ".*".join(re.escape(p) for p in pattern.split("*"))
    return re.compile(body + r"\Z", re.DOTALL)


def mcp_name_matches(pattern: str, name: str) -> bool:
    """``mcp__server`` covers ``mcp__server__tool``, but not ``mcp__server___tool``
    or ``mcp__server__a__b``: those names may also be the tool of a server named
    ``server_`` or ``server__a``, and a rule names one server."""
    if name == pattern:
        return True
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    rest = name[len(pattern) + 2:] if name.startswith(pattern + "__") else ""
    return bool(rest) and not rest.startswith("_") and "__" not in rest


def compound_pattern(pattern: str) -> bool:
    """A Bash pattern that spans several commands (a pipe, list or background
    operator): it is matched against the whole command line, not one segment."""
    return any(op in pattern for op in ("|", ";", "&", "\n"))


def normalise_command(command: str) -> str:
    return " ".join(command.split())


def command_matches(pattern: str, command: str) -> bool:
    return command_regex(normalise_command(pattern)).match(normalise_command(command)) is not None


PrefixToken = str | list[str]


def prefix_matches(prefix: list[PrefixToken], argv: list[str]) -> bool:
    """Codex prefix_rule semantics: argv starts with the tokens; a list token
    is a set of alternatives for that position."""
    if len(argv) < len(prefix):
        return False
    for tok, arg in zip(prefix, argv, strict=False):
        if isinstance(tok, list):
            if arg not in tok:
                return False
        elif tok != arg:
            return False
    return True


def split_argv(command: str) -> list[str] | None:
    try:
        import shlex  # not on the hook's path: only rule examples split commands

        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return None


_CODEX_DECISIONS = {"allow": "allow", "prompt": "escalate", "forbidden": "deny"}


def parse_codex_rules(source: str, filename: str = "<rules>") -> list[dict[str, Any]]:
    """Read ``prefix_rule(...)`` calls from a Codex ``.rules`` (Starlark) file.

    Returns raw rule dicts in the spec's shape. Only literals are accepted: the
    file is parsed, never executed.
    """
    import ast
    import shlex

    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise RuleSyntaxError(f"{filename}:{exc.lineno}: {exc.msg}") from None
    rules: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id != "prefix_rule":
            continue
        try:
            kwargs = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except ValueError:
            raise RuleSyntaxError(
                f"{filename}:{node.lineno}: prefix_rule arguments must be literals"
            ) from None
        if "pattern" not in kwargs:
            raise RuleSyntaxError(f"{filename}:{node.lineno}: prefix_rule needs pattern=[...]")
        decision = kwargs.get("decision", "allow")
        if decision not in _CODEX_DECISIONS:
            raise RuleSyntaxError(
                f"{filename}:{node.lineno}: decision must be allow, prompt or forbidden"
            )
        rule: dict[str, Any] = {
            "prefix": kwargs["pattern"],
            "verdict": _CODEX_DECISIONS[decision],
        }
        if "justification" in kwargs:
            rule["reason"] = kwargs["justification"]
        for key in ("match", "not_match"):
            if key in kwargs:
                rule[key] = [
                    shlex.join(x) if isinstance(x, list) else str(x) for x in kwargs[key]
                ]
        rules.append(rule)
    return rules
