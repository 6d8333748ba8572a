"""Where the broker finds OpenBao: this user's private broker folder
(``contract.broker_dir``, hidden in every sandbox) holds ``address`` and
``token``, each a regular file of ours, mode 0600. Nothing else is read: the
token is never taken from the environment an agent could set."""

from __future__ import annotations

import os
import stat
from typing import Any

from .. import contract
from ..atomic_file import replace_file
from ..errors import SandboxError


class BrokerConfigError(SandboxError):
    """The broker folder is missing, or not private."""


def _read_private(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BrokerConfigError(f"{path} is missing: the action broker is not set up "
                                "(see docs/actions.md, the broker)") from None
    except OSError as exc:
        raise BrokerConfigError(f"cannot open {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise BrokerConfigError(f"{path} must be a regular file of this account with "
                                    "mode 0600")
        data = os.read(fd, 65536)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").strip()


def write_config(address: str, token: str, home: str | None = None) -> str:
    """Store the broker's address and token (0700 folder, 0600 files)."""
    folder = contract.broker_dir(home or os.path.expanduser("~"))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    for name, value in (("address", address), ("token", token)):
        replace_file(os.path.join(folder, name), (value + "\n").encode(), 0o600)
    return folder


def broker_for_user(home: str | None = None) -> Any:
    """The broker of this account: its OpenBao client and its lease journal."""
    import hvac

    from .broker import Broker

    home = home or os.path.expanduser("~")
    folder = contract.broker_dir(home)
    address = _read_private(os.path.join(folder, "address"))
    token = _read_private(os.path.join(folder, "token"))
    client = hvac.Client(url=address, token=token, timeout=10)
    return Broker(client, contract.actions_journal_dir(home))
