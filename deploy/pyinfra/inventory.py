"""Example pyinfra inventory: the demo fleet's containers (see inventories/demo).

    pyinfra deploy/pyinfra/inventory.py deploy/pyinfra/deploy.py

Each host names itself in the spec inventory with ``sandbox_render_host``; a real
fleet lists SSH hosts instead (``"dev-linux-01.example.com"``) with the same data.
"""

demo = [
    ("@podman/sandbox-demo-1", {"sandbox_render_host": "sandbox-demo-1"}),
    ("@podman/sandbox-demo-2", {"sandbox_render_host": "sandbox-demo-2"}),
    ("@podman/sandbox-demo-3", {"sandbox_render_host": "sandbox-demo-3"}),
]
