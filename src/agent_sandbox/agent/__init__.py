"""The agent clients themselves (Claude Code, Codex CLI, Gemini CLI): everything
that speaks a client's own protocol, above the runtime that contains them.

``sandbox agent`` runs a whole client inside the sandbox: ``profiles`` (what
each client needs opened), ``state`` (its private state folder),
``gemini_settings`` (the checked copies of Gemini CLI's settings) and ``run``
(one run: the model endpoint and the host side of the hook relay, whose wire
format is ``hook_frames``; ``hook_relay`` is the side inside). Beside it, what
``sandbox init`` and ``sandbox verify`` know of the installed clients:
``client_checks`` (what each will really apply) and ``client_trust`` (the trust
entries ``init --trust`` writes).

Importing this package must stay free: ``hook_relay`` is on the hook's path.
"""
