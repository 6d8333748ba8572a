"""The policy engine: classifies one agent tool call as allow, observe,
escalate or deny.

- ``shell``: a stdlib-only shell tokenizer that finds every command a command
  line would run.
- ``engine``: ``Policy`` (built from the effective policy JSON) and
  ``Policy.classify(call) -> Decision``; pure apart from resolving symlinks and
  reading git remotes.
- ``protect``: the self-protected paths, re-applied at every policy load.
- ``remember``: "always allow this exact command in this repository" entries.

Nothing here may ever answer allow for input it does not understand.
"""
