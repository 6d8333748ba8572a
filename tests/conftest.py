"""Isolation every test gets without asking for it, so that the suite runs in
parallel (pytest-xdist) and beside other sandboxes on the same machine.

- Each test process (each xdist worker) gets its own per-user state folder (and
  with it the lock folder) and audit folder through the variables the host
  contract honours, set before any test module copies the environment for the
  commands it starts: no test reads or writes the real user's folders or
  ``/var/log/agent-sandbox``, and two workers never share run records or owed
  sweeps. The XDG base folders are unset,
  so a test's HOME alone says where the agent clients keep their files. No
  ``sandbox mcp`` asks a resident server unless its test says so.
- Tests marked ``host_global`` change what every process on the machine sees
  (files under ``/etc/agent-sandbox``, a bound unix socket no sandbox can mask):
  they run alone, while every other test
  of the run waits (a reader-writer lock shared by the workers).
- ``one_at_a_time`` serialises shared builds (the base image) between workers;
  ``gvisor_image`` is that image (podman, runsc and the base image, built once).
- The longest files run first (``LONGEST_FIRST``): each file stays on one worker
  (``--dist loadfile``), so a long file handed out last would run alone at the
  end while the other worker idles. xdist's own reordering (files with the most
  tests first) is switched off, since test count says little about time.

Never a real user's state, never a fixed resource shared between workers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import base_image

# the lock folder is left to follow the state folder (its "run" folder), as it does for
# a user: a test that moves the state folder moves the locks with it
STATE_VARIABLES = ("AGENT_SANDBOX_STATE_DIR", "AGENT_SANDBOX_AUDIT_DIR")
# set on some machines (a desktop session): they would send the agent clients a test
# starts with a throwaway HOME to the real user's configuration
HOME_OVERRIDES = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")
# The files that take longest, longest first (seconds of one full run on this 2-core
# machine: pytest -n 3 --dist loadfile, per-file sums of the test durations). Handed
# out first, they overlap with everything else (the pyinfra host beside the Molecule
# scenario: both hold containers); a file not named here runs after them, in
# collection order. Only the order changes, never what runs.
LONGEST_FIRST = (
    # first, three long files that start no container: on a fresh machine the base
    # image may still be building (tests/base_image.py), and the files that need
    # it would wait for it
    "exec/test_srt_conformance.py",       # 124
    "agents/test_hooks_kept_on.py",       # 82
    "agents/test_agent_command.py",       # 59
    "fleet/test_molecule.py",             # 158: one converged fleet, every front end
    "fleet/test_molecule_no_init.py",     # with the above (SAME_WORKER): its fleet's second host
    "fleet/test_pull.py",                 # with the above (SAME_WORKER): the host pulls
    "fleet/test_pyinfra_host.py",         # 39
    "exec/test_escape.py",                # 69
    "exec/test_escape_two_step.py",       # 60
    "actions/test_actions_e2e.py",        # 56
    "agents/test_real_clients.py",        # 45
    "agents/test_client_state_attacks.py",  # 44
    "platforms/test_macos_vs_srt.py",     # 41
    "approval/test_mcp_resident.py",      # 41
    "agents/test_managed_hosts.py",       # 40
    "platforms/test_roles.py",            # 34
    "approval/test_fault.py",             # 32
    "web/test_browser.py",                # 30
    "web/test_load.py",                   # 29
    "agents/test_containment.py",         # 27
    "exec/test_exec_attacks.py",          # 26
    "foundation/test_fuzz.py",            # 25
    "approval/test_differential.py",      # 23
    "approval/test_views.py",             # 22
    "actions/test_runner.py",             # 21
    "exec/test_backends.py",              # 18
    "approval/test_write_file.py",        # 18
)


# Files that check one world made once (a package fixture) run on one worker, one
# after the other: xdist hands them out as one file. The Molecule fleet converges
# the no-init scenario's host beside the default scenario's (tests/fleet/conftest.py).
SAME_WORKER = {"fleet/test_molecule_no_init.py": "fleet/test_molecule.py",
               "fleet/test_pull.py": "fleet/test_molecule.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile``, with the files of ``SAME_WORKER`` handed out together."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    together = {f"tests/{a}": f"tests/{b}" for a, b in SAME_WORKER.items()}

    class Together(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return together.get(scope, scope)

    return Together(config, log)  # type: ignore[arg-type]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "host_global: changes what every process on this machine sees "
        "(/etc/agent-sandbox, an unmaskable unix socket); runs while no other test "
        "of the run does")
    root = Path(tempfile.mkdtemp(prefix="agent-sandbox-test-"))
    config.stash[_ROOT] = root
    for variable, sub in zip(STATE_VARIABLES, ("state", "audit"), strict=True):
        os.environ[variable] = str(root / sub)
    os.environ.pop("AGENT_SANDBOX_LOCK_DIR", None)
    # Ansible's and Molecule's own per-user folder (~/.ansible: temporary files, and
    # Molecule's scenario state, named after the checkout's folder name only, so two
    # checkouts of the same name shared it)
    os.environ["ANSIBLE_HOME"] = str(root / "ansible")
    # no resident MCP server outlives a test: the tests that want one say so
    # (approval/test_mcp_resident.py; the agents' worlds stop theirs)
    os.environ["AGENT_SANDBOX_MCP_RESIDENT"] = "off"
    for variable in HOME_OVERRIDES:  # a test's own HOME decides where clients look
        os.environ.pop(variable, None)


    # xdist hands out files by test count unless told not to: keep ours (below)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# ``slow`` (left out by ``make test-fast``): containers, the real agent clients and srt
# comparisons. A test that uses one of these fixtures gets it here (podman and its
# images, Molecule's fleet, an agent world with the real clients); srt comparisons
# and tests that run podman themselves carry the marker in their file.
SLOW_FIXTURES = frozenset({"gvisor_image", "base_image", "containers_up", "containers_held",
                           "molecule_fleet", "world"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every item of a file in ``LONGEST_FIRST`` first, in that order; within a
    file and among the other files the collected order holds (a stable sort).
    Items that use a fixture of ``SLOW_FIXTURES`` are marked ``slow``."""
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    tests = Path(__file__).parent
    rank = {str(tests / name): i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_ROOT, None)
    if root is not None:
        # the warm podman service the gVisor tests started in this state folder
        from agent_sandbox.runtime.containers.service import stop_all

        stop_all(str(root / "state" / "podman"))
        shutil.rmtree(root, ignore_errors=True)


