"""An action's parameters: checked against its JSON Schema, then placed into its
argv template as whole elements (never through a shell).

``{name}`` in an argv element is replaced by the parameter's text; ``{{`` and
``}}`` are literal braces. A string goes in as it is, a number or boolean as its
JSON text, an array or object as compact JSON. A parameter that is an element
of its own may not start with ``-`` (the program would read it as an option):
write the element as ``--flag={name}`` or constrain the schema. No value may
carry a NUL byte (argv cannot), and an element may not grow past 128 KiB.
"""

from __future__ import annotations

import json
from typing import Any

from ..display import printable
from ..errors import SandboxError
from ..spec.actions import PLACEHOLDER, Action

MAX_ELEMENT = 128 * 1024


class ActionParamsError(SandboxError):
    """The parameters do not fit the action; nothing ran."""


def validate(action: Action, params: Any) -> dict[str, Any]:
    """``params`` checked against the action's schema; the first errors, by path."""
    import jsonschema

    if not isinstance(params, dict):
        raise ActionParamsError(f"parameters must be an object, not {type(params).__name__}")
    validator = jsonschema.Draft202012Validator(
        action.params, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(params), key=lambda e: list(map(str, e.path)))
    if errors:
        shown = []
        for err in errors[:5]:
            where = ".".join(str(p) for p in err.path) or "(the parameters)"
            text = printable(err.message)
            if len(text) > 300:  # the message quotes the value: keep both ends
                text = text[:140] + " ... " + text[-140:]
            shown.append(f"{where}: {text}")
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise ActionParamsError("invalid parameters: " + "; ".join(shown) + more)
    return params


def _text(name: str, value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, (bool, int, float)) or value is None:
        text = json.dumps(value)
    else:
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if "\x00" in text:
        raise ActionParamsError(f"parameter {name} contains a NUL byte")
    return text


def _value(action: Action, params: dict[str, Any], name: str) -> Any:
    if name in params:
        return params[name]
    prop = (action.params.get("properties") or {}).get(name) or {}
    if isinstance(prop, dict) and "default" in prop:
        return prop["default"]
    raise ActionParamsError(f"argv needs parameter {name}, which was not given")


def render_argv(action: Action, params: dict[str, Any]) -> list[str]:
    """The argv the container runs, from validated ``params``."""
    argv: list[str] = []
    for element in action.argv:
        whole = PLACEHOLDER.fullmatch(element)
        if whole and whole.group(1):
            name = whole.group(1)
            text = _text(name, _value(action, params, name))
            if text.startswith("-"):
                raise ActionParamsError(
                    f"parameter {name} starts with '-' and would be read as an option "
                    f"(the action would need an element such as --{name}={{{name}}})")
        else:
            def sub(m: Any) -> str:
                if m.group(0) == "{{":
                    return "{"
                if m.group(0) == "}}":
                    return "}"
                if m.group(1) is None:
                    raise ActionParamsError("an argv element has a lone brace")
                return _text(m.group(1), _value(action, params, m.group(1)))

            text = PLACEHOLDER.sub(sub, element)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_ELEMENT:
            raise ActionParamsError(f"argv element {len(argv)} is longer than "
                                    f"{MAX_ELEMENT // 1024} KiB")
        argv.append(text)
    return argv


def plan_text(action: Action, params: dict[str, Any]) -> str | None:
    """The text of the parameter that carries the plan (``action.plan.param``)."""
    if action.plan is None:
        return None
    return _text(action.plan.param, params.get(action.plan.param, ""))
