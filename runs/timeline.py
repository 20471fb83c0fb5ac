"""One agent session's turns on a time axis, read from a trial's raw records in storage.

A trial's raw records are one gzip JSONL object (runner/worker/director.py ``records_blob``),
possibly hundreds of thousands of lines. Nothing here loads a whole trial: the object is
streamed from storage (S3 ``get_object`` body in chunks, or a file handle), decompressed
incrementally, and only the lines a page needs are parsed (a cheap substring test skips the
others). Both reads are paged (``offset``/``limit``); the session list of a trial is cached
by the records' sha256 (the bytes never change once stored).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from django.core.cache import cache

from agentperf.engine import rawrecords
from agentperf.engine.metrics import RequestRecord
from runs.models import Trial
from submissions.services.artifacts import artifact_storage

CHUNK = 256 * 1024
MAX_LIMIT = 200
NS = 1_000_000_000
SESSIONS_TIMEOUT_S = 7 * 24 * 3600


class TimelineError(ValueError):
    """Bad paging or session arguments: ``field`` names the query parameter; ``status`` is
    400, or 404 for a session the trial does not have."""

    def __init__(self, field: str, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


class RecordsUnavailable(Exception):
    """The trial has no raw records in storage, or what is stored is not request records."""


def _record(line: bytes, trial: Trial) -> RequestRecord:
    """One stored record line as its request record (agentperf.engine.rawrecords, the one
    reader of the format); a line that is not one makes the records unavailable."""
    try:
        return rawrecords.parse(line)
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
        raise RecordsUnavailable(
            f"trial {trial.index}'s stored raw records are unreadable ({type(exc).__name__}: "
            f"{str(exc)[:160]})"
        ) from None


def timeline_read(trial: Trial, params: Any) -> dict[str, Any]:
    """The sessions page, or with ``agent`` and ``session`` in ``params`` (a QueryDict or a
    mapping) that session's turns page: what every timeline endpoint answers."""
    page = Page.parse(params.get("offset"), params.get("limit"))
    if params.get("agent") in (None, "") and params.get("session") in (None, ""):
        return trial_sessions(trial, page)
    return session_timeline(
        trial, agent=params.get("agent"), session=params.get("session"), page=page
    )


@dataclass(frozen=True, slots=True)
class Page:
    offset: int
    limit: int

    @classmethod
    def parse(cls, offset: Any, limit: Any, *, default_limit: int = 50) -> Page:
        """``offset``/``limit`` from query strings; TimelineError names the bad one."""
        values = {}
        for name, raw, default in (("offset", offset, 0), ("limit", limit, default_limit)):
            if raw in (None, ""):
                values[name] = default
                continue
            try:
                values[name] = int(str(raw))
            except ValueError:
                raise TimelineError(name, f"{name} must be an integer") from None
        if values["offset"] < 0:
            raise TimelineError("offset", "offset must be >= 0")
        if not 1 <= values["limit"] <= MAX_LIMIT:
            raise TimelineError("limit", f"limit must be between 1 and {MAX_LIMIT}")
        return cls(values["offset"], values["limit"])


def _chunks(key: str) -> Iterator[bytes]:
    """The stored object's bytes, chunk by chunk, never all at once."""
    storage = artifact_storage()
    connection = getattr(storage, "connection", None)
    if connection is not None and hasattr(storage, "bucket_name"):  # S3 (django-storages)
        body = connection.meta.client.get_object(
            Bucket=storage.bucket_name,
            Key=storage._normalize_name(key),  # the key S3Storage itself would use
        )["Body"]
        try:
            yield from body.iter_chunks(CHUNK)
        finally:
            body.close()
        return
    with storage.open(key, "rb") as handle:  # filesystem: a real file handle streams
        while chunk := handle.read(CHUNK):
            yield chunk


def record_lines(key: str) -> Iterator[bytes]:
    """Each JSONL line of a stored records object, streamed (agentperf.engine.rawrecords)."""
    return rawrecords.iter_lines(_chunks(key))


def _key_of(trial: Trial) -> str:
    if not trial.raw_records_key:
        raise RecordsUnavailable(f"trial {trial.index} has no raw records stored")
    return trial.raw_records_key


def _window_start_ns(trial: Trial) -> int | None:
    """The trial's window start (its metrics, read through the contract); None for a trial
    not stored yet."""
    return trial.summary.window_start_ns if trial.metrics else None


def _all_sessions(trial: Trial) -> list[dict[str, Any]]:
    """Every agent session of the trial, in first-send order (one streamed pass; cached)."""
    cache_key = f"timeline:sessions:{trial.raw_records_sha256 or trial.raw_records_key}"
    found = cache.get(cache_key)
    if found is not None:
        return found
    sessions: dict[tuple[int, str], dict[str, Any]] = {}
    for line in record_lines(_key_of(trial)):
        r = _record(line, trial)
        key = (int(r.agent_id), str(r.session_id))
        entry = sessions.get(key)
        if entry is None:
            entry = sessions[key] = {
                "agent_id": key[0],
                "session_id": key[1],
                "trajectory_id": str(r.trajectory_id),
                "turns": 0,
                "failed": 0,
                "first_send_ns": int(r.t_send_ns),
            }
        entry["turns"] += 1
        entry["failed"] += 0 if r.ok else 1
    found = sorted(sessions.values(), key=lambda s: (s["first_send_ns"], s["agent_id"]))
    cache.set(cache_key, found, SESSIONS_TIMEOUT_S)
    return found


