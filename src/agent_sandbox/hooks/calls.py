"""Turn each agent's tool-call JSON into the engine's agent-neutral ``Call``.

Claude Code and Codex share one shape (``tool_name`` + ``tool_input``), Gemini
CLI names its tools differently, Cursor sends one event per kind of action.
Anything not understood raises ``BadInput``: the hook then denies.
"""

from __future__ import annotations

import os

from agent_sandbox.errors import SandboxError

from ..policy.decision import Call
from ..policy.tools import BY_NAME

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class BadInput(SandboxError, ValueError):
    """The hook input is not what the agent's protocol promises."""


def _str(obj: dict[str, Any], key: str, what: str) -> str:
    v = obj.get(key)
    if not isinstance(v, str) or not v:
        raise BadInput(f"{what}: {key} must be a non-empty string")
    return v


def _opt_str(obj: dict[str, Any], *keys: str) -> str | None:
    for k in keys:
        v = obj.get(k)
        if v is not None:
            if not isinstance(v, str):
                raise BadInput(f"{k} must be a string")
            if v:
                return v
    return None


def cwd_of(data: dict[str, Any], here: str | None = None) -> str:
    """The folder a call is made in: the input's ``cwd``, else Cursor's first
    workspace root, else ``here`` (default: this process's working directory).
    The only implementation: ``sandbox agent``'s relay calls it too."""
    cwd = data.get("cwd")
    if cwd is None:
        roots = data.get("workspace_roots")
        if isinstance(roots, list) and roots and isinstance(roots[0], str):
            cwd = roots[0]
    if cwd is None:
        cwd = os.getcwd() if here is None else here
    if not isinstance(cwd, str) or not cwd.startswith("/") or "\x00" in cwd:
        raise BadInput("cwd must be an absolute path")
    return os.path.normpath(cwd)


def _tool_input(data: dict[str, Any]) -> dict[str, Any]:
    ti = data.get("tool_input")
    if ti is None:
        return {}
    if not isinstance(ti, dict):
        raise BadInput("tool_input must be an object")
    return ti


def _urls_in(text: str) -> tuple[str, ...]:
    out = []
    for tok in text.split():
        tok = tok.strip("<>()[]{}\"',;")
        if "://" in tok:
            out.append(tok)
    return tuple(out)


