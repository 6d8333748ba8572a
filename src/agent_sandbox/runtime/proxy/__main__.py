"""``python -I -m agent_sandbox.runtime.proxy``: the standalone service (``service.py``)."""

from .standalone import main

raise SystemExit(main())
