"""Render a whole inventory, host by host, with one shared cache of spec stacks.

The CLI, the Ansible plugin, the pyinfra deploy and the benchmark all go
through ``FleetRenderer`` so they produce the same bytes. Hosts that share the
same layer files share one merged spec (a fleet has few distinct stacks); the
cache is a small LRU, so memory stays flat however many hosts (and host layer
files) there are.
"""

from __future__ import annotations

from collections.abc import Iterator

from .inventory import HostFacts, Inventory
from .render import Artifact, render
from .spec.loader import load_layer, load_stack
from .spec.models import Spec

MAX_STACKS = 256  # distinct layer stacks kept merged (hosts with their own file add one each)


class FleetRenderer:
    def __init__(self, inventory: Inventory, *, extra_layers: tuple[str, ...] = ()):
        self.inventory = inventory
        self.extra_layers = extra_layers
        self._stacks: dict[tuple[str, ...], Spec] = {}

    @classmethod
    def from_path(cls, root: str) -> FleetRenderer:
        return cls(Inventory.load(root))

    def spec_for(self, host: str) -> Spec:
        key = tuple(self.inventory.layer_paths(host)) + self.extra_layers
        spec = self._stacks.pop(key, None)
        if spec is None:
            spec = load_stack([load_layer(p) for p in key])
            if len(self._stacks) >= MAX_STACKS:
                self._stacks.pop(next(iter(self._stacks)))
        self._stacks[key] = spec  # most recently used last
        return spec

    def facts(self, host: str) -> HostFacts:
        return self.inventory.facts(host)

    def render_host(self, host: str) -> dict[str, Artifact]:
        return render(self.spec_for(host), self.facts(host))

    def __iter__(self) -> Iterator[tuple[str, dict[str, Artifact]]]:
        for host in self.inventory:
            yield host, self.render_host(host)
