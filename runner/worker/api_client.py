"""The runner API as the pool worker sees it: JSON over HTTP with the run's token.

Every call carries the run token (`Authorization: Bearer`) and, once the run started, the
attempt number (`X-Run-Attempt`): the web side refuses writes from an attempt that a newer
one replaced (409), so a stale worker stops instead of writing twice.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from agentperf.contract import TOKEN_KEY_ENV, ApiRef, Contract, UploadGrant, run_token

TRANSIENT_STATUSES = (502, 503, 504)
# The longest Retry-After honoured; a larger one waits this long.
MAX_RETRY_AFTER_S = 60.0
# How a run ended, on a refusal because it ended (runs/api.py RUN_STATUS_HEADER).
RUN_STATUS_HEADER = "X-Run-Status"


class RunnerApiError(Exception):
    """A call the web side refused; `status` is the HTTP status (0: never reached it)."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"runner API {status}: {message}")
        self.status = status
        self.body = body or {}


class RunSuperseded(RunnerApiError):
    """Another attempt owns the run now, or the run is finished or cancelled: stop quietly.

    ``run_status``: how the run ended on the web side (done, failed, cancelled) when the
    refusal says so; None when another attempt still owns it."""

    def __init__(
        self,
        status: int,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        run_status: str | None = None,
    ) -> None:
        super().__init__(status, message, body)
        self.run_status = run_status


def retry_after_s(error: urllib.error.HTTPError) -> float | None:
    """The answer's Retry-After in seconds (the delay form; a date is not sent by the web
    side, core/contention.py), at most MAX_RETRY_AFTER_S; None when absent or unreadable."""
    raw = error.headers.get("Retry-After") if error.headers is not None else None
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return min(value, MAX_RETRY_AFTER_S) if value >= 0 else None


def token_key() -> str:
    """This pool host's key for deriving run tokens (docs/security.md "Run tokens and
    upload grants")."""
    key = os.environ.get(TOKEN_KEY_ENV, "")
    if not key:
        raise RunnerApiError(0, f"this pool host has no {TOKEN_KEY_ENV}; it cannot act for a run")
    return key


class RunnerApi:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        retries: int = 5,
        backoff_s: float = 1.0,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.attempt: int | None = None
        self.ref: dict[str, Any] | None = None  # the message's api section (for shards)

    @classmethod
    def for_run(cls, api: ApiRef | dict[str, Any], run_id: int, **options: Any) -> RunnerApi:
        """The client of run `run_id` from a message's ``api`` section: the run spec's
        ``ApiRef`` as parsed on receipt, or a shard message's section (read here once);
        the token is derived here from its seed and this host's key."""
        ref = api if isinstance(api, ApiRef) else ApiRef.model_validate(api)
        client = cls(ref.base_url, run_token(token_key(), run_id, ref.seed), **options)
        client.ref = ref.dump()
        return client

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if self.attempt is not None:
            headers["X-Run-Attempt"] = str(self.attempt)
        headers.update(extra or {})
        return headers

    def _retrying(
        self,
        what: str,
        send: Callable[[], Any],
        refused: Callable[[urllib.error.HTTPError], Exception],
    ) -> Any:
        """`send()`, retried with backoff on connection errors and 502/503/504 (waiting at
        least the answer's Retry-After: a 503 `busy` is the database's contention, and the
        request changed nothing); any other HTTP error (or the last transient one) is raised
        as `refused(error)`. A retry is safe because every runner API write is idempotent:
        the same heartbeat, upload, trial or completion sent twice counts once
        (docs/pipeline.md "Contention")."""
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            delay = self.backoff_s * (2**attempt)
            try:
                return send()
            except urllib.error.HTTPError as exc:
                if exc.code not in TRANSIENT_STATUSES or attempt >= self.retries:
                    raise refused(exc) from None
                last = exc
                delay = max(delay, retry_after_s(exc) or 0.0)
                exc.close()
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                last = exc
                if attempt >= self.retries:
                    break
            time.sleep(delay)
        raise RunnerApiError(0, f"{what} failed: {last}")

    def call(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        """One JSON call; connection errors and 502/503/504 are retried with backoff."""
        url = self.base_url + path.lstrip("/")
        data = None if payload is None else json.dumps(payload).encode()
        headers = self._headers({"Content-Type": "application/json"} if data else None)

        def send() -> dict[str, Any]:
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
                return json.loads(body) if body else {}

        def refused(exc: urllib.error.HTTPError) -> Exception:
            try:
                body = json.loads(exc.read() or b"{}")
            except ValueError:
                body = {}
            error = body.get("error") or {}
            message = error.get("message") or exc.reason
            if exc.code == 409 or (exc.code == 401 and error.get("code") == "run_finished"):
                run_status = exc.headers.get(RUN_STATUS_HEADER) if exc.headers else None
                return RunSuperseded(exc.code, str(message), body, run_status=run_status or None)
            return RunnerApiError(exc.code, str(message), body)

        result: dict[str, Any] = self._retrying(f"{method} {url}", send, refused)
        return result

    def report(self, path: str, document: Contract) -> dict[str, Any]:
        """POST one contract document (agentperf/contract.py): what it holds, as built."""
        return self.call("POST", path, document.dump())

    def upload(self, target: dict[str, Any], content: bytes) -> None:
        """PUT `content` to an upload grant (``UploadGrant``) from the API: exactly the
        declared size, before the grant expires."""
        grant = UploadGrant.model_validate(target)
        if len(content) != grant.size:
            raise RunnerApiError(0, f"the grant is for {grant.size} bytes, not {len(content)}")
        headers = dict(grant.headers)

        def send() -> None:
            request = urllib.request.Request(
                grant.url, data=content, method=grant.method, headers=headers
            )
            with urllib.request.urlopen(request, timeout=max(self.timeout_s, 120)) as response:
                response.read()

        def refused(exc: urllib.error.HTTPError) -> Exception:
            detail = exc.read()[:300].decode(errors="replace")
            return RunnerApiError(exc.code, f"upload refused: {detail}")

        self._retrying("upload", send, refused)

    def download(self, url: str) -> bytes:
        def send() -> bytes:
            with urllib.request.urlopen(url, timeout=max(self.timeout_s, 120)) as response:
                return bytes(response.read())

        def refused(exc: urllib.error.HTTPError) -> Exception:
            return RunnerApiError(exc.code, f"download refused: {exc.reason}")

        data: bytes = self._retrying("download", send, refused)
        return data
