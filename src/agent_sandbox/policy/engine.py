"""Classify one tool call against the effective policy.

``Policy.from_document(doc, repo=..., home=...)`` builds the engine from the
effective policy JSON (``Spec.model_dump(mode="json")``) using only the
stdlib and the stdlib-only spec modules, so the hook stays fast.
``Policy.classify(call)`` returns a ``Decision``: the strictest verdict of
every part of the call (each shell segment, each redirect, each path, each
host), with reasons a human can read.

Rules: strictest matching rule wins; a shell segment no rule matches gets
``commands.default``. Self-protection (``protect.protected_paths``) and the
built-in checks (pipe into a shell, decoded payloads, command names decided at
run time, unparsable input) are applied on top and can only tighten.

It never answers allow for a call it cannot fully understand, and never lets a
remembered decision override a deny.
"""

from __future__ import annotations

import os
import posixpath

from ..spec import paths
from ..spec.rules import ToolKind, Verdict, command_matches, normalise_command, prefix_matches
from . import shell

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from types import ModuleType
    from typing import Any

ALLOW, OBSERVE, ESCALATE, DENY = Verdict.ALLOW, Verdict.OBSERVE, Verdict.ESCALATE, Verdict.DENY


def _domains() -> ModuleType:
    """``spec.domains`` pulls in ipaddress (~5 ms): load it only for host checks."""
    from ..spec import domains

    return domains


class PolicyError(ValueError):
    """The policy document is malformed; the message says where."""


class Call:
    """One tool call in agent-neutral form.

    kind: bash | read | write | fetch | mcp | search | internal
    """

    __slots__ = ("command", "cwd", "kind", "mcp_name", "params", "paths", "tool", "urls")

    def __init__(self, kind: str, tool: str, params: dict[str, Any], cwd: str, *,
                 command: str = "", paths: tuple[str, ...] = (), urls: tuple[str, ...] = (),
                 mcp_name: str = "") -> None:
        self.kind, self.tool, self.params, self.cwd = kind, tool, params, cwd
        self.command, self.paths, self.urls, self.mcp_name = command, paths, urls, mcp_name

    def __repr__(self) -> str:
        return f"Call({self.kind!r}, {self.tool!r}, {summary_of(self)!r})"


class Decision:
    __slots__ = ("kind", "reasons", "remembered", "risk", "summary", "verdict")

    def __init__(self, verdict: Verdict, *, kind: str = "", summary: str = "") -> None:
        self.verdict = verdict
        self.reasons: list[str] = []
        self.risk = "low"
        self.kind = kind
        self.summary = summary
        self.remembered = False

    def __repr__(self) -> str:
        return f"Decision({self.verdict.value}, {self.reasons!r})"

    def add(self, verdict: Verdict, reason: str) -> None:
        if verdict.rank > self.verdict.rank:
            self.verdict = verdict
        if reason and verdict is not ALLOW:
            self.reasons.append(f"{verdict.value}: {reason}")

    def reason_text(self) -> str:
        strongest = [r for r in self.reasons if r.startswith(self.verdict.value + ":")]
        return "; ".join(strongest or self.reasons) or self.verdict.value


class RuleEntry:
    __slots__ = ("pattern", "prefix", "reason", "tool", "verdict")

    def __init__(self, verdict: Verdict, tool: str, pattern: str | None,
                 prefix: list[Any] | None, reason: str) -> None:
        self.verdict, self.tool, self.pattern = verdict, tool, pattern
        self.prefix, self.reason = prefix, reason


DECODERS = {("base64", "-d"), ("base64", "--decode"), ("base64", "-D"), ("xxd", "-r"),
            ("openssl", "enc"), ("openssl", "base64"), ("gzip", "-d"), ("gunzip", ""),
            ("zcat", ""), ("uudecode", ""), ("rev", ""), ("tr", "")}
MUTATORS = frozenset({
    "rm", "mv", "cp", "tee", "chmod", "chown", "chgrp", "ln", "truncate", "touch", "mkdir",
    "rmdir", "install", "dd", "rsync", "unlink", "shred", "patch", "sed", "perl", "tar", "unzip",
    "git", "curl", "wget", "python", "python3", "node", "setfacl", "chattr", "sponge", "ed",
    "ex", "vi", "vim", "nano", "emacs",
})
# Shell builtins that change nothing outside the shell itself: allowed when no
# rule names them (their redirects and substitutions are still judged).
INERT = frozenset({"true", "false", "exit", ":", "cd", "pwd", "test", "[", "[[", "return",
                   "shift", "wait", "set", "unset", "local", "read", "break", "continue"})
