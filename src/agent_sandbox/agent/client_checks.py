"""What each installed agent client will actually apply: would it skip our
hooks, and would the calls it allows run outside an OS boundary?

It reads the clients' own files the way the clients read them (Codex project
and hook trust and its managed requirements, Claude Code workspace trust and
``disableAllHooks``, Gemini CLI folder trust and ``hooksConfig`` in every
settings layer, and the managed files a fleet host should have) and returns
findings a human can act on. ``sandbox status`` shows them for a repository,
``sandbox verify`` for the host.

Read-only: it never changes a file, and an unreadable file is a finding, not
an error.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from dataclasses import dataclass
from typing import Any

from agent_sandbox import contract

CODEX_REQUIREMENTS = "/etc/codex/requirements.toml"
CLAUDE_MANAGED = "/etc/claude-code/managed-settings.json"
GEMINI_SYSTEM = contract.GEMINI_SYSTEM_SETTINGS
HOST_POLICY = contract.POLICY_FILE


@dataclass(frozen=True)
class Finding:
    client: str
    problem: str  # "skips-hooks" | "outside-boundary" | "missing-managed-file"
    detail: str
    # the one command that completes the set-up, when the client skips our hooks
    # silently until it is run (``sandbox init`` exits non-zero naming it)
    fix: str | None = None


def _json(path: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path} is unreadable ({exc})"
    return (doc if isinstance(doc, dict) else None), None


def _toml(path: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"{path} is unreadable ({exc})"


CLIENT_PROGRAMS = {"claude": ("claude",), "codex": ("codex",), "gemini": ("gemini",),
                   "cursor": ("cursor-agent", "cursor")}


def installed_clients(extra_path: str = "") -> list[str]:
    path = os.pathsep.join(p for p in (extra_path, os.environ.get("PATH", "")) if p)
    return [c for c, programs in CLIENT_PROGRAMS.items()
            if any(shutil.which(x, path=path) for x in programs)]


def installed_version(client: str) -> str | None:
    """The version of the client on PATH (``claude --version``: "2.1.332 (Claude
    Code)"), or None when it is not there or says nothing a version looks like."""
    import re
    import subprocess

    exe = shutil.which(client)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"\s*v?(\d+(?:\.\d+){0,3})\b", out)
    return m.group(1) if m else None


# -- Codex --------------------------------------------------------------------

def codex(repo: str | None, home: str) -> list[Finding]:
    from .client_trust import codex_entries

    out: list[Finding] = []
    req, err = _toml(CODEX_REQUIREMENTS)
    if err:
        out.append(Finding("codex", "skips-hooks", err))
    managed_hooks = bool(req and req.get("hooks"))
    codex_home = os.environ.get("CODEX_HOME") or os.path.join(home, ".codex")
    hooks_file = os.path.join(repo, ".codex", "hooks.json") if repo else ""
    if repo and os.path.isfile(hooks_file) and not managed_hooks:
        # with managed hooks, Codex runs ours whatever it makes of the project's
        doc, err = _json(hooks_file)
        cfg, cerr = _toml(os.path.join(codex_home, "config.toml"))
        if err or cerr:
            out.append(Finding("codex", "skips-hooks", err or cerr or ""))
        elif doc is not None:
            ours = {h.get("command") for groups in (doc.get("hooks") or {}).values()
                    for g in groups for h in g.get("hooks") or []
                    if contract.is_hook_command(h.get("command"), "codex")}
            for _file, key, value in codex_entries(codex_home, repo, hooks_file, doc,
                                                   {c for c in ours if c}):
                node: Any = cfg or {}
                for part in key:
                    node = node.get(part) if isinstance(node, dict) else None
                if node != value:
                    what = ("the project is not trusted" if key[0] == "projects"
                            else f"hook {key[2]} is not trusted (or was modified)")
                    fix = f"sandbox init --codex --trust {repo}"
                    out.append(Finding("codex", "skips-hooks",
                                       f"{what}: Codex skips it silently; run `{fix}`", fix))
                    break
        return out + _codex_boundary(req, repo)
    if not managed_hooks:
        out.append(Finding("codex", "skips-hooks",
                           f"no managed hooks in {CODEX_REQUIREMENTS} and no trusted "
                           "project hooks here"))
    return out + _codex_boundary(req, repo)


