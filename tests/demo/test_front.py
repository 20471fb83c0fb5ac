"""The embedded profile's front (demo/front.py, docs/security.md "Slow clients"): Debian's
nginx before gunicorn, as `make demo` serves the site.

The hostile finding: 12 connections that each sent one header line every 3 s held every
gunicorn thread and timed the whole site out. Here the same connections go to the front and
the site still answers; the same against gunicorn alone (two sync workers, so two slow
clients are enough) leave it unable to answer, which is what the front is for."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from demo.front import start_front
from tests.services import wait_port
from tests.support.llamacpp import free_port
from tests.support.webserver import start_gunicorn
from tests.support.workers import worker_env

pytestmark = pytest.mark.django_db

SLOW_CLIENTS = 12


def _slow_clients(port: int, count: int) -> list[socket.socket]:
    """Connections that sent a request line and one header, and nothing since."""
    held = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port), timeout=10)
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        held.append(conn)
    return held


def test_slow_clients_hold_the_front_not_the_site(tmp_path):
    site = start_gunicorn(tmp_path / "gunicorn.log", workers=2, env=worker_env())
    port = free_port()
    upstream = int(site.url.rsplit(":", 1)[1])
    front = start_front(
        host="127.0.0.1",
        port=port,
        upstream_port=upstream,
        prefix=tmp_path / "front",
        log=tmp_path / "front.log",
    )
    assert front is not None, "nginx is installed by `make test` (Makefile: nginx)"
    held: list[socket.socket] = []
    try:
        wait_port(port, 30, "the nginx front")
        held = _slow_clients(port, SLOW_CLIENTS)
        url = f"http://127.0.0.1:{port}/health?format=json"
        for _ in range(3):
            with urllib.request.urlopen(url, timeout=60) as response:
                assert response.status == 200
        # gunicorn alone: two slow clients take both sync workers, and a request waits
        held += _slow_clients(upstream, 2)
        with pytest.raises(TimeoutError):
            urllib.request.urlopen(f"{site.url}/health?format=json", timeout=5)
    finally:
        for conn in held:
            conn.close()
        front.terminate()
        front.wait(timeout=30)
        site.stop()


def test_a_body_past_the_buffer_reaches_the_site_from_a_private_folder(tmp_path):
    """A request body too large for nginx's memory goes to its temp folder under the
    prefix; under a folder only its owner may enter (pytest's tmp_path, a clone in a 0700
    home) the front's workers must still write it, or every runner upload is a 500."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    site = start_gunicorn(tmp_path / "gunicorn.log", workers=1, env=worker_env())
    port = free_port()
    front = start_front(
        host="127.0.0.1",
        port=port,
        upstream_port=int(site.url.rsplit(":", 1)[1]),
        prefix=private / "front",
        log=tmp_path / "front.log",
    )
    assert front is not None, "nginx is installed by `make test` (Makefile: nginx)"
    try:
        wait_port(port, 30, "the nginx front")
        body = b"x" * (1 << 20)  # past client_body_buffer_size (16 KiB): written to a file
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/runner/runs/1/blobs", data=body, method="PUT"
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        # the site's own answer (no run token: 4xx), not nginx's 500 for an unwritable body
        assert 400 <= refused.value.code < 500, (
            refused.value.code,
            (private / "front" / "error.log").read_text(errors="replace")[-2000:],
        )
    finally:
        front.terminate()
        front.wait(timeout=30)
        site.stop()
