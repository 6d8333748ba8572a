"""Renderer for the agents artifacts (filled in by its issue).

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..facts import HostFacts
from ..spec.models import Spec
from . import Artifact


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    return ()
