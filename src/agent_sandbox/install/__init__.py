"""Install steps that run on a host, one implementation for every front end.

The ``sandbox_runtime`` and ``sandbox_agents`` roles and the pyinfra deploy
call these through ``sandbox install ...`` instead of carrying shell of their
own: ``proxy_service`` runs the rendered egress-proxy unit (systemd, or a
detached process where there is no init system), ``apparmor`` loads the
bubblewrap profile where AppArmor restricts user namespaces, and ``repository`` connects
one repository (``sandbox init`` as its owner), and ``rendered_files`` installs
the rendered files themselves (run on the host by the roles' module and by the
pyinfra deploy; standard library only). Each step is idempotent and says whether
it changed anything, so a second run reports ``unchanged``.

These modules never render anything: they act on files the front end has
already installed, and read only files that root owns.
"""
