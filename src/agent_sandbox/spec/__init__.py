"""The spec: models, layered loading, and the pure rules they are made of.

Submodules ``rules``, ``paths`` and ``domains`` are stdlib-only and safe on the
hook's hot path; the models and loader (pydantic, yaml) load only when asked.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import
    from typing import Any

_LAZY = {
    "Layer": "layer", "load_layer": "loader", "load_spec": "loader", "load_stack": "loader",
    "parse_yaml": "loader", "Spec": "models", "ToolKind": "rules", "Verdict": "rules",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(name)


__all__ = sorted(_LAZY)
