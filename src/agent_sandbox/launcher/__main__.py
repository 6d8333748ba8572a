"""``python -m agent_sandbox.launcher install BINDIR``."""

from agent_sandbox.launcher import main

raise SystemExit(main())
