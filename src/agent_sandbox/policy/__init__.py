"""The policy engine: classifies one agent tool call as allow, observe,
escalate or deny.

- ``shell``: a stdlib-only shell parser that finds every command a command
  line would run; ``shell_lexer`` reads its words, operators and redirections.
- ``engine``: ``Policy`` (built from the effective policy JSON) and
  ``Policy.classify(call) -> Decision``; pure apart from resolving symlinks and
  reading git remotes.
- ``decision``: ``Call`` (one tool call, agent-neutral), ``Decision`` (the
  strictest verdict of its parts), ``PolicyError``.
- ``document``: the policy document's shape, checked when it loads.
- ``commandline``: one shell command line judged segment by segment.
- ``reached_hosts``: the host of a fetch URL, and every host a shell command reaches.
- ``remember``: remembered decisions (``sandbox approve --always``).
- ``modelled``: the commands the engine fully models, with every flag it knows;
  nothing else is ever allowed.
- ``self_protection``: the self-protected paths (from ``agent_sandbox.protected``),
  re-applied at every policy load.
- ``registry``: the repositories ``sandbox init`` connected; the only ones whose
  policy a hook applies.

Nothing here may ever answer allow for input it does not understand.
"""
