"""Real-time OpenAI-compatible server driven by the performance model.

Raw asyncio (uvloop when available) HTTP/1.1 with keep-alive. Endpoints: ``POST
/v1/chat/completions``, ``POST /v1/completions`` (streaming SSE with
``stream_options.include_usage``, or one JSON body), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (Prometheus text, vLLM metric names) and, when enabled,
``GET /debug/ground_truth?request_id=ID`` (or ``client_id=ID``: the ``X-Request-Id`` header or
the body's ``user`` field).

The model's iterations end on timers of the event loop; a timer wakes ``spin_s`` early and
sleeps the rest precisely, so tokens are written within about 0.1 ms of the model's time on
an idle machine.

Its parts: ``SimServer`` (here: routes, admission, emission), a client connection's HTTP
framing (``connection``), the bytes of an answer (``responses``), ``/metrics``
(``metrics``), the ground-truth log (``ground_truth``); and the server in its own process
(``start_server``, here).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs

import orjson

from agentperf.simulator.behaviour import HONEST, Behaviour
from agentperf.simulator.deployment import Deployment, RejectedRequest
from agentperf.simulator.profile_types import Profile
from agentperf.simulator.prompts import PromptAccountant, PromptError, filler, message_text
from agentperf.simulator.scheduler import SimRequest
from runner.twin_server.connection import Connection, error_body
from runner.twin_server.ground_truth import GroundTruth, GroundTruthLog
from runner.twin_server.metrics import EmissionLag, metrics_text
from runner.twin_server.responses import (
    SSE_HEAD,
    chunk_affixes,
    completion_body,
    final_chunks,
    http_chunk,
    role_chunk,
    usage,
)

_PRIME_IN_THREAD_CHARS = 50_000


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
class _Stream:
    """One admitted request's answer in progress: where it goes and how it is framed."""

    proto: Connection
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
        self._truth = GroundTruthLog()
        self._counter = 0
        self.lag = EmissionLag()
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
            lambda: Connection(self), host, port, backlog=1024, reuse_address=True
        )
        sock = self._server.sockets[0]
        self.host, self.port = sock.getsockname()[:2]
        return self.host, self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def ground_truth(
        self, request_id: str | None = None, *, client_id: str | None = None
    ) -> GroundTruth | None:
        """The true emissions of one request, by server id or by client id."""
        return self._truth.get(request_id, client_id=client_id)

    # ---------------------------------------------------------------- routes
    def handle(
        self, proto: Connection, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> None:
        path, _, query = target.partition("?")
        if path in ("/v1/chat/completions", "/v1/completions"):
            if method != "POST":
                proto.respond(405, error_body(405, "POST required"))
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
                proto.respond(404, error_body(404, "no ground truth for that request"))
            else:
                proto.respond(200, json.dumps(truth.to_dict()).encode())
        else:
            proto.respond(404, error_body(404, f"{method} {path} not found"))

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

    def _completion(self, proto: Connection, api: str, headers: dict[str, str], raw: bytes) -> None:
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

    def _reject(self, proto: Connection, status: int, message: str) -> None:
        self.requests_failed += 1
        proto.respond(status, error_body(status, message))

    def _new_request(self, dep: Deployment, api: str, body: dict[str, Any], rid: str) -> SimRequest:
        """The model's request for a completion body: its prompt's shape, its length limits
        and its output kind; PromptError or RejectedRequest when the body does not fit."""
        if api == "chat":
            shape = self.accountant.chat(self.behaviour.prefix_body(body))
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        else:
            shape = self.accountant.completion(body)
            max_tokens = body.get("max_tokens")
        for name, v in (("max_tokens", max_tokens), ("min_tokens", body.get("min_tokens"))):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise PromptError(f"{name}: an integer is required")
        metadata = body.get("metadata")
        return dep.new_request(
            rid,
            shape,
            max_tokens=max_tokens,
            min_tokens=body.get("min_tokens") or 0,
            ignore_eos=bool(body.get("ignore_eos")),
            # OpenAI's request `metadata` (string values) may name the answer's kind
            output_kind=metadata.get("output_kind") if isinstance(metadata, dict) else None,
        )

    def _open_stream(
        self,
        proto: Connection,
        req: SimRequest,
        api: str,
        headers: dict[str, str],
        body: dict[str, Any],
        model: str,
        t_received: int,
    ) -> _Stream:
        """How ``req``'s answer is written: streamed or whole, its ids, its chunks' framing,
        and its ground truth when kept (by the client's ``X-Request-Id`` or ``user``)."""
        client_id = headers.get("x-request-id") or (
            body.get("user") if isinstance(body.get("user"), str) else None
        )
        truth = (
            GroundTruth(req.rid, client_id, t_received, prompt_tokens=req.prompt.tokens)
            if self.ground_truth_enabled
            else None
        )
        stream_opts = body.get("stream_options")
        st = _Stream(
            proto=proto,
            req=req,
            rid=req.rid,
            api=api,
            model=model,
            stream=bool(body.get("stream")),
            include_usage=bool(isinstance(stream_opts, dict) and stream_opts.get("include_usage")),
            created=int(time.time()),
            truth=truth,
            reported=req.stop_at,
        )
        st.prefix, st.suffix = chunk_affixes(api, req.rid, st.created, model)
        return st

    def _admit(
        self,
        proto: Connection,
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
            req = self._new_request(dep, api, body, rid)
        except (PromptError, RejectedRequest) as exc:
            self._reject(proto, 400, str(exc))
            return
        reported = req.stop_at
        if self.behaviour:
            gauges = dep.gauges()
            in_flight = int(gauges["running"] + gauges["waiting"]) + 1
            req.stop_at, reported = self.behaviour.lengths(req.stop_at, in_flight=in_flight)
        st = self._open_stream(proto, req, api, headers, body, model, t_received)
        st.reported = reported
        req.owner = st
        req.on_emit = self._on_emit
        req.on_done = self._on_done
        proto.current = req
        if st.stream:
            proto.write(SSE_HEAD)
        dep.submit(req)

    def _on_emit(self, req: SimRequest, n: int, t_model_ns: int) -> None:
        st: _Stream = req.owner
        if not st.stream:
            return
        start = st.sent
        st.sent += n
        parts = []
        if start == 0 and st.api == "chat":
            parts.append(role_chunk(st.prefix))
        text = self.behaviour.text(n, start) if self.behaviour else filler(n, start)
        parts.append(st.prefix + text.encode() + st.suffix)
        last = st.sent >= req.stop_at
        if last:
            reason = "length" if req.stop_at >= req.max_tokens else "stop"
            used = self._usage(st, req) if st.include_usage else None
            parts.append(final_chunks(st.api, st.rid, st.created, st.model, reason, used))
        framed = http_chunk(b"".join(parts), last=last)
        t = time.perf_counter_ns()
        st.proto.write(framed)
        self.lag.add(t - t_model_ns)
        if st.truth is not None:
            st.truth.emissions.append((t, n, t_model_ns))

    def _usage(self, st: _Stream, req: SimRequest) -> dict[str, Any]:
        """The usage reported for ``req`` (once per request: cache_inflated adds the cached
        tokens it claims beyond the cache to the hit counter)."""
        cached = self.behaviour.cached(req.cached, req.prompt.tokens)
        self.inflated_hits += cached - req.cached
        return usage(req.prompt.tokens, st.reported, cached)

    def _on_done(self, req: SimRequest) -> None:
        st: _Stream = req.owner
        proto = st.proto
        if st.truth is not None:
            st.truth.cached_tokens = req.cached
            st.truth.completion_tokens = req.stop_at
        if not st.stream:
            text = self.behaviour.text(req.stop_at) if self.behaviour else filler(req.stop_at)
            body = completion_body(
                st.api,
                st.rid,
                st.created,
                st.model,
                text,
                req.finish_reason,
                self._usage(st, req),
            )
            t = time.perf_counter_ns()
            proto.respond(200, body, done=False)
            if st.truth is not None:
                st.truth.emissions.append((t, req.stop_at, req.t_last_ns or t))
        if st.truth is not None:
            self._truth.record(st.truth)
        proto.finish_request()

    def on_disconnect(self, req: SimRequest) -> None:
        if self.deployment is not None and not req.done:
            self.deployment.cancel(req)

    def metrics_text(self) -> str:
        """The /metrics body (runner/twin_server/metrics.py)."""
        dep = self.deployment
        assert dep is not None
        return metrics_text(
            self.profile,
            dep.totals(),
            dep.gauges(),
            inflated_hits=self.inflated_hits,
            accelerators_seen=self.behaviour.accelerators_seen(self.profile.accelerators_used),
            lag=self.lag,
        )


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
        return GroundTruth.from_dict(d)

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