_PATCH_HEADS = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")
_LINE_BREAKS = frozenset("\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def patch_paths(patch: str) -> tuple[str, ...]:
    """Every file path an ``apply_patch`` envelope may touch, read as Codex reads it.

    Codex splits on ``\\n`` (dropping a trailing ``\\r``), trims each hunk header
    (Unicode white space) before matching it, and matches ``*** Move to:`` untrimmed.
    Here every line is matched both as it is and trimmed, and each path both as
    written and trimmed, so nothing Codex writes is left out. A marker anywhere
    else in a line, or a path holding a line break or control character, is
    refused rather than guessed.
    """
    out: list[str] = []
    for raw in patch.split("\n"):
        line = raw[:-1] if raw.endswith("\r") else raw
        found = False
        for variant in (line, line.strip()):
            for head in _PATCH_HEADS:
                if variant.startswith(head):
                    found = True
                    path = variant[len(head):]
                    out += [path, path.strip()]
        if not found and any(h.strip() in line for h in _PATCH_HEADS):
            raise BadInput(f"apply_patch: a file header that is not at the start of its line: "
                           f"{line[:80]!r}")
    for path in out:
        if any(ord(c) < 0x20 or ord(c) == 0x7F or c in _LINE_BREAKS for c in path):
            raise BadInput(f"apply_patch: a file path with a control character: {path!r}")
    return tuple(dict.fromkeys(p for p in out if p))


_GLOB_CHARS = frozenset("*?[{")


def glob_root(pattern: str) -> str:
    """The folder a file-name pattern starts from: its components before the
    first one with a wildcard (``*?[{``), or the whole pattern when it has none;
    ``""`` for a pattern that starts with a wildcard. A ``..`` after a wildcard
    names a different folder for each match: refused rather than guessed."""
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        if not _GLOB_CHARS.isdisjoint(part):
            if ".." in parts[i:]:
                raise BadInput(f"a file pattern with '..' after a wildcard: {pattern!r}")
            return "/".join(parts[:i]) or ("/" if pattern.startswith("/") else "")
    return pattern


def _search_paths(ti: dict[str, Any], cwd: str, dirs: tuple[str, ...],
                  patterns: tuple[str, ...]) -> tuple[str, ...]:
    """Every folder a search or listing tool reads: its folder (``dirs``: the
    first key given, else none: the working directory) and the folder each file
    pattern (``patterns``: a string or a list of them) starts from, below it."""
    base = _opt_str(ti, *dirs) if dirs else None
    out = [base] if base else []
    for key in patterns:
        value = ti.get(key)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None or item == "":
                continue
            if not isinstance(item, str):
                raise BadInput(f"{key} must be a string or a list of strings")
            root = glob_root(item)
            if root:
                out.append(root if root.startswith(("/", "~")) else
                           os.path.join(base or cwd, root))
    return tuple(dict.fromkeys(out))


def claude_call(data: dict[str, Any]) -> Call:
    """Claude Code (and Codex) PreToolUse input."""
    tool = _str(data, "tool_name", "hook input")
    ti = _tool_input(data)
    cwd = cwd_of(data)
    if tool in ("Bash", "Monitor", "shell", "local_shell", "exec_command", "unified_exec",
                "shell_command"):
        cmd = ti.get("command")
        if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
            import shlex

            cmd = shlex.join(cmd)
        if not isinstance(cmd, str) or not cmd.strip():
            raise BadInput(f"{tool}: tool_input.command must be a non-empty string")
        wd = _opt_str(ti, "workdir", "cwd")
        if wd and not wd.startswith("/"):
            wd = os.path.join(cwd, wd)  # as the client reads it: from the session's folder
        return Call("bash", tool, ti, wd or cwd, command=cmd)
    if tool == "view_image":
        return Call("read", tool, ti, cwd, paths=(_str(ti, "path", tool),))
    if tool in ("Read", "NotebookRead"):
        return Call("read", tool, ti, cwd, paths=(_str(ti, "file_path" if tool == "Read"
                                                          else "notebook_path", tool),))
    if tool in ("Write", "Edit", "MultiEdit"):
        return Call("write", tool, ti, cwd, paths=(_str(ti, "file_path", tool),))
    if tool == "NotebookEdit":
        return Call("write", tool, ti, cwd, paths=(_str(ti, "notebook_path", tool),))
    if tool == "apply_patch":
        patch = ti.get("command") or ti.get("input") or ti.get("patch")
        if isinstance(patch, list):
            patch = "\n".join(str(p) for p in patch)
        if not isinstance(patch, str) or not patch:
            raise BadInput("apply_patch: no patch text")
        ps = patch_paths(patch)
        if not ps:
            raise BadInput("apply_patch: the patch names no file")
        return Call("write", tool, ti, cwd, paths=ps)
    if tool in ("Grep", "Glob", "LS"):
        return Call("search", tool, ti, cwd, paths=_search_paths(
            ti, cwd, ("path",), ("pattern",) if tool == "Glob" else ("glob",)))
    if tool == "WebFetch":
        return Call("fetch", tool, ti, cwd, urls=(_str(ti, "url", tool),))
    if tool in ("WebSearch", "web_search"):
        return Call("fetch", tool, ti, cwd)
    if tool.startswith("mcp__"):
        return Call("mcp", tool, ti, cwd, mcp_name=tool)
    if tool in BY_NAME:
        return Call("internal", tool, ti, cwd)
    return Call("unknown", tool, ti, cwd)


_GEMINI_READ = {"read_file": ("file_path", "absolute_path", "path")}
_GEMINI_SEARCH = ("list_directory", "glob", "search_file_content", "grep_search", "grep",
                  "read_many_files")


def gemini_call(data: dict[str, Any]) -> Call:
    tool = _str(data, "tool_name", "hook input")
    ti = _tool_input(data)
    cwd = cwd_of(data)
    mcp = data.get("mcp_context")
    if isinstance(mcp, dict) and isinstance(mcp.get("server_name"), str):
        name = f"mcp__{mcp['server_name']}__{mcp.get('tool_name') or tool}"
        return Call("mcp", tool, ti, cwd, mcp_name=name)
    if tool == "run_shell_command":
        cmd = _str(ti, "command", tool)
        wd = _opt_str(ti, "dir_path", "directory")
        if wd and not wd.startswith("/"):
            wd = os.path.join(cwd, wd)
        return Call("bash", tool, ti, wd or cwd, command=cmd)
    if tool in ("write_file", "replace", "edit"):
        return Call("write", tool, ti, cwd, paths=(_str(ti, "file_path", tool),))
    if tool in _GEMINI_READ:
        p = _opt_str(ti, *_GEMINI_READ[tool])
        if not p:
            raise BadInput(f"{tool}: no file_path")
        return Call("read", tool, ti, cwd, paths=(p,))
    if tool in _GEMINI_SEARCH:
        patterns = (("pattern",) if tool == "glob" else ("paths", "include")
                    if tool == "read_many_files" else ("include",))
        return Call("search", tool, ti, cwd, paths=_search_paths(
            ti, cwd, ("dir_path", "path", "directory"), patterns))
    if tool == "web_fetch":
        prompt = ti.get("prompt") or ti.get("url") or ""
        if not isinstance(prompt, str):
            raise BadInput("web_fetch: prompt must be a string")
        return Call("fetch", tool, ti, cwd, urls=_urls_in(prompt))
    if tool in ("google_web_search", "web_search"):
        return Call("fetch", tool, ti, cwd)
    if tool.startswith("mcp__"):
        return Call("mcp", tool, ti, cwd, mcp_name=tool)
    if tool in BY_NAME:
        return Call("internal", tool, ti, cwd)
    return Call("unknown", tool, ti, cwd)


def cursor_call(event: str, data: dict[str, Any]) -> Call:
    cwd = cwd_of(data)
    if event == "before-shell-execution":
        cmd = _str(data, "command", "beforeShellExecution")
        return Call("bash", "Shell", {"command": cmd}, cwd, command=cmd)
    if event == "before-read-file":
        p = _str(data, "file_path", "beforeReadFile")
        return Call("read", "Read", {"file_path": p}, cwd, paths=(p,))
    if event == "before-mcp-execution":
        tool = _str(data, "tool_name", "beforeMCPExecution")
        raw = data.get("tool_input")
        if isinstance(raw, str):
            import json

            try:
                params = json.loads(raw) if raw.strip() else {}
            except ValueError:
                raise BadInput("beforeMCPExecution: tool_input is not JSON") from None
        else:
            params = raw if raw is not None else {}
        if not isinstance(params, dict):
            raise BadInput("beforeMCPExecution: tool_input must be an object")
        name = tool if tool.startswith("mcp__") else f"mcp__{tool}"
        server = data.get("server") or data.get("server_name")
        if isinstance(server, str) and server and not tool.startswith("mcp__"):
            name = f"mcp__{server}__{tool}"
        return Call("mcp", tool, params, cwd, mcp_name=name)
    raise BadInput(f"unknown Cursor event {event!r}")
