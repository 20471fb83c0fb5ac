"""The llama.cpp twin against the real server it models: fitted on one configuration,
checked on configurations it was never fitted to (docs/simulator.md "Hold-out").

    .venv/bin/python -m benchmarks.twin_holdout [--fit-config q8_0/p2/t1]
        [--holdout q4_0/p2/t1,q8_0/p4/t1,q8_0/p2/t2] [--concurrency 1,2,4]
        [--warmup 10] [--duration 40] [--fit] [--no-fit-config] [--pin] [--starts K]
        [--out benchmarks/results/twin_holdout.json] [--record]
    .venv/bin/python -m benchmarks.twin_holdout --record-from benchmarks/results/twin_holdout.json

A configuration is ``TYPE/pPARALLEL/tTHREADS``: SmolLM2-135M as GGUF type TYPE
(``benchmarks.cpu_micro.gguf_file``) served by ``runner.launchers.llamacpp_server
--parallel PARALLEL --threads THREADS``. For each configuration and concurrency N, one
trial of the engine (``agentperf.engine.jobs.trial_job``: same trajectories, warm-up, window
and settings) runs twice:

- measured: against the real llama.cpp server on this host;
- predicted: on virtual time against the twin, the profile ``local-cpu-llamacpp`` with the
  configuration's hardware figures from ``benchmarks/results/cpu_micro.json`` (matrix
  throughput and memory bandwidth of TYPE at THREADS threads: ``benchmarks.cpu_micro``), its
  weight bits and ``max_batch = PARALLEL``; its fitted efficiencies are the profile's.

It prints config, N, measured, predicted and error for the p25 output speed per agent and the
output throughput. ``--fit`` first fits the profile's three free parameters (compute and
bandwidth efficiency, iteration overhead) to the fit configuration's measured points by least
squares on log error (a deterministic coordinate search), and prints them; the profile
carries the values so fitted. A hold-out configuration is never used by the fit.

``--record`` (or ``--record-from`` an earlier ``--out`` file, without measuring again) keeps
the held-out rows as the twin's accuracy record, ``local-cpu-llamacpp.holdout.json`` beside
the profile: each row's p25 speed and output throughput are two held-out figures measured on
this CPU (docs/simulator.md "Accuracy"; ``manage.py twin_accuracy`` reads it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentperf.engine.jobs import Target, trial_job
from agentperf.engine.replay import ReplayConfig
from agentperf.engine.trajectory import Trajectory, Turn
from agentperf.engine.transport import Clock, Transport
from agentperf.engine.trial import TrialConfig, TrialResult, run_trial
from agentperf.simulator.profile import PROFILES_DIR, Profile, profile_from_dict
from agentperf.simulator.virtual import run_with_simulator
from benchmarks.cpu_micro import ALIAS, REPO, Server, gguf_file

PROFILE = PROFILES_DIR / "local-cpu-llamacpp.yaml"
MICRO = REPO / "benchmarks" / "results" / "cpu_micro.json"
FREE = (
    # (deployment path, low, high): the parameters the fit moves
    ("efficiency.compute", 0.05, 1.5),
    ("efficiency.bandwidth", 0.05, 1.5),
    ("efficiency.iteration_overhead_us", 0.0, 20000.0),
)


@dataclass(frozen=True, slots=True)
class Config:
    kind: str
    parallel: int
    threads: int

    @classmethod
    def parse(cls, text: str) -> Config:
        try:
            kind, p, t = text.split("/")
            if not (p.startswith("p") and t.startswith("t")):
                raise ValueError
            return cls(kind, int(p[1:]), int(t[1:]))
        except ValueError:
            raise SystemExit(f"config {text!r}: TYPE/pPARALLEL/tTHREADS, e.g. q8_0/p2/t2") from None

    def __str__(self) -> str:
        return f"{self.kind}/p{self.parallel}/t{self.threads}"


def trajectories(n: int = 24, seed: int = 25) -> list[Trajectory]:
    """Agentic sessions sized for a 135M model on one or two cores: a ~120-token system
    prompt, tool output appended each turn (contexts up to ~1k tokens), 16-48-token answers."""
    rng = random.Random(seed)
    words = ("def", "return", "import", "class", "value", "error", "test", "file", "path",
             "line", "self", "config", "result", "assert", "module", "function", "output")  # fmt: skip

    def text(k: int) -> str:
        return " ".join(rng.choice(words) for _ in range(k))

    out = []
    for i in range(n):
        system = {"role": "system", "content": f"You are coding agent {i}. " + text(100)}
        turns = [Turn(0, (system, {"role": "user", "content": f"task {i}: " + text(20)}), 32)]
        length = 2
        for k in range(1, rng.randint(4, 7)):
            new = (
                {"role": "assistant", "content": f"step {k} " + text(rng.randint(10, 40))},
                {"role": "user", "content": "tool output " + text(rng.randint(20, 100))},
            )
            turns.append(Turn(length, new, rng.randint(16, 48), tool_delay_s=rng.uniform(0.2, 1.5)))
            length += 2
        out.append(Trajectory(id=f"h{i}", turns=tuple(turns)))
    return out


def trial_config(
    n: int, warmup: float, duration: float, model: str = ALIAS, seed: int = 0
) -> TrialConfig:
    """One trial of ``n`` agents as every hold-out and spread measurement runs it: no health
    limits to speak of, no bootstrap, agents started over at most 2 s."""
    return TrialConfig(
        concurrency=n,
        warmup_s=warmup,
        duration_s=duration,
        accelerators=1,
        min_requests=1,
        bootstrap_resamples=0,
        max_cpu_percent=100.0,
        replay=ReplayConfig(model=model, seed=seed, ramp_s=min(2.0, warmup)),
    )


def micro_row(micro: dict[str, Any], cfg: Config) -> dict[str, Any]:
    for r in micro["measurements"]:
        if r["type"] == cfg.kind and r["threads"] == cfg.threads:
            return dict(r)
    raise SystemExit(f"{MICRO}: no measurement of {cfg.kind} at {cfg.threads} threads")


def profile_doc(cfg: Config, micro: dict[str, Any], free: dict[str, float] | None = None) -> Any:
    """The twin of ``cfg``: the profile with the configuration's hardware figures."""
    doc = yaml.safe_load(PROFILE.read_text())
    row = micro_row(micro, cfg)
    m = row["model"]
    dep = doc["deployment"]
    dep["precision"] = cfg.kind
    dep["weight_bits"] = round(m["weight_bytes"] * 8 / m["params"], 3)
    dep["aggregated"]["max_batch"] = cfg.parallel
    system = doc["system"]
    src = f"benchmarks/cpu_micro.py: {cfg.kind} at {cfg.threads} threads"
    system["peak_tflops_dense"] = {
        cfg.kind: {"value": row["matmul_gflops_per_thread"] * cfg.threads / 1e3, "source": src}
    }
    system["hbm_bandwidth_tb_s"] = {"value": row["bandwidth_gb_s"] / 1e3, "source": src}
    # llama.cpp gives each slot its own KV (--ctx-per-slot 4096): the pool holds them all
    ctx = 4096 * cfg.parallel
    reserve = dep["memory"]["reserve_fraction"]
    mem = (m["weight_bytes"] + ctx * m["kv_bytes_per_token"]) / (1.0 - reserve) / 1e9
    system["memory_gb_per_accelerator"] = {"value": mem * 1.0001, "source": src}
    for path, value in (free or {}).items():
        section, key = path.split(".")
        dep[section][key] = value
    return doc


