"""One command in a bubblewrap sandbox, from start to cleanup (``BwrapRun``).

Step by step: plan the mounts (``bwrap.plan``) under the lock, in this run's
record (``run_records``), leave the owed-sweep marker (``sweep.owe``), start the
broker that judges every write (``runtime.broker``) and ``bwrap`` held at
``--block-fd``, open the proxy ports inside its network namespace
(``netns.open_listeners``), release the command through the start gate, serve
the proxy lazily (on the first connection), wait, then clean up: what the
command made is judged (``made_repos``, the sweep) and this run's record goes.

Why no bridge process inside the sandbox (srt runs socat there): the proxy's
listening sockets are created in the sandbox's network namespace and held by
this process, so the sandbox's loopback ports lead straight to the host proxy.
Nothing inside can kill, replace or impersonate the bridge, ``socket(AF_UNIX)``
can be refused outright by seccomp, and the ports are ready before the command.

Nothing here decides policy beyond what ``bwrap.plan`` planned; nothing read
from a place a sandbox can write decides anything (the lock folder is private
and read-only in every sandbox). It never runs a command unsandboxed: every
failure before the command starts raises ``SandboxStartError``.
"""

from __future__ import annotations

import _signal as signal
import os
import select
import sys
import time

from agent_sandbox import contract, protected

