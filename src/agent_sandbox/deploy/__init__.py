"""Front ends that install rendered artifacts on hosts from the controller.

``wheelhouse`` builds the offline package set a host's virtualenv is installed
from; ``pyinfra`` is the pyinfra deploy. Both run on the controller only and
never touch the controller's own configuration.
"""
