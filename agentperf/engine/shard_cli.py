"""The engine CLI's sharding parts (docs/engine.md "Sharded trials"):

- ``--shards K|auto`` on ``trial`` and ``search``;
- ``python -m agentperf.engine shard --spec FILE``: one shard (started by the coordinator);
- ``python -m agentperf.engine calibrate-client``: the events per core-second one shard
  handles against a loopback stub, which ``--shards auto`` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentperf.engine.commands import CliError
from agentperf.engine.loop import run_real
from agentperf.engine.sharding import API_KEY_ENV, LocalShards, Sharding, ShardSpec, run_shard_here
from agentperf.engine.trial import Tier

CEILING_ENV = "AGENTPERF_CLIENT_CALIBRATION"


def shards_arg(text: str) -> int | None:
    """``auto`` (None) or a positive shard count."""
    if text == "auto":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer or auto, got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_shard_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--shards",
        type=shards_arg,
        default=1,
        help="load-generator processes per trial: K (default 1) or auto (from the fastest "
        "tier's speed and calibrate-client's ceiling, each shard at most half a core)",
    )


def add_shard_commands(sub: Any) -> None:
    shard = sub.add_parser("shard", help="run one shard of a sharded trial (internal)")
    shard.add_argument("--spec", required=True)
    shard.set_defaults(func=cmd_shard)
    cal = sub.add_parser(
        "calibrate-client", help="measure one shard's events per core-second (loopback stub)"
    )
    cal.add_argument("--streams", type=int, default=128)
    cal.add_argument("--events", type=int, default=500, help="events per stream")
    cal.add_argument("--rounds", type=int, default=3)
    cal.add_argument("--out", default=None, help=f"file (default ${CEILING_ENV} or the cache)")
    cal.set_defaults(func=cmd_calibrate_client)


def calibration_path(path: str | None = None) -> Path:
    if path:
        return Path(path)
    if os.environ.get(CEILING_ENV):
        return Path(os.environ[CEILING_ENV])
    root = os.environ.get("AGENTPERF_CACHE") or os.path.expanduser("~/.cache/agentperf")
    return Path(root) / "client-calibration.json"


def read_ceiling(path: str | None = None) -> float | None:
    p = calibration_path(path)
    try:
        return float(json.loads(p.read_text())["events_per_core_s"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return None


def build_sharding(
    args: argparse.Namespace, tiers: Sequence[Tier], *, work_dir: Path
) -> Sharding | None:
    """The Sharding the CLI flags ask for (None: one process)."""
    shards = args.shards
    if shards == 1:
        return None
    if getattr(args, "target", None):
        raise CliError(
            "--shards needs --base-url: a sim: target runs on virtual time, in one process"
        )
    fastest = max((t.min_p25_output_speed for t in tiers), default=0.0)
    ceiling = None
    if shards is None:
        if not tiers:
            raise CliError("--shards auto needs --tiers (it sizes shards for the fastest tier)")
        ceiling = read_ceiling()
        if ceiling is None:
            print("no client calibration yet: running calibrate-client", file=sys.stderr)
            ceiling = float(calibrate(write=True)["events_per_core_s"])
    dataset = str(Path(args.dataset).resolve())
    api_key = args.api_key
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()

    def executor() -> LocalShards:
        return LocalShards(dataset_path=dataset, api_key=api_key, work_dir=work_dir)

    return Sharding(
        executor=executor,
        shards=shards,
        fastest_speed=fastest,
        ceiling_events_per_core_s=ceiling,
        max_shards=max(1, cpus or 1) if shards is None else None,
    )


def cmd_shard(args: argparse.Namespace) -> int:
    """One shard: pin, load the dataset, run the agents, write records and the report."""
    from agentperf.engine.stub import pin
    from agentperf.engine.trajectory import load_dataset

    spec = ShardSpec.from_dict(json.loads(Path(args.spec).read_text()))
    if spec.cpus:
        pin(set(spec.cpus))
    if not spec.dataset_path or not spec.out_dir:
        raise ValueError("a local shard's spec needs dataset_path and out_dir")
    dataset = load_dataset(spec.dataset_path)
    api_key = os.environ.get(API_KEY_ENV) or None
    run_shard_here(spec, dataset.trajectories, Path(spec.out_dir), api_key=api_key)
    return 0


# --------------------------------------------------------------------------- calibration


def _client_round(port: int, streams: int, events: int) -> tuple[int, float, float]:
    """``streams`` concurrent streams of ``events`` one-event reads; (events, cpu s, wall s)."""
    from agentperf.engine.client import HttpTransport
    from agentperf.engine.transport import RequestSpec

    async def main() -> int:
        transport = HttpTransport(f"http://127.0.0.1:{port}/v1")
        body = {
            "model": "stub",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": events,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            done = await asyncio.gather(
                *(
                    transport.send(RequestSpec(f"c{i}", "chat", body, events))
                    for i in range(streams)
                )
            )
        finally:
            await transport.aclose()
        return sum(ex.n_output_events for ex in done)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    n = run_real(main())
    return n, time.process_time() - cpu0, time.perf_counter() - wall0


CALIBRATION_INTERVAL_S = 0.002  # each stream's events 2 ms apart: one event per read


def calibrate(
    *,
    streams: int = 128,
    events: int = 500,
    rounds: int = 3,
    write: bool = False,
    out: str | None = None,
) -> dict[str, Any]:
    """Events per core-second of this host's client against the stub (the best round).

    The streams are paced (an event every 2 ms each) so that a read carries one event, as
    a real server's token-by-token stream does; unpaced, the stub's writes coalesce into
    large reads and the client looks twice as cheap as it is."""
    from agentperf.engine.stub import StubConfig, pin, serve

    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    server_core = cpus[-1] if len(cpus) > 1 else None
    pace = StubConfig(interval_s=CALIBRATION_INTERVAL_S)
    server = ctx.Process(target=serve, args=(ports, server_core, pace), daemon=True)
    server.start()
    try:
        port = int(ports.get(timeout=60))
        if len(cpus) > 1:
            pin(cpus[0])
        results = [_client_round(port, streams, events) for _ in range(max(1, rounds))]
    finally:
        server.terminate()
        server.join(timeout=10)
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cpus))
    rates = [n / cpu for n, cpu, _ in results if cpu > 0]
    doc = {
        "events_per_core_s": round(max(rates)) if rates else 0,
        "rounds": [
            {"events": n, "cpu_s": round(c, 4), "wall_s": round(w, 4)} for n, c, w in results
        ],
        "streams": streams,
        "events_per_stream": events,
        "event_interval_s": CALIBRATION_INTERVAL_S,
        "host": platform.node(),
        "python": platform.python_version(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server_core": server_core,
    }
    if write:
        path = calibration_path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
        doc["path"] = str(path)
    return doc


def cmd_calibrate_client(args: argparse.Namespace) -> int:
    doc = calibrate(
        streams=args.streams, events=args.events, rounds=args.rounds, write=True, out=args.out
    )
    per_shard = doc["events_per_core_s"] * 0.5
    print(
        f"client ceiling: {doc['events_per_core_s']:,} events per core-second "
        f"({args.streams} streams, an event every {CALIBRATION_INTERVAL_S * 1e3:g} ms each); --shards auto gives each shard "
        f"at most {per_shard:,.0f} events/s (half a core): e.g. 4,096 agents at 82 tok/s "
        f"-> {math.ceil(4096 * 82 / max(per_shard, 1))} shards"
    )
    print(f"wrote {doc['path']}")
    return 0
