"""Trust entries ``sandbox init --trust`` writes into the clients' own user state.

Codex runs a repository's ``.codex/config.toml`` and ``.codex/hooks.json`` only
for a trusted project, and each project hook only once the user has trusted
its exact definition (``[hooks.state."<file>:<event>:<group>:<handler>"]
trusted_hash``, a SHA-256 over the hook's normalised definition, as Codex
computes it). Gemini CLI reads a folder's ``.gemini/`` settings and policies
only in a trusted folder (``~/.gemini/trustedFolders.json``). Without these
entries the clients skip our hooks silently, so init writes them, but only with
the user's explicit consent (the ``--trust`` flag), and only for our own hooks.

Each entry is a (file, key path, value) triple. ``apply`` adds them to the
user's file; ``remove`` takes exactly those keys out again and, when nothing
else changed, puts the original bytes back. The repository never holds any of
this: these files are outside every sandbox's writable set.

Pure apart from ``apply``/``remove``; it never trusts a hook it did not render.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from typing import Any

import tomli_w

# Codex's snake_case labels for the hook events we install.
CODEX_EVENT_LABELS = {"PreToolUse": "pre_tool_use", "PostToolUse": "post_tool_use",
                      "SessionStart": "session_start"}
CODEX_DEFAULT_TIMEOUT = 600

Entry = tuple[str, list[str], Any]  # (file, key path, value)


def codex_hook_hash(label: str, matcher: str | None, handler: dict[str, Any]) -> str:
    """Codex's trust hash of one command hook: its normalised identity (event
    label, matcher, the one handler with its timeout filled in) as canonical
    JSON, hashed with SHA-256."""
    norm: dict[str, Any] = {"type": "command", "command": handler["command"],
                            "timeout": max(1, int(handler.get("timeout")
                                                  or CODEX_DEFAULT_TIMEOUT)),
                            "async": bool(handler.get("async", False))}
    if handler.get("statusMessage") is not None:
        norm["statusMessage"] = handler["statusMessage"]
    identity: dict[str, Any] = {"event_name": label, "hooks": [norm]}
    if matcher is not None:
        identity["matcher"] = matcher
    data = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


def codex_entries(codex_home: str, repo: str, hooks_file: str, hooks_doc: dict[str, Any],
                  ours: set[str]) -> list[Entry]:
    """Project trust for ``repo`` and a trusted hash for each of our hooks in
    ``hooks_doc`` (the installed ``hooks.json``); ``ours`` holds our commands."""
    cfg = os.path.join(codex_home, "config.toml")
    out: list[Entry] = [(cfg, ["projects", repo, "trust_level"], "trusted")]
    for event, groups in sorted((hooks_doc.get("hooks") or {}).items()):
        label = CODEX_EVENT_LABELS.get(event)
        if label is None or not isinstance(groups, list):
            continue
        for gi, group in enumerate(groups):
            for hi, handler in enumerate(group.get("hooks") or []):
                if handler.get("type") != "command" or handler.get("command") not in ours:
                    continue
                key = f"{hooks_file}:{label}:{gi}:{hi}"
                out.append((cfg, ["hooks", "state", key, "trusted_hash"],
                            codex_hook_hash(label, group.get("matcher"), handler)))
    return out


def gemini_entries(home: str, repo: str) -> list[Entry]:
    return [(os.path.join(home, ".gemini", "trustedFolders.json"), [repo], "TRUST_FOLDER")]


# -- effects ------------------------------------------------------------------

def _load(path: str) -> tuple[bytes | None, dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None, {}
    doc = tomllib.loads(raw.decode()) if path.endswith(".toml") else json.loads(raw or b"{}")
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a table")
    return raw, doc


def _dump(path: str, doc: dict[str, Any]) -> bytes:
    if path.endswith(".toml"):
        return tomli_w.dumps(doc).encode()
    return (json.dumps(doc, indent=2) + "\n").encode()


def _write(path: str, data: bytes) -> None:
    from agent_sandbox.atomic_file import replace_file

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    replace_file(path, data, mode)


def apply(entries: list[Entry]) -> list[dict[str, Any]]:
    """Write the entries; returns the restore records (one per file touched:
    its original bytes, hex, or None when init created it, and our keys)."""
    records: list[dict[str, Any]] = []
    for path in sorted({e[0] for e in entries}):
        raw, doc = _load(path)
        created_dir = not os.path.isdir(os.path.dirname(path))
        keys = [(k, v) for f, k, v in entries if f == path]
        for key, value in keys:
            node = doc
            for part in key[:-1]:
                nxt = node.get(part)
                if not isinstance(nxt, dict):
                    nxt = node[part] = {}
                node = nxt
            node[key[-1]] = value
        data = _dump(path, doc)
        if data != raw:
            _write(path, data)
        records.append({"path": path, "original": None if raw is None else raw.hex(),
                        "keys": [k for k, _ in keys], "created_dir": created_dir})
    return records


def remove(records: list[dict[str, Any]]) -> list[str]:
    """Undo ``apply``: our keys out, the original bytes back when the rest is
    unchanged, the file removed when init created it and nothing else is left."""
    changed = []
    for rec in records:
        path = rec["path"]
        try:
            raw, doc = _load(path)
        except (OSError, ValueError):
            continue  # the user's file is now theirs alone; never overwrite it blindly
        if raw is None:
            continue
        for key in rec["keys"]:
            chain = [doc]
            for part in key[:-1]:
                nxt = chain[-1].get(part)
                if not isinstance(nxt, dict):
                    break
                chain.append(nxt)
            else:
                chain[-1].pop(key[-1], None)
                for parent, part in zip(reversed(chain[:-1]), reversed(key[:-1]), strict=True):
                    if parent.get(part) == {}:
                        del parent[part]
        original = bytes.fromhex(rec["original"]) if rec["original"] is not None else None
        if original is None:
            if not doc:
                os.unlink(path)
                if rec.get("created_dir"):
                    try:
                        os.rmdir(os.path.dirname(path))  # only when nothing else is there
                    except OSError:
                        pass
            else:
                _write(path, _dump(path, doc))
        else:
            _, orig_doc = (None, tomllib.loads(original.decode()) if path.endswith(".toml")
                           else json.loads(original or b"{}"))
            _write(path, original if doc == orig_doc else _dump(path, doc))
        changed.append(path)
    return changed
