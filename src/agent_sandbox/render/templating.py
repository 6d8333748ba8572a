"""The jinja2 environment over the top-level ``templates/`` folder (loaded once)."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import jinja2

TEMPLATES = os.environ.get(
    "AGENT_SANDBOX_TEMPLATES",
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "templates"),
)


def _find_templates() -> str:
    candidates = [TEMPLATES, os.path.join(os.path.dirname(__file__), "templates"),
                  # an installed wheel carries them as package data: agent_sandbox/templates
                  os.path.join(os.path.dirname(__file__), "..", "templates")]
    for c in candidates:
        if os.path.isdir(c):
            return os.path.abspath(c)
    raise RuntimeError("agent-sandbox templates folder not found")


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_find_templates()),
        autoescape=False,  # noqa: S701 - configuration files, not HTML; values go through tojson
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson_compact"] = lambda v: json.dumps(v, sort_keys=True)
    return env


def render_template(name: str, **context: Any) -> bytes:
    return environment().get_template(name).render(**context).encode()
