"""``sandbox init`` / ``sandbox uninstall``: install the per-repository connector.

``init`` creates ``.sandbox/`` (the effective policy the hook reads, the srt
settings approved commands run under, the escalation queue, audit, originals,
state) and, for each chosen agent, its hook and MCP entries as rendered by
``agent_sandbox.render.agents``. An agent file that already exists is merged
(its own keys kept, ours added) and its original bytes are saved under
``.sandbox/originals/`` first; ``.sandbox/state/installed.json`` lists what init
wrote. ``uninstall`` restores every original byte for byte and removes only
what init added. Running ``init`` twice changes nothing the second time.

Hook commands use the absolute interpreter running ``sandbox`` (never a bare
``python`` from PATH). Every file is written atomically; nothing is written
before the whole plan has been computed and validated.

A sandboxed command may have written the repository before: every file under it
is read, copied, written and removed through ``below_root``, never through a
link in any component, and a link (or a non-folder) where a folder of ours
should be stops init or uninstall before anything changes.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import socket
import stat
import sys
import tomllib
from dataclasses import dataclass
from typing import Any

from . import below_root
from .errors import SandboxError
from .repo_layout import AUDIT, FOLDERS, INSTALLED, ORIGINALS, SANDBOX, SPEC_LAYER, under
from .starter_policy import MANAGED_POLICY, starter_policy

AGENT_FLAGS = ("claude", "codex", "cursor", "gemini")
AGENT_DIRS = (".claude", ".cursor", ".gemini", ".codex", ".vscode")
STATE_FILE = INSTALLED
MCP_NAME = "agent-sandbox"
MCP_STARTUP_S = 30  # Codex's startup_timeout_sec for our server (its default: 10)


class ConnectorError(SandboxError):
    """init or uninstall cannot proceed; the message says why and what to do."""


@dataclass(frozen=True)
class Planned:
    path: str  # absolute
    content: bytes
    mode: int
    merge: str  # "json" | "toml" | "own" (ours alone; never merged)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rel(repo: str, path: str) -> str:
    rel = os.path.relpath(path, repo)
    if rel.startswith(".."):
        raise ConnectorError(f"{path} is outside {repo}")
    return rel


def merge_json(original: Any, ours: Any) -> Any:
    """Ours added to theirs: objects merged key by key, lists joined without
    duplicates, scalars of ours win."""
    if isinstance(original, dict) and isinstance(ours, dict):
        out = dict(original)
        for k, v in ours.items():
            out[k] = merge_json(original[k], v) if k in original else v
        return out
    if isinstance(original, list) and isinstance(ours, list):
        out_l = list(original)
        for item in ours:
            if item not in out_l:
                out_l.append(item)
        return out_l
    return ours


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def _load_spec(repo: str, agents: list[str], mcp: bool) -> Any:
    import tempfile

    from .spec.loader import load_layer, load_stack
    from .spec.models import AgentOptions, McpServer

    repo_layer = under(repo, SPEC_LAYER)
    layers = [load_layer(p) for p in (MANAGED_POLICY,) if os.path.isfile(p)]
    with tempfile.TemporaryDirectory() as tmp:
        if os.path.isfile(repo_layer):
            layers.append(load_layer(repo_layer))
        else:  # the starter init will write, validated before anything is written
            starter = os.path.join(tmp, "policy.yml")
            with open(starter, "w") as fh:
                fh.write(starter_policy())
            layer = load_layer(starter)
            layer.base = os.path.abspath(repo)  # its "." is the repository
            layers.append(layer)
        spec = load_stack(layers)
    current: dict[Any, AgentOptions] = spec.agents
    chosen: dict[Any, AgentOptions] = {name: current.get(name) or AgentOptions()
                                       for name in agents}
    spec.agents = chosen
    for opts in spec.agents.values():
        opts.enabled = True
    claude = spec.agents.get("claude")
    if claude is not None and not claude.version:
        from .agent.client_checks import installed_version

        claude.version = installed_version("claude")  # what its hook entries may say
    if mcp:
        spec.mcp_servers = {**spec.mcp_servers, MCP_NAME: McpServer(
            command=sys.executable, args=["-I", "-m", "agent_sandbox", "mcp", repo])}
    return spec


_CLAUDE_IMPORT = {"deny": "deny", "ask": "escalate"}


def imported_rules(repo: str, codex_files: list[str]) -> list[dict[str, Any]]:
    """Rules brought in from the agents' own configuration, as plain rule dicts:
    every ``prefix_rule`` of the spec's Codex ``.rules`` files, and the deny and
    ask rules of an existing ``.claude/settings.json`` (allow rules are not
    imported: an import may only tighten)."""
    from .spec.rules import RuleSyntaxError, parse_claude_rule, parse_codex_rules

    out: list[dict[str, Any]] = []
    for name in codex_files:
        path = name if os.path.isabs(name) else os.path.join(repo, name)
        below = os.path.normpath(name)
        try:
            if os.path.isabs(below) or below.startswith(".."):  # named outside on purpose
                with open(path, encoding="utf-8") as fh:
                    source = fh.read()
            else:
                source = below_root.read_file(repo, below).decode("utf-8")
            for r in parse_codex_rules(source, path):
                out.append({"verdict": r["verdict"], "tool": "bash", "prefix": r["prefix"],
                            "pattern": None, "reason": r.get("reason") or f"from {name}"})
        except below_root.NotBelowRoot:
            raise
        except (OSError, UnicodeDecodeError) as exc:
            raise ConnectorError(f"cannot read the Codex rules file {path}: {exc}") from None
        except RuleSyntaxError as exc:
            raise ConnectorError(f"invalid Codex rules: {exc}") from None
    settings = f"{ORIGINALS}/.claude/settings.json"
    if below_root.lstat(repo, settings) is None:
        settings = ".claude/settings.json"
    try:
        perms = json.loads(below_root.read_file(repo, settings)).get("permissions") or {}
    except below_root.NotBelowRoot:
        raise
    except (OSError, ValueError, AttributeError):
        perms = {}
    for key, verdict in _CLAUDE_IMPORT.items():
        for text in perms.get(key) or []:
            try:
                kind, arg = parse_claude_rule(str(text))
            except RuleSyntaxError:
                continue  # their file, their syntax: only what we understand is imported
            out.append({"verdict": verdict, "tool": kind.value, "pattern": arg or "*",
                        "prefix": None, "reason": f"imported from .claude/settings.json "
                                                  f"permissions.{key}: {text}"})
    return out


def plan(repo: str, agents: list[str], mcp: bool) -> list[Planned]:
    """Everything init would write (pure apart from reading the spec layers)."""
    from .inventory import HostFacts, User
    from .render import agents as agent_render
    from .render.srt import policy_document, srt_settings

    spec = _load_spec(repo, agents, mcp)
    home = os.path.expanduser("~")
    facts = HostFacts(name=socket.gethostname(), os="linux", python=sys.executable,
                      users=(User(getpass.getuser(), home),), repositories=(repo,))
    out: list[Planned] = []
    sb = under(repo, SANDBOX)
    doc = policy_document(spec)
    doc["commands"]["rules"] += imported_rules(repo, spec.commands.codex_rules_files)
    out.append(Planned(os.path.join(sb, "policy.json"), _json_bytes(doc), 0o644, "own"))
    settings = srt_settings(spec, home)
    fs = settings["filesystem"]
    for key in ("denyRead", "allowRead", "allowWrite", "denyWrite"):
        if key in fs:
            fs[key] = [p if p.startswith(("/", "~", "**")) else
                       os.path.normpath(os.path.join(repo, p)) for p in fs[key]]
    out.append(Planned(os.path.join(sb, "srt-settings.json"), _json_bytes(settings), 0o644,
                       "own"))
    for art in agent_render.project_artifacts(spec, facts, repo):
        out.append(Planned(art.target, art.content, art.mode,
                           "own" if art.target.endswith(".toml") else "json"))
    if "codex" in agents:
        opts = spec.agents["codex"]
        if opts.hooks:
            out.append(Planned(os.path.join(repo, ".codex", "hooks.json"),
                               _json_bytes(agent_render.codex_hooks(spec, facts)), 0o644,
                               "json"))
        cfg = agent_render.codex_config(spec)
        if mcp and MCP_NAME in cfg.get("mcp_servers", {}):
            # the first turn waits for our tools instead of going out without them;
            # a required server that has not answered within Codex's default 10 s
            # ends the session, and ours starts an interpreter, which a busy host
            # can hold up that long
            cfg["mcp_servers"][MCP_NAME].update(required=True, startup_timeout_sec=MCP_STARTUP_S)
        if cfg:
            out.append(Planned(os.path.join(repo, ".codex", "config.toml"),
                               agent_render.toml_bytes(cfg), 0o644, "toml"))
    seen: set[str] = set()
    for p in out:
        if p.path in seen:
            raise ConnectorError(f"two artifacts for {p.path}")
        seen.add(p.path)
        _rel(repo, p.path)
    return out


def registered_settings(repo: str, home: str | None = None) -> str:
    """Where an earlier init registered a copy of the sandbox settings, outside the
    repository; uninstall removes one it finds recorded. Approved commands run under
    the repository's ``.sandbox/srt-settings.json``, which the runner reads itself."""
    home = home or os.path.expanduser("~")
    key = hashlib.sha256(os.path.realpath(repo).encode()).hexdigest()[:16]
    return os.path.join(home, ".config", "agent-sandbox", "repos", key, "srt-settings.json")


