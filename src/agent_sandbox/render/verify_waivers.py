"""Renderer for ``/etc/agent-sandbox/verify.json``: the host's effective waivers of
``sandbox verify``'s checks (the spec's ``verify.waivers``, its layers merged), so
that ``sandbox verify`` on the host applies them without the spec.

Linux and macOS hosts, always (an empty list too: a waiver taken out of the spec
must leave the host when the files are installed again). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..contract import VERIFY_WAIVERS_FILE
from ..inventory import HostFacts
from ..spec.models import Spec
from . import Artifact, json_bytes, memo

VERSION = 1


def waivers_document(spec: Spec) -> dict[str, Any]:
    """``{"version": 1, "waivers": [{check, justification, expires, layer}]}``,
    sorted by check."""
    waivers = sorted(spec.verify.waivers, key=lambda w: w.check)
    return {"version": VERSION,
            "waivers": [w.model_dump(mode="json") for w in waivers]}


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    if facts.os not in ("linux", "macos"):
        return
    yield Artifact(VERIFY_WAIVERS_FILE,
                   memo(spec, "verify.json", lambda: json_bytes(waivers_document(spec))),
                   0o644, "verify-waivers")
