"""The ``sandbox`` command line."""