from ..failures import SandboxStartError
from ..host import diagnose_userns
from ..limits import Limits
from ..limits import for_run as limits_for_run
from ..private_state import private_paths
from ..process import Relay, Spawned, exited, no_inherited_fds, read_all, read_line, suppress
from ..settings import Settings, loads, require_enforceable
from . import argv as bwargv
from . import fsview, late_binds, path_entries, private_tmp
from . import plan as bw
from .owed import settle_or_refuse, settle_owed
from .run_records import RunRecord
from .said import bwrap_said
from .start_fds import StartFds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def runtime_paths(home: str, settings_source: str | None = None) -> list[str]:
    """What the runtime keeps read-only in every sandbox besides the protected set:
    its state and policy folders (``contract.state_paths``), its installation (the
    virtualenv, the base interpreter it was made from, the package) and the settings
    file of this run. A command that could rewrite them would loosen or forge the
    next run, or run its code on the host."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [*contract.state_paths(home), package]
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                   os.path.dirname(os.path.realpath(sys.executable))):
        paths += [prefix, os.path.realpath(prefix)]
    if settings_source and os.path.isabs(settings_source):
        paths.append(settings_source)
    for var in protected.ENV_FILES:  # $ENV, $BASH_ENV: what the shells read
        value = os.path.expanduser(os.path.expandvars(os.environ.get(var, "")))
        if os.path.isabs(value):
            paths.append(os.path.normpath(value))
    return list(dict.fromkeys(paths))


# refusals said and recorded one by one; the rest of a run's are counted
REFUSALS_SAID = 100


class SetupEnded(SandboxStartError):
    """bwrap ended before the command could run (``BwrapRun.start`` tries again)."""


class BwrapRun:
    """One sandboxed process (bwrap backend), from start to cleanup."""

    def __init__(self, settings: Settings, command: Sequence[str], *, cwd: str, home: str,
                 env: dict[str, str] | None = None, audit_dir: str | None = None,
                 record: Callable[[dict[str, Any]], None] | None = None,
                 extra_ports: Sequence[int] = (), opened: Sequence[str] = (),
                 overlays: Sequence[tuple[str, str, str | None]] = (),
                 filters: Mapping[str, Callable[[str], str]] | None = None,
                 pin: Any = None) -> None:
        if not command:
            raise SandboxStartError("no command given: sandbox exec -- CMD [ARG...]")
        require_enforceable(settings, "bwrap")
        self.settings, self.command, self.cwd, self.home = settings, list(command), cwd, home
        self.env, self.audit_dir, self._record = env, audit_dir, record
        self.tmp: str | None = None  # the run's own temporary folder (``private_tmp``)
        self.proc: Any = None
        self.pid1: int | None = None
        self.listeners: list[Any] = []
        # more listening ports in the sandbox's loopback, opened with the proxy's
        # before the command starts; served by the caller (``agent.run``)
        self.extra_ports = tuple(extra_ports)
        self.extra_listeners: list[Any] = []
        self.opened = tuple(opened)  # writable roots opened in the protected set (bw.plan)
        # binds over the plan: (source, target, None) writable, (source, target,
        # fallback) read-only, with ``fallback`` bound instead where the plan hides
        # ``source`` (a denyRead or credential file stays unreadable)
        self.overlays = tuple(overlays)
        self.filters = dict(filters or {})  # read-only targets shown through a filter
        self.pin = pin  # an approved command's tree (``broker.pinned.Pin``)
        self.proxy: Any = None
        self.record: RunRecord | None = None
        self.plan: bw.Plan | None = None
        self.before: dict[str, tuple[int, ...]] = {}
        # set once ``before`` is taken, before the gate lets the command run: a start
        # that failed earlier ran nothing, and has nothing to sweep (an empty
        # ``before`` would judge every protected entry of the roots new)
        self.measured = False
        self.quarantined: list[tuple[str, str]] = []
        self.notices: list[str] = []
        self.refusals = 0
        self.limits: Limits | None = None
        self._audit_close: Callable[[], None] | None = None
        self.owed: str | None = None  # this run's marker until its sweep is done
        self._seccomp = b""  # the filter this run's sandbox got
        self.relay: Relay | None = None  # standard streams that are files (see Relay)
        self.binder: late_binds.Binder | None = None  # makes the plan's late binds
        self._pid1fd = -1  # the sandbox's init (a pidfd), from its start to cleanup
        self.guarded: set[str] = set()  # protected names its read-only mounts sit on
        self.broker: Any = None  # judges the calls that change names, and unix connect()
        self._installer: Any = None  # the broker's filter, until its listener is taken
        self.absent: tuple[str, ...] = ()  # protected paths that do not exist (the broker's)
        # the git folders the broker recorded as made by the command: the sweep's
        self._repos: dict[str, tuple[int, int]] | None = None

    # start -----------------------------------------------------------------

    def start(self, *, capture: bool = False, stdin: Any = None, stdout: Any = None,
              stderr: Any = None) -> None:
        """Plan, prepare and start the sandbox, held until the command may run. bwrap
        ending before the command could run is tried twice more: it remounts every
        mount of the host, and one that goes meanwhile (a container stopping, a
        build's mount) fails its set-up; nothing ran, so trying again is safe."""
        env = os.environ if self.env is None else self.env
        if self.tmp is None and private_tmp.needed(self.settings, env, self.home, self.cwd):
            self.settings, self.tmp = private_tmp.make(self.settings)
            self.env = {**env, "TMPDIR": self.tmp}
        for attempt in range(3):
            try:
                self._start(capture=capture, stdin=stdin, stdout=stdout, stderr=stderr)
                return
            except SetupEnded:
                if attempt == 2:
                    raise
                self.proc, self.measured = None, False

    def _start(self, *, capture: bool, stdin: Any, stdout: Any, stderr: Any) -> None:
        """The start's phases: the filter, the plan under the lock, bwrap spawned with
        the broker, its namespaces furnished, the sweep's record, the gate opened;
        whatever fails on the way ends bwrap and cleans up."""
        fds = StartFds(self._seccomp_fd())
        # the run's cgroup (made early by ``sandbox exec``, or now), the launcher moving
        # into it while it plans
        self.limits = limits_for_run(*self.settings.limits)
        try:
            lock_dir = contract.lock_dir(self.home)
            ph = self.record = RunRecord(lock_dir)
            p, relied = self._plan_locked(ph, lock_dir)
            late = self._spawn(p, fds, capture=capture, stdin=stdin, stdout=stdout,
                               stderr=stderr)
            # the late binds' helper, forked while bwrap starts; it reads the gate's
            # "ready" itself (one hand-over less before the command starts)
            binder = self.binder = late_binds.Binder(fds.ready_r if late else None)
            pid1 = self._await_setup(fds)
            with suppress(BrokenPipeError):  # bwrap ended: the ready check says why
                os.write(fds.block_w, b"1")
            if binder.kid:  # made once bwrap's setup is complete, while this goes on
                binder.request(pid1, late)
            self._measure(p, relied, os.path.basename(ph.record), lock_dir)
            self._release(fds, binder, pid1)
        except BaseException:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.cleanup()
            raise
        finally:
            fds.close()

    def _seccomp_fd(self) -> int:
        """This run's seccomp filter (``seccomp.program``), in a memfd bwrap reads."""
        from . import seccomp

        n = self.settings.network
        try:
            by_path = bool(n.allow_unix_sockets) and not n.allow_all_unix_sockets
            self._seccomp = seccomp.program(
                allow_unix=bool(n.allow_unix_sockets) or n.allow_all_unix_sockets,
                deny_bind=by_path and not n.allow_local_binding)
            return seccomp.memfd(self._seccomp)
        except seccomp.SeccompError as exc:
            raise SandboxStartError(str(exc)) from None

    def _plan_locked(self, ph: RunRecord, lock_dir: str) -> tuple[bw.Plan, list[str]]:
        """The sweeps earlier runs owe, settled; then the plan, made under the lock
        (``RunRecord``): (the plan, its mounts other runs rely on)."""
        self._settle_or_refuse(ph)
        realfs = fsview.RealFs(skip=[lock_dir])
        with ph:
            others = ph.others()
            p = bw.plan(self.settings, home=self.home, cwd=self.cwd, fs=realfs,
                        protect=runtime_paths(self.home, self.settings.source),
                        tools=path_entries.tool_dirs(), opened=self.opened,
                        private=private_paths(self.home), brokered=True)
            relied = [m.path for m in p.mounts if m.path in others]
            # no placeholder is made: the protected names that do not exist are
            # refused when a call would create them (runtime.broker), in every run
            # alike and whatever the tree looks like by then
            self.absent = tuple(x for x, _ in p.absent)
            p = bw.without(p, set(self.absent) | {m.path for m in p.mounts
                                                  if not os.path.lexists(m.path)})
        self.plan = p
        return p, relied

    def _spawn(self, p: bw.Plan, fds: StartFds, *, capture: bool, stdin: Any, stdout: Any,
               stderr: Any) -> tuple[tuple[str, str], ...]:
        """bwrap started with the broker serving its calls, held at its block fd;
        the descriptors it was given closed here. Returns the plan's late binds."""
        # started here (not by subprocess): bwrap gets the descriptors under the
        # numbers of ``CHILD_FDS``, one digit each (see ``bwrap.argv.gated``)
        given = fds.given()
        binds = bwargv.overlay_binds(p, self.overlays, self.filters)
        late = bwargv.late_binds(p, binds)
        argv, env = bwargv.prepare(p, self.command, self.cwd, self.env,
                                   fds.for_bwrap() if capture
                                   else bwargv.Fds(*bwargv.CHILD_FDS),
                                   overlays=binds, late=[t for _, t in late],
                                   interactive=not capture and os.isatty(0))
        from ..broker import launch

        installer = self._installer = launch.installer(
            self.settings, capture=capture,
            reads=bool(p.read_rules[0] or p.read_rules[2]) or self.pin is not None,
            execs=self.pin is not None)
        limits = self.limits
        assert limits is not None  # made by _start
        bounded = limits.before(installer)  # the child is born in the run's cgroup
        broker = dict(plan=p, settings=self.settings, home=self.home, cwd=self.cwd,
                      opened=self.opened, overlays=self.overlays, absent=self.absent,
                      on_deny=self._refused, pin=self.pin,
                      scratch=(self.tmp,) if self.tmp else (),
                      approved=self.record.record if self.record is not None else "")
        try:
            if capture:
                import subprocess

                # serving before the fork: the child's own calls until its exec
                # (subprocess waits for that exec) are handed over too
                self.broker = launch.start(installer, None, **broker)
                self.proc = subprocess.Popen(
                    argv, env=env, pass_fds=given, preexec_fn=bounded,
                    stdin=stdin, stdout=stdout, stderr=stderr)
                limits.leave()
            else:
                no_inherited_fds()
                for fd in given:
                    os.set_inheritable(fd, True)
                self.relay = Relay()
                stdio = self.relay.start()
                self.proc = Spawned(argv, env, stdio,
                                    renumber=dict(zip(given, bwargv.CHILD_FDS, strict=True)),
                                    pre_exec=bounded)
                limits.leave()
                self.relay.after_spawn()
        except OSError as exc:
            raise SandboxStartError(f"cannot start bwrap: {exc}") from None
        if self.broker is not None:
            launch.handed(installer, self.broker)
        else:
            self.broker = launch.start(installer, self.proc.pid, **broker)
        self._installer = None
        self._repos = self.broker.repos()  # what the sweep judges, after the broker
        fds.close_given()
        return late

    def _await_setup(self, fds: StartFds) -> int:
        """The sandbox's init known (bwrap's info), and the proxy's ports (with the
        extra ones) opened in its network namespace, while bwrap waits at its block fd."""
        # While bwrap starts (in its own processes), this one loads what comes next:
        # the waits below are that much shorter.
        from . import netns

        netns.load()
        info = read_all(fds.info_r)
        if self.record is not None:
            self.record.note_pid(self.proc.pid)
        try:
            self.pid1 = int(loads(info)["child-pid"])
            if self.record is not None:
                self.record.note_pid(self.pid1)
            # held while bwrap waits at its block fd: the sandbox's init, whose end
            # is the end of every process in its pid namespace (``sweep``)
            with suppress(OSError):
                self._pid1fd = os.pidfd_open(self.pid1)
        except (ValueError, KeyError, TypeError):
            self.proc.wait()
            hint = diagnose_userns()
            raise SandboxStartError(
                f"bubblewrap could not create the sandbox ({bwrap_said(self.proc)})"
                + (f"; {hint}" if hint else "; check that user namespaces are enabled")
            ) from None
        try:
            ports = (contract.PROXY_HTTP_PORT, contract.PROXY_SOCKS_PORT,
                     *self.extra_ports)
            opened = netns.open_listeners(self.pid1, ports)
            self.listeners, self.extra_listeners = opened[:2], opened[2:]
        except netns.NamespaceError as exc:
            self.proc.kill()
            self.proc.wait()
            raise SandboxStartError(f"{exc}; {diagnose_userns() or 'check /proc access'}"
                                    ) from None
        return self.pid1

    def _measure(self, p: bw.Plan, relied: list[str], record: str, lock_dir: str) -> None:
        """While bwrap mounts the plan: the identities the sweep judges by and the
        owed marker, both before the gate lets the command run, and the modules the
        cleanup needs."""
        from . import reaper  # noqa: F401
        from .sweep import measure, owe, owe_repo, spared

        self.guarded, self.before = measure(p, relied)
        self.measured = True
        # owed until this run's own sweep is done (see sweep.settle)
        self.owed = owe(lock_dir, record, self.home,
                        [w for w in p.writable_roots if w != self.tmp], self.before,
                        spared(p, self.guarded), brokered=self.broker is not None)
        if self.broker is not None and self.broker.files is not None:
            owed = self.owed
            self.broker.files.made.on_repo = lambda path, ident: owe_repo(owed, path, ident)

    def _release(self, fds: StartFds, binder: late_binds.Binder, pid1: int) -> None:
        """The command released through the start gate once bwrap's setup is
        complete, the broker armed first."""
        # bwrap's setup is complete once the gate says "ready" and the command still
        # held: the plan's binds left out of bwrap's command line
        # (bwrap.argv.late_binds) are made then, by the helper
        ready = binder.wait() if binder.kid else read_line(fds.ready_r) == b"ready\n"
        if self.broker is not None and ready:  # from here on, every brokered call is judged
            try:
                self.broker.arm(pid1)
            except (FileNotFoundError, ProcessLookupError):
                ready = False  # bwrap ended after its word: the command never ran
        if self.limits is not None:  # the launcher out of the run's groups (``leave``):
            self.limits.settle()  # a command pressing on its limits never meets it there
        with suppress(BrokenPipeError):  # the command starts only on this word
            ready = ready and os.write(fds.gate_w, b"go\n") == 3
        if not ready:  # bwrap failed before the command, or ended before the word
            self.proc.wait()
            raise SetupEnded("the sandbox could not start the command "
                             f"({bwrap_said(self.proc)})")

    def _refused(self, why: str, more: int = 0) -> None:
        """A call the broker refused: said after the run, and recorded, one by one up
        to ``REFUSALS_SAID``, then counted (``more``: said once, at the end), so a
        command refused in a loop fills neither the launcher's memory nor the log."""
        self.refusals += not more
        if self.refusals > REFUSALS_SAID and not more:
            return
        why = why.replace("\n", "\\n")  # a name with a line break: still one line
        self.notices.append(f"sandbox: refused: {why}\n")
        with suppress(Exception):
            self._recorder()({"event_kind": "write_refused", "reason": why,
                              **({"repeats": more} if more else {})})

    # proxy -----------------------------------------------------------------

    def start_proxy(self) -> None:
        if self.proxy is not None or not self.listeners:
            return
        from ..proxy import refusing, serve

        try:
            record = self._recorder()
        except Exception as exc:  # no audit, no egress: every request is refused
            reason = f"{type(exc).__name__}: {exc}"
            self.notices.append(f"sandbox: the audit log is unavailable ({reason}); "
                                "all network requests are refused\n")
            record = refusing(reason)
        self.proxy = serve(self.settings.network, self.listeners[0], self.listeners[1], record,
                           f"exec-{os.getpid()}")
        self.listeners = []  # the proxy owns them now

    # waiting ---------------------------------------------------------------

    def forward(self, signum: int) -> None:
        """Send a signal to the command (the children of the sandbox's init)."""
        targets: list[int] = []
        if self.pid1 is not None:
            with suppress(OSError):
                with open(f"/proc/{self.pid1}/task/{self.pid1}/children") as fh:
                    targets = [int(x) for x in fh.read().split()]
        for pid in targets or ([self.pid1] if self.pid1 else []):
            with suppress(OSError):
                os.kill(pid, signum)

    def wait(self, timeout: float | None = None, *, lazy_proxy: bool = True,
             wake: int = -1) -> tuple[int, bool]:
        """Wait for the command; (returncode, timed_out). ``wake``: the signal wakeup
        pipe (run.supervise): a signal another thread took still wakes this one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not lazy_proxy:
            self.start_proxy()
        pidfd = os.pidfd_open(self.proc.pid)
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if wake >= 0:
                poller.register(wake, select.POLLIN)
            watching = self.proxy is None and bool(self.listeners)
            if watching:
                for s in self.listeners:
                    poller.register(s.fileno(), select.POLLIN)
            while True:
                ms = None if deadline is None else max(0, int((deadline - time.monotonic())
                                                              * 1000))
                try:
                    events = poller.poll(ms)
                except InterruptedError:
                    continue
                if not events:
                    if deadline is not None and time.monotonic() >= deadline:
                        self.kill()
                        return self.proc.wait(), True
                    continue
                fds = {fd for fd, _ in events}
                if pidfd in fds:
                    return self.proc.wait(), False
                if wake in fds:  # its handler has run by now: drain, wait on
                    with suppress(OSError):
                        os.read(wake, 512)
                if watching and fds - {wake}:  # a first connection: serve the proxy
                    for s in self.listeners:
                        poller.unregister(s.fileno())
                    watching = False
                    self.start_proxy()
        finally:
            os.close(pidfd)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # --die-with-parent and the pid namespace take the rest
            with suppress(OSError):
                os.kill(self.proc.pid, signal.SIGKILL)
        if self._pid1fd >= 0:  # the namespace's init too, without waiting for bwrap's end
            with suppress(OSError):
                signal.pidfd_send_signal(self._pid1fd, signal.SIGKILL)

    def _namespace_ended(self) -> bool:
        """Whether every process of the sandbox has ended: its init has (the kernel
        ends the rest of the pid namespace first). bwrap's own end is not enough when
        it was killed: a command still running could create what the sweep judged."""
        return self._pid1fd < 0 or exited(self._pid1fd, timeout=10.0)

    def sweep(self) -> bool:
        """Disarm protected names the command created below the writable roots;
        False when that cannot be done yet (the sandbox is still running)."""
        if self.plan is None or self.proc is None:
            return True  # nothing ran
        if self.proc.poll() is None:
            return False
        if not self.measured:
            return True  # the command never ran (see ``measured``)
        if not self._namespace_ended():
            return False  # owed: swept by a later start once it has ended
        from .sweep import quarantine, spared

        roots = [w for w in self.plan.writable_roots if os.path.isdir(w) and w != self.tmp]
        skip = spared(self.plan, self.guarded)
        ph = self.record
        self.quarantined, notes = quarantine(roots, self.before, self.home, skip,
                                             recorder=self._recorder,
                                             lock_dir=ph.dir if ph else None,
                                             own=ph.record if ph else "",
                                             repos=self._repos if self._repos is None or
                                             self.tmp is None else  # not in its own folder
                                             {k: v for k, v in self._repos.items()
                                              if not k.startswith(self.tmp + "/")})
        self.notices.extend(notes)
        return True

    def _recorder(self) -> Callable[[dict[str, Any]], None]:
        """This run's one audit recorder, for the proxy and the sweep alike: the
        caller's, or the audit folder's, opened on first use and closed in cleanup."""
        if self._record is None:
            from ..proxy import audit_recorder

            self._record, self._audit_close = audit_recorder(
                self.audit_dir or contract.default_audit_dir(self.home))
        return self._record

    def cleanup(self) -> None:
        if self._installer is not None:  # a start that failed before the hand-over
            self._installer.close()
            self._installer = None
        shared = None
        if self.broker is not None:  # the sandbox has ended: nothing left to answer
            shared = self.broker.files.shared if self.broker.files is not None else None
            self.broker.close()
            self.broker = None
        if self.binder is not None:  # the late binds' helper, done or let go
            self.binder.close()
            self.binder = None
        swept = False
        try:
            swept = self.sweep()
        except Exception as exc:  # owed: the next start does it or refuses (settle_or_refuse)
            self._sweep_failed(exc, self.plan.writable_roots if self.plan else ())
        if swept and self.owed:
            with suppress(OSError):
                os.unlink(self.owed)
            self.owed = None
        if shared is not None and (swept or not self.measured):  # the command has ended
            self.notices += [f"sandbox: {n}\n" for n in shared.settle()]
        if self._pid1fd >= 0:
            with suppress(OSError):
                os.close(self._pid1fd)
            self._pid1fd = -1
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        for s in [*self.listeners, *self.extra_listeners]:
            with suppress(OSError):
                s.close()
        self.listeners, self.extra_listeners = [], []
        if self.record is not None:
            ph, self.record = self.record, None
            try:
                self._settle_owed(ph)
            except Exception as exc:
                self._sweep_failed(exc, ())
            ph.cleanup()
        if self._audit_close is not None:
            self._audit_close()
            self._audit_close = None
        if self.relay is not None:
            self.relay.finish()
            self.relay = None
        if self.limits is not None:  # what stopped the command; its cgroup removed
            rc = self.proc.returncode if self.proc is not None else None
            self.notices += [f"sandbox: {n}\n" for n in self.limits.finish(rc)]
            self.limits = None
        if self.tmp is not None:  # after the sweep: nothing of it is left for a host tool
            private_tmp.remove(self.tmp)
            self.tmp = None
        if self.refusals > REFUSALS_SAID:
            self._refused(f"{self.refusals - REFUSALS_SAID} more calls (the first "
                          f"{REFUSALS_SAID} are said above)", self.refusals - REFUSALS_SAID)
        if self.notices:  # they quote names the command chose
            from agent_sandbox.display import printable_lines

            self.notices = [printable_lines(n.rstrip("\n")) + "\n" for n in self.notices]

    def _sweep_failed(self, exc: Exception, roots: Sequence[str]) -> None:
        """A sweep that could not finish: said, recorded, and left owed (its marker
        stays), so that no later start of this account goes ahead until it is done."""
        reason = f"{type(exc).__name__}: {exc}"
        where = f" in {', '.join(roots)}" if roots else ""
        self.notices.append(
            f"sandbox: WARNING: the check of what the command created{where} could not "
            f"finish ({reason}); no sandbox of this account starts until it does (each start "
            "tries again). Do not run git or other tools there before then.\n")
        with suppress(Exception):
            self._recorder()({"event_kind": "sweep_failed", "reason": reason,
                              "roots": list(roots)})

    def _settle_or_refuse(self, ph: RunRecord) -> None:
        """Before anything is planned: the sweeps earlier runs still owe, done now
        (what they judge must not count as already there for this run), or no start."""
        settle_or_refuse(ph, self._recorder, self.notices.append)

    def _settle_owed(self, ph: RunRecord) -> None:
        """The sweeps of runs killed before theirs, and stuck sandboxes (``reaper``)."""
        from .reaper import reap_stuck

        reap_stuck(ph.dir)
        settle_owed(ph, self._recorder, self.notices.append)
