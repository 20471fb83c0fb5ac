"""Synthetic catalog rows, submissions, runs and published results: the test suite's data
and benchmarks/site.py's. No shared mutable fixtures.

A result is made the way the pipeline makes one (docs/pipeline.md), in process, from
made-up trial figures: its submission walks the lifecycle service (draft → submitted →
validated), its run is dispatched (the run spec through runs.dispatch), started by
runs.services.run_start with the worker's own runner info, its trials carry the engine's
summaries and verdicts (agentperf.engine.trial.evaluate_tiers) as the contract's documents,
its completion and verification go verifying → in_review (the report stored by
runs.verification_report.verification_store), and it is published by
leaderboard.publishing.result_publish. Where a service needs evidence made-up figures
cannot give (the raw records run_record_trial and run_complete check in storage, the
private test set run_prepare generates), the step writes what that service would write;
each such place says so. The steps (`submission_validated`, `dispatched`, `started`,
`trials_stored`, `finished`) serve builders of runs with real raw records too
(tests/support/records.py).
"""

from __future__ import annotations

import copy
import functools
import itertools
from typing import TYPE_CHECKING, Any, NamedTuple

from catalog.models import AIModel, HardwareSystem, SloTier, SloTierSet
from submissions import constants as c
from submissions.models import Organization, Submission
from submissions.services.lifecycle import submission_transition

if TYPE_CHECKING:
    from agentperf import contract
    from agentperf.engine.metrics import TrialSummary
    from catalog.models import Dataset
    from leaderboard.models import Result
    from runs.models import BenchmarkRun

_seq = itertools.count(1)

DEFAULT_TIERS = [
    ("20 tok/s", 20, 10),
    ("60 tok/s", 60, 10),
    ("100 tok/s", 100, 5),
    ("180 tok/s", 180, 5),
    ("300 tok/s", 300, 3),
]


# --- catalog rows and submissions --------------------------------------------------------
# No service writes one catalog row or organization: the catalog's rows come from its files
# (catalog.services.catalog_seed, all of them at once) and an organization from
# `manage.py create_org`, so these write the row as those do.


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
    SloTier.objects.bulk_create(
        SloTier(
            tier_set=tier_set, name=name, order=order, min_p25_output_speed=speed, max_ttft_s=ttft
        )
        for order, (name, speed, ttft) in enumerate(tiers)
    )
    return tier_set


def make_submission(*, org: Organization, status: str = c.DRAFT, **fields: Any) -> Submission:
    """A submission row in `status`, with no history: the state a test starts from (the
    lifecycle's own tests move it from there). ``config`` is stored as given, which need
    not be a whole deployment config; `submission_validated` walks a draft on."""
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


def submission_validated(submission: Submission) -> Submission:
    """A draft moved draft → submitted → validated by the lifecycle service, as
    submission_submit moves a config that parsed and names catalog rows
    (submissions/services/submissions.py); the dispatch it asks for is make_run's."""
    for to in (c.SUBMITTED, c.VALIDATED):
        submission_transition(submission=submission, to=to, actor_label="system")
    return submission


# --- trial figures as the worker reports them ----------------------------------------------

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


