"""Context pre-flight: before any load is sent, does every turn of the dataset fit the
server's context? (docs/engine.md "Context pre-flight")

A turn fits when its prompt plus its forced answer (``max_tokens`` = the turn's target) fit
the context of one sequence: a longer prompt is refused (HTTP 400) and a longer total is cut
short by the server (vLLM and llama.cpp both clamp the answer), so either way the request
fails. The context is what the server publishes: vLLM's ``max_model_len`` in
``GET /v1/models``; llama.cpp's per-slot ``n_ctx`` (``meta.n_ctx`` there, else
``GET /props``; one slot holds one sequence). Prompts are counted by the server's own
tokenizer (vLLM: ``POST /tokenize`` with the request's messages; llama.cpp: ``POST
/apply-template`` then ``POST /tokenize``), which renders the chat template as the request
would: that count is the request's ``usage.prompt_tokens``.

Counting every prompt of a dataset would send the whole dataset once, so the local counts
decide where they can: the server counts the longest prompt, whose ratio to its local count
scales every local count; a turn whose scaled estimate is further than ``MARGIN`` from the
limit is judged by it, and the turns within the margin are counted by the server (nearest
the limit first, at most ``MAX_SERVER_COUNTS``). Without the server's tokenizer a turn is
called unfit only when its local count is over the limit by more than the margin.
"""

from __future__ import annotations

import http.client
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from agentperf.engine.replay import NAMESPACE_TOKENS, ReplayConfig, build_request
from agentperf.engine.trajectory import Trajectory
from agentperf.httpget import Connect, http_request

MARGIN = 0.25  # how far a scaled local count may be from the server's own count
MAX_SERVER_COUNTS = 200  # prompts the server counts at most (each one is a prompt's upload)
NAMED_TRAJECTORIES = 10  # trajectories a refusal names
# A namespace line of the replay's form (agentperf/engine/replay.py): its hex differs per
# session and so, by a token or two, does its count.
PREFLIGHT_NAMESPACE = "agentperf-session " + "0" * 16 + "\n"
TOKENIZE_MAX_BYTES = 16 << 20  # a 200k-token prompt's token ids as JSON

VLLM = "vllm"
LLAMACPP = "llamacpp"


class FetchError(Exception):
    """The server did not answer a pre-flight request with JSON."""


# (method, path from the server's root, JSON body or None) -> the decoded JSON answer
Fetch = Callable[[str, str, dict[str, Any] | None], Any]


