"""Real-time OpenAI-compatible server driven by the performance model.

Raw asyncio (uvloop when available) HTTP/1.1 with keep-alive. Endpoints: ``POST
/v1/chat/completions``, ``POST /v1/completions`` (streaming SSE with
``stream_options.include_usage``, or one JSON body), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (Prometheus text, vLLM metric names) and, when enabled,
``GET /debug/ground_truth?request_id=ID`` (or ``client_id=ID``: the ``X-Request-Id`` header or
the body's ``user`` field).

The model's iterations end on timers of the event loop; a timer wakes ``spin_s`` early and
sleeps the rest precisely, so tokens are written within about 0.1 ms of the model's time on
an idle machine. The ground-truth log holds, per request, every write that carried output:
``(perf_counter_ns just before the write, tokens in it, model emission time)``; the
monotonic clock is shared by every process on the machine, so a client's timestamps can be
compared with it directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast
from urllib.parse import parse_qs

import orjson

from agentperf.simulator.behaviour import HONEST, Behaviour
from agentperf.simulator.deployment import Deployment, RejectedRequest
from agentperf.simulator.profile_types import Profile
from agentperf.simulator.prompts import PromptAccountant, PromptError, filler
from agentperf.simulator.scheduler import SimRequest

_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024
_PRIME_IN_THREAD_CHARS = 50_000
_GROUND_TRUTH_REQUESTS = 200_000


class RealTimeline:
    """perf_counter_ns and loop timers that wake early and sleep the rest precisely."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, spin_s: float = 0.0015) -> None:
        self._loop = loop
        self._spin_s = spin_s

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def call_at(self, t_ns: int, fn: Callable[[], None]) -> None:
        delay = (t_ns - time.perf_counter_ns()) / 1e9 - self._spin_s
        if delay > 0:
            self._loop.call_later(delay, self._fire, t_ns, fn)
        else:
            self._loop.call_soon(self._fire, t_ns, fn)

    @staticmethod
    def _fire(t_ns: int, fn: Callable[[], None]) -> None:
        rem = t_ns - time.perf_counter_ns()
        if rem > 0:
            time.sleep(rem / 1e9)
        fn()


@dataclass(slots=True)
class GroundTruth:
    """What the server really did for one request (perf_counter_ns clock)."""

    request_id: str
    client_id: str | None
    t_received_ns: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    emissions: list[tuple[int, int, int]] = field(default_factory=list)  # (t_write, n, t_model)

    @property
    def t_first_ns(self) -> int | None:
        return self.emissions[0][0] if self.emissions else None

    @property
    def t_last_ns(self) -> int | None:
        return self.emissions[-1][0] if self.emissions else None

    @property
    def output_speed(self) -> float | None:
        """(n_out − 1) / (t_last − t_first), as docs/engine.md "Definitions" defines it, on the
        true writes."""
        if len(self.emissions) < 2:
            return None
        n = sum(e[1] for e in self.emissions)
        dt = self.emissions[-1][0] - self.emissions[0][0]
        return (n - 1) / (dt / 1e9) if dt > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "client_id": self.client_id,
            "t_received_ns": self.t_received_ns,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "emissions": [list(e) for e in self.emissions],
        }


@dataclass(slots=True)
class _Stream:
    proto: _HttpProtocol
    req: SimRequest
    rid: str
    api: str
    model: str
    stream: bool
    include_usage: bool
    created: int
    truth: GroundTruth | None
    sent: int = 0
    reported: int = 0  # completion_tokens in usage (differs from stop_at only when dishonest)
    prefix: bytes = b""
    suffix: bytes = b""


def _error_body(status: int, message: str) -> bytes:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return json.dumps(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    ).encode()


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
_REASONS.update({411: "Length Required", 413: "Payload Too Large", 431: "Headers Too Large"})


