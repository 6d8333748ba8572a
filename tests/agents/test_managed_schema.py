"""The managed Claude Code files validate against the client's published schema
(the vendored SchemaStore copy), managed-only switches included.

Codex's ``requirements.toml`` is parsed by the real binary (test_managed_hosts
lists its hooks as managed) and Gemini CLI loads its system settings and admin
policy in the same real-client runs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema

from agent_sandbox.inventory import HostFacts
from agent_sandbox.render import render
from agent_sandbox.spec.loader import load_layer, load_stack

SCHEMA = json.loads((Path(__file__).parent / "schemas" /
                     "claude-code-settings.schema.json").read_text())
SPEC = """\
version: 1
agents: {claude: {}}
filesystem:
  deny_read: ["~/.ssh"]
  allow_write: ["."]
network:
  allowed_domains: [github.com]
mcp_servers:
  docs: {command: docs-mcp}
"""


def rendered(tmp_path: Path) -> dict[str, bytes]:
    spec_file = tmp_path / "fleet.yml"
    spec_file.write_text(SPEC)
    spec = load_stack([load_layer(str(spec_file))])
    facts = HostFacts(name="h", os="linux", python=sys.executable)
    return {t: a.content for t, a in render(spec, facts).items()}


def test_managed_settings_validate_and_carry_the_managed_only_switches(tmp_path: Path) -> None:
    arts = rendered(tmp_path)
    doc = json.loads(arts["/etc/claude-code/managed-settings.json"])
    jsonschema.Draft7Validator(SCHEMA).validate(doc)
    assert doc["allowManagedPermissionRulesOnly"] is True
    assert doc["allowManagedMcpServersOnly"] is True
    assert doc["sandbox"]["network"]["allowManagedDomainsOnly"] is True
    assert doc["sandbox"]["filesystem"]["allowManagedReadPathsOnly"] is True
    mcp = json.loads(arts["/etc/claude-code/managed-mcp.json"])
    assert mcp == {"mcpServers": {"docs": {"type": "stdio", "command": "docs-mcp", "args": []}}}


def test_the_schema_can_fail() -> None:
    bad = {"sandbox": {"network": {"allowManagedDomainsOnly": "yes"}}}
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(bad))
