"""``sandbox verify``'s check of the web approvals service, run only where its unit is
installed (``contract.WEB_UNIT``; the spec's ``platforms.linux.web``, off by default).

Judged from the host: the unit's ``ExecStart`` listens on loopback; the service answers
there and refuses a call without the token (401) and with a wrong one; the token file of
the unit's account is that account's alone (0600, in a 0700 folder) and hidden in every
sandbox (``contract.private_paths``). It never reads the token itself and never passes
what it could not check.
"""

from __future__ import annotations

import os
import shlex
import stat

from agent_sandbox import contract

from . import VerifyError

TIMEOUT = 5.0


def unit_options(text: str) -> tuple[str, str, int]:
    """(User, --host, --port) of a rendered web unit (pure)."""
    user, argv = "", []
    for line in text.splitlines():
        if line.startswith("User="):
            user = line[len("User="):].strip()
        elif line.startswith("ExecStart="):
            argv = shlex.split(line[len("ExecStart="):])
    if "serve" not in argv:
        raise VerifyError("the web unit's ExecStart does not run `sandbox serve`")
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else contract.WEB_PORT
    return user, host, port


def answer(host: str, port: int, token: str | None) -> int:
    """The HTTP status of ``GET /api/status`` on the service."""
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
    try:
        conn.request("GET", "/api/status",
                     headers={"Authorization": f"Bearer {token}"} if token else {})
        return conn.getresponse().status
    except OSError as exc:
        raise VerifyError(f"the web service does not answer on {host}:{port}: {exc}") from None
    finally:
        conn.close()


def check_web_service(unit: str | None = None) -> str:
    from agent_sandbox.web.server import is_loopback

    with open(unit or contract.WEB_UNIT, encoding="utf-8") as fh:
        user, host, port = unit_options(fh.read())
    if not is_loopback(host):
        raise VerifyError(f"the web unit listens on {host}, not on loopback")
    for token in (None, "not-the-token-" + "0" * 32):
        status = answer(host, port, token)
        if status != 401:
            raise VerifyError(f"the web service answered {status} to a call "
                              f"{'without a token' if token is None else 'with a wrong token'}")
    import pwd

    try:
        account = pwd.getpwnam(user)
    except KeyError:
        raise VerifyError(f"the web unit's account {user!r} does not exist") from None
    web = contract.web_dir(account.pw_dir)
    token_file = os.path.join(web, "token")
    try:
        folder, st = os.lstat(web), os.lstat(token_file)
    except OSError as exc:
        raise VerifyError(f"no token file for {user}: {exc}") from None
    if stat.S_IMODE(st.st_mode) != 0o600 or st.st_uid != account.pw_uid or \
            not stat.S_ISREG(st.st_mode) or folder.st_mode & 0o077:
        raise VerifyError(f"{token_file} is not {user}'s alone (mode "
                          f"{stat.S_IMODE(st.st_mode):04o}, folder "
                          f"{stat.S_IMODE(folder.st_mode):04o})")
    if os.path.abspath(web) not in contract.private_paths(account.pw_dir):
        raise VerifyError(f"{web} is not among the folders every sandbox hides")
    return (f"`sandbox serve` as {user} on {host}:{port} refuses calls without its token; "
            f"{token_file} is 0600 and hidden in every sandbox")
