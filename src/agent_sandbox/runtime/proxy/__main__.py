"""``python -I -m agent_sandbox.runtime.proxy``: the standalone service (``service.py``)."""

from .service import main

raise SystemExit(main())