def trial_summary(
    *, speed: float, throughput: float, ttft_p75: float, accelerators: int, requests: int = 400
) -> TrialSummary:
    """The engine's TrialSummary (agentperf.engine.metrics) of a trial with these figures
    over a 120 s window after a 30 s warm-up."""
    from agentperf.engine.metrics import NS, ClientHealth, TrialSummary

    window_s = 120.0
    output_tokens = speed * 0.5 * window_s  # what a half-busy agent generates
    return TrialSummary(
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
    (`trial_summary`) with the contract's named extras, through ``contract.TrialMetrics``
    (docs/pipeline.md "The contract"), so a change of either shape breaks the tests that
    use it."""
    from agentperf import contract

    summary = trial_summary(
        speed=speed,
        throughput=throughput,
        ttft_p75=ttft_p75,
        accelerators=accelerators,
        requests=requests,
    )
    return contract.TrialMetrics.of(summary, **extra).dump()


def measured_telemetry(
    *, power_w: float, accelerators: int, window_s: float = 120.0, tool: str = "nvml"
) -> dict:
    """A trial's telemetry as the runner host reports it: NVML-shaped samples (energy
    counter and power, one a second, `power_w` split over `accelerators` in use) through
    the real window maths (runner.telemetry.window_energy). A fresh copy of the one
    computed for these arguments (the maths is the costliest part of a synthetic run)."""
    return copy.deepcopy(_measured_telemetry(power_w, accelerators, window_s, tool))


@functools.lru_cache(maxsize=256)
def _measured_telemetry(power_w: float, accelerators: int, window_s: float, tool: str) -> dict:
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


class SyntheticTrial(NamedTuple):
    """One trial's report as the worker sends it (contract.TrialReport), less the raw
    records a synthetic trial has none of."""

    index: int
    concurrency: int
    phase: str
    metrics: contract.TrialMetrics
    verdicts: dict[str, contract.TierVerdict]
    telemetry: contract.TrialTelemetry


class Power(NamedTuple):
    """What a run's trials draw: measured on the host (`measured_w`, the runner's
    telemetry) and modelled by the twin (`modelled_w`, the simulator's counters), each at
    the largest trial and falling to half at none; None: not reported."""

    measured_w: float | None = None
    modelled_w: float | None = None


def synthetic_trials(
    spec: contract.RunSpec, points, *, accelerators: int, power: Power | None = None
) -> list[SyntheticTrial]:
    """The trials of `points` [(N, speed, throughput, ttft_p75)] as the worker reports them
    under `spec`: the engine's summary, its verdicts on the spec's tiers
    (agentperf.engine.trial.evaluate_tiers, as the worker's trial gives them) and the
    window's telemetry."""
    from agentperf import contract
    from agentperf.engine.trial import evaluate_tiers

    power = power or Power()
    tiers = spec.engine_tiers()
    top = points[-1][0]
    out = []
    for index, (n, speed, throughput, ttft) in enumerate(points):
        summary = trial_summary(
            speed=speed, throughput=throughput, ttft_p75=ttft, accelerators=accelerators
        )
        verdicts = evaluate_tiers(summary, tiers, min_requests=spec.search.min_requests)
        share = 0.5 + 0.5 * n / top
        watts = power.measured_w * share if power.measured_w else None
        extra: dict[str, Any] = {"power_w": watts} if watts else {}
        if power.modelled_w:  # what a simulated run's worker stores (runner/worker/director.py)
            extra["modelled_energy"] = modelled_energy(
                power_w=power.modelled_w * share, accelerators=accelerators
            )
        telemetry = (
            measured_telemetry(power_w=watts, accelerators=accelerators)
            if watts
            else {"measured": False, "reason": "not measured: no accelerator telemetry"}
        )
        out.append(
            SyntheticTrial(
                index=index,
                concurrency=n,
                phase="ramp",
                metrics=contract.TrialMetrics.of(summary, **extra),
                verdicts={name: contract.TierVerdict.of(v) for name, v in verdicts.items()},
                telemetry=contract.TrialTelemetry.model_validate(telemetry),
            )
        )
    return out


def search_summary(trials: list[SyntheticTrial], tiers: list[str], *, cap: int) -> dict:
    """The completion's search summary: the engine's own search result over the trials
    (agentperf.engine.search), through contract.SearchSummary."""
    from agentperf import contract
    from agentperf.engine.search import SearchResult, SearchTrial, tier_results

    searched = [
        SearchTrial(t.index, t.concurrency, t.phase, {k: v.passed for k, v in t.verdicts.items()})
        for t in trials
    ]
    results = tier_results(searched, tiers, cap=cap, confirm=False)
    return contract.SearchSummary.of(SearchResult(searched, results, cap=cap, flags=[])).dump()


# --- runs: dispatched, started, trials stored, completed, verified --------------------------


def _launcher_section(submission: Submission, accelerators: int) -> tuple[str, dict[str, Any]]:
    """(pool, the run spec's launcher section): dispatch's own reading of the config
    (runs.dispatch.launcher_spec) when it names a launcher dispatch can run; otherwise (a
    test's partial config, an endpoint no pool allowlists) the twin's tiny profile for a
    simulated submission and an attached endpoint on its hardware's pool for a measured one."""
    from runs.dispatch import SIMULATED_POOL, DispatchError, launcher_spec

    if submission.deployment.launcher.kind is not None:
        try:
            return launcher_spec(submission)
        except DispatchError:
            pass
    served = f"{submission.model.slug}-served"
    if submission.is_simulated:
        return SIMULATED_POOL, {
            "kind": "simulated",
            "profile": "tiny",
            "seed": 0,
            "clock": "virtual",
            "served_model_name": served,
            "profile_label": "Tiny (test)",
            "accelerators_used": accelerators,
            "accelerators_total": accelerators,
        }
    return submission.hardware.runner_pool, {
        "kind": "attached",
        "endpoint_id": "lab-1",
        "url": "http://endpoint.test/v1",
        "api_key_env": "",
        "served_model_name": served,
    }


def run_spec(*, run: BenchmarkRun, accelerators: int, cap: int, **search: Any) -> dict:
    """``BenchmarkRun.run_spec`` as dispatch stores it: the spec runs.dispatch.run_spec_for
    builds for the run's submission and tier set (docs/pipeline.md "The contract"), with
    `accelerators` used, a 30 s warm-up and a 120 s window (the synthetic trials' own)
    under `cap`, then `search`, over its search options; its load generation and time
    limits follow from those options as dispatch derives them."""
    from agentperf import contract
    from runs import dispatch

    submission = run.submission
    pool, launcher = _launcher_section(submission, accelerators)
    built = dispatch.run_spec_for(
        submission,
        pool=pool,
        launcher=launcher,
        tier_set=contract.TierSetRef(slug=run.tier_set.slug, version=run.tier_set.version),
        tiers=run.tier_set.as_engine_tiers(),
    ).stored()
    options = {
        **built["search"],
        "warmup_s": 30.0,
        "duration_s": 120.0,
        "cap": cap,
        **search,
    }
    soft, hard = dispatch.time_limits(options, launcher)
    # `accelerators` used of dispatch's total; dispatch's per-worker split only where it
    # adds up to them
    counts = built["accelerators"]
    if counts["used"] != accelerators:
        counts = {"used": accelerators, "total": counts["total"]}
    fields = {
        **built,
        "accelerators": counts,
        "search": options,
        "loadgen": dispatch.loadgen_section(pool, options),
        "limits": {"soft_s": soft, "hard_s": hard},
    }
    fields.pop("run_id")
    return dispatch.run_spec_build(fields, run.pk).stored()


def dispatched(
    submission: Submission,
    *,
    tier_set: SloTierSet,
    accelerators: int,
    cap: int,
    dataset: Dataset | None = None,
    status: str = "pending",
    **search: Any,
) -> BenchmarkRun:
    """The run as runs.dispatch.run_prepare leaves it: its spec (`run_spec`, with `search`
    over its search options), the queue and time limits that follow from it, and a run
    token. run_prepare itself would pick the default tier set and generate the private test
    set, where a test names its own."""
    from core.queues import pool_queue
    from runs.dispatch import run_token_mint
    from runs.models import BenchmarkRun

    run = BenchmarkRun.objects.create(
        submission=submission, tier_set=tier_set, dataset=dataset, status=status
    )
    run.run_spec = run_spec(run=run, accelerators=accelerators, cap=cap, **search)
    spec = run.spec
    run.queue = pool_queue(spec.pool)
    run.soft_time_limit_s = spec.limits.soft_s
    run.time_limit_s = spec.limits.hard_s
    _, run.token_hash = run_token_mint(run)
    run.save(update_fields=["run_spec", "queue", "soft_time_limit_s", "time_limit_s", "token_hash"])
    return run


def started(run: BenchmarkRun) -> BenchmarkRun:
    """A dispatched run of a validated submission taken on: validated → queued, as
    runs.dispatch.submission_dispatch leaves it (the task message is not sent), then
    pending → running by runs.services.run_start with the worker's own runner info, as the
    pool worker's first call does. Returns the run as run_start does."""
    from runner.worker.qualification import runner_info
    from runs import dispatch
    from runs.services import run_start

    submission_transition(
        submission=run.submission,
        to=c.QUEUED,
        actor_label=dispatch.ACTOR,
        data={"run_id": run.pk, "queue": run.queue},
    )
    return run_start(run=run, runner_info=runner_info())


def trials_stored(run: BenchmarkRun, trials: list[SyntheticTrial]) -> None:
    """The trials' rows by runs.services.trial_row, as run_record_trial stores a worker's
    reports, less their raw records (that service takes a trial only with its records in
    storage)."""
    from runs.models import Trial
    from runs.services import trial_row

    Trial.objects.bulk_create(trial_row(run, t) for t in trials)


def _completed(run: BenchmarkRun, summary: dict, *, trials: int) -> None:
    """running → verifying with the search summary, by runs.services.completion_store, the
    step run_complete ends with (run_complete first checks the raw records in storage,
    which synthetic trials lack, and the host telemetry, which they do not report)."""
    from runs.services import completion_store

    completion_store(run, documents={"search_summary": summary}, trials=trials)


def _verified(run: BenchmarkRun, checks: list[dict] | None) -> None:
    """verifying → in_review with the run done, by runs.services.run_verified, the step
    run_verify ends with; its report the given checks (None: none), stored by
    runs.verification_report.verification_store (the checks run_verify computes read raw
    records)."""
    from runs.services import run_verified
    from runs.verification_report import verification_store

    report = verification_store(run=run, checks=checks) if checks is not None else None
    run_verified(run, report=report)


def finished(
    run: BenchmarkRun, summary: dict, *, trials: int, checks: list[dict] | None = None
) -> None:
    """A running run completed with `summary` (→ verifying) and verified with `checks` as
    its report (→ in_review, the run done); see `_completed` and `_verified`."""
    _completed(run, summary, trials=trials)
    _verified(run, checks)


def _documents_stored(run: BenchmarkRun, summary: dict, checks: list[dict] | None) -> None:
    """The search summary and the report of a run whose submission a test put in a state
    of its own: stored without moving it (no lifecycle event)."""
    from runs.verification_report import verification_store

    if summary:
        run.search_summary = summary
        run.save(update_fields=["search_summary"])
    if checks is not None:
        verification_store(run=run, checks=checks)


def make_run(
    *,
    submission: Submission,
    points,
    tier_set: SloTierSet,
    accelerators: int = 8,
    status: str = "done",
    power_w: float | None = None,
    dataset: Dataset | None = None,
    verification: list[dict] | None = None,
    summary: bool = True,
    modelled_power_w: float | None = None,
) -> BenchmarkRun:
    """A run of `submission` whose trials are `points` [(N, speed, throughput, ttft_p75)],
    judged on `tier_set`'s tiers, with the engine's own search summary (unless `summary` is
    False) and `verification`'s checks as its report (None: no report).

    A validated submission (`submission_validated`) goes the pipeline's way: queued,
    running, then (`status` "done") verifying and in_review, or (`status` "running") left
    running. A submission a test put in another state keeps it and its history: the run is
    stored in `status`, with no lifecycle event.
    """
    piped = submission.status == c.VALIDATED
    if piped and status not in ("done", "running"):
        raise ValueError(f"a dispatched run ends done or is left running, not {status!r}")
    cap = max(p[0] for p in points)
    run = dispatched(
        submission,
        tier_set=tier_set,
        accelerators=accelerators,
        cap=cap,
        dataset=dataset,
        status="pending" if piped else status,
    )
    if piped:
        run = started(run)
    power = Power(measured_w=power_w, modelled_w=modelled_power_w)
    trials = synthetic_trials(run.spec, points, accelerators=accelerators, power=power)
    trials_stored(run, trials)
    names = [t.name for t in run.spec.tiers]
    found = search_summary(trials, names, cap=cap) if summary else {}
    if piped and status == "done":
        finished(run, found, trials=len(trials), checks=verification)
    elif not piped:
        _documents_stored(run, found, verification)
    for name in ("status", "status_reason", "status_changed_at"):  # where the run left it
        setattr(submission, name, getattr(run.submission, name))
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
) -> Result:
    """A Result of a submission taken through the pipeline (`make_run`) and published by
    leaderboard.publishing.result_publish, from a run with synthetic trials."""
    from leaderboard.publishing import result_publish

    model = model or make_model()
    hardware = hardware or make_hardware()
    tier_set = tier_set or make_tier_set()
    submission = make_submission(
        org=org or make_org(),
        model=model,
        hardware=hardware,
        is_simulated=simulated,
        source=source,
        config=config or {},
    )
    run = make_run(
        submission=submission_validated(submission),
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
