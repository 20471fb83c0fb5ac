"""``python -m agentperf.engine trial|search|report|dataset|... `` — see docs/engine.md.

Commands of packages above the engine (``ladder``: agentperf.ladder) are added through the
``agentperf.engine_commands`` entry points in pyproject.toml (docs/engine.md "Targets"); the
subcommand API they and the engine's own command modules use is agentperf/engine/commands.py."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TextIO

import orjson

from agentperf.engine.commands import COMMANDS_GROUP, AddCommand, CliError
from agentperf.engine.datasets.cli import add_dataset_commands
from agentperf.engine.jobs import Target, search_job, trial_job
from agentperf.engine.meanfield import MeanField, MeanFieldError, check_mean_field
from agentperf.engine.metrics import TrialSummary
from agentperf.engine.openloop import (
    DEFAULT_RATE_CAP,
    auto_rate_step,
    open_loop_summary,
    open_trial_config,
    rate_of,
    steps_for,
)
from agentperf.engine.preflight import check_context, http_fetch
from agentperf.engine.replay import ARRIVAL_CLOSED, ARRIVAL_OPEN, ARRIVALS, ReplayConfig
from agentperf.engine.report import add_report_command, print_max_agents
from agentperf.engine.search import SearchResult, SearchTrial
from agentperf.engine.shard_cli import add_shard_commands, add_shard_option, build_sharding
from agentperf.engine.targets import UnknownTarget
from agentperf.engine.trajectory import Dataset, DatasetError, Trajectory, load_dataset
from agentperf.engine.trial import Tier, TrialConfig, TrialResult, load_tiers


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _tool_choice(text: str) -> str | dict[str, Any] | None:
    if text == "omit":
        return None
    if text.startswith("{"):
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise argparse.ArgumentTypeError("tool_choice JSON must be an object")
        return parsed
    return text


def _common(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="OpenAI-compatible base URL, e.g. http://host:8000/v1")
    where.add_argument(
        "--target",
        help="SCHEME:SPEC, an in-process target: sim:PROFILE runs the simulator in virtual time",
    )
    p.add_argument("--model", required=True, help="model name sent in every request")
    p.add_argument("--dataset", required=True, help="dataset file (gzip JSONL)")
    p.add_argument("--accelerators", type=_positive_int, required=True)
    p.add_argument("--accelerators-total", type=_positive_int, default=None)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--api", choices=("chat", "completions"), default="chat")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    p.add_argument(
        "--tool-choice",
        type=_tool_choice,
        default="none",
        help='"none" (default), "auto", "required", a JSON object, or "omit"',
    )
    p.add_argument("--tool-delay-scale", type=_non_negative, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ramp", type=_non_negative, default=None, help="seconds (default: warm-up)")
    p.add_argument("--min-requests", type=int, default=20)
    p.add_argument("--timeout", type=float, default=600.0, help="per-request timeout, seconds")
    p.add_argument("--min-tokens", action="store_true", help="also send min_tokens = target")
    p.add_argument("--no-ignore-eos", action="store_true")
    p.add_argument("--no-namespace", action="store_true", help="no per-session cache namespace")
    prime = p.add_mutually_exclusive_group()
    prime.add_argument(
        "--prime-cache",
        dest="prime_cache",
        action="store_true",
        default=None,
        help="start from a warm prefix cache (sim: targets only; their default)",
    )
    prime.add_argument(
        "--no-prime-cache",
        dest="prime_cache",
        action="store_false",
        help="start cold: every agent's first prompt is an uncached prefill",
    )
    p.add_argument(
        "--mean-field",
        type=_positive_int,
        default=None,
        metavar="MIN_AGENTS",
        help="sim: targets: run a trial of N agents as N/k agents on a 1/k slice of the "
        "deployment, the largest k leaving MIN_AGENTS or more (an approximation; "
        'docs/engine.md "Mean-field trials")',
    )
    p.add_argument(
        "--no-preflight",
        action="store_true",
        help="send every turn even when the server's context cannot hold it (each such "
        'request fails with the server\'s reason; docs/engine.md "Context pre-flight")',
    )
    p.add_argument("--max-loop-lag-ms", type=float, default=25.0)
    p.add_argument("--max-cpu-percent", type=float, default=90.0)
    p.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default=ARRIVAL_CLOSED,
        help="closed: N agents held (default); open: sessions arrive as a seeded Poisson "
        'process (docs/engine.md "Arrival modes")',
    )


# An open loop's rate schedules that many sessions a minute for the whole window: past this
# the schedule alone would outgrow memory (`--rate 1e12` hung the CLI)
MAX_RATE_PER_MIN = 100_000.0


def _positive_float(text: str) -> float:
    """A rate in sessions per minute: > 0, finite, at most MAX_RATE_PER_MIN."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text}") from None
    if not math.isfinite(value) or not value > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    if value > MAX_RATE_PER_MIN:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_RATE_PER_MIN:,.0f} sessions per minute, got {text}"
        )
    return value


