"""``python -m agent_sandbox``: the same entry point as the ``sandbox`` command."""

from agent_sandbox.cli.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
