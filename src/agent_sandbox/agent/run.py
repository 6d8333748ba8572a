"""Run an agent client itself inside the sandbox (``sandbox agent``).

The client process, and everything it starts (its shell tool, file writes,
fetches, the MCP servers it launches, our hooks), runs under ``BwrapRun`` with
the run's settings (``profiles.agent_settings``). Two kinds of port are
opened in the sandbox's own loopback before the client starts, besides the
proxy's:

- **the model endpoint** named with ``--model-endpoint`` when it is on loopback:
  a connection to that one port inside is joined to the same port on the host's
  loopback, and to nothing else (the proxy keeps refusing every loopback
  address, so a fleet-denied 127.0.0.1 stays denied for every other port);
- **the hook relay**: the hooks the client runs inside cannot write the audit
  log or the approval queue (both read-only in every sandbox), so the inner
  ``sandbox hook`` hands its input to this process (``hook_relay``), which
  runs the same hook on the host, in the run's working directory, and returns
  its answer. The relay computes the call's folders with the hook's own
  functions and refuses any outside the run's working directory or its
  registered repository (a forged ``cwd``, ``workspace_roots`` or shell
  ``workdir``), then pins the input's ``cwd`` to the resolved folder; it runs
  nothing but ``sandbox hook``.

Everything that arrives on these ports comes from the sandbox and is hostile:
sizes are bounded, the JSON is checked, and nothing from it picks a program,
an environment variable or a folder outside the run.

It never starts the client outside the sandbox: every failure before the
client starts raises ``SandboxStartError``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from agent_sandbox import contract
from agent_sandbox.errors import SandboxError
from agent_sandbox.runtime.bwrap.run import BwrapRun
from agent_sandbox.runtime.process import suppress

from .hook_frames import MAX_REQUEST, RELAY_ENV, RELAY_PORT, recv_frame, send_frame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from agent_sandbox.runtime.settings import Settings

    from .profiles import Endpoint

HOOK_TIMEOUT = 900.0  # the hook's own deadline is shorter; this only bounds a stuck one
MAX_HOOKS = 16  # hooks run at once for one client; more wait (the client waits for each)
AGENT_EVENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Refused(SandboxError, ValueError):
    """A relayed hook input that is not run (the reason is the hook's answer)."""


class HookRelay:
    """Runs the hooks the client asks for on the host (see the module doc)."""

    def __init__(self, cwd: str, env: dict[str, str]) -> None:
        from agent_sandbox.policy.registry import repository_of
        from agent_sandbox.state_paths import account_home

        self.cwd, self.env = os.path.realpath(cwd), env
        self.repo = repository_of(self.cwd, account_home())
        self.procs: set[subprocess.Popen[bytes]] = set()
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_HOOKS)

    def handle(self, conn: socket.socket) -> None:
        try:
            req = recv_frame(conn, MAX_REQUEST)
            with self.slots:
                answer = self.answer(req)
        except (OSError, ValueError) as exc:
            answer = {"rc": 2, "stdout": "", "stderr": f"agent-sandbox: hook relay: {exc}\n"}
        with suppress(OSError):
            send_frame(conn, answer)

    def answer(self, req: Any) -> dict[str, Any]:
        def refused(why: str) -> dict[str, Any]:
            return {"rc": 2, "stdout": "", "stderr": f"agent-sandbox: hook relay: {why}\n"}

        if not isinstance(req, dict):
            return refused("expected a JSON object")
        argv, stdin = req.get("argv"), req.get("stdin")
        if (not isinstance(argv, list) or len(argv) != 2
                or not all(isinstance(a, str) and 0 < len(a) <= 40
                           and set(a) <= AGENT_EVENT_CHARS for a in argv)
                or not isinstance(stdin, str)):
            return refused("malformed request")
        try:
            stdin = self.pin(argv[0], argv[1], stdin)
        except Refused as exc:
            return refused(str(exc))
        # isolated (``contract.hook_argv``): the run's folder, writable from inside,
        # is this process's working folder
        proc = subprocess.Popen(contract.hook_argv(sys.executable, argv[0], argv[1]),
                                cwd=self.cwd, env=self.env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        with self.lock:
            self.procs.add(proc)
        try:
            out, err = proc.communicate(stdin.encode("utf-8", "surrogatepass"),
                                        timeout=HOOK_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return refused("the hook did not answer in time")
        finally:
            with self.lock:
                self.procs.discard(proc)
        return {"rc": proc.returncode, "stdout": out.decode("utf-8", "replace"),
                "stderr": err.decode("utf-8", "replace")}

    def owns(self, folder: str) -> bool:
        """Whether ``folder`` is (symlinks resolved) inside the run's folder and in the
        same registered repository as the run, so its audit and queue are the run's."""
        from agent_sandbox.policy.registry import repository_of
        from agent_sandbox.state_paths import account_home

        if not os.path.isabs(folder):
            return False
        real = os.path.realpath(folder)
        return _inside(real, self.cwd) and repository_of(real, account_home()) == self.repo

    def pin(self, agent: str, event: str, stdin: str) -> str:
        """The hook input to run on the host, pinned to the run's folder; or
        raises ``Refused``. The folders are computed by the hook's own functions
        (``hooks.calls.cwd_of``, ``hooks.tool_call.to_call``): the call's folder and,
        for a tool call, the folder it would run in (a shell call's ``workdir``)
        must both be inside the run's folder and repository; the input's ``cwd`` is
        then set to the resolved folder, so the hook cannot pick another one."""
        from agent_sandbox.hooks.calls import BadInput, cwd_of
        from agent_sandbox.hooks.tool_call import AGENTS, PRE_EVENTS, to_call

        if agent not in AGENTS or event not in AGENTS[agent]:
            raise Refused(f"unknown hook {agent} {event}")
        try:
            data = json.loads(stdin)
        except ValueError as exc:
            raise Refused(f"the hook input is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise Refused("the hook input is not a JSON object")
        try:
            cwd = cwd_of(data, self.cwd)
        except BadInput as exc:
            raise Refused(f"malformed hook input: {exc}") from None
        if not self.owns(cwd):
            raise Refused(f"the call's folder {cwd!r} is outside this agent's folder "
                          f"{self.cwd}")
        data["cwd"] = os.path.realpath(cwd)
        data.pop("workspace_roots", None)
        if event in PRE_EVENTS:
            try:
                where = to_call(agent, event, data).cwd
            except BadInput as exc:
                raise Refused(f"malformed hook input: {exc}") from None
            if not self.owns(where):
                raise Refused(f"the call would run in {where!r}, outside this agent's "
                              f"folder {self.cwd}")
        return json.dumps(data)

    def stop(self) -> None:
        with self.lock:
            for p in self.procs:
                with suppress(OSError):
                    p.kill()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def forward(conn: socket.socket, host: str, port: int) -> None:
    """Join one connection from inside to ``host:port`` on the host (both ways)."""
    try:
        up = socket.create_connection((host, port), timeout=10)
        up.settimeout(None)
    except OSError:
        conn.close()
        return
    t = threading.Thread(target=_pipe, args=(up, conn), daemon=True)
    t.start()
    _pipe(conn, up)
    t.join()
    conn.close()
    up.close()


class Servers:
    """Accept loops for the extra ports; one thread per connection."""

    def __init__(self) -> None:
        self.socks: list[socket.socket] = []
        self.threads: list[threading.Thread] = []

    def serve(self, raw: Any, handle: Any) -> None:
        sock = socket.socket(fileno=raw.detach())  # netns hands over C-level sockets
        sock.settimeout(0.5)
        self.socks.append(sock)

        def loop() -> None:
            while sock in self.socks:
                try:
                    conn, _ = sock.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.settimeout(None)
                threading.Thread(target=self._one, args=(handle, conn), daemon=True).start()

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        self.threads.append(t)

    @staticmethod
    def _one(handle: Any, conn: socket.socket) -> None:
        try:
            handle(conn)
        finally:
            with suppress(OSError):
                conn.close()

    def stop(self) -> None:
        socks, self.socks = self.socks, []
        for s in socks:
            with suppress(OSError):
                s.close()
        for t in self.threads:
            t.join(2)


def hold_config(home: str, entries: Sequence[str]) -> list[tuple[str, bytes | None]]:
    """Create the absent config entries as what their absence means
    (``profiles.absent_default``) so a read-only mount can hold each name;
    returns what was created, for ``release_config``."""
    from .profiles import absent_default

    created: list[tuple[str, bytes | None]] = []
    for entry in entries:
        path = os.path.join(home, entry.rstrip("/"))
        if os.path.lexists(path):
            continue
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        default = absent_default(entry)
        if default is None:
            os.mkdir(path, 0o700)
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(default)
        created.append((path, default))
    return created


def release_config(created: Sequence[tuple[str, bytes | None]]) -> None:
    """Remove what ``hold_config`` created, where it is still what was created."""
    import stat

    for path, default in created:
        with suppress(OSError):
            st = os.lstat(path)
            if default is None and stat.S_ISDIR(st.st_mode):
                os.rmdir(path)  # only when empty
            elif default is not None and stat.S_ISREG(st.st_mode) and st.st_size == len(default):
                with open(path, "rb") as fh:
                    if fh.read() == default:
                        os.unlink(path)


def run_client(client: str, command: Sequence[str], base: Settings, cwd: str, home: str, *,
               endpoint: Endpoint | None = None, timeout: float | None = None,
               err: Any = None) -> int:
    """Run ``command`` (``client``'s program and its arguments) under ``base`` with
    what the client needs added (``profiles.agent_settings``) and its private state
    (``state``); return its exit status."""
    from .profiles import agent_settings, profile
    from .state import prepare

    prof = profile(client)
    settings = agent_settings(base, client, home, endpoint)
    # the client's state folders are private to sandboxed runs (``state``); the
    # host's /tmp is not the client's: its temporary files go to its private folder
    view = prepare(client, home)
    env = {**{k: v for k, v in os.environ.items() if k != prof.home_env},
           "TMPDIR": view.tmpdir}
    overlays, filters = list(view.overlays), {}
    if client == "gemini":  # hooks no user or repository setting switches off
        from . import gemini_settings

        guard = gemini_settings.prepare(home, cwd, view.held)
        overlays += guard.overlays
        filters, env = guard.filters, {**env, **guard.env}
    held = hold_config(home, [c for c in prof.config_files
                              if not any(c.startswith(d) for d in prof.private_dirs)])
    try:
        return run_agent(command, settings, cwd, home, endpoint=endpoint, timeout=timeout,
                         overlays=overlays, filters=filters, env=env, err=err)
    finally:
        release_config(held)


def run_agent(command: Sequence[str], settings: Settings, cwd: str, home: str, *,
              endpoint: Endpoint | None = None, timeout: float | None = None,
              env: dict[str, str] | None = None, opened: Sequence[str] = (),
              overlays: Sequence[tuple[str, str, str | None]] = (),
              filters: Mapping[str, Callable[[str], str]] | None = None,
              err: Any = None) -> int:
    """Run the client with the terminal attached; return its exit status."""
    from agent_sandbox.runtime.bwrap.supervise import start_holding_signals, supervise

    base = dict(os.environ if env is None else env)
    ports = [RELAY_PORT]
    if endpoint is not None and endpoint.loopback:
        ports.append(endpoint.port)
    inner_env = {**base, RELAY_ENV: str(RELAY_PORT)}
    run = BwrapRun(settings, command, cwd=cwd, home=home, env=inner_env, extra_ports=ports,
                   opened=opened, overlays=overlays, filters=filters)
    relay = HookRelay(cwd, {k: v for k, v in base.items() if k != RELAY_ENV})
    servers = Servers()
    held = start_holding_signals(run)

    def prepare() -> None:
        by_port = dict(zip(ports, run.extra_listeners, strict=True))
        run.extra_listeners = []  # served here now
        servers.serve(by_port[RELAY_PORT], relay.handle)
        if endpoint is not None and endpoint.loopback:
            target = "127.0.0.1" if endpoint.host == "localhost" else endpoint.host
            servers.serve(by_port[endpoint.port],
                          lambda c: forward(c, target, endpoint.port))

    def stop() -> None:
        servers.stop()
        relay.stop()

    return supervise(run, timeout, err, prepare=prepare, stop=stop, held=held)
