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

The parts live beside it, one concept each: ``decision`` (``Call``, ``Decision``,
``PolicyError``), ``document`` (the document's shape, checked at load),
``commandline`` (a shell command judged segment by segment), ``reached_hosts`` (the hosts
a URL or command reaches) and ``remember`` (remembered decisions).

It never answers allow for a call it cannot fully understand, and never lets a
remembered decision override a deny.
"""

from __future__ import annotations

from .. import approved_claims
from ..spec import paths
from ..spec.rules import Verdict, command_matches, mcp_name_matches, prefix_matches
from .commandline import classify_command
from .decision import Call, Decision, PolicyError, finish_risk, raise_risk, summary_of
from .document import RuleEntry, parse_verdict, rule_shape, seconds, section, string_list
from .reached_hosts import domains, url_host
from .remember import REMEMBER_SCOPES, load_remembered, remembered_key

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from typing import Any

ALLOW, OBSERVE, ESCALATE, DENY = Verdict.ALLOW, Verdict.OBSERVE, Verdict.ESCALATE, Verdict.DENY


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
        self.homes = homes  # what the environment adds only ever adds protection
        fs = section(doc, "filesystem")
        net = section(doc, "network")
        cmds = section(doc, "commands")
        appr = section(doc, "approvals")

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
        self.allowed_domains = string_list(net, "allowed_domains", "network")
        self.denied_domains = string_list(net, "denied_domains", "network")
        self.default = parse_verdict(cmds.get("default", "escalate"), "commands.default")
        self.rules: list[RuleEntry] = []
        raw_rules = cmds.get("rules", [])
        if not isinstance(raw_rules, list):
            raise PolicyError("commands.rules must be a list")
        for i, r in enumerate(raw_rules):
            if not isinstance(r, dict):
                raise PolicyError(f"commands.rules[{i}] must be an object")
            pattern, prefix, tool = rule_shape(r, f"commands.rules[{i}]")
            verdict = parse_verdict(r.get("verdict"), f"commands.rules[{i}]")
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
        self.ttl = seconds(appr, "ttl", 1800.0)
        self.wait = seconds(appr, "wait", 120.0)
        self.remember_ttl = seconds(appr, "remember_ttl", 7 * 86400.0)
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
                ok = pat == "*" or domains().pattern_matches(pat, subject)
            elif kind == "mcp":
                ok = pat == "*" or mcp_name_matches(pat, subject)
            else:
                ok = pat == "*"
            if ok:
                out.append(r)
        return out

    def apply_rules(self, d: Decision, kind: str, subject: str, argv: list[str] | None,
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
    def places(self, path: str, cwd: str) -> list[str]:
        """Every file a path from a tool call may name (``paths.places``: the
        kernel's reading and a tidying client's), ``~`` as the agent's shell
        reads it. Raises ``paths.OpaquePath`` for a path through a process's
        magic links. Every rule and exemption is applied to these, never to the
        path as written."""
        p = path
        if p == "~" or p.startswith("~/"):
            p = self.home + p[1:]
        return paths.places(p, cwd)

    @property
    def protected(self) -> list[str]:
        """Self-protection, added at every load (computed when first needed),
        under the account's home and under ``$HOME`` when that differs."""
        if self._protected is None:
            from .self_protection import protected_paths

            rules: list[str] = []
            for h in self.homes:
                rules += protected_paths(self.repo, h)
            self._protected = sorted(set(rules))
        return self._protected

    def read_ok(self, abspath: str) -> bool:
        if "audit-keys" in abspath:
            from .self_protection import PROTECTED_READ

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
        try:
            fulls = self.places(path, cwd)
        except paths.OpaquePath as exc:
            d.add(ESCALATE, f"reading {path!r}: {exc}")
            raise_risk(d, "medium")
            return
        for full in fulls:
            if not self.read_ok(full):
                d.add(DENY, f"reading {full} is denied by filesystem.deny_read")
                d.risk = "high"
                return
        if explicit:
            for full in fulls:
                self.apply_rules(d, "read", full, None, None)

    def check_tree(self, d: Decision, root: str, budget: int = 20000) -> None:
        """A walk reads everything below ``root`` (``grep -r``, a search tool), and
        below the folders links there lead to: escalate when something there is
        read-denied (or there is too much to look at). The one reading of a
        recursive read, for every tool."""
        import os

        from .self_protection import PROTECTED_READ

        denies = list(self.deny_read) + list(PROTECTED_READ)
        anchored = [r for r in denies if not r.startswith("**/")]
        if not any(r.startswith("**/") for r in denies) and not any(
                r == root or r.startswith(root.rstrip("/") + "/") or paths.is_glob(r)
                for r in anchored):
            return
        if not os.path.isdir(root):
            return
        seen = 0
        walked: set[tuple[int, int]] = set()
        # links to folders followed (grep -R, rg -L, a search tool that follows
        # them read what they hold), each folder once
        for top, dirs, files in os.walk(root, followlinks=True):
            try:
                st = os.stat(top)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in walked:
                dirs[:] = []
                continue
            walked.add((st.st_dev, st.st_ino))
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

    def check_write(self, d: Decision, path: str, cwd: str) -> None:
        """A file written by a tool (``commandline`` exempts a shell's own
        descriptors before it calls this)."""
        if path.startswith("\x00dynamic:"):
            d.add(ESCALATE, f"write target decided at run time ({path[9:]})")
            return
        device = paths.special_device(path)
        if device == "null":
            return
        if device is not None:
            what = "terminal" if device == "terminal" else "descriptor of the agent's process"
            d.add(DENY, f"{path} is a {what}: a file tool may not write it")
            d.risk = "high"
            return
        try:
            fulls = self.places(path, cwd)
        except paths.OpaquePath as exc:
            d.add(DENY, f"writing {path!r}: {exc}")
            d.risk = "high"
            return
        for full in fulls:
            self._check_write_at(d, full)

    def _check_write_at(self, d: Decision, full: str) -> None:
        device = paths.special_device(full)
        if device == "null":
            return
        if device is not None:
            d.add(DENY, f"{full} is a terminal: a file tool may not write it")
            d.risk = "high"
            return
        if self.is_protected(full):
            d.add(DENY, f"{full} is protected (sandbox state, agent settings, hooks and MCP "
                        "configuration are never writable by an agent)")
            d.risk = "high"
            return
        if any(paths.covers(r, full) for r in self.deny_write):
            d.add(DENY, f"writing {full} is denied by filesystem.deny_write")
            d.risk = "high"
            return
        if approved_claims.claimed_path(full):
            d.add(DENY, f"{full} was written by an approved command that is still running: "
                        "write it once that run has ended")
            return
        # a rule may tighten a write, never loosen filesystem.allow_write
        self.apply_rules(d, "write", full, None, None)
        if any(paths.covers(r, full) for r in self.allow_write):
            return
        d.add(ESCALATE, f"{full} is outside filesystem.allow_write")
        raise_risk(d, "medium")

    # -- network ----------------------------------------------------------
    def check_host(self, d: Decision, host: str, what: str) -> None:
        if not host:  # a transfer to a local path (a path remote): a human decides
            d.add(ESCALATE, f"{what} is a transfer outside this repository")
            raise_risk(d, "medium")
            return
        try:
            canon = domains().canonical_host(host)
        except domains().DomainError as exc:
            d.add(DENY, f"{what}: bad host {host!r}: {exc}")
            return
        if any(domains().pattern_matches(p, canon) or p == "*" for p in self.denied_domains):
            d.add(DENY, f"{what}: {canon} is in network.denied_domains")
            d.risk = "high"
            return
        # a rule may tighten a host, never loosen network.allowed_domains
        self.apply_rules(d, "fetch", canon, None, None)
        ok, _why = domains().host_allowed(canon, self.allowed_domains, self.denied_domains)
        if ok:
            return
        d.add(ESCALATE, f"{what}: {canon} is not in network.allowed_domains")
        raise_risk(d, "medium")

    # -- the entry point --------------------------------------------------
    def classify(self, call: Call) -> Decision:
        d = Decision(ALLOW, kind=call.kind, summary=summary_of(call))
        try:
            self._classify(call, d)
        except Exception as exc:  # fail closed on anything unexpected
            d.add(DENY, f"internal error while classifying: {type(exc).__name__}: {exc}")
        entry = self._remembered(call) if d.verdict is ESCALATE else None
        if entry is not None and call.kind == "bash":
            # a command runs code of the tree: remembered for the content it was
            # approved with, checked when the request is made and pinned while it runs
            seen = entry.get("content")
            if isinstance(seen, dict) and isinstance(entry.get("request_id"), str):
                d.remembered_content = entry
                d.reasons.append("escalate: remembered approval, which runs it while the files "
                                 "it may read are those it was approved with")
        elif entry is not None:
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
            from .tools import CONTENT_SEARCH

            for p in call.paths or (call.cwd,):
                self.check_read(d, p, call.cwd, explicit=True)
                if call.tool in CONTENT_SEARCH and d.verdict.rank < ESCALATE.rank:
                    # it reads the files below its folder, as ``grep -r`` does
                    try:
                        fulls = self.places(p, call.cwd)
                    except paths.OpaquePath:
                        continue  # check_read escalated it already
                    for full in fulls:
                        self.check_tree(d, full)
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
                self.apply_rules(d, "mcp", call.mcp_name, None, self.default)
        elif kind == "internal":
            from .tools import BY_NAME

            verdict, why = BY_NAME.get(call.tool, (ALLOW, ""))
            d.add(verdict, why if verdict is not ALLOW else "")
        else:
            d.add(DENY, f"unknown tool {call.tool!r}")
        finish_risk(d)

    def classify_command(self, command: str, cwd: str, d: Decision) -> None:
        classify_command(self, command, cwd, d)

    def _remembered(self, call: Call) -> dict[str, Any] | None:
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
                return e
        return None


# What ``approve --always`` may remember, named by the approver:
#   exact    this tool, these arguments (file content included), this directory
