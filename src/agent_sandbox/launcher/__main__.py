"""``python -m agent_sandbox.launcher install|ensure BINDIR``."""

from agent_sandbox.launcher import main

raise SystemExit(main())
