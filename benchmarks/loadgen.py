"""Load-generator benchmark: our HttpTransport vs a vLLM-bench-style aiohttp client.

    .venv/bin/python -m benchmarks.loadgen            # full run (~2 minutes)
    .venv/bin/python -m benchmarks.loadgen --quick    # smaller, for a smoke check
    .venv/bin/python -m benchmarks.loadgen --compare OLD_CLIENT.py   # + another client.py
    .venv/bin/python -m benchmarks.loadgen --shards 1,2 [...]  # sharded trials (benchmarks/shard_scaling.py)

A fast streaming server runs in its own process pinned to one core, writing pre-rendered
SSE chunks and recording, on the same monotonic clock (CLOCK_MONOTONIC via
perf_counter_ns), when it wrote each stream's first content event. Each client case runs in
a fresh process pinned to the other core. Reported per case:

- events/core-s: streamed events per second of client CPU time (process time);
- cpu%: client CPU time / wall time;
- TTFT error p50/p99: client first-token time minus the server's send time of that event;
- send time for a ~500 KB (131k-token) prompt: from the call to the server holding the
  whole body (median of repeated sends).

The baseline is written the way vLLM's ``benchmarks`` client is: aiohttp, iterate the
response line by line, JSON-parse every chunk, one timestamp per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import random
import statistics
import sys
import time
import urllib.request
from typing import Any

import uvloop

from agentperf.engine.stub import pin as _pin
from agentperf.engine.stub import serve as _serve_stub


def _server_main(port_queue: Any, core: int) -> None:
    _serve_stub(port_queue, core)


def _fetch_stats(port: int) -> dict[str, Any]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/stats", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


# --------------------------------------------------------------------------- clients


def _transport_class(kind: str) -> Any:
    """Our HttpTransport, or (kind ``file:PATH``) the one in another copy of client.py."""
    if not kind.startswith("file:"):
        from agentperf.engine.client import HttpTransport

        return HttpTransport
    import importlib.util

    spec = importlib.util.spec_from_file_location("compare_client", kind.removeprefix("file:"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.HttpTransport


async def _ours(
    port: int,
    bodies: list[dict[str, Any]],
    concurrency: int,
    ramp_s: float = 0.0,
    kind: str = "ours",
) -> list[dict[str, Any]]:
    from agentperf.engine.transport import RequestSpec

    transport = _transport_class(kind)(f"http://127.0.0.1:{port}/v1")
    results: list[dict[str, Any]] = []
    queue = list(reversed(bodies))

    async def worker(i: int) -> None:
        await asyncio.sleep(ramp_s * i / concurrency)  # agents start spread over the ramp
        while queue:
            body = queue.pop()
            spec = RequestSpec(body["x_id"], "chat", body, body["max_tokens"])
            t_call = time.perf_counter_ns()
            ex = await transport.send(spec)
            results.append(
                {
                    "id": body["x_id"],
                    "ok": ex.ok,
                    "err": ex.error_detail,
                    "t_call": t_call,
                    "t_first": ex.t_first_ns,
                    "events": ex.n_output_events,
                }
            )

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    await transport.aclose()
    return results


async def _baseline(
    port: int,
    bodies: list[dict[str, Any]],
    concurrency: int,
    ramp_s: float = 0.0,
    kind: str = "aiohttp",
) -> list[dict[str, Any]]:
    """Written the way vLLM's benchmark client is (aiohttp, line iteration, json per chunk)."""
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    results: list[dict[str, Any]] = []
    queue = list(reversed(bodies))
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker(i: int) -> None:
            await asyncio.sleep(ramp_s * i / concurrency)
            while queue:
                body = queue.pop()
                t_call = time.perf_counter_ns()
                first: int | None = None
                events = 0
                text = ""
                async with session.post(url, json=body) as response:
                    async for chunk_bytes in response.content:
                        chunk_bytes = chunk_bytes.strip()
                        if not chunk_bytes:
                            continue
                        chunk = chunk_bytes.decode("utf-8").removeprefix("data: ")
                        if chunk == "[DONE]":
                            continue
                        timestamp = time.perf_counter_ns()
                        data = json.loads(chunk)
                        choices = data.get("choices")
                        if choices:
                            content = choices[0]["delta"].get("content")
                            if content:
                                if first is None:
                                    first = timestamp
                                events += 1
                                text += content
                results.append(
                    {
                        "id": body["x_id"],
                        "ok": True,
                        "err": "",
                        "t_call": t_call,
                        "t_first": first,
                        "events": events,
                    }
                )

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return results