def _profile(cfg: Config, micro: dict[str, Any], free: dict[str, float] | None = None) -> Profile:
    return profile_from_dict(profile_doc(cfg, micro, free), path=PROFILE)


def _point(r: TrialResult) -> dict[str, float]:
    s = r.summary
    return {
        "p25_output_speed": round(s.p25_output_speed, 2),
        "output_throughput_tok_s": round(s.output_throughput_tok_s, 2),
        "requests": s.requests,
        "ttft_p50_s": round(s.ttft_s.get("p50", math.nan), 3),
    }


def predict(prof: Profile, trajs: list[Trajectory], config: TrialConfig) -> dict[str, float]:
    async def main(transport: Transport, clock: Clock) -> TrialResult:
        return await run_trial(transport, clock, trajs, config, ())

    return _point(run_with_simulator(prof, main, seed=0))


@dataclass(frozen=True)
class Twin:
    """What a hold-out run needs of one engine's twin: its profile and free parameters, how
    a configuration is written, how its real server is started (a context giving the
    engine's Target) and how its twin is built (from the micro-benchmark and fitted values).
    benchmarks/vllm_holdout.py is the other engine; the driver below is shared."""

    module: str
    server: str  # the real server's name in the accuracy record
    profile: Path
    free: tuple[tuple[str, float, float], ...]
    model: str
    parse: Callable[[str], Any]
    serve: Callable[[Any], AbstractContextManager[Target]]
    build: Callable[[Any, dict[str, Any], dict[str, float] | None], Profile]
    fit_config: str
    holdout: str
    warmup: float
    duration: float


