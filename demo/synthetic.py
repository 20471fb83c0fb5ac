"""Synthetic catalog rows, submissions, runs and published results, built through the real
publish service (leaderboard.publishing.result_publish) from made-up trial figures: the
test suite's data and benchmarks/site.py's. No shared mutable fixtures."""

from __future__ import annotations

import itertools
from typing import Any

from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from submissions.models import Organization, Submission

_seq = itertools.count(1)

DEFAULT_TIERS = [
    ("20 tok/s", 20, 10),
    ("60 tok/s", 60, 10),
    ("100 tok/s", 100, 5),
    ("180 tok/s", 180, 5),
    ("300 tok/s", 300, 3),
]


def make_org(name: str | None = None) -> Organization:
    n = next(_seq)
    name = name or f"Org {n}"
    return Organization.objects.create(name=name, slug=f"org-{n}-{name.lower().replace(' ', '-')}")


def make_model(**fields: Any) -> AIModel:
    n = next(_seq)
    defaults = {
        "slug": f"model-{n}",
        "name": f"Model {n}",
        "provider": "Test",
        "total_params_b": 100.0,
        "active_params_decode_b": 10.0,
        "kv_bytes_per_token": 1000,
        "context_length": 131072,
    }
    defaults.update(fields)
    return AIModel.objects.create(**defaults)


def make_hardware(**fields: Any) -> HardwareSystem:
    n = next(_seq)
    defaults = {
        "slug": f"hw-{n}",
        "name": f"HW {n}",
        "vendor": "Test",
        "accelerator": "X1",
        "accelerators_per_system": 8,
        "runner_pool": f"hw-{n}",
    }
    defaults.update(fields)
    return HardwareSystem.objects.create(**defaults)


def make_tier_set(model: AIModel | None = None, tiers=DEFAULT_TIERS) -> SloTierSet:
    n = next(_seq)
    tier_set = SloTierSet.objects.create(
        slug=f"tiers-{n}",
        model=model,
        name=f"Tiers {n}",
        version=n,
        effective_date="2026-11-01",
        source="test",
    )
    for order, (name, speed, ttft) in enumerate(tiers):
        SloTier.objects.create(
            tier_set=tier_set, name=name, order=order, min_p25_output_speed=speed, max_ttft_s=ttft
        )
    return tier_set


def make_submission(*, org: Organization, status: str = "draft", **fields: Any) -> Submission:
    model = fields.pop("model", None) or make_model()
    hardware = fields.pop("hardware", None) or make_hardware()
    return Submission.objects.create(
        org=org,
        model=model,
        hardware=hardware,
        status=status,
        config=fields.pop("config", {}),
        **fields,
    )


# --- runs and published results (leaderboard) ------------------------------------------

RAMP = (1, 2, 4, 8, 16, 32, 64, 128)


def synthetic_points(
    *,
    single_agent_speed: float = 180.0,
    knee: float = 24.0,
    accelerators: int = 8,
    concurrencies=RAMP,
    tokens_in_per_out: float = 40.0,
    duty_cycle: float = 0.5,
) -> list[tuple[int, float, float, float]]:
    """(N, p25 speed, throughput per accelerator, TTFT p75) of a plausible system.

    Per-agent speed falls as agents share the batch (s1 / (1 + (N-1)/knee)); each agent
    generates for `duty_cycle` of the time and its prompts carry `tokens_in_per_out` input
    tokens per output token, so throughput per accelerator = N·s·duty·(1+ratio)/accel.
    TTFT grows with the queue.
    """
    out = []
    for n in concurrencies:
        speed = single_agent_speed / (1 + (n - 1) / knee)
        throughput = n * speed * duty_cycle * (1 + tokens_in_per_out) / accelerators
        out.append((n, speed, throughput, 0.4 + 0.03 * n))
    return out


def trial_metrics(
    *,
    speed: float,
    throughput: float,
    ttft_p75: float,
    accelerators: int,
    requests: int = 400,
    **extra: Any,
) -> dict:
    """``Trial.metrics`` as the worker stores it: the engine's own TrialSummary
    (agentperf.engine.metrics) with the contract's named extras, through
    ``contract.TrialMetrics`` (docs/pipeline.md "The contract"), so a change of either shape
    breaks the tests that use it."""
    from agentperf import contract
    from agentperf.engine.metrics import NS, ClientHealth, TrialSummary

    window_s = 120.0
    output_tokens = speed * 0.5 * window_s  # what a half-busy agent generates
    summary = TrialSummary(
        window_start_ns=int(30 * NS),
        window_end_ns=int((30 + window_s) * NS),
        window_s=window_s,
        requests=requests,
        ok=requests,
        failed=0,
        errors_by_class={},
        error_rate=0.0,
        p25_output_speed=speed,
        median_output_speed=speed * 1.2,
        ttft_s={
            "p50": ttft_p75 * 0.7,
            "p75": ttft_p75,
            "p90": ttft_p75 * 1.3,
            "p95": ttft_p75 * 1.5,
            "p99": ttft_p75 * 2.0,
        },
        cache_hit_ratio=0.8,
        input_tokens=throughput * accelerators * window_s - output_tokens,
        output_tokens=output_tokens,
        throughput_tok_s=throughput * accelerators,
        output_throughput_tok_s=output_tokens / window_s,
        throughput_per_accelerator=throughput,
        accelerators=accelerators,
        accelerators_total=None,
        mean_in_flight=1.0,
        client=ClientHealth(loop_lag_p99_ms=1.0, cpu_percent=20.0, healthy=True, reason=""),
        requests_total=requests,
        speed_undefined=0,
    )
    return contract.TrialMetrics.of(summary, **extra).dump()


