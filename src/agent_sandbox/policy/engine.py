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
from ..spec.rules import (
    ToolKind,
    Verdict,
    command_matches,
    compound_pattern,
    mcp_name_matches,
    normalise_command,
    prefix_matches,
)
from . import modelled, shell

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
INERT = frozenset({"true", "false", "exit", ":", "cd", "pwd", "test", "[", "return",
                   "shift", "wait", "break", "continue"})
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
# Named for a high risk; every assignment outside modelled.SAFE_ENV escalates anyway.
RISKY_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "ENV",
                       "PROMPT_COMMAND", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "PYTHONPATH",
                       "NODE_OPTIONS", "GIT_EXTERNAL_DIFF", "GIT_CONFIG_COUNT", "CDPATH",
                       "PAGER", "EDITOR", "VISUAL", "PERL5OPT", "RUBYOPT", "PYTHONSTARTUP"})
_GIT_PLACE_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CONFIG",
                  "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT")
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
                ok = pat == "*" or mcp_name_matches(pat, subject)
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
        if "audit-keys" in abspath:
            from .protect import PROTECTED_READ

            if any(paths.covers(r, abspath) for r in PROTECTED_READ):
                return False
        return paths.read_allowed(abspath, self.deny_read, self.allow_read)

    def is_protected(self, abspath: str) -> bool:
        # a .git entry itself (a gitdir: file, or a folder put in place) decides which
        # configuration and hooks git runs there
        if abspath.rsplit("/", 1)[-1] == ".git" or abspath.endswith("/.git/hooks"):
            return True
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
        # a rule may tighten a write, never loosen filesystem.allow_write
        self._apply_rules(d, "write", full, None, None)
        if any(paths.covers(r, full) for r in self.allow_write):
            return
        d.add(ESCALATE, f"{full} is outside filesystem.allow_write")
        _raise_risk(d, "medium")

    # -- network ----------------------------------------------------------
    def check_host(self, d: Decision, host: str, what: str) -> None:
        if not host:  # a transfer to a local path (a path remote): a human decides
            d.add(ESCALATE, f"{what} is a transfer outside this repository")
            _raise_risk(d, "medium")
            return
        try:
            canon = _domains().canonical_host(host)
        except _domains().DomainError as exc:
            d.add(DENY, f"{what}: bad host {host!r}: {exc}")
            return
        if any(_domains().pattern_matches(p, canon) or p == "*" for p in self.denied_domains):
            d.add(DENY, f"{what}: {canon} is in network.denied_domains")
            d.risk = "high"
            return
        # a rule may tighten a host, never loosen network.allowed_domains
        self._apply_rules(d, "fetch", canon, None, None)
        ok, _why = _domains().host_allowed(canon, self.allowed_domains, self.denied_domains)
        if ok:
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
                host = url_host(u)
                if host is None:
                    d.add(DENY, f"{call.tool}: {u!r} is not an http(s) URL whose host the "
                                "policy engine can read exactly")
                else:
                    self.check_host(d, host, call.tool)
        elif kind == "mcp":
            from .tools import own_mcp_verdict

            own = own_mcp_verdict(call.mcp_name)
            if own is not None:  # our own server's tools (policy/tools.py)
                d.add(own[0], f"{call.mcp_name}: {own[1]}" if own[0] is not ALLOW else "")
            else:
                self._apply_rules(d, "mcp", call.mcp_name, None, self.default)
        elif kind == "internal":
            from .tools import BY_NAME

            verdict, why = BY_NAME.get(call.tool, (ALLOW, ""))
            d.add(verdict, why if verdict is not ALLOW else "")
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
        # the working directories a command may run in: a cd that may or may not
        # happen (after && or ||, in a condition, a subshell, a pipeline) adds one;
        # None: unknown (a cd inside a loop, to a run-time place, to $OLDPWD)
        cwds: list[str] | None = [os.path.realpath(cwd)]
        if parsed.loops and any(seg.name in ("cd", "pushd", "popd") for seg in parsed.segments):
            cwds = None
        for seg in parsed.segments:
            cwds = self._segment(seg, cwds, cwd, d)
        # rules that span several commands (curl * | *sh*) judge the whole line; they
        # can only tighten (the spec refuses allow and observe ones)
        whole = normalise_command(command)
        for r in self.rules:
            if (r.tool in ("bash", "any") and r.pattern and compound_pattern(r.pattern)
                    and r.verdict.rank > ALLOW.rank and command_matches(r.pattern, whole)):
                d.add(r.verdict, r.reason or f"policy rule {r.pattern!r}")

    def _paths_in(self, d: Decision, path: str, cwds: list[str] | None) -> list[str]:
        """Every place ``path`` may name (each working directory; ``~`` both as
        $HOME and as a literal folder), or none when the directory is unknown."""
        if path.startswith("/"):
            return [self.resolve(path, "/")]
        out = []
        if path == "~" or path.startswith("~/"):
            out.append(self.resolve(path, "/"))
        if cwds is None:
            d.add(ESCALATE, f"{path!r} is relative to a working directory decided at run time")
            return out
        out += [paths.resolve(path, c) for c in cwds]
        return out

    def _segment(self, seg: shell.Segment, cwds: list[str] | None, base: str,
                 d: Decision) -> list[str] | None:
        here = cwds[0] if cwds else base
        for op, target in seg.redirects:
            self._redirect(d, op, target, cwds)
        for a in seg.assignments:
            name = a.split("=", 1)[0].rstrip("+")
            if name in RISKY_ENV or name.endswith(("_proxy", "_PROXY")) or name.startswith(
                    ("GIT_", "LD_", "BASH_FUNC_")) or name in ("CDPATH", "IFS", "SHELLOPTS"):
                d.add(ESCALATE, f"sets {name}, which changes what runs")
                _raise_risk(d, "high")
            elif not modelled.safe_assignment(a):
                d.add(ESCALATE, f"sets {name}, an environment variable the policy engine does "
                                "not model (it may make a program load code or configuration)")
        if not seg.argv:
            return cwds
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
        # paths in arguments of commands that are not modelled: protected reads and
        # writes found by shape (a modelled command's arguments are judged exactly below)
        mutating = name in MUTATORS
        for a, dyn in zip(argv[1:], seg.dynamic[1:], strict=False):
            if dyn and mutating and (".sandbox" in a or a.startswith("$")):
                d.add(ESCALATE, f"{name} on a path decided at run time ({a!r})")
            for cand in _path_candidates(a):
                for full in self._paths_in(d, cand, cwds or [here]):
                    if not self.read_ok(full):
                        d.add(DENY, f"{name} touches {full}, which filesystem.deny_read "
                                    "protects")
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
        if name == "cd":
            return self._cd(seg, cwds, d)
        self._modelled(seg, cwds, d)
        return cwds

    def _redirect(self, d: Decision, op: str, target: str, cwds: list[str] | None) -> None:
        bare = op.lstrip("0123456789")
        if bare in (">&", "<&") and (target == "-" or target.rstrip("-").isdigit()):
            return  # duplicates or closes a descriptor
        if target.startswith("\x00dynamic:"):
            d.add(ESCALATE, f"redirection target decided at run time ({target[9:]})")
            return
        if target.startswith(("/dev/tcp/", "/dev/udp/")) or target in ("/dev/tcp", "/dev/udp"):
            parts = target.split("/")
            if len(parts) > 3 and parts[3]:
                self.check_host(d, parts[3], "a /dev/tcp redirection")
            d.add(ESCALATE, f"{target} opens a network connection from the shell")
            _raise_risk(d, "high")
            return
        if target in shell.DEV_SINKS or (target.startswith("/dev/fd/")
                                         and target[8:].isdigit()):
            return
        reading = bare in ("<", "<&")
        for full in self._paths_in(d, target, cwds):
            if reading:
                self.check_read(d, full, "/", explicit=False)
            else:
                self.check_write(d, full, "/")

    def _cd(self, seg: shell.Segment, cwds: list[str] | None, d: Decision) -> list[str] | None:
        args = seg.argv[1:]
        dyn = seg.dynamic[1:]
        physical = False
        while args and args[0] in ("-L", "-P", "-e", "-@", "--") and not dyn[0]:
            physical = physical or args[0] == "-P"
            stop = args[0] == "--"
            args, dyn = args[1:], dyn[1:]
            if stop:
                break
        if len(args) > 1 or (args and (dyn[0] or args[0] == "-" or args[0].startswith("-"))):
            d.add(ESCALATE, "cd to a place decided at run time")
            return None
        target = args[0] if args else "~"
        if (os.environ.get("CDPATH") and not target.startswith(("/", "~"))
                and target.split("/", 1)[0] not in (".", "..")):
            d.add(ESCALATE, "cd under CDPATH may go elsewhere")
            return None
        if cwds is None:
            return None
        if target == "~" or target.startswith("~/"):
            target = self.home + target[1:]
        new: list[str] = []
        for c in cwds:
            joined = os.path.join(c, target)
            new.append(os.path.realpath(joined))  # physical (cd -P, and the kernel)
            if not physical:
                new.append(os.path.realpath(os.path.normpath(joined)))  # logical ..
        new = list(dict.fromkeys(new))
        certain = (seg.persist and seg.after in ("", ";", "\n") and not seg.conditional
                   and len(new) == 1 and os.path.isdir(new[0]))
        out = new if certain else list(dict.fromkeys(cwds + new))
        return out if len(out) <= 8 else None

    def _modelled(self, seg: shell.Segment, cwds: list[str] | None, d: Decision) -> None:
        """At least escalate unless the command is one the engine fully models."""
        argv = list(seg.argv)
        for i, (dyn, glob) in enumerate(zip(seg.dynamic, seg.globs, strict=False)):
            if dyn and not glob:
                d.add(ESCALATE, f"{argv[i]!r} is decided at run time")
                return
        if any(seg.globs):
            if cwds is None or len(cwds) != 1:
                d.add(ESCALATE, "a glob in a working directory decided at run time")
                return
            expanded = [argv[0]]
            for word, glob in zip(argv[1:], seg.globs[1:], strict=False):
                if not glob:
                    expanded.append(word)
                    continue
                import glob as globmod

                pattern = self.home + word[1:] if word.startswith("~/") else word
                found = sorted(globmod.glob(pattern, root_dir=cwds[0]))[:1001]
                if len(found) > 1000:
                    d.add(ESCALATE, f"{word!r} matches too many files to judge")
                    return
                if any(f.startswith("-") for f in found):
                    d.add(ESCALATE, f"{word!r} matches a file name that reads as an option")
                    return
                expanded += found or [word]
            argv = expanded
        problem, uses = modelled.model(argv)
        if problem:
            d.add(ESCALATE, problem)
            return
        if seg.name not in modelled.BUILTINS and not self._trusted_program(seg.name):
            d.add(ESCALATE, f"{seg.name} does not resolve to a program outside the writable "
                            "places")
            return
        for path, how in uses:
            for full in self._paths_in(d, path, cwds):
                if how == "git":
                    self._check_git(d, full)
                    continue
                self.check_read(d, full, "/", explicit=False)
                if how == "tree" and d.verdict.rank < ESCALATE.rank:
                    self._check_tree(d, full)

    def _trusted_program(self, name: str) -> bool:
        for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
            if not folder.startswith("/"):
                return False  # an empty or relative PATH entry: the working directory
            candidate = os.path.join(folder, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                real = os.path.realpath(candidate)
                return not any(paths.covers(r, real) or paths.covers(r, folder)
                               for r in self.allow_write)
        return False

    def _check_git(self, d: Decision, where: str) -> None:
        if any(k in os.environ for k in _GIT_PLACE_ENV):
            d.add(ESCALATE, "git's repository is chosen by the environment (GIT_DIR ...)")
            return
        cur = where
        for _ in range(256):
            dotgit = os.path.join(cur, ".git")
            if os.path.lexists(dotgit):
                if os.path.islink(dotgit) or not os.path.isdir(dotgit):
                    d.add(ESCALATE, f"{dotgit} points git at another directory")
                elif os.path.lexists(os.path.join(dotgit, "commondir")):
                    d.add(ESCALATE, f"{dotgit}/commondir points git at another directory")
                return
            parent = os.path.dirname(cur)
            if parent == cur:
                return
            cur = parent
        d.add(ESCALATE, "git repository too deep to find")

    def _check_tree(self, d: Decision, root: str, budget: int = 20000) -> None:
        """A walk reads everything below ``root``: escalate when something there is
        read-denied (or there is too much to look at)."""
        from .protect import PROTECTED_READ

        denies = list(self.deny_read) + list(PROTECTED_READ)
        anchored = [r for r in denies if not r.startswith("**/")]
        if not any(r.startswith("**/") for r in denies) and not any(
                r == root or r.startswith(root.rstrip("/") + "/") or paths.is_glob(r)
                for r in anchored):
            return
        if not os.path.isdir(root):
            return
        seen = 0
        for top, dirs, files in os.walk(root, followlinks=False):
            for entry in dirs + files:
                seen += 1
                full = os.path.join(top, entry)
                targets = [full]
                if os.path.islink(full):
                    targets.append(os.path.realpath(full))
                for t in targets:
                    if not self.read_ok(t):
                        d.add(ESCALATE, f"walks {root}, which holds {t} (read-denied)")
                        return
            if seen > budget:
                d.add(ESCALATE, f"{root} holds more than {budget} entries: too many to check")
                return

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
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise PolicyError(f"approvals.{key} must be a finite number of seconds")
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
    """The host of a URL-like shell argument (scheme optional), or None.

    Used to find hosts in command arguments, where it only needs to find more
    than a client would; a fetch tool's URL is read by ``url_host``.
    """
    u = url.strip()
    if "://" in u:
        u = u.split("://", 1)[1]
    elif u.startswith("//"):
        u = u[2:]
    u = u.replace("\\", "/").split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in u:
        u = u.rsplit("@", 1)[1]
    if u.startswith("["):
        end = u.find("]")
        return u[: end + 1] if end > 0 else None
    host = u.split(":", 1)[0]
    return host or None


_FORBIDDEN_HOST = frozenset(" #%/:<>?@[\\]^|")


def url_host(url: str) -> str | None:
    """The host a WHATWG URL parser (the one the agents' fetch tools use) reads
    from an http(s) URL, or None when the URL is anything else or anything the
    engine cannot read exactly.

    As the WHATWG parser does: leading and trailing C0 controls and spaces are
    dropped, tabs and newlines anywhere are removed, ``\\`` counts as ``/``, any
    run of slashes after the scheme is skipped, the authority ends at the first
    ``/``, ``\\``, ``?`` or ``#``, the user information ends at its last ``@``,
    and the host is percent-decoded.
    """
    if not isinstance(url, str):
        return None
    u = url.strip("".join(chr(i) for i in range(0x21)))
    u = u.replace("\t", "").replace("\n", "").replace("\r", "")
    scheme, colon, rest = u.partition(":")
    if not colon or scheme.lower() not in ("http", "https"):
        return None
    rest = rest.lstrip("/\\")
    end = len(rest)
    for c in "/\\?#":
        j = rest.find(c)
        if 0 <= j < end:
            end = j
    authority = rest[:end]
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None
        host, port = authority[: close + 1], authority[close + 1 :]
        if port and not (port.startswith(":") and port[1:].isdigit()):
            return None
        return host
    host, _, port = authority.partition(":")
    if port and not port.isdigit():
        return None
    if "%" in host:
        from urllib.parse import unquote

        host = unquote(host, errors="strict") if _percent_ok(host) else ""
    if not host or any(c in _FORBIDDEN_HOST or ord(c) < 0x20 or ord(c) == 0x7F
                       for c in host):
        return None
    return host


def _percent_ok(text: str) -> bool:
    i = text.find("%")
    while i >= 0:
        if len(text) < i + 3 or not all(c in "0123456789abcdefABCDEF" for c in text[i + 1:i + 3]):
            return False
        i = text.find("%", i + 1)
    return True


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
            # any bare argument may be a host: localhost, 2130706433, 0x7f.1, [::1]
            if not a.startswith("-") and "://" not in a:
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
                if u.lower().startswith("file:"):  # a local repository: no host
                    out.append(("", f"git {sub[0]} (the local repository {u})"))
                elif "://" not in u:
                    h = u.split(":", 1)[0].rsplit("@", 1)[-1]
                    out.append((h, "git"))
            if not urls and sub[0] != "clone":
                name_ = remotes[0] if remotes else "origin"
                url = _git_remote_url(cwd, name_)
                if url and (url.startswith(("/", ".", "~", "file:")) or ":" not in url):
                    # a path remote: no host to check, but it leaves the repository
                    out.append(("", f"git {sub[0]} {name_} (the local repository {url})"))
                elif url:
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
