"""Connection to a local podman container with pipelining (demo and Molecule hosts).

``containers.podman.podman`` runs ``podman exec`` without ``--interactive``, so
it cannot pipeline and every module costs a temporary folder, a file copy and
four more ``podman exec`` calls. This subclass passes ``--interactive`` when
Ansible sends a module on standard input, which makes each module one
``podman exec``: the demo fleet converges several times faster.

A file sent to the container is written by one such command as the
connection's user (``cat`` from standard input), where the collection runs
``podman cp`` and then ``podman exec chown`` (it uses the mounted filesystem
only when no user is set, which Molecule always sets); the container's
filesystem is mounted only when a file is first fetched, not once for every
task. Everything else (options, fetching) is the collection's.

Where podman runs the container with runc as root (the demo and Molecule
hosts), a command runs as ``runc exec`` on the container podman made, named by
the ID podman reports for it: runc starts it from the container's own process
settings (namespaces, cgroups, capabilities, environment, working folder), as
``podman exec`` does, without podman's exec-session bookkeeping and conmon,
which cost four times as much processor time per command (about 150 ms against
40 ms; Ansible makes a connection for every task, and each asks podman for the
container's ID once, about 40 ms more). Any other setup (another runtime,
another user, extra podman arguments, not root) takes ``podman exec``.

It must never run anything outside the container it is pointed at.
"""

from __future__ import annotations

DOCUMENTATION = """
name: agent_sandbox_podman
short_description: Run tasks in podman containers, with pipelining
description:
  - The containers.podman.podman connection with pipelining support
    (C(podman exec --interactive) when a module arrives on standard input).
author: agent-sandbox maintainers
extends_documentation_fragment:
  - connection_pipelining
options:
  remote_addr:
    description: The ID or name of the container.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_podman_host
  remote_user:
    description: User to run as inside the container.
    vars:
      - name: ansible_user
    env:
      - name: ANSIBLE_REMOTE_USER
    ini:
      - section: defaults
        key: remote_user
  podman_extra_args:
    description: Extra arguments for every podman command.
    default: ''
    type: str
    vars:
      - name: ansible_podman_extra_args
    env:
      - name: ANSIBLE_PODMAN_EXTRA_ARGS
  podman_executable:
    description: The podman executable.
    default: podman
    type: str
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
"""

import os  # noqa: E402 - after the DOCUMENTATION string Ansible reads
import shlex  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402

from ansible.errors import AnsibleError  # noqa: E402
from ansible.module_utils.common.text.converters import to_bytes, to_native  # noqa: E402
from ansible.plugins.connection import ConnectionBase  # noqa: E402
from ansible.utils.display import Display  # noqa: E402
from ansible_collections.containers.podman.plugins.connection.podman import (  # noqa: E402
    Connection as PodmanConnection,
)

display = Display()


class Connection(PodmanConnection):
    """containers.podman.podman with ``podman exec --interactive`` for pipelining."""

    transport = "agent_sandbox_podman"
    has_pipelining = True
    _runc_prefix: list[str] | None = None
    _runc_checked = False

    def _connect(self):  # type: ignore[no-untyped-def]
        # no `podman mount` here: only fetch_file reads the mounted filesystem
        self._connected = True
        return self

    def _runc(self) -> list[str] | None:
        """``runc exec``'s argv up to the command for this container, or None
        when the command must go through ``podman exec`` (asked once)."""
        if not self._runc_checked:
            self._runc_checked = True
            self._runc_prefix = self._find_runc()
        return self._runc_prefix

    def _find_runc(self) -> list[str] | None:
        if (os.geteuid() != 0 or self.get_option("podman_extra_args")
                or (self.user or "root") not in ("root", "0")):
            return None
        runc = shutil.which("runc")
        rc, out, _ = self._podman(["inspect", "--format", "{{.Id}} {{.OCIRuntime}}"])
        fields = to_native(out, errors="surrogate_or_strict").split()
        if rc != 0 or runc is None or len(fields) != 2 or fields[1] != "runc":
            return None
        container_id = fields[0]
        # podman runs runc as root with runc's own state folder: runc must know
        # this container there, or the command goes through podman
        state = os.path.join("/run/runc", container_id, "state.json")
        if len(container_id) != 64 or not os.path.isfile(state):
            return None
        display.vvv(f"EXEC via runc, container {container_id}", host=self._container_id)
        # as `podman exec --user root`, whatever user the image names
        user = ["--user", "0:0"] if self.user else []
        return [runc, "--root", "/run/runc", "exec", *user, container_id]

    def _exec(self, args, in_data, interactive):  # type: ignore[no-untyped-def]
        """Run ``args`` in the container as the connection's user:
        (rc, stdout, stderr)."""
        prefix = self._runc()
        if prefix is None:
            exec_args = ["exec"]
            if interactive:
                exec_args.append("--interactive")
            if self.user:
                exec_args.extend(("--user", self.user))
            return self._podman(exec_args, args, in_data)
        argv = [to_bytes(a, errors="surrogate_or_strict") for a in (*prefix, *args)]
        display.vvv(f"RUN {argv}", host=self._container_id)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        stdout, stderr = proc.communicate(input=in_data)
        return proc.returncode, stdout, stderr

    def exec_command(self, cmd, in_data=None, sudoable=False):  # type: ignore[no-untyped-def]
        if not self._connected:
            self._connect()
        self._display_exec = None
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        return self._exec(args, in_data, in_data is not None)

    def put_file(self, in_path, out_path):  # type: ignore[no-untyped-def]
        """Write ``in_path``'s bytes to ``out_path`` in the container, as the
        connection's user, in one command."""
        ConnectionBase.put_file(self, in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._container_id)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as fh:
            data = fh.read()
        rc, _, stderr = self._exec(["sh", "-c", 'cat > "$1"', "sh", to_native(out_path)],
                                   data, True)
        if rc != 0:
            raise AnsibleError(f"Failed to copy file from {in_path} to {out_path} in container "
                               f"{self._container_id}\n{to_native(stderr)}")

    def fetch_file(self, in_path, out_path):  # type: ignore[no-untyped-def]
        if self._mount_point is None:
            super()._connect()  # the collection's: `podman mount`
        super().fetch_file(in_path, out_path)