# Search defaults. On a real endpoint every second is wall time. On the simulator (virtual
# time) a second costs only the requests sent in it. A cold rack-scale system would need a
# long warm-up (every agent's first prompt is an uncached ~27k-token prefill: 8,192 agents
# started at once queue behind the prefill pool for minutes), so sim targets start from a
# primed prefix cache (ReplayConfig.prime_cache) and agents at a uniformly random turn of the
# dataset; then a one-minute warm-up reaches the same steady state as five minutes from cold
# (docs/benchmarks.md "Virtual-time search").
REAL_WARMUP_S = 30.0
REAL_DURATION_S = 120.0
VIRTUAL_WARMUP_S = 60.0
VIRTUAL_RAMP_S = 30.0
VIRTUAL_DURATION_S = 120.0  # one agent must send min_requests (20) in the window


def _resolve_search_defaults(args: argparse.Namespace) -> None:
    virtual = bool(getattr(args, "target", None))
    if args.warmup is None:
        args.warmup = VIRTUAL_WARMUP_S if virtual else REAL_WARMUP_S
        if virtual and args.ramp is None:
            args.ramp = VIRTUAL_RAMP_S
    if args.duration is None:
        args.duration = VIRTUAL_DURATION_S if virtual else REAL_DURATION_S


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agentperf.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    trial = sub.add_parser("trial", help="one trial at a fixed concurrency")
    _common(trial)
    load = trial.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=_positive_int, help="agents (closed loop)")
    load.add_argument(
        "--rate", type=_positive_float, help="sessions per minute (with --arrival open)"
    )
    trial.add_argument("--warmup", type=_non_negative, required=True, help="seconds")
    trial.add_argument("--duration", type=float, required=True, help="window, seconds")
    trial.add_argument("--tiers", help="tiers JSON (optional: adds verdicts)")
    add_shard_option(trial)
    search = sub.add_parser("search", help="find max agents per SLO tier")
    _common(search)
    search.add_argument("--tiers", required=True, help="tiers JSON")
    search.add_argument(
        "--warmup",
        type=_non_negative,
        default=None,
        help=f"seconds (default {REAL_WARMUP_S:g}; sim: {VIRTUAL_WARMUP_S:g} virtual)",
    )
    search.add_argument(
        "--duration",
        type=float,
        default=None,
        help=f"window, seconds (default {REAL_DURATION_S:g}; sim: {VIRTUAL_DURATION_S:g} virtual)",
    )
    search.add_argument("--cap", type=_positive_int, default=1024, help="highest concurrency")
    search.add_argument(
        "--rate-cap",
        type=_positive_float,
        default=DEFAULT_RATE_CAP,
        help=f"open loop: highest rate, sessions per minute (default {DEFAULT_RATE_CAP:g})",
    )
    search.add_argument(
        "--rate-step",
        type=_positive_float,
        default=None,
        help="open loop: the rate of one search step, sessions per minute (default: the rate "
        "whose sessions send twice --min-requests in the window)",
    )
    search.add_argument("--max-trials", type=_positive_int, default=60)
    search.add_argument(
        "--resume", action="store_true", help="continue from DIR/trials.jsonl of a previous run"
    )
    add_shard_option(search)
    add_shard_commands(sub)
    add_report_command(sub)
    dataset = sub.add_parser("dataset", help="dataset import|generate|stats")
    dataset_sub = dataset.add_subparsers(dest="dataset_command", required=True)
    add_dataset_commands(dataset_sub)
    plugins = entry_points(group=COMMANDS_GROUP)
    for ep in plugins:
        add: AddCommand = ep.load()
        add(sub)
    if not plugins:  # a checkout that was never installed: `ladder` would just be missing
        parser.epilog = f"no {COMMANDS_GROUP} entry points (ladder): run make install"
    return parser


