"""The pool's nginx router (runner/launchers/slurm_task.py `nginx_argv`, docs/pipeline.md
"The router"), the real Debian nginx with the launcher's config, in front of a worker that
would close a kept-alive connection when the next request arrives on it, without answering.

That is what llama.cpp's server does after every streamed response (it closes the
connection while its headers say keep-alive); on a busy node nginx sends the next request
before it sees the close. The worker here makes that race certain: it answers the first
request on each connection and drops any later one unanswered. While the router kept
connections to the workers alive, such a request was a 502 in the measurement
(tests/slurm/test_e2e_slurm.py failed on it in CI); it now opens one connection per request.
A worker that refuses a connection is skipped and logged; a worker's own HTTP error is
passed on and never retried."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from runner.launchers.slurm_task import nginx_argv


class DroppingWorker:
    """An HTTP/1.1 worker on 127.0.0.1: the first request on a connection gets a complete
    keep-alive response (`status`); a second request on the same connection is read and
    the connection closed with no answer."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.answered: list[str] = []  # the X-Request-Id of each answered request
        self.dropped: list[str] = []
        self.connection = ""  # the Connection header of the last request
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_request(conn: socket.socket, buf: bytes) -> tuple[dict[str, str], bytes] | None:
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        headers = {}
        for line in head.decode().split("\r\n")[1:]:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return headers, rest[length:]

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            first = self._read_request(conn, b"")
            if first is None:
                return
            headers, rest = first
            rid = headers.get("x-request-id", "")
            self.connection = headers.get("connection", "")
            body = json.dumps({"port": self.port, "request": rid}).encode()
            reason = {200: "OK", 503: "Service Unavailable"}[self.status]
            with self.lock:  # before the answer: the client may look as soon as it has it
                self.answered.append(rid)
            conn.sendall(
                f"HTTP/1.1 {self.status} {reason}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n".encode()
                + body
            )
            second = self._read_request(conn, rest)
            if second is not None:
                with self.lock:
                    self.dropped.append(second[0].get("x-request-id", ""))
            # closed here, unanswered

    def close(self) -> None:
        self.sock.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def router(tmp_path: Path):
    started: list[tuple[subprocess.Popen[bytes], list[DroppingWorker]]] = []

    def start(workers: list[DroppingWorker], refusing: Sequence[int] = ()) -> tuple[str, Path]:
        """nginx over `refusing` (ports nothing listens on) first, then `workers`."""
        port = free_port()
        upstreams = [f"127.0.0.1:{p}" for p in (*refusing, *(w.port for w in workers))]
        argv = nginx_argv(tmp_path, "router", port, upstreams, log_stem="fe-0")
        process = subprocess.Popen(argv, stderr=subprocess.PIPE)
        started.append((process, workers))
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"nginx did not start: {process.stderr.read()!r}"
                    ) from None
                time.sleep(0.05)
        return f"http://127.0.0.1:{port}", tmp_path / "logs"

    yield start
    for process, workers in started:
        process.terminate()
        process.wait(timeout=30)
        for w in workers:
            w.close()


def post(url: str, rid: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "x" * 5000}]}
        ).encode(),
        headers={"Content-Type": "application/json", "X-Request-Id": rid},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


@pytest.mark.parametrize("n_workers", [1, 2])
def test_no_request_lands_on_a_connection_the_worker_drops(router, n_workers):
    """With keep-alive to the workers (the config before), the second request already went
    to a cached connection and came back 502, with one worker or two."""
    workers = [DroppingWorker() for _ in range(n_workers)]
    url, logs = router(workers)
    got = [post(url, f"r{i}") for i in range(8)]
    assert [status for status, _ in got] == [200] * 8
    assert [body["request"] for _, body in got] == [f"r{i}" for i in range(8)]
    assert sorted(rid for w in workers for rid in w.answered) == [f"r{i}" for i in range(8)]
    assert [rid for w in workers for rid in w.dropped] == []  # never a second request
    # each request asked the worker to close the connection (the close is the server's)
    assert {w.connection for w in workers} == {"close"}
    # round-robin still reaches every worker
    assert all(w.answered for w in workers)
    assert (logs / "fe-0.router-error.log").exists()
    assert not (logs / "fe-0.router-retries.log").read_text()


def test_a_worker_that_refuses_is_skipped_and_the_request_logged(router):
    gone = free_port()  # nothing listens there
    alive = DroppingWorker()
    url, logs = router([alive], refusing=[gone])
    got = [post(url, f"s{i}") for i in range(4)]
    assert [status for status, _ in got] == [200] * 4
    assert sorted(alive.answered) == ["s0", "s1", "s2", "s3"]
    lines = (logs / "fe-0.router-retries.log").read_text().splitlines()
    # the requests round-robin sent to the refusing worker first: named, with both tries
    assert lines and all(f"127.0.0.1:{gone}, 127.0.0.1:{alive.port}" in line for line in lines)
    assert all("statuses=[502, 200]" in line for line in lines)
    assert {line.rsplit("x_request_id=", 1)[1] for line in lines} <= {"s0", "s1", "s2", "s3"}


def test_a_workers_own_http_error_is_passed_on_not_retried(router):
    workers = [DroppingWorker(status=503), DroppingWorker(status=503)]
    url, logs = router(workers)
    status, _ = post(url, "e0")
    assert status == 503
    assert sum(len(w.answered) for w in workers) == 1  # one worker asked, once
    assert not (logs / "fe-0.router-retries.log").read_text()