def _client_main(kind: str, port: int, case: dict[str, Any], core: int, out: Any) -> None:
    _pin(core)
    rng = random.Random(1)
    bodies = []
    for i in range(case["requests"]):
        body: dict[str, Any] = {
            "model": "bench",
            "messages": [{"role": "user", "content": case.get("prompt", "hi")}],
            "max_tokens": case["events"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "x_id": f"{kind}-{i}",
            "x_pack": case["pack"],
            "x_interval_s": case["interval_s"],
            "x_ttft_s": rng.uniform(*case["ttft_s"]) if case["ttft_s"] else 0.0,
        }
        bodies.append(body)
    ours = kind != "aiohttp"
    fn = _ours if ours else _baseline
    if ours:
        # What runs.py does before a trial: long-lived setup objects out of the cyclic GC's
        # scans, and fewer collections (parsing allocates many short-lived dicts).
        from agentperf.engine.loop import quiet_gc

        quiet_gc()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    results = uvloop.run(fn(port, bodies, case["concurrency"], case.get("ramp_s", 0.0), kind))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    stats = _fetch_stats(port)
    errors_ms = []
    sends_ms = []
    for r in results:
        first_sent = stats["first"].get(r["id"])
        if r["t_first"] is not None and first_sent is not None:
            errors_ms.append((r["t_first"] - first_sent) / 1e6)
        received = stats["received"].get(r["id"])
        if received is not None:
            sends_ms.append((received - r["t_call"]) / 1e6)
    events = sum(r["events"] for r in results)
    out.put(
        {
            "kind": kind,
            "ok": sum(1 for r in results if r["ok"]),
            "errors": [r["err"] for r in results if not r["ok"]][:3],
            "events": events,
            "cpu_s": cpu,
            "wall_s": wall,
            "events_per_core_s": events / cpu if cpu else 0.0,
            "cpu_percent": 100 * cpu / wall,
            "ttft_err_p50_ms": _pct(errors_ms, 50),
            "ttft_err_p99_ms": _pct(errors_ms, 99),
            "send_ms_median": statistics.median(sends_ms) if sends_ms else None,
        }
    )


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]  # nearest rank


def _run_case(kind: str, port: int, case: dict[str, Any], core: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_client_main, args=(kind, port, case, core, out))
    proc.start()
    result: dict[str, Any] = out.get(timeout=900)
    proc.join(timeout=60)
    return result


def _parser() -> argparse.ArgumentParser:
    """The command line (``--shards``/``--memory`` go to benchmarks/shard_scaling.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="run only cases whose name contains this")
    parser.add_argument("--server-core", type=int, default=1)
    parser.add_argument("--client-core", type=int, default=0)
    parser.add_argument(
        "--compare",
        default="",
        help="also run the HttpTransport of this client.py (e.g. an older version), side by side",
    )
    return parser


def _cases(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    """The cases, by name: fast streams at packs 1 and 8 and N = 1 to 256, a realistic
    paced 256-agent load, and a 500 KB prompt's send time."""
    cases: list[tuple[str, dict[str, Any]]] = []
    for pack in (1, 8):
        for c in (1, 8, 64, 256):
            events = 200 if quick else 500
            requests = max(c, (8 if quick else 24) * 1000 // events) if c < 64 else c * 2
            cases.append(
                (
                    f"fast pack={pack} N={c}",
                    {
                        "concurrency": c,
                        "requests": requests,
                        "events": events,
                        "pack": pack,
                        "interval_s": 0.0,
                        "ttft_s": None,
                    },
                )
            )
    cases.append(
        (
            "realistic 256 x 100 tok/s",
            {
                "concurrency": 256,
                "requests": 256 * 3,
                "events": 150 if quick else 300,
                "ramp_s": 2.0,
                "pack": 1,
                "interval_s": 0.01,
                "ttft_s": (0.02, 0.5),
            },
        )
    )
    cases.append(
        (
            "send 500 KB prompt (N=1)",
            {
                "concurrency": 1,
                "requests": 10 if quick else 30,
                "events": 2,
                "pack": 1,
                "interval_s": 0.0,
                "ttft_s": None,
                "prompt": "x" * 500_000,
            },
        )
    )
    return cases


def _print_row(name: str, kind: str, r: dict[str, Any]) -> None:
    """One case and client's figures, as the header lays them out."""
    p50, p99, send = r["ttft_err_p50_ms"], r["ttft_err_p99_ms"], r["send_ms_median"]
    label = "compare" if kind.startswith("file:") else kind
    print(
        f"{name:<34} {label:<9} {r['events_per_core_s']:>13,.0f} "
        f"{r['cpu_percent']:>5.0f} {_fmt(p50):>12} {_fmt(p99):>9} {_fmt(send):>8}"
        + (f"  errors: {r['errors']}" if r["errors"] else "")
    )
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if any(a == "--shards" or a.startswith("--shards=") or a == "--memory" for a in args_in):
        from benchmarks.shard_scaling import main as shards_main  # sharded trials: K side by side

        return shards_main(args_in)
    args = _parser().parse_args(argv)
    kinds = ["ours", "aiohttp"] + ([f"file:{args.compare}"] if args.compare else [])
    ctx = mp.get_context("spawn")
    port_queue = ctx.Queue()
    server = ctx.Process(target=_server_main, args=(port_queue, args.server_core), daemon=True)
    server.start()
    port = port_queue.get(timeout=60)
    try:
        print(f"server pid {server.pid} on core {args.server_core}; clients on {args.client_core}")
        header = (
            f"{'case':<34} {'client':<9} {'events/core-s':>13} {'cpu%':>5} "
            f"{'ttft err p50':>12} {'p99 (ms)':>9} {'send ms':>8}"
        )
        print(header)
        for name, case in _cases(args.quick):
            if args.only not in name:
                continue
            for kind in kinds:
                _print_row(name, kind, _run_case(kind, port, case, args.client_core))
    finally:
        server.terminate()
        server.join(timeout=10)
    return 0


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