def measured_telemetry(
    *, power_w: float, accelerators: int, window_s: float = 120.0, tool: str = "nvml"
) -> dict:
    """A trial's telemetry as the runner host reports it: NVML-shaped samples (energy
    counter and power, one a second, `power_w` split over `accelerators` in use) through
    the real window maths (runner.telemetry.window_energy)."""
    from runner.telemetry import GpuSample, window_energy

    s = 1_000_000_000
    each = power_w / accelerators
    samples = [
        GpuSample(
            t_ns=k * s,
            index=i,
            name="X1",
            power_w=each,
            utilization_pct=90.0,
            memory_used_mib=60_000.0,
            memory_total_mib=80_000.0,
            energy_mj=each * k * 1000.0,
            uuid=f"GPU-builder-{i}",
        )
        for k in range(int(window_s) + 3)
        for i in range(accelerators)
    ]
    return window_energy(samples, 1 * s, int((1 + window_s) * s), interval_s=1.0, tool=tool)


def modelled_energy(
    *, power_w: float, accelerators: int, window_s: float = 120.0, idle_fraction: float = 0.3
) -> dict:
    """A simulated trial's ``metrics["modelled_energy"]`` as the worker makes it: the
    simulator's /metrics text at the window's start and end (its counter names), parsed by
    the worker's parser and turned into power by runner.telemetry.modelled."""
    from agentperf.verification.speculative import parse_metrics
    from runner.telemetry.modelled import modelled_power

    idle = power_w / accelerators * idle_fraction
    dynamic = (power_w - idle * accelerators) * window_s

    def text(energy_j: float) -> str:
        label = '{model_name="sim"}'
        return (
            f"sim:modelled_dynamic_energy_joules_total{label} {energy_j!r}\n"
            f"sim:modelled_idle_power_watts{label} {idle!r}\n"
            f"sim:accelerators_used{label} {float(accelerators)!r}\n"
        )

    scrapes = {"start": parse_metrics(text(1000.0)), "end": parse_metrics(text(1000.0 + dynamic))}
    block = modelled_power(scrapes, window_s)
    assert block is not None
    return block


def run_spec(*, run, accelerators: int, cap: int, **search: Any) -> dict:
    """``BenchmarkRun.run_spec`` as dispatch stores it (runs/dispatch.py run_prepare): a
    contract RunSpec (docs/pipeline.md "The contract") with the settings' search options, a
    simulated launcher for a simulated submission and an attached endpoint otherwise."""
    from django.conf import settings

    from agentperf import contract
    from runs.dispatch import loadgen_section

    submission = run.submission
    served = f"{submission.model.slug}-served"
    if submission.is_simulated:
        launcher: dict[str, Any] = {
            "kind": "simulated",
            "profile": "tiny",
            "seed": 0,
            "clock": "virtual",
            "served_model_name": served,
            "profile_label": "Tiny (test)",
            "accelerators_used": accelerators,
            "accelerators_total": accelerators,
        }
    else:
        launcher = {
            "kind": "attached",
            "endpoint_id": "lab-1",
            "url": "http://endpoint.test/v1",
            "api_key_env": "",
            "served_model_name": served,
        }
    options = {
        **settings.RUN_SEARCH_OPTIONS,
        "warmup_s": 30.0,
        "duration_s": 120.0,
        "cap": cap,
        **search,
    }
    pool = "simulated" if submission.is_simulated else submission.hardware.runner_pool
    return contract.RunSpec.model_validate(
        {
            "version": contract.SPEC_VERSION,
            "run_id": run.pk,
            "submission_id": submission.pk,
            "pool": pool,
            "launcher": launcher,
            "model": {"slug": submission.model.slug, "served_model_name": served},
            "tier_set": {"slug": run.tier_set.slug, "version": run.tier_set.version},
            "tiers": run.tier_set.as_engine_tiers(),
            "accelerators": {"used": accelerators, "total": None},
            "search": options,
            "loadgen": loadgen_section(pool, options),
            "heartbeat_interval_s": 15,
            "telemetry_interval_s": 1.0,
            "limits": {"soft_s": 3000, "hard_s": 3600},
            "simulated": submission.is_simulated,
        }
    ).stored()