def _codex_boundary(req: dict[str, Any] | None, repo: str | None) -> list[Finding]:
    fs = ((req or {}).get("permissions") or {}).get("filesystem") or {}
    if fs.get("deny_read"):
        return []
    if repo:
        cfg, _ = _toml(os.path.join(repo, ".codex", "config.toml"))
        if cfg and cfg.get("default_permissions") in (cfg.get("permissions") or {}):
            return []
    return [Finding("codex", "outside-boundary",
                    "no deny_read for Codex's sandbox (requirements or permission profile): "
                    "an allowed command can read anything")]


# -- Claude Code ----------------------------------------------------------------

def claude(repo: str | None, home: str) -> list[Finding]:
    out: list[Finding] = []
    managed, err = _json(CLAUDE_MANAGED)
    if err:
        out.append(Finding("claude", "skips-hooks", err))
    layers = [os.path.join(home, ".claude", "settings.json")]
    if repo:
        layers += [os.path.join(repo, ".claude", "settings.json"),
                   os.path.join(repo, ".claude", "settings.local.json")]
    for path in layers:
        doc, _ = _json(path)
        if doc and doc.get("disableAllHooks") and not (managed or {}).get("hooks"):
            out.append(Finding("claude", "skips-hooks", f"{path} sets disableAllHooks"))
    if repo and not managed and os.path.isfile(os.path.join(repo, ".claude", "settings.json")):
        state, _ = _json(os.path.join(home, ".claude.json"))
        project = ((state or {}).get("projects") or {}).get(repo) or {}
        if not project.get("hasTrustDialogAccepted"):
            out.append(Finding("claude", "skips-hooks",
                               "the workspace is not trusted: an interactive Claude Code "
                               "runs no project hooks until its trust dialog is accepted"))
    out += _claude_fails_open(managed, repo)
    sandbox_on = [(managed or {}).get("sandbox", {}).get("enabled")]
    if repo:
        proj, _ = _json(os.path.join(repo, ".claude", "settings.json"))
        sandbox_on.append((proj or {}).get("sandbox", {}).get("enabled"))
    if True not in sandbox_on:
        out.append(Finding("claude", "outside-boundary",
                           "Claude Code's sandbox is not enabled by a managed or project "
                           "settings file"))
    return out


def _claude_fails_open(managed: dict[str, Any] | None, repo: str | None) -> list[Finding]:
    """Our hook entries without ``onFailure: block``: Claude Code runs the call when
    such a hook cannot start, crashes, exits oddly or times out."""
    docs = [managed]
    if repo:
        docs.append(_json(os.path.join(repo, ".claude", "settings.json"))[0])
    ours = [h for doc in docs for groups in ((doc or {}).get("hooks") or {}).values()
            if isinstance(groups, list) for g in groups if isinstance(g, dict)
            for h in g.get("hooks") or [] if isinstance(h, dict)
            and contract.is_hook_command(h.get("command"), "claude")]
    if not ours or all(h.get("onFailure") == "block" for h in ours):
        return []
    from agent_sandbox.render.agents import CLAUDE_ON_FAILURE

    version = installed_version("claude")
    new = version is not None and tuple(int(x) for x in version.split(".")) >= \
        CLAUDE_ON_FAILURE
    fix = ("run `sandbox init --claude` again (or set agents.claude.version)" if new else
           "install Claude Code 2.1.295 or later, then run `sandbox init --claude` again")
    return [Finding("claude", "fails-open",
                    "our hooks carry no onFailure: block: Claude Code runs a call when the "
                    f"hook cannot start, crashes or times out (installed: {version or 'none'}); "
                    + fix)]


# -- Cursor -------------------------------------------------------------------

def cursor(repo: str | None, home: str) -> list[Finding]:
    """Our entries in Cursor's hooks files (the user's, the project's) without
    ``failClosed: true``: Cursor runs the call when such a hook crashes, times out
    or answers no JSON. (Cursor does not run here: the shape is the one Cursor's
    own hooks examples use.)"""
    out: list[Finding] = []
    paths = [os.path.join(home, ".cursor", "hooks.json")]
    if repo:
        paths.append(os.path.join(repo, ".cursor", "hooks.json"))
    for path in paths:
        doc, err = _json(path)
        if err:
            out.append(Finding("cursor", "skips-hooks", err))
        ours = [h for entries in ((doc or {}).get("hooks") or {}).values()
                if isinstance(entries, list) for h in entries if isinstance(h, dict)
                and contract.is_hook_command(h.get("command"), "cursor")]
        if any(h.get("failClosed") is not True for h in ours):
            out.append(Finding("cursor", "fails-open",
                               f"{path}: our hooks carry no failClosed: true: Cursor runs a "
                               "call when the hook crashes or times out; run `sandbox init "
                               "--cursor` again"))
    return out