def _check_folders(repo: str, folders: Any) -> None:
    """Every folder of ``folders`` (relative to ``repo``) that exists is a real
    folder below ``repo``, each component on its way too (``NotBelowRoot``
    otherwise): checked before the first change, so a refusal changes nothing."""
    for rel in sorted(set(folders)):
        try:
            fd = below_root.open_folder(repo, rel)
        except FileNotFoundError:
            continue
        os.close(fd)


def _originals_of(folder: str) -> str:
    """Where the saved originals of the files in ``folder`` go."""
    return f"{ORIGINALS}/{folder}" if folder else ORIGINALS


def _make_folder(repo: str, rel: str, mode: int) -> None:
    os.close(below_root.open_folder(repo, rel, create=True, mode=mode))


def _merged(p: Planned, original: bytes) -> bytes:
    if p.merge == "json":
        try:
            theirs = json.loads(original)
        except ValueError as exc:
            raise ConnectorError(f"{p.path} is not valid JSON ({exc}); fix or move it, then "
                                 "run init again") from None
        return _json_bytes(merge_json(theirs, json.loads(p.content)))
    if p.merge == "toml":
        import tomli_w

        try:
            theirs = tomllib.loads(original.decode())
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConnectorError(f"{p.path} is not valid TOML ({exc})") from None
        return tomli_w.dumps(merge_json(theirs, tomllib.loads(p.content.decode()))).encode()
    return p.content


