"""A burst client for the ground-truth regression test, run in a fresh process.

    python -m tests.simulator.burst URL [--client PATH/TO/client.py]

Sends two bursts of 64 streaming requests on the same pooled connections of one
``HttpTransport`` (the second burst repeats the first one's prompts, so the server answers
from its prefix cache within milliseconds) on the stock asyncio loop, and prints one JSON
line per request of the second burst: ``{"id", "t_send_ns", "t_first_ns", "cached", "ok"}``.

A fresh process matters: how the C allocator serves the loop's 256 KB ``recv`` buffers
depends on the process's history, and the engine runs in fresh processes. ``--client``
loads the transport from another copy of ``client.py`` (to show a regression).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
from typing import Any

from agentperf.engine.transport import Exchange, RequestSpec

STREAMS = 64
TOKENS = 300


def _spec(rid: str, text: str) -> RequestSpec:
    body = {
        "model": "tiny-1b",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": rid,
    }
    return RequestSpec(request_id=rid, api="chat", body=body, target_output_tokens=TOKENS)


def _transport_class(path: str) -> Any:
    if not path:
        from agentperf.engine.client import HttpTransport

        return HttpTransport
    spec = importlib.util.spec_from_file_location("burst_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.HttpTransport


async def _bursts(url: str, transport_class: Any) -> list[Exchange]:
    tr = transport_class(url)
    try:
        out: list[Exchange] = []
        for burst in (0, 1):
            specs = [
                _spec(f"burst{burst}-{i}", f"cached {i} " + "word " * 300) for i in range(STREAMS)
            ]
            out = list(await asyncio.gather(*(tr.send(s) for s in specs)))
        return out
    finally:
        await tr.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--client", default="")
    args = ap.parse_args()
    for ex in asyncio.run(_bursts(args.url, _transport_class(args.client))):
        row = {
            "id": ex.request_id,
            "t_send_ns": ex.t_send_ns,
            "t_first_ns": ex.t_first_ns,
            "cached": ex.cached_tokens,
            "prompt": ex.prompt_tokens,
            "ok": ex.ok,
            "error": ex.error_detail,
        }
        print(json.dumps(row))


if __name__ == "__main__":
    main()
