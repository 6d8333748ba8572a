"""Connection to a local podman container with pipelining (demo and Molecule hosts).

``containers.podman.podman`` runs ``podman exec`` without ``--interactive``, so
it cannot pipeline and every module costs a temporary folder, a file copy and
four more ``podman exec`` calls. This subclass passes ``--interactive`` when
Ansible sends a module on standard input, which makes each module one
``podman exec``: the demo fleet converges several times faster.

A file sent to the container is written by one ``podman exec --interactive``
as the connection's user (``cat`` from standard input), where the collection
runs ``podman cp`` and then ``podman exec chown`` (it uses the mounted
filesystem only when no user is set, which Molecule always sets); the
container's filesystem is mounted only when a file is first fetched, not once
for every task. Everything else (options, fetching) is the collection's.

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

import shlex  # noqa: E402 - after the DOCUMENTATION string Ansible reads

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

    def _connect(self):  # type: ignore[no-untyped-def]
        # no `podman mount` here: only fetch_file reads the mounted filesystem
        self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=False):  # type: ignore[no-untyped-def]
        if not self._connected:
            self._connect()
        self._display_exec = None
        args = shlex.split(to_native(cmd, errors="surrogate_or_strict"))
        exec_args = ["exec"]
        if in_data is not None:
            exec_args.append("--interactive")
        if self.user:
            exec_args.extend(("--user", self.user))
        return self._podman(exec_args, args, in_data)

    def put_file(self, in_path, out_path):  # type: ignore[no-untyped-def]
        """Write ``in_path``'s bytes to ``out_path`` in the container, as the
        connection's user, in one ``podman exec``."""
        ConnectionBase.put_file(self, in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._container_id)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as fh:
            data = fh.read()
        exec_args = ["exec", "--interactive"]
        if self.user:
            exec_args.extend(("--user", self.user))
        rc, _, stderr = self._podman(
            exec_args, ["sh", "-c", 'cat > "$1"', "sh", to_native(out_path)], data)
        if rc != 0:
            raise AnsibleError(f"Failed to copy file from {in_path} to {out_path} in container "
                               f"{self._container_id}\n{to_native(stderr)}")

    def fetch_file(self, in_path, out_path):  # type: ignore[no-untyped-def]
        if self._mount_point is None:
            super()._connect()  # the collection's: `podman mount`
        super().fetch_file(in_path, out_path)
