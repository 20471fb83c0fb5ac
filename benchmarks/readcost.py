"""CPU per network read of HttpTransport versions, side by side (uvloop).

    .venv/bin/python -m benchmarks.readcost 5 agentperf/engine/client.py /tmp/client_before.py

Starts the loadgen benchmark's streaming server (its own process, core 1), then, for K rounds,
runs each given ``client.py`` in a fresh process on core 0: 128 streams of 500 events, one
event per server write. Prints each version's client CPU time per network read (min and
median over the rounds), which is what the per-read path costs, whatever the machine's load
does to wall-clock figures.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing as mp
import sys
import time
from typing import Any

from benchmarks import loadgen


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"client_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.HttpTransport


def _client(path: str, port: int, out: Any) -> None:
    import uvloop

    from agentperf.engine.loop import quiet_gc
    from agentperf.engine.transport import RequestSpec

    loadgen._pin(0)
    transport_class = _load(path)
    quiet_gc()

    async def main() -> tuple[float, int]:
        tr = transport_class(f"http://127.0.0.1:{port}/v1")
        reads = 0
        bodies = [
            {
                "model": "bench",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 500,
                "stream": True,
                "x_id": f"{i}",
                "x_pack": 1,
                "x_interval_s": 0.0,
                "x_ttft_s": 0.0,
            }
            for i in range(128)
        ]

        async def one(body: dict[str, Any]) -> None:
            nonlocal reads
            ex = await tr.send(RequestSpec(body["x_id"], "chat", body, 500))
            assert ex.ok, ex.error_detail
            reads += ex.n_reads

        cpu0 = time.process_time()
        await asyncio.gather(*(one(b) for b in bodies))
        cpu = time.process_time() - cpu0
        await tr.aclose()
        return cpu, reads

    out.put(uvloop.run(main()))


def main(argv: list[str]) -> int:
    rounds, paths = int(argv[0]), argv[1:]
    ctx = mp.get_context("spawn")
    port_queue = ctx.Queue()
    server = ctx.Process(target=loadgen._server_main, args=(port_queue, 1), daemon=True)
    server.start()
    port = port_queue.get(timeout=60)
    per_read: dict[str, list[float]] = {p: [] for p in paths}
    try:
        for _ in range(rounds):
            for path in paths:
                out = ctx.Queue()
                proc = ctx.Process(target=_client, args=(path, port, out))
                proc.start()
                cpu, reads = out.get(timeout=600)
                proc.join(timeout=60)
                per_read[path].append(cpu / reads * 1e6)
    finally:
        server.terminate()
        server.join(timeout=10)
    for path, values in per_read.items():
        v = sorted(values)
        print(f"{path}: CPU per read min {v[0]:.2f} us, median {v[len(v) // 2]:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
