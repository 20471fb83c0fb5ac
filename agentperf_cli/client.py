"""A small client of the vendor API (docs/api.md), on the standard library's urllib."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from agentperf_cli import __version__
from agentperf_cli.settings import CliError, Target

TIMEOUT_S = 60.0
USER_AGENT = f"agentperf-cli/{__version__}"


class ApiError(CliError):
    """A 4xx/5xx answer in the API's error shape: code, message and fields by path."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: dict[str, list[str]],
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}", exit_code=2)
        self.status = status
        self.retry_after = retry_after  # seconds, from a 429's Retry-After
        self.code = code
        self.api_message = message
        self.fields = fields


class Unreachable(CliError):
    """No HTTP answer at all (refused, DNS, timeout, TLS)."""


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _error_from(status: int, raw: bytes, retry_after: float | None = None) -> ApiError:
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        body = {}
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        fields = error.get("fields") or {}
        return ApiError(
            status,
            str(error.get("code") or "error"),
            str(error.get("message") or ""),
            {str(k): [str(m) for m in v] for k, v in fields.items()}
            if isinstance(fields, dict)
            else {},
            retry_after,
        )
    text = raw[:200].decode("utf-8", "replace").strip() or "no body"
    return ApiError(status, "server_error" if status >= 500 else "error", text, {}, retry_after)


class Api:
    def __init__(self, target: Target, *, need_token: bool = True) -> None:
        if need_token and not target.token:
            raise CliError("not logged in: run `agentperf login --url URL` or set AGENTPERF_TOKEN")
        self.url = target.url
        self.token = target.token

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> tuple[Any, dict[str, str]]:
        """The decoded JSON answer and its headers; ApiError on 4xx/5xx."""
        all_headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            all_headers["Content-Type"] = content_type
        all_headers.update(headers or {})
        url = f"{self.url}/api/v1/{path.lstrip('/')}"
        req = urllib.request.Request(url, data=body, method=method, headers=all_headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as response:
                raw = response.read()
                answer_headers = {k.lower(): v for k, v in response.headers.items()}
        except urllib.error.HTTPError as exc:
            wait = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            raise _error_from(exc.code, exc.read(), wait) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach the API at {self.url}: {reason}") from None
        try:
            return (json.loads(raw) if raw else {}), answer_headers
        except ValueError:
            raise CliError(
                f"the API at {self.url} answered {url} with something not JSON"
            ) from None

    def get(self, path: str) -> Any:
        return self.request("GET", path)[0]

    def post_json(self, path: str, data: dict[str, Any]) -> Any:
        return self.request("POST", path, body=json.dumps(data).encode())[0]


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")
