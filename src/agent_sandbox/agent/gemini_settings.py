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
- ``hooksConfig.enabled`` when it is anything but ``true``;
- every ``BeforeTool`` hook that is not ours (``our_commands``: the system
  files' hook commands and the one ``sandbox init`` writes for this runtime).
  Gemini CLI runs the BeforeTool hooks of a call side by side on the same
  input and applies the ``tool_input`` any of them returns: another hook
  could turn the call ours allowed into one ours never saw;
- from the repository's file only, every hook that is not ours, of any event,
  and the programs Gemini CLI starts itself outside a tool call
  (``STARTED_PROGRAMS``: ``tools.discoveryCommand`` ...): our hooks judge tool
  calls, and none of these is one. (The user's own hooks of other events stay:
  the user's file is not writable from a sandbox.)

Everything else in the files is kept as it was, but for
``advanced.ignoreLocalEnv``, which both copies set (below). The variables that
move the system files elsewhere (``GEMINI_CLI_SYSTEM_SETTINGS_PATH`` and
``..._DEFAULTS_PATH``) are pinned to the system's paths in the client's
environment: a ``.env`` file only sets variables that are not set.

Gemini CLI runs the hooks of its settings files (the system's included) only
in a folder it trusts, and asks its environment first: ``GEMINI_RESTRICTED_MODE``
or ``GEMINI_CLI_TRUST_WORKSPACE=false`` make every folder untrusted, whatever
the system file says about folder trust. So both are pinned too, to a trusted
folder: under ``sandbox agent`` the sandbox, not the trust prompt, contains
what a repository's settings start.

The environment is the other input that reaches the hooks: Gemini CLI loads
one ``.env`` file into its own environment (every variable not set yet, for
the rest of the session, its hooks' processes included), the first it finds
walking up from its folder. With ``advanced.ignoreLocalEnv`` on and the folder
trusted, the candidates are each folder's ``.gemini/.env`` and, at the end,
the user's ``~/.gemini/.env`` (always present inside: the host's file or an
empty one), never a plain ``.env`` a command can write. Each candidate that
exists is shown as a checked copy holding only the variables of ``ENV_KEYS``
(what Gemini CLI itself takes from a folder it does not trust, and the
switches between its APIs), rewritten in one plain form. A system file that
switches ``advanced.ignoreLocalEnv`` off stops the run: the copies could not
keep the hooks on.

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
from agent_sandbox.runtime.failures import SandboxStartError

from .state import placeholder_file

SYSTEM_DEFAULTS = os.path.join(os.path.dirname(SYSTEM_SETTINGS), "system-defaults.json")
PINNED_ENV = {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": SYSTEM_SETTINGS,
              "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": SYSTEM_DEFAULTS,
              "GEMINI_CLI_TRUST_WORKSPACE": "true",
              "GEMINI_RESTRICTED_MODE": "false"}
# the variables a checked .env copy keeps: Gemini CLI's AUTH_ENV_VAR_WHITELIST
# and its switches between the Gemini API, Vertex AI and Code Assist
ENV_KEYS = frozenset({"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT",
                      "GOOGLE_CLOUD_LOCATION", "GOOGLE_GENAI_USE_VERTEXAI",
                      "GOOGLE_GENAI_USE_GCA"})
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


def _system_hooks() -> tuple[set[str], set[str]]:
    """The hooks of the system files, as names (``hook_names``) and commands (an
    absent or unreadable file has none that Gemini CLI would run either). A system
    file that lets plain ``.env`` files in (``advanced.ignoreLocalEnv`` false: it
    overrides the copies) stops the run."""
    names: set[str] = set()
    commands: set[str] = set()
    for path in (SYSTEM_SETTINGS, SYSTEM_DEFAULTS):
        try:
            doc = _parse(path, _read(path, follow=True))
        except SandboxStartError:
            continue
        names |= hook_names(doc)
        commands |= hook_commands(doc)
        advanced = doc.get("advanced")
        if (path == SYSTEM_SETTINGS and isinstance(advanced, dict)
                and "ignoreLocalEnv" in advanced and advanced["ignoreLocalEnv"] is not True):
            raise SandboxStartError(
                f"{path} sets advanced.ignoreLocalEnv to {advanced['ignoreLocalEnv']!r}: a "
                "project's .env file could then set Gemini CLI's environment and switch its "
                "hooks off; sandbox agent gemini needs it on (or unset)")
    return names, commands


def env_files(home: str, cwd: str) -> list[str]:
    """The ``.gemini/.env`` files Gemini CLI may load in ``cwd`` (see the module doc)
    that exist, but the user's own (an input of ``state`` already)."""
    found, d, own = [], cwd, os.path.realpath(home)
    while True:
        path = os.path.join(d, ".gemini", ".env")
        if d != own and os.path.lexists(path):
            found.append(path)
        parent = os.path.dirname(d)
        if parent == d:
            return found
        d = parent


def hook_commands(doc: dict[str, Any]) -> set[str]:
    """The command of each hook of ``doc``."""
    return {h["command"] for h in hook_entries(doc) if isinstance(h.get("command"), str)}


def our_commands(system_commands: set[str]) -> set[str]:
    """The hook commands a copy keeps: the system files' and those ``sandbox init``
    renders for this runtime (``contract.hook_command``)."""
    import sys

    from agent_sandbox.contract import hook_command
    from agent_sandbox.hooks.tool_call import AGENTS

    return system_commands | {hook_command(sys.executable, "gemini", event)
                              for event in AGENTS["gemini"]}


def only_our_hooks(doc: dict[str, Any], ours: set[str],
                   events: frozenset[str] | None = None) -> dict[str, Any]:
    """``doc`` with no hook of ``events`` (None: every event) but those whose
    command is in ``ours`` (a group left empty is dropped); ``doc`` itself is
    not changed."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return doc  # no event Gemini CLI would register
    out = dict(hooks)
    for event, groups in hooks.items():
        if events is not None and event not in events:
            continue
        kept = []
        for group in groups if isinstance(groups, list) else ():
            entries = group.get("hooks") if isinstance(group, dict) else None
            mine = [h for h in entries if isinstance(h, dict) and h.get("type") == "command"
                    and h.get("command") in ours] if isinstance(entries, list) else []
            if mine:
                kept.append({**group, "hooks": mine})
        out[event] = kept
    return {**doc, "hooks": out}


# the settings that name a program Gemini CLI starts itself, outside any tool call
# (so outside our hooks): dropped from the workspace copy
STARTED_PROGRAMS = (("tools", "discoveryCommand"), ("tools", "callCommand"),
                    ("advanced", "bugCommand"))


def without_started_programs(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without ``STARTED_PROGRAMS``; ``doc`` itself is not changed."""
    out = dict(doc)
    for section, key in STARTED_PROGRAMS:
        sub = out.get(section)
        if isinstance(sub, dict) and key in sub:
            out[section] = {k: v for k, v in sub.items() if k != key}
    return out


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


def checked(doc: dict[str, Any], protected: set[str], ours: set[str], *,
            workspace: bool = False) -> dict[str, Any]:
    """The copy the client reads of a user or (``workspace``) the repository's
    file: ``keep_hooks_on``, ``only_our_hooks`` (BeforeTool in the user's, every
    event and ``without_started_programs`` in the repository's) and
    ``advanced.ignoreLocalEnv`` on (no plain ``.env`` file is loaded)."""
    doc = keep_hooks_on(doc, protected)
    if workspace:
        doc = without_started_programs(only_our_hooks(doc, ours))
    else:
        doc = only_our_hooks(doc, ours, frozenset({"BeforeTool"}))
    advanced = doc.get("advanced")
    return {**doc, "advanced": {**(advanced if isinstance(advanced, dict) else {}),
                                "ignoreLocalEnv": True}}


def _env_value(raw: str) -> str | None:
    """The value of one ``KEY=VALUE`` line as dotenv reads a simple one (quoted, or
    bare up to a comment); None for anything else (it is dropped)."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"`":
        value = raw[1:-1]
    else:
        value = raw.split(" #", 1)[0].strip()
    if any(c in value for c in "'\"`\\\n\r$") or value.startswith("#"):
        return None
    return value


def checked_env(data: bytes) -> bytes:
    """The ``ENV_KEYS`` variables of a ``.env`` file, each once (the last, as
    dotenv keeps it) in one plain form, ``KEY='VALUE'``; every other line is dropped,
    so no reading of the file by Gemini CLI's parser can find another variable."""
    out: dict[str, str] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, eq, raw = line.strip().removeprefix("export ").partition("=")
        key = key.strip()
        if eq and key in ENV_KEYS:
            value = _env_value(raw)
            if value is not None:
                out[key] = value
    return "".join(f"{k}='{v}'\n" for k, v in out.items()).encode()


class Guard:
    """The filters and environment for one run (``prepare``)."""

    __slots__ = ("env", "filters", "held", "ours", "overlays", "protected")

    def __init__(self, held: str, protected: set[str], ours: set[str]) -> None:
        self.held, self.protected, self.ours = held, protected, ours
        self.overlays: list[tuple[str, str, str | None]] = []
        self.filters: dict[str, Callable[[str], str]] = {}
        self.env = dict(PINNED_ENV)

    def copy(self, source: str, *, workspace: bool = False) -> str:
        """The checked copy of the settings file ``source`` (see ``checked``, ``_store``)."""
        doc = _parse(source, _read(source, follow=False))
        data = json.dumps(checked(doc, self.protected, self.ours, workspace=workspace),
                          indent=2).encode() + b"\n"
        return self._store("gemini-settings-", ".json", data)

    def copy_workspace(self, source: str) -> str:
        return self.copy(source, workspace=True)

    def copy_env(self, source: str) -> str:
        """The checked copy of the ``.env`` file ``source`` (see ``_store``)."""
        return self._store("gemini-env-", ".env", checked_env(_read(source, follow=False)))

    def _store(self, prefix: str, suffix: str, data: bytes) -> str:
        """``data`` as a file in ``held`` (content-addressed: concurrent runs share
        it, and a run never rewrites a file another has bound)."""
        name = prefix + hashlib.sha256(data).hexdigest()[:32] + suffix
        path = os.path.join(self.held, name)
        if not os.path.lexists(path):
            from agent_sandbox.atomic_file import replace_file

            replace_file(path, data, 0o600)
        return path


def prepare(home: str, cwd: str, held: str) -> Guard:
    """The guard of one ``sandbox agent gemini`` run in ``cwd``: ``held`` is the
    private folder's placeholder folder (``state``: ours, read-only inside).
    The user's file is already an overlay of ``state``; the workspace's is
    added here, when Gemini CLI would read one (not in the home folder itself)."""
    user = os.path.join(home, ".gemini", "settings.json")
    workspace = os.path.join(cwd, ".gemini", "settings.json")
    protected, system_commands = _system_hooks()
    # in the home folder itself Gemini CLI reads no workspace file
    has_workspace = (os.path.realpath(cwd) != os.path.realpath(home)
                     and os.path.lexists(workspace))
    if has_workspace:
        protected |= hook_names(_parse(workspace, _read(workspace, follow=True)))
    g = Guard(held, protected, our_commands(system_commands))
    g.filters[user] = g.copy
    if has_workspace:
        empty = os.path.join(held, "gemini-workspace-absent.json")
        placeholder_file(empty, b"{}")
        g.overlays.append((workspace, workspace, empty))
        g.filters[workspace] = g.copy_workspace
    no_env = os.path.join(held, "gemini-env-absent.env")
    placeholder_file(no_env, b"")
    g.filters[os.path.join(home, ".gemini", ".env")] = g.copy_env
    for path in env_files(home, cwd):
        g.overlays.append((path, path, no_env))
        g.filters[path] = g.copy_env
    return g
