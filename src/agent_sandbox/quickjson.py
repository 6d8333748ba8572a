"""``json.loads`` and ``json.dumps`` without importing the ``json`` package.

The hook's allow path reads and writes JSON on every tool call; importing
``json`` loads three modules and compiles six regular expressions (about 2 ms,
a tenth of what the hook adds to a bare interpreter). ``json`` itself does its
work in the interpreter's C accelerator ``_json``; these functions call that
accelerator directly, configured exactly as ``json`` configures it, so they
return the same objects and write the same text:

- ``loads(data)`` is ``json.loads(data)``: the same scanner, the same
  whitespace rule, UTF-8 bytes decoded as ``json`` decodes them. Anything
  unusual (other encodings, a byte-order mark, every error) is handed to
  ``json.loads`` itself, which raises its own ``JSONDecodeError``.
- ``dumps(obj)`` is ``json.dumps(obj)`` with the default settings.
- ``encoder(...)`` gives ``json.JSONEncoder(...).encode`` for the settings the
  audit's canonical form uses.

Without the accelerator (another interpreter) every function is the ``json``
package's. This module never parses or writes JSON any other way.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - an interpreter without the accelerator
    _json = None  # type: ignore[assignment]

_WS = " \t\n\r"  # json.decoder.WHITESPACE


class _Context:
    """What ``json.JSONDecoder()`` gives the C scanner, without its regexes."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__
    memo: dict[Any, Any] = {}


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _StrictContext(_Context):
    """The same, refusing ``NaN`` and ``Infinity`` (not JSON by RFC 8259)."""

    parse_constant = staticmethod(_refuse_constant)


_scan: Any = (_json.make_scanner(_Context())  # type: ignore[arg-type]
               if _json is not None else None)
_strict_scan: Any = (_json.make_scanner(_StrictContext())  # type: ignore[arg-type]
                     if _json is not None else None)


def _slow_loads(data: str | bytes, strict: bool = False) -> Any:
    import json

    if strict:
        return json.loads(data, parse_constant=_refuse_constant)
    return json.loads(data)


def loads(data: str | bytes | bytearray, *, strict: bool = False) -> Any:
    """``json.loads(data)``: the same result, or the same error. ``strict=True``
    also refuses ``NaN`` and ``Infinity`` with a ``ValueError`` (settings files)."""
    scan = _strict_scan if strict else _scan
    if scan is None:
        return _slow_loads(bytes(data) if isinstance(data, bytearray) else data, strict)
    if isinstance(data, (bytes, bytearray)):
        # json.detect_encoding: UTF-8 unless a BOM or a NUL in the first bytes
        if len(data) < 2 or not data[0] or not data[1] or data[:2] in (
                b"\xef\xbb", b"\xff\xfe", b"\xfe\xff"):
            return _slow_loads(bytes(data), strict)
        text = data.decode("utf-8", "surrogatepass")
    elif isinstance(data, str):
        text = data
    else:
        return _slow_loads(data, strict)  # json's TypeError
    try:
        start = len(text) - len(text.lstrip(_WS))
        obj, end = scan(text, start)
        if text[end:].strip(_WS):
            raise ValueError("extra data")
    except Exception:  # every error as json reports it (the scanner needs json loaded)
        return _slow_loads(text, strict)
    finally:
        _Context.memo.clear()
    return obj


def _not_serializable(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def encoder(*, sort_keys: bool, separators: tuple[str, str], ensure_ascii: bool,
            allow_nan: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(sort_keys=..., separators=..., ensure_ascii=...,
    allow_nan=...).encode`` (circular references checked, no ``default``)."""
    if _json is None:  # pragma: no cover
        import json

        return json.JSONEncoder(sort_keys=sort_keys, separators=separators,
                                ensure_ascii=ensure_ascii, allow_nan=allow_nan).encode
    item_sep, key_sep = separators
    string = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
    make = _json.make_encoder

    def encode(obj: Any) -> str:
        if isinstance(obj, str):
            out: str = string(obj)
            return out
        chunks = make({}, _not_serializable, string, None, key_sep, item_sep, sort_keys,
                      False, allow_nan)(obj, 0)
        return "".join(chunks)

    return encode


_default = encoder(sort_keys=False, separators=(", ", ": "), ensure_ascii=True, allow_nan=True)


def dumps(obj: Any) -> str:
    """``json.dumps(obj)`` with the default settings."""
    return _default(obj)