@contextmanager
def _cores(cores: set[int] | None) -> Iterator[None]:
    """Run the block on ``cores`` (None: leave the affinity alone): the calling thread's
    affinity, which a process or thread started inside inherits; it comes back after, on
    an error too."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def split_cores(threads: int) -> tuple[set[int], set[int]]:
    """``--pin``: the load generator on the first core, the server on the next ``threads``
    (docs/simulator.md "Hold-out: the vLLM twin": a server thread that shares its core with
    the load generator measures the contention, not the server). Refused when the host has
    no core to spare."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < threads + 1:
        raise SystemExit(
            f"--pin: {threads} server thread(s) and the load generator need {threads + 1} "
            f"cores; this process may use {len(cores)}"
        )
    return {cores[0]}, set(cores[1 : 1 + threads])


def _median_point(points: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the server starts."""
    return {k: float(statistics.median(p[k] for p in points)) for k in points[0]}


def measure(
    twin: Twin,
    cfg: Any,
    ns: list[int],
    trajs: list[Trajectory],
    warmup: float,
    duration: float,
    *,
    starts: int = 1,
    pin: bool = False,
) -> dict[int, dict[str, Any]]:
    """Each N's trial against the real server, over ``starts`` server starts (the median of
    each figure: the speed of a small model's short answers moves between starts). With
    ``pin`` the server runs on its own cores and the load generator on another."""
    if starts < 1:
        raise SystemExit(f"--starts {starts}: at least one server start")
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in ns}
    generator, server = split_cores(cfg.threads) if pin else (None, None)
    for start in range(starts):
        with ExitStack() as stack:
            with _cores(server):
                target = stack.enter_context(twin.serve(cfg))
            with _cores(generator):
                for n in ns:
                    r = trial_job(
                        target=target,
                        trajectories=trajs,
                        config=trial_config(n, warmup, duration, model=twin.model),
                    )
                    runs[n].append(_point(r))
                    print(
                        f"  measured {cfg} N={n} (start {start + 1}/{starts}): {runs[n][-1]}",
                        file=sys.stderr,
                        flush=True,
                    )
    return {n: {**_median_point(points), "starts": points} for n, points in runs.items()}


def _loss(pred: dict[int, dict[str, Any]], meas: dict[int, dict[str, Any]]) -> float:
    total = 0.0
    for n, m in meas.items():
        for key in ("p25_output_speed", "output_throughput_tok_s"):
            a, b = pred[n][key], m[key]
            total += math.log(max(a, 1e-6) / max(b, 1e-6)) ** 2
    return total


def fit(
    twin: Twin,
    cfg: Any,
    meas: dict[int, dict[str, Any]],
    micro: dict[str, Any],
    trajs: list[Trajectory],
    warmup: float,
    duration: float,
) -> tuple[dict[str, float], float]:
    """Bounded least squares on log error over the fit configuration's points, from the
    profile's values (``coordinate_fit``)."""
    base = yaml.safe_load(twin.profile.read_text())["deployment"]

    def loss(v: dict[str, float]) -> float:
        prof = twin.build(cfg, micro, v)
        pred = {
            n: predict(prof, trajs, trial_config(n, warmup, duration, model=twin.model))
            for n in meas
        }
        return _loss(pred, meas)

    return coordinate_fit(base, twin.free, meas, loss)


def coordinate_fit(
    deployment: dict[str, Any],
    free: tuple[tuple[str, float, float], ...],
    meas: dict[int, dict[str, Any]],
    loss: Callable[[dict[str, float]], float],
) -> tuple[dict[str, float], float]:
    """A deterministic coordinate search in log space (halving steps) over the ``free``
    (deployment path, low, high) parameters, from their values in ``deployment``, for the
    least ``loss``; refused with as many free parameters as measured figures (two per N)."""
    if len(free) >= 2 * len(meas):
        raise SystemExit(f"{len(free)} free parameters need more than {len(free)} points")
    x = {p: float(deployment[p.split(".")[0]][p.split(".")[1]]) for p, _, _ in free}
    bounds = {p: (lo, hi) for p, lo, hi in free}
    best = loss(x)
    step = 0.5  # in log space: ×1.65
    while step > 0.01:
        improved = False
        for p, _, _ in free:
            for sign in (1, -1):
                lo, hi = bounds[p]
                cur = max(x[p], 1.0)  # overhead 0 moves by an absolute microsecond scale
                cand = dict(x)
                cand[p] = min(hi, max(lo, cur * math.exp(sign * step)))
                if cand[p] == x[p]:
                    continue
                value = loss(cand)
                if value < best - 1e-12:
                    x, best, improved = cand, value, True
                    break
        if not improved:
            step /= 2
    return {p: round(v, 4) for p, v in x.items()}, best


def _err(pred: float, meas: float) -> str:
    if meas <= 0:
        return "n/a"
    return f"{(pred / meas - 1) * 100:+.1f}%"


def _parser(twin: Twin) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=f"{twin.server}: the twin against the real server")
    ap.add_argument("--fit-config", default=twin.fit_config)
    ap.add_argument("--holdout", default=twin.holdout)
    ap.add_argument("--concurrency", default="1,2,4")
    ap.add_argument("--warmup", type=float, default=twin.warmup)
    ap.add_argument("--duration", type=float, default=twin.duration)
    ap.add_argument("--fit", action="store_true", help="fit the free parameters first")
    ap.add_argument(
        "--starts", type=int, default=1, help="server starts per configuration (the median)"
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the load generator on the first core, the server on the next THREADS",
    )
    ap.add_argument(
        "--no-fit-config", action="store_true", help="measure only the held-out configurations"
    )
    ap.add_argument("--micro", default=str(MICRO))
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    ap.add_argument(
        "--record", action="store_true", help="write the twin's accuracy record from this run"
    )
    ap.add_argument(
        "--record-from", default=None, help="write the accuracy record from an --out file, only"
    )
    return ap


