"""The locally built base image (``scripts/base-image.sh``) for the tests that
start containers: Molecule's hosts, the pyinfra host and the gVisor runs.

``make setup`` starts building it in the background where it is missing (a fresh
machine), and the script lets one build run at a time: a test that needs the image
runs the script, which waits for a build under way and then finds the image there
(or builds it, and a failed build fails that test with the script's own output).
Meanwhile the workers run the files that start no container (``LONGEST_FIRST`` in
tests/conftest.py hands those out first).

Test support only.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

IMAGE = "localhost/agent-sandbox-base:bookworm"
REPO = Path(__file__).resolve().parents[1]


def build() -> str:
    """The image, built here when missing (or waited for, when a build is under way)."""
    subprocess.run(["bash", "scripts/base-image.sh"], cwd=REPO, check=True, timeout=900,
                   env=dict(os.environ, CONTAINERS_CONF=str(REPO / "containers.conf")))
    return IMAGE