def make_run(
    *,
    submission: Submission,
    points,
    tier_set: SloTierSet,
    accelerators: int = 8,
    status: str = "done",
    power_w: float | None = None,
    dataset=None,
    verification: list[dict] | None = None,
    summary: bool = True,
    modelled_power_w: float | None = None,
):
    """A finished run whose trials are `points` [(N, speed, throughput, ttft_p75)], with
    verdicts against `tier_set` and the engine's own search summary."""
    from agentperf import contract
    from agentperf.engine.search import SearchResult, SearchTrial, tier_results
    from agentperf.engine.trial import TierVerdict
    from runs.models import BenchmarkRun, Trial, VerificationReport

    tiers = list(tier_set.tiers.all())
    run = BenchmarkRun.objects.create(
        submission=submission, tier_set=tier_set, dataset=dataset, status=status
    )
    run.run_spec = run_spec(run=run, accelerators=accelerators, cap=max(p[0] for p in points))
    run.save(update_fields=["run_spec"])
    trials, search_trials = [], []
    for index, (n, speed, throughput, ttft) in enumerate(points):
        verdicts = {  # the engine's own verdicts, as the worker reports them (the contract)
            t.name: contract.TierVerdict.of(
                TierVerdict(
                    passed=speed >= t.min_p25_output_speed and ttft <= t.max_ttft_s, ttft_s=ttft
                )
            )
            for t in tiers
        }
        watts = power_w * (0.5 + 0.5 * n / points[-1][0]) if power_w else None
        extra: dict[str, Any] = {"power_w": watts} if watts else {}
        if modelled_power_w:  # what a simulated run's worker stores (runner/worker/director.py)
            extra["modelled_energy"] = modelled_energy(
                power_w=modelled_power_w * (0.5 + 0.5 * n / points[-1][0]),
                accelerators=accelerators,
            )
        telemetry = (
            measured_telemetry(power_w=watts, accelerators=accelerators)
            if watts
            else {"measured": False, "reason": "not measured: no accelerator telemetry"}
        )
        trials.append(
            Trial(
                run=run,
                index=index,
                concurrency=n,
                phase="ramp",
                metrics=trial_metrics(
                    speed=speed,
                    throughput=throughput,
                    ttft_p75=ttft,
                    accelerators=accelerators,
                    **extra,
                ),
                verdicts={name: v.dump() for name, v in verdicts.items()},
                telemetry=contract.TrialTelemetry.model_validate(telemetry).dump(),
            )
        )
        search_trials.append(
            SearchTrial(index, n, "ramp", {k: v.passed for k, v in verdicts.items()})
        )
    Trial.objects.bulk_create(trials)
    if summary:
        cap = max(p[0] for p in points)
        results = tier_results(search_trials, [t.name for t in tiers], cap=cap, confirm=False)
        run.search_summary = contract.SearchSummary.of(
            SearchResult(search_trials, results, cap=cap, flags=[])
        ).dump()
        run.save(update_fields=["search_summary"])
    if verification is not None:
        VerificationReport.objects.create(
            run=run,
            status="fail" if any(c.get("status") == "fail" for c in verification) else "pass",
            checks=verification,
        )
    return run


def make_published_result(
    *,
    model: AIModel | None = None,
    hardware: HardwareSystem | None = None,
    org: Organization | None = None,
    tier_set: SloTierSet | None = None,
    points=None,
    accelerators: int = 8,
    simulated: bool = False,
    label: str | None = None,
    config: dict | None = None,
    power_w: float | None = None,
    verification: list[dict] | None = None,
    published_at=None,
    source: str = "vendor_submitted",
    modelled_power_w: float | None = None,
):
    """A Result published through `result_publish`, from a run with synthetic trials."""
    from leaderboard.publishing import result_publish

    model = model or make_model()
    hardware = hardware or make_hardware()
    tier_set = tier_set or make_tier_set()
    submission = make_submission(
        org=org or make_org(),
        status="in_review",
        model=model,
        hardware=hardware,
        is_simulated=simulated,
        source=source,
        config=config or {},
    )
    run = make_run(
        submission=submission,
        points=points or synthetic_points(accelerators=accelerators),
        tier_set=tier_set,
        accelerators=accelerators,
        power_w=power_w,
        verification=verification,
        modelled_power_w=modelled_power_w,
    )
    result = result_publish(submission=submission, run=run, label=label)
    if published_at is not None:
        type(result).objects.filter(pk=result.pk).update(published_at=published_at)
        result.published_at = published_at
    return result
