"""A bounded HTTP GET for the small documents a server publishes (/v1/models, /metrics,
/props, /version), optionally through a connect function: a sandboxed server's loopback is
reached through its network namespace (docs/security.md "Sandbox"). Used by the engine side
(the /metrics scrape of the speculative-decoding check; the context pre-flight's /v1/models,
/props and its POSTs to /tokenize, through `http_request`) and by the pool host's launchers."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable


class ResponseTooLarge(ValueError):
    """The server's body was larger than the reader allows."""


Connect = Callable[[str, int, float | None], socket.socket]


class _ConnectedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, timeout: float, connect: Connect) -> None:
        super().__init__(host, port, timeout=timeout)
        self._open = connect

    def connect(self) -> None:
        self.sock = self._open(self.host, self.port, self.timeout)


HTTP_GET_MAX_BYTES = 1 << 20  # 1 MiB: a server's /v1/models, /metrics, /props, /version


def _capped(body: bytes, url: str, max_bytes: int) -> bytes:
    if len(body) > max_bytes:
        raise ResponseTooLarge(f"{url}: the response body is larger than {max_bytes} bytes")
    return body


def http_get(
    url: str,
    *,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    connect: Connect | None = None,
    max_bytes: int = HTTP_GET_MAX_BYTES,
) -> bytes:
    """GET `url` and return the body (urllib's errors for a failed status); through
    `connect` when given (a sandbox's network namespace). The served process is the vendor's:
    at most `max_bytes` are read, a longer body is ResponseTooLarge."""
    return http_request(
        "GET", url, timeout_s=timeout_s, headers=headers, connect=connect, max_bytes=max_bytes
    )


def http_request(
    method: str,
    url: str,
    *,
    timeout_s: float,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    connect: Connect | None = None,
    max_bytes: int = HTTP_GET_MAX_BYTES,
) -> bytes:
    """`http_get` for any method, with an optional request body (the context pre-flight
    POSTs to a server's /tokenize: agentperf/engine/preflight.py)."""
    if connect is None:
        request = urllib.request.Request(url, data=body, headers=headers or {}, method=method)
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return _capped(bytes(response.read(max_bytes + 1)), url, max_bytes)
    parts = urllib.parse.urlsplit(url)
    conn = _ConnectedHTTP(parts.hostname or "127.0.0.1", parts.port or 80, timeout_s, connect)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path or "/", body=body, headers=headers or {})
        response = conn.getresponse()
        content = response.read(max_bytes + 1)
        if response.status >= 400:
            raise urllib.error.HTTPError(
                url, response.status, response.reason, response.headers, None
            )
        return _capped(content, url, max_bytes)
    finally:
        conn.close()
