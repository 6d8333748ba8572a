"""The locally built base image (``scripts/base-image.sh``) for the tests that
start containers: Molecule's hosts, the pyinfra host and the gVisor runs.

Built once per run. On a machine without it (a fresh CI machine) the build takes
about a minute: under pytest-xdist it starts in the background as soon as a worker
has collected a test that needs it, so the workers run other files meanwhile
(``LONGEST_FIRST`` in tests/conftest.py hands out files without containers first)
instead of all waiting for the one that builds. Whoever needs the image takes the
build lock, so it waits for a build under way, then runs the script itself: a no-op
when the image is there, and a failed build fails that test with the script's own
output.

Test support only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

IMAGE = "localhost/agent-sandbox-base:bookworm"
REPO = Path(__file__).resolve().parents[1]
SCRIPT = ["bash", "scripts/base-image.sh"]
# the session fixtures that build it (tests/conftest.py, tests/fleet/conftest.py)
FIXTURES = frozenset({"base_image", "gvisor_image", "gvisor_env"})
LOCK = "base-image.lock"  # in the run's shared folder, as one_at_a_time names it
_STARTED: list[subprocess.Popen[bytes]] = []  # kept, not collected while it runs


def _env() -> dict[str, str]:
    return dict(os.environ, CONTAINERS_CONF=str(REPO / "containers.conf"))


def build(one_at_a_time: Callable[[str], contextlib.AbstractContextManager[None]]) -> str:
    """The image, built here when missing (or waited for, when a build is under way)."""
    with one_at_a_time(LOCK.removesuffix(".lock")):
        subprocess.run(SCRIPT, cwd=REPO, env=_env(), check=True, timeout=900)
    return IMAGE


def start_in_background(shared: Path, fixturenames: Iterable[Iterable[str]]) -> None:
    """Start the build under the build lock when a collected test needs the image
    and no worker of this run has started it yet (the first to get here does)."""
    if not any(FIXTURES.intersection(names) for names in fixturenames):
        return
    try:
        os.close(os.open(shared / "base-image.started", os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o600))
    except FileExistsError:
        return
    fd = os.open(shared / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # no test runs before every worker has collected, so nobody holds it yet
        fcntl.flock(fd, fcntl.LOCK_EX)
        # the child keeps the lock (the same open file) until the build ends; the
        # build itself does not get it, so nothing it leaves running can hold it
        argv = ["bash", "-c", f'"$@" {fd}>&-', "build", *SCRIPT]
        with open(shared / "base-image.log", "wb") as log:
            _STARTED.append(subprocess.Popen(argv, cwd=REPO, env=_env(),
                                             stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, pass_fds=(fd,),
                                             start_new_session=True))
    finally:
        os.close(fd)
