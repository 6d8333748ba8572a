"""What a human is shown of a request: exactly what its approval is bound to.

A decision is bound to ``request_hash`` of a request's tool, parameters and working
folder (``records.bound``), and the runner acts on those fields and no other: a shell
command is ``params.command`` run by ``bash -c`` in ``cwd`` (``executor.run_command``); a
write is ``params.file_path`` resolved against ``cwd`` with its ``content``, its
``old_string``/``new_string``/``replace_all`` or its ``edits`` (``executor.apply_write``,
both in ``approval``);
a granted call is the agent's own tool run with every parameter. So every view
(``sandbox pending``, ``pending --json``, ``sandbox watch``) builds what it shows from
``fields`` here, which lays out those bound fields whole: the tool, the working folder,
then every parameter (nested ones by their path, ``edits[0].old_string``), the ones the
runner uses first. Never from the request's ``summary`` or ``reasons``, which the engine
wrote for the audit and which can omit a part (a write's content, the folder) or, once
redacted, hide one.

The values are the raw text: the views pass them through ``display.printable`` (escaped,
never redacted: the request file holds the raw parameters anyway, so redacting the view
protects nothing at rest). Pure; stdlib only.
"""

from __future__ import annotations

import json

from .records import bound, hash_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# parameters the runner acts on, shown first in this order; the rest follow by name
FIRST = ("command", "file_path", "notebook_path", "content", "old_string", "new_string",
         "replace_all", "edits", "input", "patch", "url", "path")


JSON_MARK = " (json)"  # after the name of a value that is not text


def _label(prefix: str, key: str) -> str:
    plain = key.isidentifier() and key.isascii()
    if not prefix:
        return key if plain else json.dumps(key, ensure_ascii=False)
    return f"{prefix}.{key}" if plain else f"{prefix}[{json.dumps(key, ensure_ascii=False)}]"


def _order(keys: list[str]) -> list[str]:
    first = [k for k in FIRST if k in keys]
    return first + sorted(k for k in keys if k not in FIRST)


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        for k in _order(list(value)):
            _flatten(_label(prefix, k), value[k], out)
    elif isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        for i, v in enumerate(value):
            _flatten(f"{prefix}[{i}]", v, out)
    elif isinstance(value, str):
        out.append((prefix, value))
    else:  # marked: the number 1 and the text "1" are different calls
        out.append((prefix + JSON_MARK, json.dumps(value, ensure_ascii=False, sort_keys=True)))


def fields(req: dict[str, Any]) -> list[tuple[str, str]]:
    """Every bound field of ``req`` as (name, raw text), in the order shown: ``tool``,
    ``cwd``, then each parameter. A string is its own text; anything else is its JSON,
    its name marked ``JSON_MARK``. A name that is not a plain identifier is quoted, so
    no two different requests are laid out alike (``{"a.b": x}`` is ``"a.b"``,
    ``{"a": {"b": x}}`` is ``a.b``)."""
    tool, params, cwd = bound(req)
    out: list[tuple[str, str]] = []
    _flatten("tool", tool, out)
    _flatten("cwd", cwd, out)
    if isinstance(params, dict) and params and all(isinstance(k, str) for k in params):
        for k in _order(list(params)):
            _flatten(_label("", k), params[k], out)
    else:  # not an object, or an empty one: named as no parameter can be
        _flatten("(params)", params, out)
    content = req.get("content")
    if content is not None:  # what a command was pinned with (``queue.content``): hashed too
        _flatten("(content)", content, out)
    return out


def effect(req: dict[str, Any]) -> str:
    """What approving ``req`` does, in one line (from its kind and mode, which the
    runner dispatches on)."""
    tool = bound(req)[0]
    kind, mode = req.get("kind"), req.get("mode", "run")
    if mode == "grant":
        return f"the agent's own {tool} tool runs, with exactly these parameters"
    if kind == "bash":
        return "runs `bash -c COMMAND` in the sandbox, in the working folder cwd"
    if kind == "write":
        return "writes file_path (a relative path from cwd) as shown, outside the sandbox"
    if kind == "action":
        return ("runs the declared action once, with exactly this argv and image, in a new "
                "gVisor container with a credential minted for this run and revoked after it")
    return f"{tool} cannot run outside the agent: an approval ends failed"


def mismatch(req: dict[str, Any]) -> str | None:
    """Why an approval of ``req`` as it stands would be refused (its stored hash is not
    that of its bound fields), or None."""
    try:
        actual = hash_of(req)
    except (TypeError, ValueError):
        return "its parameters cannot be hashed: an approval is refused"
    if actual != req.get("hash"):
        return ("its hash is not that of its tool, parameters, cwd and content: an approval "
                "is refused")
    return None


def size(text: str) -> str:
    """``N characters, M lines`` of a raw value."""
    lines = text.count("\n") + 1
    return f"{len(text)} character{'s' * (len(text) != 1)}, {lines} line{'s' * (lines != 1)}"


def as_json(req: dict[str, Any]) -> dict[str, Any]:
    """A request for ``sandbox pending --json``: its bound fields as stored, the same
    fields laid out as the views show them, what approving does, and the context."""
    out = {k: req.get(k) for k in ("id", "created", "agent", "kind", "mode", "tool", "params",
                                   "cwd", "content", "changed", "requeued_from", "hash", "risk",
                                   "reasons", "wait_until")}
    out["fields"] = [{"name": n, "value": v} for n, v in fields(req)]
    out["effect"] = effect(req)
    out["refused"] = mismatch(req)
    return out
