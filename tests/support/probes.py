"""Programs the tests run inside a sandbox or a container (its own Python): they look at
what they were given, then answer every GET on ``$PORT`` with it, as a served engine answers
``/v1/models``, so a launcher's readiness check passes and the test reads what was seen."""

from __future__ import annotations

SERVER = r"""
import http.server as _http, json as _json, os as _os

class _Handler(_http.BaseHTTPRequestHandler):
    def do_GET(self):
        body = _json.dumps({"object": "list", "data": [{"id": MODEL}], "seen": seen}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

_http.HTTPServer((HOST, int(_os.environ["PORT"])), _Handler).serve_forever()
"""


def answering(looks: str, *, model: str = "probe", host: str = "127.0.0.1") -> str:
    """A program: ``looks`` (top-level Python that sets ``seen``, a JSON-able value), then a
    server answering ``{"object": "list", "data": [{"id": model}], "seen": seen}``."""
    return f"MODEL = {model!r}\nHOST = {host!r}\n{looks.strip()}\n{SERVER}"
