"""``sandbox verify``: the isolation self-check of one host, judged from outside
the sandbox, and the drift of installed files from the render manifest.

(The audit chain's own verification is ``agent_sandbox.audit.verifier``.)

- ``checks``: each check, run against the real components, and ``run``;
- ``netlab``: the private network the domain checks reach an upstream through;
- ``drift``: installed files against the render manifest;
- ``drift_check``: ``sandbox verify --drift``, the files and the host checks, recorded
  in the host's audit and state (the scheduled job's run);
- ``web``: the web approvals service, where its unit is installed.

What the last run found is kept by ``agent_sandbox.last_verify`` (``sandbox serve``
reports it, below this package).
"""

from agent_sandbox.errors import SandboxError


class VerifyError(SandboxError):
    """A check could not be carried out; the message says why."""