DESTRUCTIVE = frozenset({"rm", "dd", "mkfs", "shred", "wipefs", "fdisk", "parted", "sudo", "su",
                         "doas", "chown", "kill", "pkill", "killall", "reboot", "shutdown"})
NETWORK_TOOLS = frozenset({"curl", "wget", "http", "https", "aria2c", "lynx", "links", "w3m"})
REMOTE_SHELLS = frozenset({"ssh", "scp", "sftp", "nc", "ncat", "netcat", "telnet", "socat",
                           "ftp", "mosh"})
PACKAGE_REGISTRIES = {
    "pip": ("pypi.org", "files.pythonhosted.org"),
    "pip3": ("pypi.org", "files.pythonhosted.org"),
    "uv": ("pypi.org", "files.pythonhosted.org"),
    "npm": ("registry.npmjs.org",),
    "pnpm": ("registry.npmjs.org",),
    "yarn": ("registry.yarnpkg.com",),
    "cargo": ("crates.io", "index.crates.io", "static.crates.io"),
    "gem": ("rubygems.org",),
}
_INSTALL_WORDS = frozenset({"install", "add", "i", "update", "upgrade", "download", "fetch",
                            "sync"})
_GIT_NET = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule"})
RISKY_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "ENV",
                       "PROMPT_COMMAND", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "PYTHONPATH",
                       "NODE_OPTIONS"})
APPROVER_COMMANDS = frozenset({"approve", "deny", "watch", "init", "uninstall", "pending"})
INTERNAL_TOOLS = frozenset({
    "TodoWrite", "Task", "ExitPlanMode", "BashOutput", "KillShell", "KillBash", "AskUserQuestion",
    "SlashCommand", "Skill", "ListMcpResourcesTool", "ReadMcpResourceTool", "EnterPlanMode",
    "save_memory", "write_todos", "update_plan", "TaskOutput", "TaskStop", "LSP",
})


def _verdict(value: Any, where: str) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        raise PolicyError(f"{where}: unknown verdict {value!r}") from None


