"""The broker of one bubblewrap run, set up: the filter the child installs before
it execs bwrap (``installer``), then the judge and the thread (``start``).

Kept out of ``bwrap.run`` so that a run's start reads as its steps; everything
here refuses the start (``SandboxStartError``) rather than run without a broker.
"""

from __future__ import annotations

import os

from ..failures import SandboxStartError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..bwrap.plan import Plan
    from ..settings import Settings
    from .notify import Installer
    from .pinned import Pin
    from .server import Broker


def installer(settings: Settings, *, capture: bool, reads: bool = False,
              execs: bool = False) -> Installer:
    """What the child that execs bwrap runs first: a seccomp filter whose listener
    the launcher keeps, so that the calls the broker judges come to it.
    ``capture``: the child is started by ``subprocess``, which waits for the exec
    (the child cannot wait for the launcher then, and sends the listener).
    ``reads``: the plan leaves reading to be judged by glob (``Plan.read_rules``):
    every open is handed over, not only those that may write. ``execs``: every
    ``execve`` too (an approved command's programs, ``pinned``)."""
    from ..bwrap.seccomp import SeccompError
    from . import notify

    names = list(notify.FILE_CALLS) + (list(notify.EXEC_CALLS) if execs else [])
    if settings.network.allow_unix_sockets or settings.network.allow_all_unix_sockets:
        names.append("connect")
    try:
        prog = notify.program(names, write_opens=True, all_opens=reads, enosys=("openat2",))
    except SeccompError as exc:
        raise SandboxStartError(str(exc)) from None
    return notify.Installer(prog, send=capture)


def start(made: Installer, pid: int | None, plan: Plan, settings: Settings, *, home: str,
          cwd: str, opened: Sequence[str], overlays: Sequence[tuple[str, str, str | None]],
          absent: Sequence[str], on_deny: Callable[[str], None], pin: Pin | None = None,
          scratch: Sequence[str] = (), approved: str = "") -> Broker:
    """The broker's thread, started before bwrap sets the sandbox up (bwrap's calls
    are handed over too, and go on unjudged until ``Broker.arm``). ``pid``: the
    child that made the filter; None for a child about to be forked that sends its
    listener (``Installer.send``): the thread then receives it and serves the
    child's calls from before its ``exec`` (``handed``, once it is forked).
    ``scratch``: folders of the run's own, removed when it ends (its temporary
    folder): no host tool meets what is planted there. ``approved``: an approved
    command's run record, which claims the files it writes (``approved_claims``)."""
    from agent_sandbox.spec.paths import expand

    from .judge import Judge, ReadRules
    from .server import Broker

    listener: int | Callable[[], int] = made.receive_listener
    if pid is not None:
        try:
            listener = made.take_listener(pid)
        except OSError as exc:
            raise _refused(exc) from None
    mine = [os.path.realpath(o) for o in opened]
    mine += [t for _, t, fallback in overlays if fallback is None]
    from ..bwrap.path_entries import path_shadows

    judge = Judge([*plan.writable_roots, *mine], home,
                  [expand(r, home=home, cwd=cwd) for r in settings.filesystem.deny_write],
                  mine, absent, ReadRules(*plan.read_rules), path_shadows())
    judge.scratch = tuple(scratch)
    sockets = plan.unix_sockets
    if sockets is None and settings.network.allow_all_unix_sockets:
        sockets = ("/",)
    broker = Broker(listener, judge, sockets, on_deny=on_deny, pin=pin)
    if broker.files is not None and pin is not None:
        broker.files.approved = pin.record = approved
    if broker.files is not None:  # a truncate the broker makes holds the run's limit too
        from ..limits import DEFAULT_FILE_SIZE

        broker.files.max_size = settings.limits[2] or DEFAULT_FILE_SIZE
    broker.start()
    return broker


def handed(made: Installer, broker: Broker) -> None:
    """After the fork of a child that sends its listener: until the broker holds it."""
    made.forked()
    try:
        broker.wait_listener()
    except OSError as exc:
        raise _refused(exc) from None


def _refused(exc: OSError) -> SandboxStartError:
    return SandboxStartError(f"{exc.strerror}; the sandbox needs seccomp user notification "
                             "(Linux 5.14 or later)")