# -- Gemini CLI -----------------------------------------------------------------

def _our_gemini_hooks(doc: dict[str, Any] | None) -> set[str]:
    from .gemini_settings import hook_entries

    names: set[str] = set()
    for h in hook_entries(doc):
        if contract.is_hook_command(h.get("command"), "gemini"):
            names.update(str(x) for x in (h.get("name"), h.get("command")) if x)
    return names


def gemini(repo: str | None, home: str) -> list[Finding]:
    out: list[Finding] = []
    system, err = _json(GEMINI_SYSTEM)
    if err:
        out.append(Finding("gemini", "skips-hooks", err))
    layers = [os.path.join(home, ".gemini", "settings.json")]
    if repo:
        layers.append(os.path.join(repo, ".gemini", "settings.json"))
    ours = _our_gemini_hooks(system)
    for path in layers:
        doc, _ = _json(path)
        ours |= _our_gemini_hooks(doc)
    only_bare = ("; a bare `gemini` skips them, `sandbox agent gemini` (the wrapper) "
                 "runs them anyway")
    for path in layers:
        doc, _ = _json(path)
        cfg = (doc or {}).get("hooksConfig") or {}
        if cfg.get("enabled") is False:
            out.append(Finding("gemini", "skips-hooks",
                               f"{path} sets hooksConfig.enabled false{only_bare}"))
        if ours & {str(x) for x in cfg.get("disabled") or []}:
            out.append(Finding("gemini", "skips-hooks",
                               f"{path} lists our hooks in hooksConfig.disabled{only_bare}"))
    folder_trust = (((system or {}).get("security") or {}).get("folderTrust") or {})
    if repo and folder_trust.get("enabled") is not False:
        trusted, _ = _json(os.path.join(home, ".gemini", "trustedFolders.json"))
        marks = trusted or {}
        d, ok = repo, False
        while True:
            if marks.get(d) in ("TRUST_FOLDER", "TRUST_PARENT"):
                ok = True
                break
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        if not ok:
            fix = f"sandbox init --gemini --trust {repo}"
            out.append(Finding("gemini", "skips-hooks",
                               "the folder is not trusted: Gemini CLI ignores the repository's "
                               f"hooks there; run `{fix}`", fix))
    out += _gemini_boundary()
    return out


def _gemini_boundary(path: str | None = None) -> list[Finding]:
    """Gemini CLI has no OS sandbox that runs here: its calls are contained only
    when the client itself runs in ``sandbox agent``. What can be seen is what
    the name ``gemini`` resolves to on PATH: the wrapper the roles install
    (which runs ``sandbox agent gemini``) or the client itself. A user who runs
    the client's program by its full path is not seen."""
    from .profiles import is_wrapper

    first = shutil.which("gemini", path=path)
    if first is not None and is_wrapper(first):
        return []
    return [Finding("gemini", "outside-boundary",
                    f"`gemini` on PATH is {first or 'not found'}, not the agent-sandbox "
                    "wrapper: its allowed calls run outside any OS boundary; run it as "
                    "`sandbox agent gemini -- ARGS`, or install the wrapper (artifact kind "
                    "agent-wrapper, first on PATH through /etc/profile.d)")]


def check(repo: str | None, home: str | None = None,
          clients: list[str] | None = None) -> list[Finding]:
    """Findings for the given clients (default: those on PATH), for ``repo`` if given."""
    home = home or os.path.expanduser("~")
    chosen = clients if clients is not None else installed_clients()
    out: list[Finding] = []
    checks = {"claude": claude, "codex": codex, "cursor": cursor, "gemini": gemini}
    for c in chosen:
        out += checks[c](repo, home)
    if os.path.isfile(HOST_POLICY):
        for c, path in (("claude", CLAUDE_MANAGED), ("codex", CODEX_REQUIREMENTS),
                        ("gemini", GEMINI_SYSTEM)):
            if c in chosen and not os.path.isfile(path):
                out.append(Finding(c, "missing-managed-file",
                                   f"this host has a managed policy but no {path}"))
    return out