def http_fetch(
    base_url: str,
    *,
    api_key: str | None = None,
    connect: Connect | None = None,
    timeout_s: float = 60.0,
) -> Fetch:
    """A Fetch over HTTP to the server of ``base_url`` (its ``/v1`` path left off: the
    tokenizer and /props are at the server's root); ``connect`` reaches a sandboxed one."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    root = path[: -len("/v1")] if path.endswith("/v1") else path
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def fetch(method: str, where: str, body: dict[str, Any] | None) -> Any:
        url = urlunsplit((parts.scheme, parts.netloc, root + where, "", ""))
        try:
            raw = http_request(
                method,
                url,
                timeout_s=timeout_s,
                body=None if body is None else orjson.dumps(body),
                headers=headers,
                connect=connect,
                max_bytes=TOKENIZE_MAX_BYTES,
            )
            return orjson.loads(raw)
        # URLError and socket errors are OSErrors; a JSON decode error and ResponseTooLarge
        # are ValueErrors; a malformed answer is an HTTPException
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise FetchError(f"{method} {where}: {exc}") from exc

    return fetch


def models_path(base_url: str) -> str:
    """The model list's path from the server's root: ``/v1/models`` for a base URL with no
    path or one ending in ``/v1`` (the requests go to ``…/v1/chat/completions``: the
    client's endpoint_path), else ``/models`` under that path."""
    path = urlsplit(base_url).path.rstrip("/")
    return "/v1/models" if not path or path.endswith("/v1") else "/models"


@dataclass(slots=True, frozen=True)
class ServerContext:
    """The tokens one request's prompt and answer may hold, and where that was read."""

    tokens: int
    source: str
    tokenizer: str | None  # VLLM or LLAMACPP: how its prompts are counted; None: not at all


@dataclass(slots=True, frozen=True)
class TurnSize:
    """One turn's prompt and forced answer, in tokens."""

    trajectory_id: str
    turn_index: int
    prompt_tokens: int
    output_tokens: int
    counted_by: str  # "server" (its tokenizer) or "local" (the dataset's count, scaled)

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def describe(self) -> str:
        how = "the server's count" if self.counted_by == "server" else "local estimate"
        return (
            f"turn {self.turn_index}, {self.prompt_tokens:,} prompt + {self.output_tokens:,} "
            f"answer = {self.total:,} tokens, {how}"
        )


@dataclass(slots=True)
class ContextCheck:
    """What the pre-flight found (``check_context``)."""

    context: ServerContext | None
    turns: int = 0
    unfit: list[TurnSize] = field(default_factory=list)
    server_counted: int = 0
    # turns within the margin of the limit that the server did not count (no tokenizer
    # endpoint, or past MAX_SERVER_COUNTS): they may or may not fit, and are not refused
    uncertain: int = 0
    ratio: float | None = None  # the server's count over the local one, longest prompt
    unchecked: str = ""  # why there is no context to check against

    @property
    def fits(self) -> bool:
        return not self.unfit

    def refusal(self, opt_out: str) -> str:
        """The message that refuses the run: per trajectory (the first NAMED_TRAJECTORIES)
        its unfit turns and the longest of them, the context and where it was read, and
        ``opt_out``: how to send them anyway."""
        assert self.context is not None
        by_trajectory: dict[str, list[TurnSize]] = {}
        for turn in self.unfit:
            by_trajectory.setdefault(turn.trajectory_id, []).append(turn)
        named = [
            f"{name} {_turn_ranges(sorted(t.turn_index for t in turns))} (longest: "
            f"{max(turns, key=lambda t: t.total).describe()})"
            for name, turns in list(by_trajectory.items())[:NAMED_TRAJECTORIES]
        ]
        more = len(by_trajectory) - len(named)
        return (
            f"{len(self.unfit)} of {self.turns} turns cannot fit the server's context of "
            f"{self.context.tokens:,} tokens per request ({self.context.source}; a turn needs "
            "its prompt plus its answer): "
            + "; ".join(named)
            + (f"; and {more} more trajectories" if more else "")
            + f". Nothing was sent; {opt_out}"
        )

    def line(self) -> str:
        """One line on a check that passed or could not run."""
        if self.context is None:
            return f"context pre-flight: not checked, {self.unchecked}"
        counted = (
            f"{self.server_counted} counted by the server's tokenizer, the rest by their local "
            f"count × {self.ratio:.2f} (the server's count over the local one on the longest "
            f"prompt; ±{MARGIN:.0%})"
            if self.server_counted and self.ratio is not None
            else f"by their local count (±{MARGIN:.0%}: the server has no tokenizer endpoint)"
        )
        doubt = f"; {self.uncertain} near the limit may not fit" if self.uncertain else ""
        return (
            f"context pre-flight: every turn fits the server's context of "
            f"{self.context.tokens:,} tokens ({self.context.source}); {self.turns} turns, "
            f"{counted}{doubt}"
        )


def _turn_ranges(indices: list[int]) -> str:
    """``turn 3`` or ``turns 3, 5–8``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)
    return f"turn{'s' if len(indices) > 1 else ''} {text}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class NoContext(Exception):
    """The server publishes no context length, or did not answer; the message says which."""


def server_context(fetch: Fetch, *, base_url: str, model: str) -> ServerContext:
    """The context of one request as the server publishes it (NoContext: none)."""
    path = models_path(base_url)
    failed: list[str] = []
    try:
        listing = fetch("GET", path, None)
    except FetchError as exc:
        listing, failed = None, [str(exc)]
    data = listing.get("data") if isinstance(listing, dict) else None
    entries = [e for e in data or [] if isinstance(e, dict)]
    entry = next((e for e in entries if e.get("id") == model), entries[0] if entries else {})
    if (tokens := _int(entry.get("max_model_len"))) is not None:
        return ServerContext(tokens, f"GET {path}: max_model_len", VLLM)
    meta = entry.get("meta")
    if isinstance(meta, dict) and (tokens := _int(meta.get("n_ctx"))) is not None:
        return ServerContext(tokens, f"GET {path}: meta.n_ctx, per slot", LLAMACPP)
    try:
        props = fetch("GET", "/props", None)
    except FetchError as exc:
        props, failed = None, [*failed, str(exc)]
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    if isinstance(settings, dict) and (tokens := _int(settings.get("n_ctx"))) is not None:
        return ServerContext(tokens, "GET /props: n_ctx, per slot", LLAMACPP)
    if len(failed) == 2:
        raise NoContext(f"the server did not answer: {'; '.join(failed)}")
    raise NoContext(f"the server publishes no context length (GET {path}, GET /props)")


def server_prompt_tokens(fetch: Fetch, tokenizer: str, body: dict[str, Any]) -> int:
    """The server's own count of a request body's prompt (chat template rendered)."""
    chat = "messages" in body
    extras: dict[str, Any] = {k: body[k] for k in ("tools", "tool_choice") if chat and k in body}
    if tokenizer == VLLM:
        request: dict[str, Any] = {"model": body.get("model")}
        if chat:
            request["messages"] = body["messages"]
            if "tools" in extras:
                request["tools"] = extras["tools"]
        else:
            request["prompt"] = body["prompt"]
        answer = fetch("POST", "/tokenize", request)
        count = answer.get("count") if isinstance(answer, dict) else None
    else:
        prompt = body.get("prompt")
        if chat:
            rendered = fetch("POST", "/apply-template", {"messages": body["messages"], **extras})
            prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
        if not isinstance(prompt, str):
            raise FetchError("POST /apply-template: no prompt in the answer")
        # add_special: what the server's completion path does when it tokenizes the prompt
        answer = fetch("POST", "/tokenize", {"content": prompt, "add_special": True})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        count = len(tokens) if isinstance(tokens, list) else None
    if not isinstance(count, int):
        raise FetchError(f"POST /tokenize: no token count in {str(answer)[:200]!r}")
    return count


@dataclass(slots=True)
class _Turn:
    trajectory: Trajectory
    index: int
    local: int | None  # the dataset's count of the prompt as sent (namespace line included)
    output: int


def check_context(
    trajectories: Sequence[Trajectory],
    replay: ReplayConfig,
    fetch: Fetch,
    *,
    base_url: str,
) -> ContextCheck:
    """Every turn of ``trajectories``, as ``replay`` builds its request, against the context
    of the server behind ``fetch`` (see the module docstring for how prompts are counted)."""
    try:
        context = server_context(fetch, base_url=base_url, model=replay.model)
    except NoContext as exc:
        return ContextCheck(context=None, unchecked=str(exc))
    namespace = PREFLIGHT_NAMESPACE if replay.cache_namespace else ""
    extra = NAMESPACE_TOKENS if namespace else 0
    turns = [
        _Turn(t, k, None if size is None else size + extra, t.turns[k].target_output_tokens)
        for t in trajectories
        for k, size in enumerate(t.prompt_tokens())
    ]
    check = ContextCheck(context=context, turns=len(turns))
    limit = context.tokens
    tokenizer = context.tokenizer

    def count(turn: _Turn) -> int | None:
        nonlocal tokenizer
        if tokenizer is None or check.server_counted >= MAX_SERVER_COUNTS:
            return None
        spec = build_request(
            turn.trajectory, turn.index, replay, request_id="preflight", namespace=namespace
        )
        try:
            n = server_prompt_tokens(fetch, tokenizer, spec.body)
        except FetchError:
            tokenizer = None  # no tokenizer endpoint here: local counts from now on
            return None
        check.server_counted += 1
        return n

    def judge(turn: _Turn, prompt: int, counted_by: str) -> None:
        if prompt + turn.output > limit:
            check.unfit.append(
                TurnSize(turn.trajectory.id, turn.index, prompt, turn.output, counted_by)
            )

    longest = max((t for t in turns if t.local), key=lambda t: t.local or 0, default=None)
    longest_count = None if longest is None else count(longest)
    ratio = 1.0
    if longest is not None and longest.local and longest_count is not None:
        ratio = check.ratio = longest_count / longest.local
    near: list[tuple[float, _Turn]] = []
    for turn in turns:
        if turn is longest and longest_count is not None:
            judge(turn, longest_count, "server")
        elif turn.local is None:
            near.append((0.0, turn))  # no local count: only the server can say
        else:
            estimate = turn.local * ratio
            if estimate * (1 - MARGIN) + turn.output > limit:
                judge(turn, round(estimate), "local")
            elif estimate * (1 + MARGIN) + turn.output > limit:
                near.append((abs(estimate + turn.output - limit), turn))
    near.sort(key=lambda item: item[0])
    for _, turn in near:
        n = count(turn)
        if n is None:
            check.uncertain += 1
        else:
            judge(turn, n, "server")
    return check
