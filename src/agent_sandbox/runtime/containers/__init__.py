"""Containers on the gVisor kernel, driven through this user's podman service:
``service`` (the warm podman service: shared, judged before every use),
``podman`` (the Docker API client, in the fewest round trips), ``net`` (a
container's network namespace: the proxy's ports and relayed endpoints). The
gVisor backend (``backends.gvisor``) and infrastructure actions
(``actions.runner``) run their containers here. Importing this package loads
nothing.
"""
