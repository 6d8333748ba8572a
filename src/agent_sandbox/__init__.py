"""agent-sandbox: provision and enforce sandboxes for AI coding agents.

One declarative spec (``agent_sandbox.spec``), one pure renderer
(``agent_sandbox.render``), and a small runtime on each host.
"""

__version__ = "0.1.0"
