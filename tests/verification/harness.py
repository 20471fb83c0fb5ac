"""A whole benchmark run on virtual time, judged by the same checks the pipeline stores.

``simulated_run(cheat)`` does what the pool worker does — qualification probes, the SLO
search with /metrics scraped at every window's start and end — against the tiny simulated
system in process (``cheat`` names dishonest modes), then builds the report with
``runs.verification.report_checks``, the function the pipeline's report uses.
Only the database and object storage are left out (the run is a plain namespace).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from catalog.datasets import small_shape
from runner import contract
from runner.engine.datasets.synthetic import generate_dataset
from runner.engine.replay import ReplayConfig
from runner.engine.runs import config_for_trial
from runner.engine.search import TrialOutcome, run_search
from runner.engine.trajectory import Dataset
from runner.engine.trial import Tier, TrialConfig, run_trial
from runner.simulator.virtual import run_with_simulator
from runner.verification.checks import TrialData
from runner.verification.probes import extended_probes, model_listed_check, run_probes
from runner.verification.speculative import parse_metrics
from runs.verification import report_checks

MODEL = "tiny-1b"
TIERS = [
    Tier("20", 20, 10.0),
    Tier("60", 60, 10.0),
    Tier("100", 100, 5.0),
    Tier("180", 180, 5.0),
]


@functools.lru_cache(maxsize=2)
def small_dataset(seed: int = 7, trajectories: int = 6) -> Dataset:
    """Prompts of a few hundred to ~2.5k tokens and short answers (catalog/datasets.py's
    small shape), generated once per process."""
    params = small_shape()
    return generate_dataset(
        seed=seed, trajectories=trajectories, params=params, name="verify-test", version="1"
    )


def run_spec(base: TrialConfig, *, cap: int, max_trials: int) -> dict[str, Any]:
    """The stored run spec of a simulated run with `base`'s settings (runner/contract.py
    RunSpec, as runs/dispatch.py stores it)."""
    search = {
        "warmup_s": base.warmup_s,
        "duration_s": base.duration_s,
        "cap": cap,
        "max_trials": max_trials,
        "min_requests": base.min_requests,
        "tool_delay_scale": base.replay.tool_delay_scale,
        "request_timeout_s": base.replay.timeout_s,
        "max_loop_lag_ms": base.max_loop_lag_ms,
        "max_cpu_percent": base.max_cpu_percent,
        "seed": base.replay.seed,
        "ramp_s": base.replay.ramp_s,
        "prime_cache": base.replay.prime_cache,
    }
    return contract.RunSpec.model_validate(
        {
            "version": contract.SPEC_VERSION,
            "run_id": 1,
            "submission_id": 1,
            "pool": "simulated",
            "launcher": {
                "kind": "simulated",
                "profile": "tiny",
                "seed": 0,
                "clock": "virtual",
                "served_model_name": MODEL,
                "profile_label": "Tiny",
                "accelerators_used": 1,
                "accelerators_total": 1,
            },
            "model": {"slug": MODEL, "served_model_name": MODEL},
            "tier_set": {"slug": "verify-test", "version": 1},
            "tiers": [t.to_dict() for t in TIERS],
            "accelerators": {"used": 1, "total": 1},
            "search": search,
            "loadgen": {"shards": 1, "hosts": [], "queue": None},
            "heartbeat_interval_s": 15,
            "telemetry_interval_s": 1.0,
            "limits": {"soft_s": 900, "hard_s": 1000},
            "simulated": True,
        }
    ).stored()


def simulated_run(
    cheat: str | None = None,
    *,
    cap: int = 8,
    config: dict[str, Any] | None = None,
    max_trials: int = 9,
    prime_cache: bool = False,
) -> dict[str, dict[str, Any]]:
    """{check name: check} of one simulated run (tiny profile, virtual time)."""
    dataset = small_dataset()
    base = TrialConfig(
        concurrency=1,
        warmup_s=10.0,
        duration_s=40.0,
        accelerators=1,
        min_requests=10,
        replay=ReplayConfig(
            model=MODEL, seed=3, ramp_s=10.0, tool_delay_scale=0.5, prime_cache=prime_cache
        ),
        bootstrap_resamples=200,
    )

    async def main(transport: Any, clock: Any) -> tuple[list, list[TrialData], Any]:
        qualification = [model_listed_check(MODEL, None)]
        qualification += await run_probes(transport, clock, model=MODEL)
        qualification += await extended_probes(transport, clock, model=MODEL, dataset=dataset)
        trials: list[TrialData] = []

        async def execute(n: int, phase: str, index: int) -> TrialOutcome:
            scraped: dict[str, Any] = {}

            def on_window(mark: str, t_ns: int) -> None:
                scraped[mark] = parse_metrics(transport.metrics_text())

            config_n = config_for_trial(base, n, index)
            res = await run_trial(
                transport, clock, dataset.trajectories, config_n, TIERS, on_window=on_window
            )
            data = res.to_dict()
            metrics = dict(data["summary"], statistics=data["statistics"])
            trials.append(
                TrialData(
                    index=index,
                    concurrency=n,
                    phase=phase,
                    metrics=metrics,
                    verdicts=data["verdicts"],
                    records=res.records,
                    telemetry={
                        "measured": False,
                        "reason": "not measured: simulated on virtual time",
                        "server_metrics": scraped,
                    },
                    raw_records_key=f"memory/{index}",
                    raw_records_count=len(res.records),
                )
            )
            return TrialOutcome(
                {k: v.passed for k, v in res.verdicts.items()},
                {},
                sorted(k for k, v in res.verdicts.items() if v.marginal),
            )

        search = await run_search(execute, [t.name for t in TIERS], cap=cap, max_trials=max_trials)
        return qualification, trials, search

    qualification, trials, search = run_with_simulator("tiny", main, seed=0, cheat=cheat)
    digest = dataset.digest()
    run = SimpleNamespace(
        run_spec=run_spec(base, cap=cap, max_trials=max_trials),
        search_summary=contract.SearchSummary.of(search).dump(),  # what the worker sends
        qualification=qualification,
        telemetry={"measured": False, "reason": "not measured: simulated on virtual time"},
        runner_info={"dataset": {"sha256": digest}},
        dataset=SimpleNamespace(
            name=dataset.name,
            version=dataset.version,
            sha256=digest,
            visibility="private",
            VISIBILITY_PRIVATE="private",
        ),
        submission=SimpleNamespace(config=config or {}),
    )
    checks = report_checks(run, trials, {t.id: t for t in dataset.trajectories})
    return {c["name"]: c for c in checks}


def failing(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, c in checks.items() if c["status"] == "fail"}
