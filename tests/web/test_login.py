"""The dashboard's login by challenge and answer against a real ``sandbox serve``: the
token itself is never accepted from a page (not as the WebSocket's first message), the
server proves it holds the token before the page answers, a proof is good once, for
its own origin, and a session lives only as long as the process that opened it."""

from __future__ import annotations

import json
import secrets
import socket
from pathlib import Path

import pytest
import requests
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agent_sandbox.web.login import CLIENT, SERVER, own_origin

from .conftest import Server, login, mac, start_server


def challenge(server: Server, origin: str | None = None) -> tuple[str, str, str]:
    nonce = secrets.token_urlsafe(32)
    r = requests.post(server.url + "api/login/challenge", timeout=10, json={
        "origin": origin or server.url.rstrip("/"), "client_nonce": nonce})
    assert r.status_code == 200, r.text
    return nonce, r.json()["server_nonce"], r.json()["server_proof"]


def answer(server: Server, sn: str, proof: str) -> requests.Response:
    return requests.post(server.url + "api/login", json={"server_nonce": sn, "proof": proof},
                         timeout=10)


def status(server: Server, auth: str) -> int:
    return requests.get(server.url + "api/status", headers={"Authorization": auth},
                        timeout=10).status_code


def test_a_session_by_challenge_and_answer(server: Server) -> None:
    sid = login(server)  # checks the server's proof before answering
    assert sid and server.token not in sid
    assert status(server, f"Session {sid}") == 200
    assert status(server, f"Session {sid[:-1]}x") == 401
    assert status(server, f"Bearer {sid}") == 401  # a session is no token
    with connect(server.ws_url) as ws:
        ws.send(json.dumps({"session": sid}))
        assert json.loads(ws.recv(timeout=10))["hello"]["user"]


def test_the_token_itself_never_opens_the_websocket_from_a_page(server: Server) -> None:
    with connect(server.ws_url) as ws:  # what the dashboard used to send: refused now
        ws.send(json.dumps({"token": server.token}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_a_proof_is_refused_when_wrong_reused_or_for_another_origin(server: Server) -> None:
    origin = server.url.rstrip("/")
    nonce, sn, _ = challenge(server)
    wrong = mac("w" * 43, CLIENT, origin, sn, nonce)
    assert answer(server, sn, wrong).status_code == 401
    good = mac(server.token, CLIENT, origin, sn, nonce)
    assert answer(server, sn, good).status_code == 401  # that challenge is used up
    # the server's own proof never serves as the page's (another label)
    nonce, sn, server_proof = challenge(server)
    assert answer(server, sn, server_proof).status_code == 401
    # control: a right proof over a fresh challenge opens a session, once
    nonce, sn, _ = challenge(server)
    good = mac(server.token, CLIENT, origin, sn, nonce)
    r = answer(server, sn, good)
    assert r.status_code == 200 and status(server, f"Session {r.json()['session']}") == 200
    assert answer(server, sn, good).status_code == 401
    # a page of another origin (another port) cannot even ask
    port = int(origin.rsplit(":", 1)[1])
    for other in (f"http://127.0.0.1:{port + 1}", f"https://127.0.0.1:{port}",
                  "http://evil.example", f"{origin}/x", "null"):
        r = requests.post(server.url + "api/login/challenge", timeout=10, json={
            "origin": other, "client_nonce": secrets.token_urlsafe(32)})
        assert r.status_code == 403, (other, r.status_code)


def test_a_session_dies_with_the_server_that_opened_it(repo: Path) -> None:
    first = start_server(repo)
    port = int(first.url.rstrip("/").rsplit(":", 1)[1])
    try:
        sid = login(first)
        assert status(first, f"Session {sid}") == 200
    finally:
        first.stop()
    again = start_server(repo, port=port)  # the same port, a new process
    try:
        assert status(again, f"Session {sid}") == 401
        with connect(again.ws_url) as ws:
            ws.send(json.dumps({"session": sid}))
            with pytest.raises(ConnectionClosed):
                ws.recv(timeout=10)
        assert status(again, f"Session {login(again)}") == 200  # control
    finally:
        again.stop()


def test_origins_of_the_server() -> None:
    assert own_origin("http://127.0.0.1:8765", "127.0.0.1", 8765, False)
    assert own_origin("http://localhost:8765", "127.0.0.1", 8765, False)
    assert own_origin("http://[::1]:8765", "::1", 8765, False)
    assert not own_origin("http://127.0.0.1:8766", "127.0.0.1", 8765, False)
    assert not own_origin("https://127.0.0.1:8765", "127.0.0.1", 8765, False)
    assert not own_origin("http://10.0.0.1:8765", "127.0.0.1", 8765, False)
    assert not own_origin("http://127.0.0.1:8765/", "127.0.0.1", 8765, False)
    assert not own_origin("http://127.0.0.1:99999", "127.0.0.1", 8765, False)
    assert own_origin("https://10.0.0.1", "10.0.0.1", 443, True)
    assert not own_origin("https://example.test", "10.0.0.1", 443, True)
    assert own_origin("https://approvals.example.test", "127.0.0.1", 8765, False,
                      "https://approvals.example.test/")
    assert own_origin("http://192.0.2.7:8765", "0.0.0.0", 8765, False)


def test_the_listening_port_is_the_servers_alone(server: Server) -> None:
    """While the server runs, nobody else can take its port (it is bound without
    SO_REUSEPORT): the port squat needs the server gone, and then its sessions are gone
    too."""
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        with pytest.raises(OSError):
            s.bind(("127.0.0.1", port))
    finally:
        s.close()
    assert SERVER != CLIENT