def run(twin: Twin, argv: list[str] | None = None) -> None:
    """Measure, fit if asked, predict every configuration; print, write and record."""
    args = _parser(twin).parse_args(argv)
    if args.record_from:
        doc = json.loads(Path(args.record_from).read_text())
        write_record(doc, twin)
        return
    micro = json.loads(Path(args.micro).read_text())
    ns = [int(x) for x in args.concurrency.split(",")]
    trajs = trajectories()
    holdout = [twin.parse(c) for c in args.holdout.split(",") if c]
    rows: list[dict[str, Any]] = []
    fitted: dict[str, float] | None = None
    started = time.monotonic()
    plan = [] if args.no_fit_config and not args.fit else [(twin.parse(args.fit_config), "fit")]
    plan += [(c, "held out") for c in holdout]
    if args.pin:  # refuse before measuring anything, not after the first configurations
        for cfg, _ in plan:
            split_cores(cfg.threads)
    for cfg, role in plan:
        meas = measure(
            twin, cfg, ns, trajs, args.warmup, args.duration, starts=args.starts, pin=args.pin
        )
        if role == "fit" and args.fit:
            fitted, loss = fit(twin, cfg, meas, micro, trajs, args.warmup, args.duration)
            print(f"fitted on {cfg}: {fitted} (sum of squared log errors {loss:.4f})", flush=True)
        prof = twin.build(cfg, micro, fitted)
        for n in ns:
            config = trial_config(n, args.warmup, args.duration, model=twin.model)
            pred = predict(prof, trajs, config)
            rows.append(
                {"config": str(cfg), "role": role, "N": n, "measured": meas[n], "predicted": pred}
            )
    print_table(rows)
    print(f"({time.monotonic() - started:.0f} s)")
    doc = {
        "command": f"python -m {twin.module} " + " ".join(sys.argv[1:] if argv is None else argv),
        "fitted": fitted,
        "rows": rows,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    if args.record:
        write_record(doc, twin)


FIGURES = (
    ("p25_output_speed", "p25 speed", "tok/s per agent"),
    ("output_throughput_tok_s", "output throughput", "tok/s"),
)


def holdout_record(doc: dict[str, Any], twin: Twin) -> dict[str, Any]:
    """The accuracy record of a run's held-out rows: two figures per configuration and N,
    the real server's measurement against the twin's prediction."""
    from agentperf.simulator.accuracy import MEASURED, HeldOutFigure

    figures = [
        HeldOutFigure(
            figure=f"{r['config']}, {r['N']} agent{'s' if r['N'] > 1 else ''}: {label}",
            unit=unit,
            reference=float(r["measured"][key]),
            simulated=float(r["predicted"][key]),
            basis=MEASURED,
            read=f"a trial on virtual time against the same trial on the real {twin.server} server",
        ).model_dump()
        for r in doc["rows"]
        if r["role"] == "held out"
        for key, label, unit in FIGURES
    ]
    return {
        "profile": twin.profile.stem,
        "command": doc["command"],
        "fitted": doc.get("fitted"),
        "figures": figures,
    }


def write_record(doc: dict[str, Any], twin: Twin) -> None:
    from agentperf.simulator.accuracy import holdout_path

    out = holdout_path(twin.profile.stem)
    out.write_text(json.dumps(holdout_record(doc, twin), indent=1) + "\n")
    print(f"wrote {out}")


def print_table(rows: list[dict[str, Any]]) -> None:
    """Config, role, N, then measured, predicted and error for each figure."""
    print(
        f"{'config':<12} {'role':<8} {'N':>3} {'p25 meas':>9} {'p25 pred':>9} {'error':>7} "
        f"{'tput meas':>9} {'tput pred':>9} {'error':>7}"
    )
    for r in rows:
        m, p = r["measured"], r["predicted"]
        print(
            f"{r['config']:<12} {r['role']:<8} {r['N']:>3} {m['p25_output_speed']:>9.1f} "
            f"{p['p25_output_speed']:>9.1f} {_err(p['p25_output_speed'], m['p25_output_speed']):>7} "
            f"{m['output_throughput_tok_s']:>9.1f} {p['output_throughput_tok_s']:>9.1f} "
            f"{_err(p['output_throughput_tok_s'], m['output_throughput_tok_s']):>7}"
        )


@contextmanager
def _llamacpp(cfg: Config) -> Iterator[Target]:
    with Server(gguf_file(cfg.kind), parallel=cfg.parallel, threads=cfg.threads) as server:
        yield Target(base_url=server.url + "/v1")


LLAMACPP = Twin(
    module="benchmarks.twin_holdout",
    server="llama.cpp",
    profile=PROFILE,
    free=FREE,
    model=ALIAS,
    parse=Config.parse,
    serve=_llamacpp,
    build=_profile,
    fit_config="q8_0/p2/t1",
    holdout="q4_0/p2/t1,q8_0/p4/t1,q8_0/p2/t2",
    warmup=10.0,
    duration=40.0,
)


if __name__ == "__main__":
    run(LLAMACPP)
