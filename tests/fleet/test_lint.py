"""What `ansible-lint --profile production` at the repository root covers (the bare run
itself is `make lint`, which CI runs before `make test`), and site.yml parses against
both inventories (the demo fleet and the example fleet)."""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import DEMO, EXAMPLE_FLEET, REPO, run, tool


def test_the_repository_lint_covers_every_role_and_playbook() -> None:
    """The bare run above is the only ansible-lint run in the suite: nothing under
    roles/ or playbooks/ may be excluded from it."""
    config = yaml.safe_load((REPO / ".ansible-lint").read_text())
    excluded = [str(p).rstrip("/") for p in config.get("exclude_paths", [])]
    content = [p for top in ("roles", "playbooks") for p in (REPO / top).rglob("*")
               if p.suffix in (".yml", ".yaml")]
    assert content
    paths = [str(p.relative_to(REPO)) for p in content]
    hidden = [p for p in paths if any(p == e or p.startswith(e + "/") for e in excluded)]
    assert hidden == [], hidden


@pytest.mark.parametrize("inventory", [DEMO, EXAMPLE_FLEET], ids=["demo", "example-fleet"])
def test_site_yml_parses_against_the_inventory(inventory: object, collections: object) -> None:
    run([tool("ansible-playbook"), "-i", str(inventory), "site.yml", "--syntax-check"],
        timeout=120)



@pytest.mark.parametrize("inventory", [DEMO, EXAMPLE_FLEET], ids=["demo", "example-fleet"])
def test_spec_layers_are_not_read_as_inventory(inventory: object, collections: object) -> None:
    proc = run([tool("ansible-inventory"), "-i", str(inventory), "--list"], timeout=120)
    assert "Skipping" not in proc.stderr, proc.stderr
    groups = json.loads(proc.stdout)
    assert not {"filesystem", "network", "commands", "agents"} & set(groups)
