"""The bubblewrap backend: ``sandbox exec``'s own sandbox.

- ``plan``: the pure mount planner (settings in, a ``Plan`` of mounts out), over
  a filesystem view (``fsview``: the ``FsView`` it asks, ``WalkError``, the real
  filesystem's ``RealFs``), glob rules (``globs``), and git metadata (``gitmeta``,
  git's config syntax ``gitconfig``, the repositories a brokered run made
  ``made_repos``); ``path_entries``: the caller's PATH as the planner reads it;
  ``sockets``: the unix sockets allowed by path, resolved at plan time;
- ``argv``: the plan as a ``bwrap`` command line, the start gate, the proxy
  variables; ``seccomp``: the filters; ``netns``: the proxy's listening sockets
  opened in the sandbox's network namespace; ``late_binds``: the read-only binds
  of files made after bwrap's setup; ``connect``: ssh's ProxyCommand;
- ``run``: one run, start to cleanup (``BwrapRun``); ``supervise``: a started
  run with the terminal attached, its signals forwarded; ``run_records``: the
  lock folder's run records; ``sweep``: what a run left, judged after it;
  ``owed``: the sweeps earlier runs still owe, done before a run is planned;
  ``reaper``: stuck runs ended.

It is one of the runtime's backends (``backends.bwrap``: the ``Backend``
interface over ``BwrapRun``), a peer of srt and gVisor.

The seccomp broker that judges a run's calls is a room of its own
(``runtime.broker``). Importing this package loads nothing.
"""