class Policy:
    """The effective policy, compiled for matching."""

    def __init__(self, doc: dict[str, Any], *, repo: str | None, home: str,
                 remembered: list[dict[str, Any]] | None = None,
                 remembered_path: str | None = None, shell_home: str | None = None) -> None:
        """``home``: what ``~`` in the policy means (the account's home, fixed
        when the policy was written); ``shell_home``: what ``~`` in a command
        means to the agent's shell (its ``$HOME``). Denials are expanded under
        both, so a changed ``$HOME`` can only add denials."""
        if not isinstance(doc, dict):
            raise PolicyError("policy document is not a JSON object")
        self.repo = repo
        self.home = shell_home or home
        base = repo or home
        homes = [home] if not shell_home or shell_home == home else [home, shell_home]
        fs = _obj(doc, "filesystem")
        net = _obj(doc, "network")
        cmds = _obj(doc, "commands")
        appr = _obj(doc, "approvals")

        def exp(key: str, under: list[str]) -> list[str]:
            items = fs.get(key, [])
            if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
                raise PolicyError(f"filesystem.{key} must be a list of paths")
            out = [paths.expand(x, home=h, cwd=base) for h in under for x in items]
            return list(dict.fromkeys(out))

        self.deny_read = exp("deny_read", homes)
        self.allow_read = exp("allow_read", [home])
        self.allow_write = exp("allow_write", [home])
        self.deny_write = exp("deny_write", homes)
        self._protected: list[str] | None = None
        self.allowed_domains = _strings(net, "allowed_domains", "network")
        self.denied_domains = _strings(net, "denied_domains", "network")
        self.default = _verdict(cmds.get("default", "escalate"), "commands.default")
        self.rules: list[RuleEntry] = []
        raw_rules = cmds.get("rules", [])
        if not isinstance(raw_rules, list):
            raise PolicyError("commands.rules must be a list")
        for i, r in enumerate(raw_rules):
            if not isinstance(r, dict):
                raise PolicyError(f"commands.rules[{i}] must be an object")
            pattern, prefix, tool = _rule_shape(r, f"commands.rules[{i}]")
            verdict = _verdict(r.get("verdict"), f"commands.rules[{i}]")
            reason = str(r.get("reason") or "")
            if tool in ("read", "write") and pattern is not None and pattern != "*":
                # a denial covers the path under every home; anything else only
                # under the account's home, as written
                under = homes if verdict.rank >= ESCALATE.rank else [home]
                for h in dict.fromkeys(paths.expand(pattern, home=h, cwd=base)
                                       for h in under):
                    self.rules.append(RuleEntry(verdict, tool, h, prefix, reason))
                continue
            self.rules.append(RuleEntry(verdict, tool, pattern, prefix, reason))
        self.ttl = _number(appr, "ttl", 1800.0)
        self.wait = _number(appr, "wait", 120.0)
        self.remember_ttl = _number(appr, "remember_ttl", 7 * 86400.0)
        self.remembered = remembered
        self.remembered_path = remembered_path

    # -- rules ------------------------------------------------------------
    def _rules_for(self, kind: str, subject: str, argv: list[str] | None = None
                   ) -> list[RuleEntry]:
        out = []
        for r in self.rules:
            if r.tool not in (kind, "any"):
                continue
            if r.prefix is not None:
                if argv is not None and prefix_matches(r.prefix, argv):
                    out.append(r)
                continue
            pat = r.pattern or "*"
            if kind == "bash":
                # the literal head must start the command: skip compiling a regex
                # for rules that cannot match (each compile costs the hook ~0.2 ms)
                head = " ".join(pat.split("*", 1)[0].split())
                ok = subject.startswith(head) and command_matches(pat, subject)
            elif kind in ("read", "write"):
                ok = pat == "*" or paths.covers(pat, subject)
            elif kind == "fetch":
                ok = pat == "*" or _domains().pattern_matches(pat, subject)
            elif kind == "mcp":
                ok = (pat == "*" or subject == pat or subject.startswith(pat + "__")
                      or (pat.endswith("*") and subject.startswith(pat[:-1])))
            else:
                ok = pat == "*"
            if ok:
                out.append(r)
        return out

    def _apply_rules(self, d: Decision, kind: str, subject: str, argv: list[str] | None,
                     default: Verdict | None) -> bool:
        """Strictest matching rule; ``default`` when none matches. Returns
        whether a rule matched."""
        matched = self._rules_for(kind, subject, argv)
        if matched:
            best = max(matched, key=lambda r: r.verdict.rank)
            why = best.reason or f"policy rule for {kind} {subject!r}"
            d.add(best.verdict, why)
            return True
        if default is not None:
            d.add(default, f"no rule matches {subject!r} (default {default.value})")
        return False

    # -- paths ------------------------------------------------------------
    def resolve(self, path: str, cwd: str) -> str:
        p = path
        if p == "~" or p.startswith("~/"):
            p = self.home + p[1:]
        return paths.resolve(p, cwd)

    @property
    def protected(self) -> list[str]:
        """Self-protection, added at every load (computed when first needed)."""
        if self._protected is None:
            from .protect import protected_paths

            self._protected = protected_paths(self.repo, self.home)
        return self._protected

    def read_ok(self, abspath: str) -> bool:
        if ".sandbox" in abspath:
            from .protect import PROTECTED_READ

            if any(paths.covers(r, abspath) for r in PROTECTED_READ):
                return False
        return paths.read_allowed(abspath, self.deny_read, self.allow_read)

    def is_protected(self, abspath: str) -> bool:
        return any(paths.covers(r, abspath) for r in self.protected)

    def check_read(self, d: Decision, path: str, cwd: str, *, explicit: bool = True) -> None:
        full = self.resolve(path, cwd)
        if not self.read_ok(full):
            d.add(DENY, f"reading {full} is denied by filesystem.deny_read")
            d.risk = "high"
            return
        if explicit:
            self._apply_rules(d, "read", full, None, None)

    def check_write(self, d: Decision, path: str, cwd: str) -> None:
        if path.startswith("\x00dynamic:"):
            d.add(ESCALATE, f"write target decided at run time ({path[9:]})")
            return
        if path in shell.DEV_SINKS or path.startswith("/dev/fd/"):
            return
        full = self.resolve(path, cwd)
        if self.is_protected(full):
            d.add(DENY, f"{full} is protected (sandbox state, agent settings, hooks and MCP "
                        "configuration are never writable by an agent)")
            d.risk = "high"
            return
        if any(paths.covers(r, full) for r in self.deny_write):
            d.add(DENY, f"writing {full} is denied by filesystem.deny_write")
            d.risk = "high"
            return
        if self._apply_rules(d, "write", full, None, None):
            return
        if any(paths.covers(r, full) for r in self.allow_write):
            return
        d.add(ESCALATE, f"{full} is outside filesystem.allow_write")
        _raise_risk(d, "medium")

    # -- network ----------------------------------------------------------
    def check_host(self, d: Decision, host: str, what: str) -> None:
        try:
            canon = _domains().canonical_host(host)
        except _domains().DomainError as exc:
            d.add(DENY, f"{what}: bad host {host!r}: {exc}")
            return
        if self._apply_rules(d, "fetch", canon, None, None):
            return
        ok, _why = _domains().host_allowed(canon, self.allowed_domains, self.denied_domains)
        if ok:
            return
        if any(_domains().pattern_matches(p, canon) or p == "*" for p in self.denied_domains):
            d.add(DENY, f"{what}: {canon} is in network.denied_domains")
            d.risk = "high"
            return
        d.add(ESCALATE, f"{what}: {canon} is not in network.allowed_domains")
        _raise_risk(d, "medium")

    # -- the entry point --------------------------------------------------
    def classify(self, call: Call) -> Decision:
        d = Decision(ALLOW, kind=call.kind, summary=summary_of(call))
        try:
            self._classify(call, d)
        except Exception as exc:  # fail closed on anything unexpected
            d.add(DENY, f"internal error while classifying: {type(exc).__name__}: {exc}")
        if d.verdict is ESCALATE and self._remembered(call):
            d.verdict = ALLOW
            d.remembered = True
            d.reasons.append("allow: remembered decision for this exact call in this repository")
        return d

    def _classify(self, call: Call, d: Decision) -> None:
        kind = call.kind
        if kind == "bash":
            self.classify_command(call.command, call.cwd, d)
        elif kind == "read":
            if not call.paths:
                d.add(DENY, f"{call.tool}: no path given")
            for p in call.paths:
                self.check_read(d, p, call.cwd)
        elif kind == "search":
            for p in call.paths or (call.cwd,):
                self.check_read(d, p, call.cwd, explicit=True)
        elif kind == "write":
            if not call.paths:
                d.add(DENY, f"{call.tool}: no path given")
            for p in call.paths:
                self.check_write(d, p, call.cwd)
        elif kind == "fetch":
            if not call.urls:
                d.add(ESCALATE, f"{call.tool}: no URL to check")
            for u in call.urls:
                host = host_of(u)
                if host is None:
                    d.add(DENY, f"{call.tool}: cannot read the host of {u!r}")
                else:
                    self.check_host(d, host, call.tool)
        elif kind == "mcp":
            self._apply_rules(d, "mcp", call.mcp_name, None, self.default)
        elif kind == "internal":
            d.add(ALLOW, "")
        else:
            d.add(DENY, f"unknown tool {call.tool!r}")
        _finish_risk(d)

    def classify_command(self, command: str, cwd: str, d: Decision) -> None:
        if not isinstance(command, str) or not command.strip():
            d.add(DENY, "empty command")
            return
        parsed = shell.parse(command)
        for problem in parsed.problems:
            d.add(ESCALATE, problem)
            _raise_risk(d, "medium")
        here = cwd
        for seg in parsed.segments:
            here = self._segment(seg, here, cwd, d)

    def _segment(self, seg: shell.Segment, here: str, base: str, d: Decision) -> str:
        for op, target in seg.redirects:
            if op.endswith("&") or target.startswith("&"):
                continue
            if op.endswith(("<", "<&")) and not op.endswith("<>"):
                if target.startswith("\x00dynamic:"):
                    d.add(ESCALATE, "input file decided at run time")
                else:
                    self.check_read(d, target, here, explicit=False)
            else:
                self.check_write(d, target, here)
        for a in seg.assignments:
            name = a.split("=", 1)[0].rstrip("+")
            if name in RISKY_ENV:
                d.add(ESCALATE, f"sets {name}, which changes what runs")
                _raise_risk(d, "high")
        if not seg.argv:
            return here
        argv = seg.argv
        name = seg.name
        if seg.dynamic and seg.dynamic[0]:
            d.add(ESCALATE, f"command name decided at run time ({argv[0]!r})")
            _raise_risk(d, "high")
        # the segment itself, against the rules
        text = normalise_command(" ".join(argv))
        inert = name in INERT and not any(seg.dynamic)
        self._apply_rules(d, "bash", text, argv, None if inert else self.default)
        if name in DESTRUCTIVE:
            _raise_risk(d, "high")
        # code from a pipe or a here-document into a shell or interpreter
        if name in shell.SHELLS or name in shell.INTERPRETERS or _versioned(name):
            opaque = seg.stdin_from_pipe and (len(argv) == 1
                                              or argv[1] in ("-", "-s", "/dev/stdin"))
            if opaque:
                decoded = [src for src in seg.pipe_sources if _is_decoder(src)]
                if decoded:
                    d.add(DENY, f"decoded data ({' '.join(decoded[0])}) is piped into {name}")
                    d.risk = "high"
                else:
                    d.add(ESCALATE, f"{name} runs code read from a pipe")
                    _raise_risk(d, "high")
            if any(src and src[0].rsplit("/", 1)[-1] in NETWORK_TOOLS for src in seg.pipe_sources):
                d.add(ESCALATE, f"downloaded content is piped into {name}")
                _raise_risk(d, "high")
        if name == "eval" and any(seg.dynamic[1:]):
            d.add(ESCALATE, "eval of text decided at run time")
            _raise_risk(d, "high")
        if (name == "sandbox" and len(argv) > 1 and argv[1] in APPROVER_COMMANDS) or (
                "agent_sandbox" in argv[1:6] and any(a in APPROVER_COMMANDS for a in argv)):
            d.add(DENY, "approvals are out of band: an agent cannot run the approver or "
                        "change the connector")
            d.risk = "high"
        if name == "source" or name == ".":
            d.add(ESCALATE, "sources a script into the shell")
        # paths in arguments: protected reads, protected writes
        mutating = name in MUTATORS
        for a, dyn in zip(argv[1:], seg.dynamic[1:], strict=False):
            if dyn and mutating and (".sandbox" in a or a.startswith("$")):
                d.add(ESCALATE, f"{name} on a path decided at run time ({a!r})")
            for cand in _path_candidates(a):
                full = self.resolve(cand, here)
                if not self.read_ok(full):
                    d.add(DENY, f"{name} touches {full}, which filesystem.deny_read protects")
                    d.risk = "high"
                if mutating and self.is_protected(full):
                    d.add(DENY, f"{name} may modify {full}, which is protected")
                    d.risk = "high"
            if mutating and ".sandbox" in a.split("/") and a not in ("--",):
                d.add(DENY, f"{name} names the sandbox state directory ({a!r})")
                d.risk = "high"
        # network
        for host, what in _hosts_in(seg, here):
            self.check_host(d, host, what)
        if name == "cd" and len(argv) > 1 and not seg.dynamic[1]:
            return self.resolve(argv[1], here)
        return here

    def _remembered(self, call: Call) -> bool:
        import time

        now = time.time()
        if self.remembered is None:
            self.remembered = load_remembered(self.remembered_path)
        for e in self.remembered:
            if (isinstance(e, dict) and e.get("repo") == self.repo
                    and isinstance(e.get("key"), str) and e.get("scope") in REMEMBER_SCOPES
                    and isinstance(e.get("expires"), (int, float)) and e["expires"] > now
                    and e["key"] == remembered_key(call.tool, call.params, call.cwd,
                                                   str(e["scope"]))):
                return True
        return False


