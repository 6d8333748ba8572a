"""The broker: the launcher's answer to the calls a sandboxed command makes that
no mount or filter can judge by itself.

A seccomp filter with a listener (``notify``) hands the launcher every call
that creates, writes, renames, links or removes a name, or changes its mode or
owner (``files``), and every ``connect()`` when unix sockets are allowed by
path (``connect``). The launcher judges each by the place it really reaches
(``target`` resolves it as the caller would; ``judge`` decides) and makes it
itself, so the command's own view of the shared tree never decides anything:
another run's or the user's changes are judged the moment they matter, and a
protected name needs nothing made or walked beforehand. ``server`` is the
thread of one run.

Never: let a call through unjudged once the command may run, decide on memory
the command can still change, or act with more rights than the caller.
"""