def _replay_config(args: argparse.Namespace) -> ReplayConfig:
    virtual = bool(getattr(args, "target", None))
    if args.prime_cache and not virtual:
        raise CliError(
            "--prime-cache needs a sim: target (a real endpoint warms its cache by serving)"
        )
    return ReplayConfig(
        model=args.model,
        api=args.api,
        seed=args.seed,
        tool_choice=args.tool_choice,
        tool_delay_scale=args.tool_delay_scale,
        ramp_s=args.warmup if args.ramp is None else args.ramp,
        ignore_eos=not args.no_ignore_eos,
        min_tokens=args.min_tokens,
        cache_namespace=not args.no_namespace,
        timeout_s=args.timeout,
        prime_cache=virtual if args.prime_cache is None else args.prime_cache,
    )


def _mean_field(args: argparse.Namespace) -> MeanField | None:
    if args.mean_field is None:
        return None
    mean_field = MeanField(args.mean_field)
    try:
        check_mean_field(mean_field, simulated=bool(args.target), arrival=args.arrival)
    except MeanFieldError as exc:
        raise CliError(f"--mean-field: {exc}") from exc
    return mean_field


def _trial_config(args: argparse.Namespace, concurrency: int) -> TrialConfig:
    if args.duration <= 0:
        raise CliError("--duration must be > 0")
    return TrialConfig(
        concurrency=concurrency,
        warmup_s=args.warmup,
        duration_s=args.duration,
        accelerators=args.accelerators,
        accelerators_total=args.accelerators_total,
        min_requests=args.min_requests,
        max_loop_lag_ms=args.max_loop_lag_ms,
        max_cpu_percent=args.max_cpu_percent,
        replay=_replay_config(args),
    )


def _load(args: argparse.Namespace) -> tuple[Dataset, list[Tier]]:
    try:
        dataset = load_dataset(args.dataset)
    except FileNotFoundError as exc:
        raise CliError(f"dataset not found: {args.dataset}") from exc
    except DatasetError as exc:
        raise CliError(f"dataset {args.dataset}: {exc}") from exc
    tiers: list[Tier] = []
    if getattr(args, "tiers", None):
        try:
            tiers = load_tiers(args.tiers)
        except FileNotFoundError as exc:
            raise CliError(f"tiers file not found: {args.tiers}") from exc
        except ValueError as exc:
            raise CliError(f"tiers {args.tiers}: {exc}") from exc
    return dataset, tiers


def _target(args: argparse.Namespace) -> Target:
    if args.target:
        try:
            target = Target.parse(args.target, seed=args.seed)
        except UnknownTarget as exc:
            raise CliError(f"--target {args.target}: {exc}") from None
        if not target.simulated:
            raise CliError(f"--target must be SCHEME:SPEC (sim:PROFILE), got {args.target!r}")
        return target
    return Target.parse(args.base_url, api_key=args.api_key, seed=args.seed)