class SimServer:
    """The simulated deployment behind an HTTP listener on the current event loop."""

    def __init__(
        self,
        profile: Profile,
        *,
        seed: int = 0,
        ground_truth: bool = True,
        debug_endpoints: bool = False,
        spin_s: float = 0.0015,
        behaviour: Behaviour | None = None,
    ) -> None:
        # how the deployment answers: as the model says, or a test's plugin
        # (agentperf/simulator/behaviour.py; loaded by name: --behaviour)
        self.behaviour: Behaviour = behaviour if behaviour is not None else HONEST
        self.profile = profile
        self.seed = seed
        self.ground_truth_enabled = ground_truth
        self.debug_endpoints = debug_endpoints
        self.spin_s = spin_s
        self.accountant = PromptAccountant()
        self.deployment: Deployment | None = None
        self._server: asyncio.base_events.Server | None = None
        self._truth: OrderedDict[str, GroundTruth] = OrderedDict()
        self._by_client: dict[str, str] = {}
        self._counter = 0
        self.lag_max_ns = 0
        self.lag_sum_ns = 0
        self.lag_count = 0
        self.requests_total = 0
        self.requests_failed = 0
        self.inflated_hits = 0  # cache_inflated: cached tokens reported beyond the cache
        self.host = ""
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self.deployment = Deployment(
            self.behaviour.profile(self.profile),
            RealTimeline(loop, spin_s=self.spin_s),
            seed=self.seed,
        )
        self.deployment.set_streaming(True)
        self._server = await loop.create_server(
            lambda: _HttpProtocol(self), host, port, backlog=1024, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        return self.host, self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # ---------------------------------------------------------------- ground truth
    def ground_truth(
        self, request_id: str | None = None, *, client_id: str | None = None
    ) -> GroundTruth | None:
        """The true emissions of one request, by server id or by client id."""
        if request_id is None and client_id is not None:
            request_id = self._by_client.get(client_id)
        return self._truth.get(request_id) if request_id is not None else None

    def _record(self, truth: GroundTruth) -> None:
        self._truth[truth.request_id] = truth
        if truth.client_id:
            self._by_client[truth.client_id] = truth.request_id
        while len(self._truth) > _GROUND_TRUTH_REQUESTS:
            _, old = self._truth.popitem(last=False)
            if old.client_id:
                self._by_client.pop(old.client_id, None)

    # ---------------------------------------------------------------- routes
    def handle(
        self, proto: _HttpProtocol, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> None:
        path, _, query = target.partition("?")
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                proto.respond(405, _error_body(405, "POST required"))
                return
            self._completion(
                proto, "chat" if path.endswith("chat/completions") else "completions", headers, body
            )
        elif path == "/health" and method == "GET":
            proto.respond(200, b"", "text/plain")
        elif path in ("/v1/models", "/models") and method == "GET":
            proto.respond(200, self._models())
        elif path == "/metrics" and method == "GET":
            proto.respond(200, self.metrics_text().encode(), "text/plain; version=0.0.4")
        elif path == "/debug/ground_truth" and self.debug_endpoints and method == "GET":
            q = parse_qs(query)
            truth = self.ground_truth(
                q.get("request_id", [None])[0], client_id=q.get("client_id", [None])[0]
            )
            if truth is None:
                proto.respond(404, _error_body(404, "no ground truth for that request"))
            else:
                proto.respond(200, json.dumps(truth.to_dict()).encode())
        else:
            proto.respond(404, _error_body(404, f"{method} {path} not found"))

    def _models(self) -> bytes:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "agentperf-simulator",
                "root": self.profile.model_slug,
                "max_model_len": self.profile.context_length,
            }
            for name in self.profile.served_model_names
        ]
        return json.dumps({"object": "list", "data": data}).encode()

    def _completion(
        self, proto: _HttpProtocol, api: str, headers: dict[str, str], raw: bytes
    ) -> None:
        t_received = time.perf_counter_ns()
        self.requests_total += 1
        try:
            body = orjson.loads(raw)
        except ValueError:
            self._reject(proto, 400, "request body is not valid JSON")
            return
        if not isinstance(body, dict):
            self._reject(proto, 400, "request body must be a JSON object")
            return
        model = body.get("model")
        if model not in self.profile.served_model_names:
            self._reject(proto, 404, f"The model `{model}` does not exist.")
            return
        texts = self._uncached_texts(api, body)
        if sum(len(t) for t in texts) > _PRIME_IN_THREAD_CHARS:
            # Tokenizing a long new prompt takes tens of ms; tiktoken releases the GIL, so
            # do it off the loop and keep other streams' emissions on time.
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(None, self._prime, texts)
            fut.add_done_callback(
                lambda _f: self._admit(proto, api, headers, body, str(model), t_received)
            )
            return
        self._admit(proto, api, headers, body, str(model), t_received)

    def _uncached_texts(self, api: str, body: dict[str, Any]) -> list[str]:
        from agentperf.simulator.prompts import message_text

        acc = self.accountant
        if api == "chat":
            msgs = body.get("messages")
            if not isinstance(msgs, list):
                return []
            out = []
            for m in msgs:
                if isinstance(m, dict):
                    t = message_text(m)
                    if hash(t) not in acc._counts:
                        out.append(t)
            return out
        prompt = body.get("prompt")
        return [prompt] if isinstance(prompt, str) else []

    def _prime(self, texts: list[str]) -> None:
        for t in texts:
            self.accountant.count_text(t)

    def _reject(self, proto: _HttpProtocol, status: int, message: str) -> None:
        self.requests_failed += 1
        proto.respond(status, _error_body(status, message))

    def _admit(
        self,
        proto: _HttpProtocol,
        api: str,
        headers: dict[str, str],
        body: dict[str, Any],
        model: str,
        t_received: int,
    ) -> None:
        if proto.closed:
            return
        dep = self.deployment
        assert dep is not None
        self._counter += 1
        rid = f"sim-{self._counter}"
        try:
            if api == "chat":
                shape = self.accountant.chat(self.behaviour.prefix_body(body))
                max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
            else:
                shape = self.accountant.completion(body)
                max_tokens = body.get("max_tokens")
            for name, v in (("max_tokens", max_tokens), ("min_tokens", body.get("min_tokens"))):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                    raise PromptError(f"{name}: an integer is required")
            req = dep.new_request(
                rid,
                shape,
                max_tokens=max_tokens,
                min_tokens=body.get("min_tokens") or 0,
                ignore_eos=bool(body.get("ignore_eos")),
                # OpenAI's request `metadata` (string values) may name the answer's kind
                output_kind=(
                    body["metadata"].get("output_kind")
                    if isinstance(body.get("metadata"), dict)
                    else None
                ),
            )
        except (PromptError, RejectedRequest) as exc:
            self._reject(proto, 400, str(exc))
            return
        reported = req.stop_at
        if self.behaviour:
            gauges = dep.gauges()
            in_flight = int(gauges["running"] + gauges["waiting"]) + 1
            req.stop_at, reported = self.behaviour.lengths(req.stop_at, in_flight=in_flight)
        client_id = headers.get("x-request-id") or (
            body.get("user") if isinstance(body.get("user"), str) else None
        )
        truth = (
            GroundTruth(rid, client_id, t_received, prompt_tokens=shape.tokens)
            if self.ground_truth_enabled
            else None
        )
        stream_opts = body.get("stream_options")
        st = _Stream(
            proto=proto,
            req=req,
            rid=rid,
            api=api,
            model=model,
            stream=bool(body.get("stream")),
            include_usage=bool(isinstance(stream_opts, dict) and stream_opts.get("include_usage")),
            created=int(time.time()),
            truth=truth,
            reported=reported,
        )
        mj = json.dumps(model)
        if api == "chat":
            st.prefix = (
                f'data: {{"id":"chatcmpl-{rid}","object":"chat.completion.chunk",'
                f'"created":{st.created},"model":{mj},"choices":[{{"index":0,'
                f'"delta":{{"content":"'
            ).encode()
            st.suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            st.prefix = (
                f'data: {{"id":"cmpl-{rid}","object":"text_completion","created":{st.created},'
                f'"model":{mj},"choices":[{{"index":0,"text":"'
            ).encode()
            st.suffix = b'","logprobs":null,"finish_reason":null}]}\n\n'
        req.owner = st
        req.on_emit = self._on_emit
        req.on_done = self._on_done
        proto.current = req
        if st.stream:
            proto.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
            )
        dep.submit(req)

    def _on_emit(self, req: SimRequest, n: int, t_model_ns: int) -> None:
        st: _Stream = req.owner
        if not st.stream:
            return
        start = st.sent
        st.sent += n
        parts = []
        if start == 0 and st.api == "chat":
            parts.append(
                st.prefix[: -len(b'"content":"')]
                + b'"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n'
            )
        text = self.behaviour.text(n, start) if self.behaviour else filler(n, start)
        parts.append(st.prefix + text.encode() + st.suffix)
        last = st.sent >= req.stop_at
        if last:
            parts.append(self._tail(st, req))
        payload = b"".join(parts)
        framed = b"%x\r\n%b\r\n" % (len(payload), payload)
        if last:
            framed += b"0\r\n\r\n"
        t = time.perf_counter_ns()
        st.proto.write(framed)
        lag = t - t_model_ns
        self.lag_sum_ns += lag
        self.lag_count += 1
        if lag > self.lag_max_ns:
            self.lag_max_ns = lag
        if st.truth is not None:
            st.truth.emissions.append((t, n, t_model_ns))

    def _tail(self, st: _Stream, req: SimRequest) -> bytes:
        p = req.prompt.tokens
        reason = "length" if req.stop_at >= req.max_tokens else "stop"
        head: dict[str, Any] = {"id": ("chatcmpl-" if st.api == "chat" else "cmpl-") + st.rid}
        obj = "chat.completion.chunk" if st.api == "chat" else "text_completion"
        head.update({"object": obj, "created": st.created, "model": st.model})
        choice: dict[str, Any] = {"index": 0}
        if st.api == "chat":
            choice["delta"] = {}
        else:
            choice["text"] = ""
        choice.update({"logprobs": None, "finish_reason": reason})
        out = b"data: " + json.dumps({**head, "choices": [choice]}).encode() + b"\n\n"
        if st.include_usage:
            usage = {**head, "choices": [], "usage": self._usage(p, st.reported, self._cached(req))}
            out += b"data: " + json.dumps(usage).encode() + b"\n\n"
        return out + b"data: [DONE]\n\n"

    @staticmethod
    def _usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }

    def _cached(self, req: SimRequest) -> int:
        """The cached_tokens reported for ``req`` (once per request: cache_inflated adds
        what it claims beyond the cache to the hit counter)."""
        reported = self.behaviour.cached(req.cached, req.prompt.tokens)
        self.inflated_hits += reported - req.cached
        return reported

    def _on_done(self, req: SimRequest) -> None:
        st: _Stream = req.owner
        proto = st.proto
        if st.truth is not None:
            st.truth.cached_tokens = req.cached
            st.truth.completion_tokens = req.stop_at
        if not st.stream:
            text = self.behaviour.text(req.stop_at) if self.behaviour else filler(req.stop_at)
            reason = req.finish_reason
            if st.api == "chat":
                choice: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": reason,
                }
                obj, prefix = "chat.completion", "chatcmpl-"
            else:
                choice = {"index": 0, "text": text, "finish_reason": reason}
                obj, prefix = "text_completion", "cmpl-"
            body = {
                "id": prefix + st.rid,
                "object": obj,
                "created": st.created,
                "model": st.model,
                "choices": [choice],
                "usage": self._usage(req.prompt.tokens, st.reported, self._cached(req)),
            }
            t = time.perf_counter_ns()
            proto.respond(200, json.dumps(body).encode(), done=False)
            if st.truth is not None:
                st.truth.emissions.append((t, req.stop_at, req.t_last_ns or t))
        if st.truth is not None:
            self._record(st.truth)
        proto.finish_request()

    def on_disconnect(self, req: SimRequest) -> None:
        if self.deployment is not None and not req.done:
            self.deployment.cancel(req)

    # ---------------------------------------------------------------- metrics
    def metrics_text(self) -> str:
        dep = self.deployment
        assert dep is not None
        c = dep.totals()
        g = dep.gauges()
        label = f'{{model_name="{self.profile.served_model_names[0]}"}}'
        rows: list[tuple[str, str, str, float]] = [
            ("vllm:num_requests_running", "gauge", "Requests in the batch.", g["running"]),
            ("vllm:num_requests_waiting", "gauge", "Requests queued.", g["waiting"]),
            ("vllm:kv_cache_usage_perc", "gauge", "KV cache in use (1 = full).", g["kv_usage"]),
            (
                "vllm:prefix_cache_queries_total",
                "counter",
                "Prompt tokens looked up.",
                c.prefix_queries,
            ),
            (
                "vllm:prefix_cache_hits_total",
                "counter",
                "Prompt tokens found cached.",
                c.prefix_hits + self.inflated_hits,
            ),
            ("vllm:prompt_tokens_total", "counter", "Prompt tokens admitted.", c.prompt_tokens),
            ("vllm:generation_tokens_total", "counter", "Tokens generated.", c.generation_tokens),
            ("vllm:request_success_total", "counter", "Requests finished.", c.requests_finished),
            ("vllm:spec_decode_num_drafts_total", "counter", "Draft proposals.", c.spec_drafts),
            (
                "vllm:spec_decode_num_draft_tokens_total",
                "counter",
                "Draft tokens.",
                c.spec_draft_tokens,
            ),
            (
                "vllm:spec_decode_num_accepted_tokens_total",
                "counter",
                "Accepted draft tokens.",
                c.spec_accepted,
            ),
            ("sim:iterations_total", "counter", "Model iterations run.", c.iterations),
            (
                "sim:accelerators_used",
                "gauge",
                "Accelerators serving.",
                self.behaviour.accelerators_seen(self.profile.accelerators_used),
            ),
            (
                "sim:emission_lag_seconds_max",
                "gauge",
                "Worst write lag behind the model.",
                self.lag_max_ns / 1e9,
            ),
            (
                "sim:emission_lag_seconds_sum",
                "counter",
                "Total write lag behind the model.",
                self.lag_sum_ns / 1e9,
            ),
            (
                "sim:emission_lag_seconds_count",
                "counter",
                "Writes carrying output.",
                self.lag_count,
            ),
        ]
        if self.profile.power_tdp_w is not None:  # modelled, never measured
            rows += [
                (
                    "sim:modelled_dynamic_energy_joules_total",
                    "counter",
                    "Modelled accelerator energy above idle (docs/simulator.md).",
                    c.energy_j,
                ),
                (
                    "sim:modelled_idle_power_watts",
                    "gauge",
                    "Modelled idle power per accelerator (docs/simulator.md).",
                    self.profile.power_idle_w,
                ),
            ]
        lines = []
        for name, kind, help_text, value in rows:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{label} {float(value)!r}")
        return "\n".join(lines) + "\n"