def _trust_entries(repo: str, chosen: list[str]) -> list[Any]:
    """The client trust entries for our own hooks in ``repo`` (see agent.client_trust)."""
    from .agent import client_trust
    from .inventory import HostFacts
    from .render import agents as agent_render

    home = os.path.expanduser("~")
    entries: list[Any] = []
    hooks_file = os.path.join(repo, ".codex", "hooks.json")
    if "codex" in chosen and below_root.lstat(repo, ".codex/hooks.json") is not None:
        facts = HostFacts(name=socket.gethostname(), os="linux", python=sys.executable)
        ours = {agent_render.hook_command(facts, "codex", ev)
                for _, ev, _ in agent_render.CODEX_EVENTS}
        doc = json.loads(below_root.read_file(repo, ".codex/hooks.json"))
        codex_home = os.environ.get("CODEX_HOME") or os.path.join(home, ".codex")
        entries += client_trust.codex_entries(codex_home, repo, hooks_file, doc, ours)
    if "gemini" in chosen:
        entries += client_trust.gemini_entries(home, repo)
    return entries


def _merge_trust(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Restore records of two inits: the first original of each file wins."""
    by_path = {r["path"]: dict(r) for r in old}
    for r in new:
        prev = by_path.get(r["path"])
        if prev is None:
            by_path[r["path"]] = r
        else:
            prev["keys"] = prev["keys"] + [k for k in r["keys"] if k not in prev["keys"]]
    return [by_path[p] for p in sorted(by_path)]


def init(repo: str, agents: list[str] | None = None, mcp: bool = False,
         trust: bool = False) -> dict[str, Any]:
    """Install the connector in ``repo``. Returns a summary of what changed.

    With ``trust`` (the user's consent), also mark our hooks trusted in the
    clients that ask for it (Codex project and hook trust, Gemini CLI trusted
    folder); the restore data records it and ``uninstall`` takes it back."""
    repo = os.path.realpath(repo)
    if not os.path.isdir(repo):
        raise ConnectorError(f"{repo} is not a directory")
    try:
        return _init(repo, agents, mcp, trust)
    except below_root.NotBelowRoot as exc:
        raise ConnectorError(f"init: {exc}") from None


def _init(repo: str, agents: list[str] | None, mcp: bool, trust: bool) -> dict[str, Any]:
    chosen = [a for a in AGENT_FLAGS if a in (agents or [])] or ["claude"]
    unknown = [a for a in (agents or []) if a not in AGENT_FLAGS]
    if unknown:
        raise ConnectorError(f"unknown agent(s): {', '.join(unknown)}")
    # every folder of ours, before the spec layer in .sandbox/ is even read
    _check_folders(repo, [*AGENT_DIRS, *(f"{SANDBOX}/{d}" for d in FOLDERS)])
    starter = SPEC_LAYER
    layer = below_root.lstat(repo, starter)
    if layer is not None and not stat.S_ISREG(layer.st_mode):
        raise ConnectorError(f"{os.path.join(repo, starter)} is not a regular file; move it "
                             "away first")
    state = _read_state(repo)
    listed, dirs = _state_paths(state)
    created_dirs: list[str] = list(dirs)
    if below_root.lstat(repo, SANDBOX) is None:
        created_dirs.append(SANDBOX)
    # agent directories that do not exist yet are ours to remove later
    for d in AGENT_DIRS:
        if below_root.lstat(repo, d) is None and d not in created_dirs:
            created_dirs.append(d)
    files: dict[str, dict[str, Any]] = {f["path"]: f for f in listed}
    # 1. compute everything; any bad input stops here, before a single write
    planned = plan(repo, chosen, mcp)
    folders = {os.path.dirname(_rel(repo, p.path)) for p in planned}
    _check_folders(repo, [*folders, *map(_originals_of, folders)])
    work: list[tuple[Planned, str, dict[str, Any], bytes,
                     tuple[bytes, os.stat_result] | None]] = []
    for p in planned:
        rel = _rel(repo, p.path)
        entry = files.get(rel)
        original: tuple[bytes, os.stat_result] | None = None  # theirs, saved now
        if entry is None:
            st = below_root.lstat(repo, rel)
            if st is not None:
                if not stat.S_ISREG(st.st_mode):
                    raise ConnectorError(f"{p.path} is not a regular file; move it away first")
                original = below_root.read_file_stat(repo, rel)
                entry = {"path": rel, "created": False, "mode": original[1].st_mode & 0o7777}
            else:
                entry = {"path": rel, "created": True}
        if entry.get("created"):
            desired = p.content
        elif original is not None:
            desired = _merged(p, original[0])
        else:
            desired = _merged(p, below_root.read_file(repo, f"{ORIGINALS}/{rel}"))
        work.append((p, rel, entry, desired, original))
    # 2. write
    _make_folder(repo, SANDBOX, 0o777)
    for d in FOLDERS:
        _make_folder(repo, f"{SANDBOX}/{d}", 0o700)
    if below_root.lstat(repo, starter) is None:
        below_root.replace_file(repo, starter, starter_policy().encode(), 0o644)
        files[starter] = {"path": starter, "created": True}
    changed: list[str] = []
    for p, rel, entry, desired, original in work:
        if original is not None:  # their bytes, mode and times, saved before ours go in
            theirs, st = original
            below_root.replace_file(repo, f"{ORIGINALS}/{rel}", theirs,
                                    st.st_mode & 0o7777, create=True, folder_mode=0o777,
                                    times_ns=(st.st_atime_ns, st.st_mtime_ns))
        try:
            current: bytes | None = below_root.read_file(repo, rel)
        except below_root.NotBelowRoot:
            raise
        except OSError:
            current = None
        if current != desired:
            below_root.replace_file(repo, rel, desired, p.mode, create=True, folder_mode=0o777)
            changed.append(rel)
        entry["sha256"] = _sha(desired)
        files[rel] = entry
    trusted: list[dict[str, Any]] = list(state.get("trust", []))
    if trust:
        from .agent import client_trust

        try:
            trusted = _merge_trust(trusted, client_trust.apply(_trust_entries(repo, chosen)))
        except (OSError, ValueError) as exc:
            raise ConnectorError(f"cannot record trust in the clients' settings: {exc}"
                                 ) from None
    new_state = {"version": 1, "agents": chosen, "mcp": mcp, "dirs": created_dirs,
                 "files": sorted(files.values(), key=lambda f: f["path"])}
    if trusted:
        new_state["trust"] = trusted
    if _read_state(repo) != new_state:
        below_root.replace_file(repo, STATE_FILE, _json_bytes(new_state), 0o600)
    from .audit.repo import pin_verifier  # the audit's trust anchor, outside the repository
    from .policy.registry import register
    from .state_paths import account_home

    register(repo, account_home())  # the registry every reader asks (not $HOME's)
    pin_verifier(repo)
    return {"repo": repo, "agents": chosen, "mcp": mcp, "changed": changed,
            "trusted": sorted(r["path"] for r in trusted)}


def _read_state(repo: str) -> dict[str, Any]:
    path = os.path.join(repo, STATE_FILE)
    try:
        data = json.loads(below_root.read_file(repo, STATE_FILE))
    except FileNotFoundError:
        return {}
    except below_root.NotBelowRoot as exc:
        raise ConnectorError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise ConnectorError(f"{path} is unreadable ({exc}); restore it before continuing"
                             ) from None
    return data if isinstance(data, dict) else {}


def _state_paths(state: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The files and folders a state lists, each a path below the repository
    (the state lives in the repository: a command may have rewritten it)."""
    files = [f for f in state.get("files", []) if isinstance(f, dict)]
    dirs = state.get("dirs", [])
    if not all(isinstance(f.get("path"), str) for f in files) or not isinstance(dirs, list) \
            or not all(isinstance(d, str) for d in dirs):
        raise ConnectorError(f"{STATE_FILE} is malformed; restore it before continuing")
    return files, dirs


def uninstall(repo: str) -> dict[str, Any]:
    """Restore the originals and remove what init added."""
    repo = os.path.realpath(repo)
    try:
        return _uninstall(repo)
    except below_root.NotBelowRoot as exc:
        raise ConnectorError(f"uninstall: {exc}") from None


def _uninstall(repo: str) -> dict[str, Any]:
    state = _read_state(repo)
    if not state:
        raise ConnectorError(f"no connector installed in {repo} (no {STATE_FILE})")
    files, dirs = _state_paths(state)
    # every folder we go through, checked before the first change
    folders = {os.path.dirname(f["path"]) for f in files}
    _check_folders(repo, [SANDBOX, *(f"{SANDBOX}/{d}" for d in FOLDERS), *dirs,
                          *folders, *map(_originals_of, folders)])
    restored, removed = [], []
    reg = state.get("settings")
    if isinstance(reg, str) and reg == registered_settings(repo) and os.path.isfile(reg):
        os.unlink(reg)
        removed.append(reg)
        d = os.path.dirname(reg)
        for _ in range(3):  # <key>/, repos/, agent-sandbox/ when nothing else is there
            try:
                os.rmdir(d)
            except OSError:
                break
            d = os.path.dirname(d)
    if state.get("trust"):
        from .agent import client_trust

        restored += client_trust.remove(state["trust"])
    for f in files:
        rel = f["path"]
        if rel.startswith(SANDBOX + "/"):
            continue
        if f.get("created"):
            if below_root.unlink(repo, rel):
                removed.append(rel)
        else:
            data, st = below_root.read_file_stat(repo, f"{ORIGINALS}/{rel}")
            below_root.replace_file(repo, rel, data, int(f.get("mode", 0o644)), create=True,
                                    folder_mode=0o777, times_ns=(st.st_atime_ns, st.st_mtime_ns))
            restored.append(rel)
    kept_audit = False
    for d in sorted(dirs, key=lambda x: -x.count("/")):
        if d == SANDBOX:
            if _has_records(repo):
                kept_audit = True
                fd = below_root.open_folder(repo, SANDBOX)
                try:
                    names = os.listdir(fd)
                finally:
                    os.close(fd)
                for name in names:
                    # a signing key left in the tree by an older version goes
                    # too (one `git add -A` from a commit); its public half
                    # stays beside the checkpoints for verifying
                    if name != "audit":
                        below_root.remove_tree(repo, f"{SANDBOX}/{name}")
            else:
                _quietly(below_root.remove_tree, repo, SANDBOX)
            continue
        _quietly(below_root.remove_empty_folders, repo, d)
    if SANDBOX not in dirs:
        # .sandbox existed before init (a policy.yml the user wrote): keep that, drop ours
        for name in ("escalations", "originals", "state", "policy.json", "srt-settings.json"):
            _quietly(below_root.remove_tree, repo, f"{SANDBOX}/{name}")
    from .policy.registry import unregister
    from .state_paths import account_home

    unregister(repo, account_home())
    return {"repo": repo, "restored": restored, "removed": removed, "kept_audit": kept_audit}


def _has_records(repo: str) -> bool:
    """Whether the repository's audit log holds a record (a log with none, and the
    checkpoint ``sandbox init`` signed of it, go with the rest of ``.sandbox``)."""
    from .audit.log import CHECKPOINT_DIR, LOCK_NAME, LOG_NAME

    try:
        fd = below_root.open_folder(repo, AUDIT)
    except FileNotFoundError:
        return False
    try:
        names = os.listdir(fd)
        if any(n not in (LOG_NAME, LOCK_NAME, CHECKPOINT_DIR) for n in names):
            return True  # something else the user or an older version keeps there
        try:
            return os.stat(LOG_NAME, dir_fd=fd, follow_symlinks=False).st_size > 0
        except FileNotFoundError:
            return False
    finally:
        os.close(fd)


def _quietly(remove: Any, repo: str, rel: str) -> None:
    """A removal whose failure leaves only a leftover (never one through a link)."""
    try:
        remove(repo, rel)
    except below_root.NotBelowRoot:
        raise
    except OSError:
        pass


def status(repo: str) -> dict[str, Any]:
    from .queue import FolderQueue

    repo = os.path.realpath(repo)
    sb = under(repo, SANDBOX)
    state = _read_state(repo)
    q = FolderQueue(os.path.join(sb, "escalations"))
    recent = []
    for rid in q.ids("done")[-10:]:
        rec = q.result(rid) or {}
        recent.append({"id": rid, "status": rec.get("status"),
                       "summary": (rec.get("request") or {}).get("summary"),
                       "exit_code": rec.get("exit_code")})
    from .agent.client_checks import check

    agents = [a for a in state.get("agents", []) if a in ("claude", "codex", "cursor", "gemini")]
    findings = [f.__dict__ for f in check(repo, clients=agents)] if state else []
    from .last_verify import read_drift

    return {"repo": repo, "installed": bool(state), "agents": state.get("agents", []),
            "mcp": state.get("mcp", False), "queue": q.counts() if q.exists() else None,
            "recent": recent, "clients": findings, "drift_check": read_drift()}
