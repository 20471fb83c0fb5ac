"""Simulator ground truth: the engine's HttpTransport against the real-time simulator.

    PYTHONPATH=. .venv/bin/python benchmarks/simulator.py [--streams 64] [--tokens 300]

Starts ``python -m runner.twin_server --profile tiny --ground-truth`` in its own process,
sends N concurrent streaming requests with the engine's client, and prints, against the
server's record of when it wrote each token (same monotonic clock): the first-token timestamp
error (client t_first − server write of the first token), the output-speed relative error,
and how far the server's writes lagged its model's emission times.
"""

from __future__ import annotations

import argparse
import asyncio

from agentperf.engine.client import HttpTransport
from agentperf.engine.transport import Exchange, RequestSpec
from runner.twin_server.server import start_server


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    srv = start_server("tiny", ground_truth=True)
    try:

        async def run() -> list[Exchange]:
            tr = HttpTransport(srv.url)
            out: list[Exchange] = []
            try:
                for r in range(args.rounds):
                    specs = [
                        RequestSpec(
                            request_id=f"r{r}-{i}",
                            api="chat",
                            body={
                                "model": "tiny-1b",
                                "messages": [{"role": "user", "content": f"{i} " + "w " * 2000}],
                                "max_tokens": args.tokens,
                                "ignore_eos": True,
                                "stream": True,
                                "stream_options": {"include_usage": True},
                                "user": f"r{r}-{i}",
                            },
                            target_output_tokens=args.tokens,
                        )
                        for i in range(args.streams)
                    ]
                    out += await asyncio.gather(*(tr.send(s) for s in specs))
            finally:
                await tr.aclose()
            return out

        exchanges = asyncio.run(run())
        first_ms, speed_err, lag_ms = [], [], []
        for ex in exchanges:
            assert ex.ok, ex.error_detail
            gt = srv.ground_truth(client_id=ex.request_id)
            assert gt is not None and gt.t_first_ns is not None and gt.output_speed
            assert ex.t_first_ns is not None and ex.t_last_ns is not None
            first_ms.append((ex.t_first_ns - gt.t_first_ns) / 1e6)
            speed = (ex.completion_tokens - 1) / ((ex.t_last_ns - ex.t_first_ns) / 1e9)
            speed_err.append(abs(speed - gt.output_speed) / gt.output_speed * 100)
            lag_ms += [(t - m) / 1e6 for t, _, m in gt.emissions]
        print(f"streams={args.streams} x rounds={args.rounds}, {args.tokens} tokens each")
        for name, v in (
            ("t_first error ms", first_ms),
            ("speed error %", speed_err),
            ("write lag vs model ms", lag_ms),
        ):
            print(f"{name:24s} p50={_pct(v, 0.5):.3f} p99={_pct(v, 0.99):.3f} max={max(v):.3f}")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