_ROOT = pytest.StashKey[Path]()


@contextlib.contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


@pytest.fixture(autouse=True)
def host_global_lock(request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Shared for every test, exclusive for ``host_global`` ones. A turnstile taken
    first keeps a waiting exclusive test from being starved by a stream of shared
    ones. Without xdist nothing runs beside the test, and nothing is locked."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    shared = tmp_path_factory.getbasetemp().parent  # the same for every worker of the run
    exclusive = request.node.get_closest_marker("host_global") is not None
    # a module's containers outlive its tests (their conmon binds sockets through
    # /proc/self/fd, found only where conmon keeps files): an exclusive test first waits for
    # every such module to end, before it takes the turnstile (no module holding
    # containers ever waits for this lock while it holds the turnstile)
    containers = _flock(shared / "containers.lock", fcntl.LOCK_EX) if exclusive else None
    if containers is not None:
        containers.__enter__()
    try:
        with _flock(shared / "turnstile.lock", fcntl.LOCK_EX):
            lock = _flock(shared / "host-global.lock",
                          fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            lock.__enter__()
        try:
            yield
        finally:
            lock.__exit__(None, None, None)
    finally:
        if containers is not None:
            containers.__exit__(None, None, None)


@pytest.fixture(scope="session")
def containers_held(tmp_path_factory: pytest.TempPathFactory
                    ) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """``with containers_held():`` around the life of containers that outlive a test
    (a module's, a package's): no ``host_global`` test runs meanwhile."""
    shared = tmp_path_factory.getbasetemp().parent

    def held() -> contextlib.AbstractContextManager[None]:
        if "PYTEST_XDIST_WORKER" not in os.environ:
            return contextlib.nullcontext()
        return _flock(shared / "containers.lock", fcntl.LOCK_SH)

    return held


@pytest.fixture(scope="module")
def containers_up(containers_held: Callable[[], contextlib.AbstractContextManager[None]]
                  ) -> Iterator[None]:
    """For a module whose containers live across its tests (``usefixtures``): held
    while the module runs, so that no ``host_global`` test runs beside them."""
    with containers_held():
        yield


@pytest.fixture(scope="session")
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory
                  ) -> Callable[[str], contextlib.AbstractContextManager[None]]:
    """``with one_at_a_time("name"):`` runs its block in one worker at a time (a
    shared build such as the base image, made once and found by the others)."""
    shared = tmp_path_factory.getbasetemp().parent

    def lock(name: str) -> contextlib.AbstractContextManager[None]:
        if "PYTEST_XDIST_WORKER" not in os.environ:
            return contextlib.nullcontext()
        return _flock(shared / f"{name}.lock", fcntl.LOCK_EX)

    return lock


@pytest.fixture(scope="session")
def gvisor_image() -> str:
    """podman, runsc and the base image; the image is built here when missing
    (tests/base_image.py), so a fresh machine runs these tests instead of skipping
    them. Missing tools are a failure: bootstrap installs them."""
    if not (shutil.which("podman") and shutil.which("runsc") and shutil.which("debootstrap")):
        pytest.fail("podman, runsc and debootstrap are needed (scripts/bootstrap.sh)")
    return base_image.build()