def trial_sessions(trial: Trial, page: Page) -> dict[str, Any]:
    """One page of the trial's agent sessions (agent, session, trajectory, turns, failures,
    first send in seconds from the window's start)."""
    sessions = _all_sessions(trial)
    w0 = _window_start_ns(trial)
    base = w0 if w0 is not None else min((s["first_send_ns"] for s in sessions), default=0)
    rows = [
        {
            **{k: v for k, v in s.items() if k != "first_send_ns"},
            "first_send_s": (s["first_send_ns"] - base) / NS,
        }
        for s in sessions[page.offset : page.offset + page.limit]
    ]
    return {
        "trial": trial.index,
        "concurrency": trial.concurrency,
        "count": len(sessions),
        "offset": page.offset,
        "limit": page.limit,
        "sessions": rows,
    }


def _seconds(t_ns: Any, base: int) -> float | None:
    return None if t_ns is None else (int(t_ns) - base) / NS


def _session_turns(
    trial: Trial, agent_id: int, session_id: str, page: Page
) -> tuple[list[RequestRecord], int | None, bool]:
    """(the page's turns of one session, the send of the turn after the page (it ends the
    last tool delay), whether more turns follow); reading stops once they are found."""
    needle = orjson.dumps({"session_id": session_id})[1:-1]  # '"session_id":"…"'
    turns: list[RequestRecord] = []
    seen = 0
    for line in record_lines(_key_of(trial)):
        if needle not in line:
            continue
        r = _record(line, trial)
        if int(r.agent_id) != agent_id or r.session_id != session_id:
            continue
        if seen < page.offset:
            seen += 1
            continue
        if len(turns) == page.limit:
            return turns, r.t_send_ns, True
        turns.append(r)
        seen += 1
    return turns, None, False


def _turn_row(r: RequestRecord, next_send_ns: int | None, base: int) -> dict[str, Any]:
    """One turn in seconds from ``base``, with the tool delay before the next turn."""
    end = r.t_end_ns or r.t_last_ns
    first, last, n_out = r.t_first_ns, r.t_last_ns, r.n_out
    speed = None
    if r.ok and n_out and n_out >= 2 and first and last and last > first:
        speed = (n_out - 1) * NS / (last - first)
    return {
        "turn_index": r.turn_index,
        "request_id": r.request_id,
        "send_s": _seconds(r.t_send_ns, base),
        "first_token_s": _seconds(first, base),
        "last_token_s": _seconds(last, base),
        "end_s": _seconds(end, base),
        "ttft_s": None if first is None else (first - r.t_send_ns) / NS,
        "tool_delay_s": None if next_send_ns is None or end is None else (next_send_ns - end) / NS,
        "n_in": r.n_in,
        "n_cached": r.n_cached,
        "n_out": n_out,
        "target_output_tokens": r.target_output_tokens,
        "output_speed": speed,
        "ok": bool(r.ok),
        "error_class": r.error_class,
    }


def session_timeline(trial: Trial, *, agent: Any, session: Any, page: Page) -> dict[str, Any]:
    """One page of one agent session's turns: send, first token, last token, end, the tool
    delay before the next turn, tokens in / cached / out, in seconds from the window start.

    Reading stops once the page (and the next turn, for the last tool delay) is found."""
    try:
        agent_id = int(str(agent))
    except ValueError:
        raise TimelineError("agent", "agent must be an integer agent id") from None
    session_id = str(session or "")
    if not session_id or len(session_id) > 200:
        raise TimelineError("session", "session must be a session id (1-200 characters)")
    w0 = _window_start_ns(trial)
    turns, after, more = _session_turns(trial, agent_id, session_id, page)
    if not turns and page.offset == 0:
        raise TimelineError(
            "session", f"no session {session_id!r} of agent {agent_id} in this trial", status=404
        )
    base = w0 if w0 is not None else (int(turns[0].t_send_ns) if turns else 0)
    sends: list[int | None] = [*(r.t_send_ns for r in turns[1:]), after] if turns else []
    return {
        "trial": trial.index,
        "concurrency": trial.concurrency,
        "agent_id": agent_id,
        "session_id": session_id,
        "offset": page.offset,
        "limit": page.limit,
        "more": more,
        "window_start_s": 0.0 if w0 is not None else None,
        "window_end_s": _window_end_s(trial, base),
        "turns": [_turn_row(r, nxt, base) for r, nxt in zip(turns, sends, strict=True)],
    }


def _window_end_s(trial: Trial, base: int) -> float | None:
    if not trial.metrics:
        return None
    return (trial.summary.window_end_ns - base) / NS
