"""The jinja2 environment over the package's ``templates/`` folder (loaded once).

The templates are package data (``agent_sandbox/templates``), never a folder
found beside the checkout or named by the environment, so every install renders
the same bytes."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import jinja2

# Package data: the same folder in a checkout, a wheel, an sdist or an editable install.
TEMPLATES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "templates")


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
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