class _HttpProtocol(asyncio.Protocol):
    """One client connection: sequential HTTP/1.1 requests with keep-alive."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.current: SimRequest | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport (asyncio's or uvloop's, which has the same API unsubclassed)
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.current is not None:
            self.server.on_disconnect(self.current)
            self.current = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def respond(
        self, status: int, body: bytes, ctype: str = "application/json", *, done: bool = True
    ) -> None:
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
        ).encode()
        self.write(head + body)
        if done:
            self.finish_request()

    def finish_request(self) -> None:
        self.busy = False
        self.current = None
        if self.buf and not self.closed:
            self._process()

    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEAD:
                    self._fatal(431)
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3:
                self._fatal(400)
                return
            method, target = parts[0], parts[1]
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fatal(411)
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fatal(400)
                return
            if length > _MAX_BODY:
                self._fatal(413)
                return
            if len(self.buf) < end + 4 + length:
                return
            body = bytes(self.buf[end + 4 : end + 4 + length])
            del self.buf[: end + 4 + length]
            self.busy = True
            self.server.handle(self, method, target, headers, body)

    def _fatal(self, status: int) -> None:
        self.respond(status, _error_body(status, _REASONS.get(status, "error")), done=False)
        if self.transport is not None:
            self.transport.close()
        self.closed = True


async def serve(
    profile: Profile,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int = 0,
    ground_truth: bool = False,
    announce: Callable[[str], None] | None = None,
    behaviour: Behaviour | None = None,
) -> None:
    """Run the server until cancelled (``behaviour``: how it answers, HONEST by default)."""
    server = SimServer(
        profile,
        seed=seed,
        ground_truth=ground_truth,
        debug_endpoints=ground_truth,
        behaviour=behaviour,
    )
    h, p = await server.start(host, port)
    if announce is not None:
        announce(f"http://{h}:{p}")
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


class ServerProcess:
    """A simulator server in its own process (``python -m runner.twin_server``), its
    output going to a log file (or a temporary file)."""

    def __init__(
        self, proc: subprocess.Popen[bytes], url: str, *, log: IO[bytes], group: bool
    ) -> None:
        self.proc = proc
        self.url = url
        self.base_url = url + "/v1"
        self._log = log
        self._group = group

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            return json.loads(resp.read())

    def ground_truth(
        self, request_id: str | None = None, *, client_id: str | None = None
    ) -> GroundTruth | None:
        """The server's true emissions for one request (needs ``ground_truth=True``)."""
        q = {"request_id": request_id} if request_id else {"client_id": client_id or ""}
        try:
            d = self.get_json("/debug/ground_truth?" + urllib.parse.urlencode(q))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        return GroundTruth(
            request_id=d["request_id"],
            client_id=d["client_id"],
            t_received_ns=d["t_received_ns"],
            prompt_tokens=d["prompt_tokens"],
            cached_tokens=d["cached_tokens"],
            completion_tokens=d["completion_tokens"],
            emissions=[(int(t), int(n), int(m)) for t, n, m in d["emissions"]],
        )

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as resp:
            return str(resp.read().decode())

    def _signal(self, sig: int) -> None:
        try:
            if self._group:
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (its whole process group when it has one), SIGKILL after ``timeout_s``."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        if not self._log.closed:
            self._log.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


