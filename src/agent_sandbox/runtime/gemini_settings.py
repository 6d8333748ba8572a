"""Gemini CLI's settings as ``sandbox agent`` shows them: hooks no lower layer can switch off.

Gemini CLI merges four settings files: the system defaults, the user's
(``~/.gemini/settings.json``), the workspace's (``<cwd>/.gemini/settings.json``)
and the system's. ``hooksConfig.disabled`` is the union of all four, compared
with each hook's name (or its command when it has none), and those names are in
the world-readable system file; so a user's or a repository's own file could
switch off the hooks the administrator or ``sandbox init`` installed, and with
them every escalation to a human. Under ``sandbox agent`` the client reads its
user and workspace files from copies made here, with exactly this removed:

- an entry of ``hooksConfig.disabled`` that names (as Gemini CLI compares them)
  a hook of the system settings, the system defaults or the workspace file, or
  that holds a ``$`` (Gemini CLI expands variables in settings values, so such
  an entry may name anything);
- ``hooksConfig.enabled`` when it is anything but ``true``.

Everything else in the files is kept as it was. The variables that move the
system files elsewhere (``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` and
``..._DEFAULTS_PATH``) are pinned to the system's paths in the client's
environment: a project ``.env`` file only sets variables that are not set.

A copy is made of what the sandbox would show at that path (``BwrapRun`` picks
the host's file or, where the run hides it, the empty placeholder, then calls
the filter). A file that cannot be copied this way (not strict JSON: Gemini CLI
also allows comments; not a regular file; over 1 MiB) stops the run with a
clear error: the client never reads a settings file that was not checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

from agent_sandbox.contract import GEMINI_SYSTEM_SETTINGS as SYSTEM_SETTINGS

from .agent_state import placeholder_file
from .errors import SandboxStartError

SYSTEM_DEFAULTS = os.path.join(os.path.dirname(SYSTEM_SETTINGS), "system-defaults.json")
PINNED_ENV = {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": SYSTEM_SETTINGS,
              "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": SYSTEM_DEFAULTS}
MAX_BYTES = 1 << 20

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any


def _read(path: str, *, follow: bool) -> bytes:
    """The bytes of a regular file (the last component not followed unless
    ``follow``); SandboxStartError otherwise."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SandboxStartError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SandboxStartError(f"{path} is not a regular file")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise SandboxStartError(f"{path} is over {MAX_BYTES} bytes")
    return data


def _parse(path: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SandboxStartError(
            f"{path} is not plain JSON ({exc}); sandbox agent must check Gemini CLI's "
            "settings before the client reads them: remove comments and trailing commas"
        ) from None
    if not isinstance(doc, dict):
        raise SandboxStartError(f"{path} is not a JSON object")
    return doc


def hook_entries(doc: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Every hook of a settings document (``hooks.EVENT[].hooks[]``), skipping
    whatever is not shaped like one."""
    hooks = (doc or {}).get("hooks")
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            entries = group.get("hooks") if isinstance(group, dict) else None
            for h in entries if isinstance(entries, list) else ():
                if isinstance(h, dict):
                    yield h


def hook_names(doc: dict[str, Any]) -> set[str]:
    """What ``hooksConfig.disabled`` would have to hold to switch off a hook of
    ``doc``: each hook's name and its command."""
    return {v for h in hook_entries(doc) for v in (h.get("name"), h.get("command"))
            if isinstance(v, str) and v}


def _system_names() -> set[str]:
    """The hooks of the system files (an absent or unreadable one has none that
    Gemini CLI would run either)."""
    names: set[str] = set()
    for path in (SYSTEM_SETTINGS, SYSTEM_DEFAULTS):
        try:
            names |= hook_names(_parse(path, _read(path, follow=True)))
        except SandboxStartError:
            continue
    return names


def keep_hooks_on(doc: dict[str, Any], protected: set[str]) -> dict[str, Any]:
    """``doc`` without what would switch off the ``protected`` hooks (see the
    module doc); ``doc`` itself is not changed."""
    cfg = doc.get("hooksConfig")
    if not isinstance(cfg, dict):
        return doc
    cfg = dict(cfg)
    if cfg.get("enabled", True) is not True:
        del cfg["enabled"]
    disabled = cfg.get("disabled")
    if isinstance(disabled, list):
        cfg["disabled"] = [d for d in disabled
                           if isinstance(d, str) and "$" not in d and d not in protected]
    elif "disabled" in cfg:
        del cfg["disabled"]
    return {**doc, "hooksConfig": cfg}


class Guard:
    """The filters and environment for one run (``prepare``)."""

    __slots__ = ("env", "filters", "held", "overlays", "protected")

    def __init__(self, held: str, protected: set[str]) -> None:
        self.held, self.protected = held, protected
        self.overlays: list[tuple[str, str, str | None]] = []
        self.filters: dict[str, Callable[[str], str]] = {}
        self.env = dict(PINNED_ENV)

    def copy(self, source: str) -> str:
        """The checked copy of ``source`` (a path in ``held``, content-addressed:
        concurrent runs share it, and a run never rewrites a file another has bound)."""
        doc = _parse(source, _read(source, follow=False))
        data = json.dumps(keep_hooks_on(doc, self.protected), indent=2).encode() + b"\n"
        name = "gemini-settings-" + hashlib.sha256(data).hexdigest()[:32] + ".json"
        path = os.path.join(self.held, name)
        if not os.path.lexists(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        return path


def prepare(home: str, cwd: str, held: str) -> Guard:
    """The guard of one ``sandbox agent gemini`` run in ``cwd``: ``held`` is the
    private folder's placeholder folder (``agent_state``: ours, read-only inside).
    The user's file is already an overlay of ``agent_state``; the workspace's is
    added here, when Gemini CLI would read one (not in the home folder itself)."""
    user = os.path.join(home, ".gemini", "settings.json")
    workspace = os.path.join(cwd, ".gemini", "settings.json")
    protected = _system_names()
    # in the home folder itself Gemini CLI reads no workspace file
    has_workspace = (os.path.realpath(cwd) != os.path.realpath(home)
                     and os.path.lexists(workspace))
    if has_workspace:
        protected |= hook_names(_parse(workspace, _read(workspace, follow=True)))
    g = Guard(held, protected)
    g.filters[user] = g.copy
    if has_workspace:
        empty = os.path.join(held, "gemini-workspace-absent.json")
        placeholder_file(empty, b"{}")
        g.overlays.append((workspace, workspace, empty))
        g.filters[workspace] = g.copy
    return g