class Reporter:
    """A one-line progress bar on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()

    def line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def bar(self, label: str, done: int, total: int) -> None:
        if not self.tty:
            self.line(f"{label}: {done}/{total}")
            return
        width = 30
        filled = int(width * done / max(1, total))
        elapsed = time.monotonic() - self.started
        self.stream.write(
            f"\r\x1b[2K{label} [{'#' * filled}{'.' * (width - filled)}] "
            f"{done}/{total} {elapsed:.0f}s"
        )
        self.stream.flush()


def _describe(result: TrialResult) -> str:
    s = result.summary
    verdicts = " ".join(f"{k}={'pass' if v.passed else 'fail'}" for k, v in result.verdicts.items())
    mf = result.mean_field
    load = f"N={result.concurrency}"
    if mf:  # docs/engine.md "Mean-field trials"
        load = (
            f"N={mf['concurrency']} (mean-field: {result.concurrency} agents on 1/{mf['factor']})"
        )
    return (
        f"{load} requests={s.requests} errors={s.error_rate:.1%} "
        f"p25_speed={s.p25_output_speed:.1f} tok/s ttft_p75={s.ttft_s['p75']:.3f} s "
        f"tput/acc={s.throughput_per_accelerator:.0f} tok/s {verdicts}".rstrip()
    )


PREFLIGHT_OPT_OUT = "--no-preflight sends them anyway (each fails with the server's reason)"


def _preflight(
    args: argparse.Namespace,
    target: Target,
    trajectories: Sequence[Trajectory],
    replay: ReplayConfig,
    reporter: Reporter,
) -> None:
    """Refuse, before any load, a dataset with turns the server's context cannot hold
    (docs/engine.md "Context pre-flight"); a sim: target has no server to ask."""
    if args.no_preflight or target.base_url is None:
        return
    fetch = http_fetch(target.base_url, api_key=target.api_key)
    check = check_context(trajectories, replay, fetch, base_url=target.base_url)
    if not check.fits:
        raise CliError(check.refusal(PREFLIGHT_OPT_OUT))
    reporter.line(check.line())


def reason_lines(summary: TrialSummary) -> list[str]:
    """The trial's top error reasons, one line each: count, class and one detail as it came
    (docs/engine.md "Error reasons")."""
    shown = sum(r.count for r in summary.error_reasons)
    lines = [f"  {r.count} failed ({r.error_class}): {r.example}" for r in summary.error_reasons]
    if shown < summary.failed:
        lines.append(f"  {summary.failed - shown} failed for other reasons")
    return lines


def cmd_trial(args: argparse.Namespace, out: TextIO) -> int:
    open_loop = args.arrival == ARRIVAL_OPEN
    if open_loop != (args.rate is not None):
        raise CliError("--rate goes with --arrival open, --concurrency with the closed loop")
    target = _target(args)
    mean_field = _mean_field(args)
    dataset, tiers = _load(args)
    config = _trial_config(args, args.concurrency or 1)
    if open_loop:
        # the rate is one step of itself: search point 1
        config = open_trial_config(config, 1, args.rate)
    reporter = Reporter(out)
    load = f"N={config.concurrency}"
    if open_loop:
        load = f"λ={args.rate:g}/min ({config.concurrency} sessions scheduled)"
    reporter.line(
        f"trial {load}: warm-up {config.warmup_s:g} s, "
        f"window {config.duration_s:g} s, {len(dataset.trajectories)} trajectories"
    )
    _preflight(args, target, dataset.trajectories, config.replay, reporter)
    result = trial_job(
        target=target,
        trajectories=dataset.trajectories,
        config=config,
        tiers=tiers,
        out_dir=args.out,
        sharding=build_sharding(args, tiers, work_dir=Path(args.out) / "shards"),
        mean_field=mean_field,
    )
    reporter.line(_describe(result))
    for line in reason_lines(result.summary):
        reporter.line(line)
    at_once = result.arrival.get("concurrent_sessions") or {}
    if at_once:
        reporter.line(
            f"concurrent sessions in the window: mean {at_once['mean']:.1f}, peak {at_once['peak']}"
        )
    reporter.line(f"wrote {Path(args.out) / 'trial.json'} and requests.jsonl")
    return 0


def _prior_trials(log_path: Path, resume: bool) -> list[SearchTrial]:
    """The trials a resumed search already ran (its trials.jsonl); a fresh one starts the
    log anew."""
    if resume and log_path.exists():
        return [
            SearchTrial.from_dict(orjson.loads(line))
            for line in log_path.read_bytes().splitlines()
            if line.strip()
        ]
    if log_path.exists():
        log_path.unlink()
    return []


@dataclass(slots=True)
class _SearchLog:
    """A search's trials as they finish: appended to trials.jsonl and reported, with each
    load as a concurrency N or, in open loop, an arrival rate λ."""

    log_path: Path
    reporter: Reporter
    rate_step: float | None
    max_trials: int

    def _load(self, point: int) -> str:
        unit = "N" if self.rate_step is None else "λ"
        load = point if self.rate_step is None else f"{rate_of(point, self.rate_step):g}/min"
        return f"{unit}={load}"

    def on_trial(self, trial: SearchTrial) -> None:
        with open(self.log_path, "ab") as fh:
            fh.write(orjson.dumps(trial.to_dict()) + b"\n")
        summary = trial.data.get("summary", {})
        verdicts = " ".join(f"{k}={'pass' if v else 'fail'}" for k, v in trial.verdicts.items())
        self.reporter.line(
            f"trial {trial.index} [{trial.phase}] {self._load(trial.concurrency)}: "
            f"p25_speed={summary.get('p25_output_speed', 0):.1f} tok/s "
            f"errors={summary.get('error_rate', 0):.1%} {verdicts}"
        )
        if summary.get("failed"):
            for line in reason_lines(TrialSummary.from_dict(summary)):
                self.reporter.line(line)

    def progress(self, phase: str, index: int, concurrency: int) -> None:
        self.reporter.bar(
            f"trial {index} [{phase}] {self._load(concurrency)}", index, self.max_trials
        )


def _write_search(
    out: TextIO,
    reporter: Reporter,
    result: SearchResult,
    doc: dict[str, Any],
    step: float | None,
    out_dir: Path,
) -> None:
    """search.json and each tier's answer: max agents, or in open loop the max arrival rate
    (docs/engine.md "Arrival modes")."""
    if step is not None:
        # max_agents and the trials' "concurrency" are search steps here; "arrival" says
        # what they mean (docs/engine.md "Arrival modes")
        doc["arrival"] = open_loop_summary(result, step)
    (out_dir / "search.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    if step is not None:
        for name, tier in doc["arrival"]["tiers"].items():
            flags = f" ({', '.join(tier['flags'])})" if tier["flags"] else ""
            mean, peak = tier["mean_concurrent_sessions"], tier["peak_concurrent_sessions"]
            at = "" if mean is None else f", {mean:.1f} sessions at once on average, peak {peak}"
            reporter.line(f"tier {name}: max rate {tier['max_rate_per_min']:g}/min{at}{flags}")
        reporter.line(f"wrote {out_dir / 'search.json'} ({len(result.trials)} trials)")
        return
    for name, t in result.tiers.items():
        flags = f" ({', '.join(t.flags)})" if t.flags else ""
        reporter.line(f"tier {name}: max agents {t.max_agents}{flags}")
    reporter.line(f"wrote {out_dir / 'search.json'} ({len(result.trials)} trials)")
    print_max_agents(out, doc)


def cmd_search(args: argparse.Namespace, out: TextIO) -> int:
    _resolve_search_defaults(args)
    target = _target(args)
    mean_field = _mean_field(args)
    dataset, tiers = _load(args)
    base = _trial_config(args, 1)
    cap = args.cap
    step: float | None = None
    if args.arrival == ARRIVAL_OPEN:
        base.replay.arrival = ARRIVAL_OPEN
        step = args.rate_step or auto_rate_step(
            dataset.trajectories, base.duration_s, base.min_requests
        )
        cap = steps_for(args.rate_cap, step)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log = _SearchLog(out_dir / "trials.jsonl", Reporter(out), step, args.max_trials)
    prior = _prior_trials(log.log_path, args.resume)
    reporter = log.reporter
    if prior:
        reporter.line(f"resuming after {len(prior)} stored trials")
    _preflight(args, target, dataset.trajectories, base.replay, reporter)
    result = search_job(
        target=target,
        trajectories=dataset.trajectories,
        tiers=tiers,
        base=base,
        cap=cap,
        out_dir=out_dir,
        prior_trials=prior,
        on_trial=log.on_trial,
        progress=log.progress,
        max_trials=args.max_trials,
        sharding=build_sharding(args, tiers, work_dir=out_dir / "shards"),
        on_attempt_failed=lambda i, a, why: reporter.line(f"trial {i} attempt {a} failed: {why}"),
        rate_step=step,
        mean_field=mean_field,
    )
    doc = result.to_dict()
    doc["simulated"] = args.target is not None
    doc["tier_definitions"] = [t.to_dict() for t in tiers]
    doc["dataset"] = {"name": dataset.name, "version": dataset.version, "path": args.dataset}
    _write_search(out, reporter, result, doc, step, out_dir)
    return 0


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    stream = out or sys.stdout
    try:
        if args.command == "trial":
            return cmd_trial(args, stream)
        if args.command == "search":
            return cmd_search(args, stream)
        handler: Callable[[argparse.Namespace], int | None] = args.func
        return int(handler(args) or 0)
    except CliError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, not a traceback, for operators and scripts
        text = str(exc).splitlines()[0] if str(exc) else ""
        print(f"error: {type(exc).__name__}: {text}", file=sys.stderr)
        return 1
