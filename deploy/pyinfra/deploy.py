"""Example pyinfra deploy: install agent-sandbox and every rendered artifact.

    pyinfra deploy/pyinfra/inventory.py deploy/pyinfra/deploy.py

``SANDBOX_INVENTORY`` selects the spec inventory (default inventories/demo);
``SANDBOX_INSTALL_RUNTIME=0`` installs only the rendered files;
``SANDBOX_WHEELHOUSE_DIR`` names the wheelhouse folder (default build/wheelhouse).
"""

import os
from pathlib import Path

from agent_sandbox.deploy.pyinfra import agent_sandbox

ROOT = Path(__file__).resolve().parents[2]

agent_sandbox(
    inventory_dir=os.environ.get("SANDBOX_INVENTORY", str(ROOT / "inventories" / "demo")),
    install_runtime=os.environ.get("SANDBOX_INSTALL_RUNTIME", "1") != "0",
    wheelhouse=os.environ.get("SANDBOX_WHEELHOUSE_DIR") or None,
)