# What ``approve --always`` may remember, named by the approver:
#   exact    this tool, these arguments (file content included), this directory
#   anywhere this tool and these arguments, in any directory of the repository
REMEMBER_SCOPES = ("exact", "anywhere")
# Arguments that describe a call without changing what it does.
_COSMETIC = frozenset({"description"})


def remembered_key(tool: str, params: Any, cwd: str, scope: str) -> str:
    """The SHA-256 an always-allow is bound to: the exact tool and arguments
    (a file's content is an argument), and the working directory unless the
    scope says otherwise. Raises PolicyError for an unknown scope."""
    import hashlib
    import json

    if scope not in REMEMBER_SCOPES:
        raise PolicyError(f"unknown scope {scope!r} (one of {', '.join(REMEMBER_SCOPES)})")
    args = ({k: v for k, v in params.items() if k not in _COSMETIC}
            if isinstance(params, dict) else params)
    body = json.dumps({"tool": tool, "params": args, "cwd": cwd if scope == "exact" else None,
                       "scope": scope}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def load_remembered(path: str | None) -> list[dict[str, Any]]:
    """Remembered decisions (``.sandbox/state/remembered.json``); unreadable: none."""
    if not path:
        return []
    import json

    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


RULE_TOOLS = frozenset(k.value for k in ToolKind)


def _rule_shape(r: dict[str, Any], where: str) -> tuple[str | None, list[Any] | None, str]:
    """(pattern, prefix, tool) of one rule, checked when the policy loads: a
    rule of the wrong shape is a PolicyError, never a surprise at match time."""
    pattern, prefix, tool = r.get("pattern"), r.get("prefix"), r.get("tool", "bash")
    if pattern is None and prefix is None:
        raise PolicyError(f"{where} has neither pattern nor prefix")
    if pattern is not None and (not isinstance(pattern, str) or not pattern.strip()):
        raise PolicyError(f"{where}.pattern must be a non-empty string, not {pattern!r}")
    if prefix is not None and not (
            isinstance(prefix, list) and prefix
            and all(isinstance(p, str) or (isinstance(p, list) and p
                                           and all(isinstance(q, str) for q in p))
                    for p in prefix)):
        raise PolicyError(f"{where}.prefix must be a non-empty list of words (or lists of "
                          f"alternative words), not {prefix!r}")
    if not isinstance(tool, str) or tool not in RULE_TOOLS:
        raise PolicyError(f"{where}.tool must be one of {', '.join(sorted(RULE_TOOLS))}, "
                          f"not {tool!r}")
    if r.get("reason") is not None and not isinstance(r.get("reason"), str):
        raise PolicyError(f"{where}.reason must be a string")
    return pattern, prefix, tool


def _obj(doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise PolicyError(f"{key} must be an object")
    return v


def _strings(obj: dict[str, Any], key: str, where: str) -> list[str]:
    v = obj.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise PolicyError(f"{where}.{key} must be a list of strings")
    return v


def _number(obj: dict[str, Any], key: str, default: float) -> float:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise PolicyError(f"approvals.{key} must be a number of seconds")
    return float(v)


def _raise_risk(d: Decision, level: str) -> None:
    order = {"low": 0, "medium": 1, "high": 2}
    if order[level] > order.get(d.risk, 0):
        d.risk = level


def _finish_risk(d: Decision) -> None:
    if d.verdict is ESCALATE and d.risk == "low":
        d.risk = "medium"


def _versioned(name: str) -> bool:
    return name.startswith(("python3.", "python2.", "perl5", "ruby", "node"))


def _is_decoder(argv: list[str]) -> bool:
    if not argv:
        return False
    n = argv[0].rsplit("/", 1)[-1]
    for tool, flag in DECODERS:
        if n == tool and (flag == "" or flag in argv[1:] or any(
                a.startswith("-") and not a.startswith("--") and flag[1:] in a[1:]
                for a in argv[1:] if flag.startswith("-") and len(flag) == 2)):
            return True
    return False


def _path_candidates(arg: str) -> list[str]:
    """Arguments that name files: ``./x``, ``/x``, ``~/x``, ``a/b``, ``--opt=/x``."""
    out = []
    for part in (arg, arg.split("=", 1)[1] if "=" in arg and arg.startswith("-") else ""):
        if not part or part.startswith("-") or "://" in part or "\x00" in part:
            continue
        if part.startswith(("/", "./", "../", "~/")) or part in ("~", ".", "..") or "/" in part \
                or part.startswith("."):
            out.append(part)
    return out


def host_of(url: str) -> str | None:
    """The host of a URL (scheme optional), or None when there is none."""
    u = url.strip()
    if "://" in u:
        u = u.split("://", 1)[1]
    elif u.startswith("//"):
        u = u[2:]
    u = u.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in u:
        u = u.rsplit("@", 1)[1]
    if u.startswith("["):
        end = u.find("]")
        return u[: end + 1] if end > 0 else None
    host = u.split(":", 1)[0]
    return host or None


def _hosts_in(seg: shell.Segment, cwd: str) -> list[tuple[str, str]]:
    argv = seg.argv
    name = seg.name
    out: list[tuple[str, str]] = []
    for a in argv[1:]:
        if "://" in a:
            scheme = a.split("://", 1)[0].lower()
            if scheme in ("http", "https", "ftp", "ftps", "ssh", "git", "ws", "wss", "sftp",
                          "rsync", "s3", "gs"):
                h = host_of(a)
                if h:
                    out.append((h, name))
    if name in NETWORK_TOOLS:
        for a in argv[1:]:
            if not a.startswith("-") and "://" not in a and "." in a and "/" not in a.split(".")[0]:
                h = host_of(a)
                if h and _looks_like_host(h):
                    out.append((h, name))
    if name in REMOTE_SHELLS:
        for a in argv[1:]:
            if a.startswith("-"):
                continue
            h = a.split(":", 1)[0]
            if "@" in h:
                h = h.rsplit("@", 1)[1]
            if _looks_like_host(h):
                out.append((h, name))
                if name in ("ssh", "nc", "ncat", "netcat", "telnet", "mosh"):
                    break
    if name == "rsync":
        for a in argv[1:]:
            if ":" in a and not a.startswith("-") and "://" not in a:
                h = a.split(":", 1)[0].rsplit("@", 1)[-1]
                if _looks_like_host(h):
                    out.append((h, "rsync"))
    if name == "git":
        sub = [a for a in argv[1:] if not a.startswith("-")]
        if sub and sub[0] in _GIT_NET:
            remotes = [a for a in sub[1:] if "://" not in a]
            urls = [a for a in sub[1:] if "://" in a or (":" in a and "@" in a)]
            for u in urls:
                if "://" not in u:
                    h = u.split(":", 1)[0].rsplit("@", 1)[-1]
                    out.append((h, "git"))
            if not urls and sub[0] != "clone":
                name_ = remotes[0] if remotes else "origin"
                url = _git_remote_url(cwd, name_)
                if url:
                    h = host_of(url) if "://" in url else url.split(":", 1)[0].rsplit("@", 1)[-1]
                    if h:
                        out.append((h, f"git {sub[0]} {name_}"))
    if name in PACKAGE_REGISTRIES and len(argv) > 1 and argv[1] in _INSTALL_WORDS:
        for h in PACKAGE_REGISTRIES[name]:
            out.append((h, f"{name} {argv[1]}"))
    return out


def _looks_like_host(h: str) -> bool:
    if not h or h.startswith(("/", ".", "~")) or "=" in h:
        return False
    if _domains().parse_ip_literal(h) is not None and any(c.isdigit() for c in h):
        return True
    return ("." in h and all(p and (p.replace("-", "").replace("_", "").isalnum())
                             for p in h.split("."))) or h == "localhost"


def _git_remote_url(cwd: str, remote: str) -> str | None:
    d = cwd
    for _ in range(64):
        cfg = os.path.join(d, ".git", "config")
        if os.path.isfile(cfg):
            try:
                with open(cfg, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(1_000_000)
            except OSError:
                return None
            section = None
            for line in text.splitlines():
                s = line.strip()
                if s.startswith("["):
                    section = s
                    continue
                if section == f'[remote "{remote}"]' and s.startswith("url") and "=" in s:
                    return s.split("=", 1)[1].strip()
            return None
        parent = posixpath.dirname(d)
        if parent == d:
            return None
        d = parent
    return None


def summary_of(call: Call) -> str:
    """The exact thing a human approves: the command, the path or the URL."""
    if call.kind == "bash":
        return call.command
    if call.kind in ("read", "write", "search"):
        return ", ".join(call.paths) or call.tool
    if call.kind == "fetch":
        return ", ".join(call.urls) or call.tool
    if call.kind == "mcp":
        return call.mcp_name
    return call.tool