READY_PREFIX = b"listening on "


def start_server(
    profile: str | Path,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    seed: int = 0,
    ground_truth: bool = False,
    catalog_dir: str | Path | None = None,
    startup_timeout_s: float = 60.0,
    behaviour: str | None = None,
    log_path: str | Path | None = None,
    new_session: bool = False,
    preexec_fn: Callable[[], None] | None = None,
) -> ServerProcess:
    """Start ``python -m runner.twin_server`` and wait until it listens (port 0 = any).

    The one way to run the simulator in its own process (tests, benchmarks, the simulated
    launcher): its output is appended to ``log_path`` (a temporary file when None), its
    ``listening on URL`` line read back from there. ``new_session`` puts it in a process
    group of its own (``stop`` then signals the group); ``preexec_fn`` runs in the child."""
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "runner.twin_server", "--profile", str(profile)]
    cmd += ["--host", host, "--port", str(port), "--seed", str(seed)]
    if ground_truth:
        cmd.append("--ground-truth")
    if catalog_dir is not None:
        cmd += ["--catalog-dir", str(catalog_dir)]
    if behaviour:  # a test's plugin, by name (agentperf/simulator/behaviour.py)
        cmd += ["--behaviour", behaviour]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    if log_path is not None:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    log: IO[bytes] = open(log_path, "a+b") if log_path is not None else tempfile.TemporaryFile()
    offset = log.tell()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
            preexec_fn=preexec_fn,
        )
    except OSError:
        log.close()
        raise
    server = ServerProcess(proc, "", log=log, group=new_session)
    deadline = time.monotonic() + startup_timeout_s
    output = b""
    while time.monotonic() < deadline:
        output = os.pread(log.fileno(), 1 << 16, offset)
        for line in output.splitlines():
            if line.startswith(READY_PREFIX):
                server.url = line.removeprefix(READY_PREFIX).decode().strip()
                server.base_url = server.url + "/v1"
                return server
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    code = proc.poll()
    server.stop(timeout_s=0)
    tail = output.decode(errors="replace")[-4000:]
    raise RuntimeError(f"simulator did not start (exit {code}); its output:\n{tail}")
