"""`agentperf verify` downloads only what an http(s) URL serves (issue 36 hostile finding):
a hostile server that names file:///etc/hostname for a raw file, or redirects to it, gets
nothing copied into the receipt folder."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agentperf_cli.settings import CliError
from agentperf_cli.verify import _download


@pytest.fixture
def hostile() -> Iterator[str]:
    class Hostile(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/ok":
                body = b"raw records"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            target = "file:///etc/hostname" if self.path == "/to-file" else "ftp://127.0.0.1/x"
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_http_url_is_downloaded(hostile: str, tmp_path: Path) -> None:
    _download(f"{hostile}/ok", tmp_path / "trial-001.jsonl.gz")
    assert (tmp_path / "trial-001.jsonl.gz").read_bytes() == b"raw records"


@pytest.mark.parametrize("url", ["file:///etc/hostname", "ftp://127.0.0.1/x", "data:,secret"])
def test_a_url_of_another_scheme_is_refused_and_nothing_is_written(url: str, tmp_path) -> None:
    with pytest.raises(CliError, match="not an http\\(s\\) URL"):
        _download(url, tmp_path / "trial-001.jsonl.gz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["/to-file", "/to-ftp"])
def test_a_redirect_to_another_scheme_is_refused(hostile: str, path: str, tmp_path) -> None:
    with pytest.raises(CliError, match="download of trial-001.jsonl.gz failed"):
        _download(f"{hostile}{path}", tmp_path / "trial-001.jsonl.gz")
    assert list(tmp_path.iterdir()) == []
