"""Publishing a verified run as a public Result, and retiring it later.

`result_publish` is the only way a Result is created: `publication_prepare` reads the run's
trials and search summary, hashes its raw files and computes what the public pages show,
outside any transaction; `result_publish` then creates the Result and moves the submission
in_review → published through the lifecycle service in one short transaction
(docs/pipeline.md "Contention").
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentperf import contract
from agentperf.engine import frontier
from agentperf.engine.search import SearchTrial, tier_results
from agentperf.verification.status import FAIL, WARN
from catalog.models import SloTierSet
from catalog.services import default_tier_set_for
from leaderboard import receipts
from leaderboard.energy import result_modelled_power, trial_energy, trial_modelled_energy
from leaderboard.models import Result
from leaderboard.points import Interval, MeasuredEnergy, PublishedPoint, UnmeasuredEnergy
from leaderboard.result_documents import Quality, TierBracket, TwinBand, twin_band
from leaderboard.tasks import result_pages_changed
from runs.models import BenchmarkRun, Trial, VerificationReport
from submissions import constants as c
from submissions.models import Submission
from submissions.services.lifecycle import TransitionError, submission_transition
from submissions.stored_config import StoredConfig, StoredConfigError, StoredSimulated


class PublishError(Exception):
    """The run cannot be published (wrong state, no usable trial, mismatched rows)."""


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _trial_power_w(trial: Trial) -> float | None:
    """Power measured over this trial's window on the runner host, over every accelerator
    the deployment used (leaderboard.energy); None otherwise. Never a modelled figure."""
    return _trial_energy(trial, trial.summary.accelerators).full_power_w


def _trial_energy(trial: Trial, accelerators: int) -> MeasuredEnergy | UnmeasuredEnergy:
    throughput = _num(trial.summary.throughput_per_accelerator)
    return trial_energy(
        trial.window_telemetry,
        accelerators=accelerators,
        throughput_tok_s=throughput * accelerators if throughput is not None else None,
    )


def point_intervals(metrics: contract.TrialMetrics) -> dict[str, Interval]:
    """A trial's session-bootstrap intervals of its frontier point's x and y (engine.stats):
    {"p25_speed": {"low", "high", "confidence"}, "throughput_per_accelerator": {...}}; a
    statistic without a finite interval is left out (trials run with resamples = 0)."""
    out: dict[str, Interval] = {}
    pairs = (
        ("p25_speed", "p25_output_speed"),
        ("throughput_per_accelerator", "throughput_per_accelerator"),
    )
    for key, name in pairs:
        interval = metrics.interval(name)
        if interval is None:
            continue
        low, high = _num(interval.low), _num(interval.high)
        if low is None or high is None or low > high:
            continue
        out[key] = Interval(low=low, high=high, confidence=_num(interval.confidence))
    return out


def _verdicts(trial: Any) -> dict[str, contract.TierVerdict]:
    """A trial's verdicts through the contract: a Trial row's parsed once
    (``Trial.tier_verdicts``), the migration's historical row's parsed here."""
    if isinstance(trial, Trial):
        return trial.tier_verdicts
    return contract.trial_verdicts(trial.verdicts)


def _passed(trial: Any) -> dict[str, bool]:
    """A stored trial's verdict per tier, read through the contract (TierVerdict)."""
    return {name: v.passed for name, v in _verdicts(trial).items()}


def _marginal_tiers(trial: Any) -> set[str]:
    return {name for name, v in _verdicts(trial).items() if v.marginal}


def tier_brackets(
    summary: contract.SearchSummary | None, trials: Iterable[Any], tier_names: list[str]
) -> dict[str, dict]:
    """Per tier, the search's bracket around its max agents and how sure it is:
    {"highest_pass", "lowest_fail" (None: never failed), "confirmed", "marginal", "flags"}.

    The stored document (TierBracket.dump() per tier, leaderboard/result_documents.py).
    From the search summary's tiers (``run.summary``) where stored, else recomputed from
    the trials. ``marginal``: a trial at the highest pass or the lowest
    fail had its verdict for this tier marginal (its bootstrap interval straddled the
    threshold, docs/verification.md "Statistics"). ``trials`` need ``concurrency``,
    ``index``, ``phase`` and ``verdicts`` (a Trial row or the migration's historical one).
    """
    trials = list(trials)
    found: dict[str, contract.TierResult]
    if summary:
        found = summary.tiers
    else:
        search_trials = [
            SearchTrial(
                index=t.index,
                concurrency=t.concurrency,
                phase=t.phase,
                verdicts=_passed(t),
                marginal=sorted(_marginal_tiers(t)),
            )
            for t in trials
        ]
        cap = max((t.concurrency for t in trials), default=1)
        found = {
            name: contract.TierResult.model_validate(r.to_dict())
            for name, r in tier_results(search_trials, tier_names, cap=cap).items()
        }
    marginal_at: dict[str, set[int]] = {}
    for t in trials:
        for name in _marginal_tiers(t):
            marginal_at.setdefault(name, set()).add(t.concurrency)
    out: dict[str, dict] = {}
    for name in tier_names:
        entry = found.get(name)
        if entry is None:
            continue
        flags = list(entry.flags)
        marginal = bool(marginal_at.get(name, set()) & {entry.max_agents, entry.lowest_fail})
        if marginal and "marginal" not in flags:
            flags.append("marginal")
        out[name] = TierBracket(
            highest_pass=entry.max_agents,
            lowest_fail=entry.lowest_fail,
            confirmed=entry.confirmed,
            marginal=marginal,
            flags=flags,
        ).dump()
    return out


def trial_point(
    trial: Trial, *, accelerators: int, power_w: float | None, simulated: bool = False
) -> PublishedPoint | None:
    """The public frontier point of one trial; None when it has no speed or throughput.

    A simulated result's point carries the simulator's modelled power (``modelled_energy``,
    labelled "modelled") and never a measured figure: the host running a twin measures
    nothing of the system it stands for. A measured result's point never carries a
    modelled one."""
    m = trial.summary
    speed = _num(m.p25_output_speed)
    throughput = _num(m.throughput_per_accelerator)
    if speed is None or throughput is None:
        return None
    energy = _trial_energy(trial, accelerators)
    if simulated:
        power_w = None
        energy = UnmeasuredEnergy(
            measured=False, reason="simulated: power is modelled, not measured"
        )
    ttft = {k: _num(v) for k, v in m.ttft_s.items()}
    return PublishedPoint(
        index=trial.index,
        concurrency=trial.concurrency,
        phase=trial.phase,
        p25_speed=speed,
        median_speed=_num(m.median_output_speed),
        ttft_s=ttft,
        ttft_p75_s=ttft.get("p75"),
        throughput_per_accelerator=throughput,
        # cost per output token (leaderboard.cost); absent on points published before it
        output_throughput_per_accelerator=(
            o / accelerators if (o := _num(m.output_throughput_tok_s)) is not None else None
        ),
        agents_per_accelerator=trial.concurrency / accelerators,
        error_rate=_num(m.error_rate),
        cache_hit_ratio=_num(m.cache_hit_ratio),
        mean_in_flight=_num(m.mean_in_flight),
        requests=m.requests,
        power_w=power_w,
        energy=energy,
        modelled_energy=trial_modelled_energy(
            m, simulated=simulated, throughput_tok_s=throughput * accelerators
        ),
        verdicts=_passed(trial),
        intervals=point_intervals(m),
        # the trial's session SLOs (docs/engine.md "Session SLOs"); None: not summarised
        sessions=m.sessions,
        # theoretical and observed cached tokens, ratio, verdict (docs/metrics.md "Cache
        # truth"); None: a trial stored before it was summarised
        cache_truth=m.cache_truth,
    )


def max_agents_of(run: BenchmarkRun, trials: Iterable[Trial], tier_names: list[str]) -> dict:
    """Max agents per tier: the search summary's, else recomputed from the trials."""
    if run.summary is not None:
        return {k: n for k, n in run.summary.max_agents.items() if n > 0}
    search_trials = [
        SearchTrial(index=t.index, concurrency=t.concurrency, phase=t.phase, verdicts=_passed(t))
        for t in trials
    ]
    cap = max((t.concurrency for t in search_trials), default=1)
    results = tier_results(search_trials, tier_names, cap=cap)
    return {name: r.max_agents for name, r in results.items() if r.max_agents > 0}


def default_label(*, hardware_name: str, when: dt.datetime) -> str:
    return f"{hardware_name} now ({when.day} {when:%b})"


def deployment_of(submission: Submission) -> StoredConfig:
    """The submission's stored config as a model; one that does not read (stored before a
    schema it no longer fits) is a PublishError naming the field, never a server error."""
    try:
        return submission.deployment
    except StoredConfigError as exc:
        raise PublishError(f"submission #{submission.pk}: {exc}") from None


def engine_of(submission: Submission) -> tuple[str, str]:
    """(engine name, version) from the stored config's ``engine`` section (the schema's
    Engine: ``name`` and ``version``, agentperf/schema/deployment.py); ("", "") for a
    submission without one."""
    engine = deployment_of(submission).engine
    return engine.name, engine.version


def _tier_set_of(run: BenchmarkRun, submission: Submission) -> SloTierSet:
    tier_set = run.tier_set or default_tier_set_for(submission.model)
    if tier_set is None:
        raise PublishError("no SLO tier set: the run has none and no default set exists")
    return tier_set


def quality_of(report: VerificationReport | None, *, simulated: bool) -> Quality:
    """The result's quality figures from its verification report's quality_distribution."""
    if simulated:
        return Quality(status="simulated", summary="simulated: a twin has no weights to degrade")
    check = report.result("quality_distribution") if report is not None else None
    if check is None:
        return Quality(status="not_measured", summary="quality: not measured")
    if check.status == WARN and "no reference" in check.summary:
        return Quality(status="no_reference", summary=check.summary)
    evidence = check.quality()
    return Quality(
        status=check.status,
        summary=check.summary,
        mean_kl=evidence.mean_kl,
        top1_agreement=evidence.top1_agreement,
        class_=evidence.limits.class_ if evidence.limits is not None else None,
        reference=evidence.deployment,
    )


@dataclass(slots=True)
class Publication:
    """What a publish writes, computed before its transaction: from the run's rows, and
    the raw files as stored, hashed for the receipt. The write transaction then only
    inserts the Result and moves the submission (docs/pipeline.md "Contention")."""

    run_id: int
    report: VerificationReport | None
    tier_set: SloTierSet
    accelerators: int
    in_system: int
    points: list[dict]
    max_agents: dict
    brackets: dict
    per_accel: dict
    agents_per_mw: dict | None
    modelled_power: Any
    engine_name: str
    engine_version: str
    receipt: Any  # receipts.prepare(run): the raw files and their digests, or None


def publication_prepare(*, submission: Submission, run: BenchmarkRun) -> Publication:
    """Everything `result_publish` needs that reads storage or computes, outside any
    transaction: PublishError when the run cannot be published."""
    if run.submission_id != submission.pk:
        raise PublishError(f"run #{run.pk} belongs to submission #{run.submission_id}")
    if run.status != BenchmarkRun.STATUS_DONE:
        raise PublishError(f"run #{run.pk} is {run.status!r}, not done")
    # Every publishing path (review console, admin, demo) refuses a failed verification.
    report = VerificationReport.objects.filter(run=run).first()
    if report is not None and report.status == VerificationReport.STATUS_FAIL:
        failed = [check.name for check in report.results if check.status == FAIL]
        raise PublishError(
            "verification failed (" + ", ".join(failed) + "); reject or re-run instead"
        )
    tier_set = _tier_set_of(run, submission)
    tier_names = [t.name for t in tier_set.tiers.all()]
    trials = list(run.trials.order_by("index"))
    metrics = [t.summary for t in trials]  # each trial's metrics, parsed once
    accelerators = max((m.accelerators for m in metrics), default=0)
    if accelerators < 1:
        raise PublishError(f"run #{run.pk}: no trial says how many accelerators it used")
    totals = [m.accelerators_total for m in metrics if m.accelerators_total is not None]
    in_system = (
        max(totals)
        if totals
        else deployment_of(submission).topology.accelerators_in_system
        or submission.hardware.accelerators_per_system
    )
    published: list[PublishedPoint] = []
    for trial in trials:
        point = trial_point(
            trial,
            accelerators=accelerators,
            power_w=_trial_power_w(trial),
            simulated=submission.is_simulated,
        )
        if point is not None:
            published.append(point)
    if not published:
        raise PublishError(f"run #{run.pk} has no trial with a speed and a throughput")
    candidates = {
        id(p): frontier.Point(p.concurrency, p.p25_speed, p.throughput_per_accelerator)
        for p in published
    }
    on_frontier = set(frontier.pareto_frontier(candidates.values()))
    for p in published:
        p.frontier = candidates[id(p)] in on_frontier
    max_agents = max_agents_of(run, trials, tier_names)
    modelled = result_modelled_power(
        simulated=submission.is_simulated, max_agents=max_agents, points=published
    )
    engine_name, engine_version = engine_of(submission)
    try:  # raw files hashed as stored (docs/verification.md "Receipt")
        prepared = receipts.prepare(run)
    except receipts.ReceiptDataError as exc:
        raise PublishError(f"raw records changed or missing since upload: {exc}") from exc
    return Publication(
        run_id=run.pk,
        report=report,
        tier_set=tier_set,
        accelerators=accelerators,
        in_system=in_system,
        points=[p.dump() for p in published],
        max_agents=max_agents,
        brackets=tier_brackets(run.summary, trials, tier_names),
        per_accel={name: n / accelerators for name, n in max_agents.items()},
        agents_per_mw=_agents_per_mw(max_agents, published),
        modelled_power=modelled.dump() if modelled is not None else None,
        engine_name=engine_name,
        engine_version=engine_version,
        receipt=prepared,
    )


def result_publish(
    *,
    submission: Submission,
    run: BenchmarkRun,
    actor=None,
    label: str | None = None,
    reason: str = "",
    publication: Publication | None = None,
) -> Result:
    """Publish `run` of `submission` (in review) as a Result; the submission becomes published.

    One transaction: the Result row, the conditional lifecycle UPDATE and its AuditEvent
    either all happen or none does. What it writes is computed before it
    (`publication_prepare`, or ``publication`` when the caller prepared it before its own
    transaction), so the write lock is held for the inserts only. Once it commits the page
    cache is bumped and the affected pages are rebuilt in the background
    (`leaderboard.rebuild`), outside the transaction.
    """
    if publication is None:
        publication = publication_prepare(submission=submission, run=run)
    elif publication.run_id != run.pk:
        raise PublishError(f"the publication was prepared for run #{publication.run_id}")
    now = timezone.now()
    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(pk=submission.pk)
        if locked.status != c.IN_REVIEW:
            raise PublishError(
                f"submission #{submission.pk} is {locked.status!r}; only in_review publishes"
            )
        result = Result.objects.create(
            submission=submission,
            run=run,
            model_id=submission.model_id,
            hardware_id=submission.hardware_id,
            tier_set=publication.tier_set,
            label=label or default_label(hardware_name=submission.hardware.name, when=now),
            is_simulated=submission.is_simulated,
            twin_profile=twin_profile(submission),
            workload=submission.workload,
            accelerators_used=publication.accelerators,
            accelerators_in_system=publication.in_system,
            max_agents=publication.max_agents,
            brackets=publication.brackets,
            agents_per_accelerator=publication.per_accel,
            agents_per_mw=publication.agents_per_mw,
            modelled_power=publication.modelled_power,
            band=band.dump() if (band := simulated_band(submission)) else None,
            points=publication.points,
            engine_name=publication.engine_name,
            engine_version=publication.engine_version,
            dataset_sha256=run.dataset.sha256 if run.dataset_id else "",
            quality=quality_of(publication.report, simulated=submission.is_simulated).dump(),
            published_at=now,
        )
        receipts.attach_receipt(result, publication.receipt)
        try:
            submission_transition(
                submission=submission,
                to=c.PUBLISHED,
                actor=actor,
                reason=reason,
                expected_from=c.IN_REVIEW,
                data={"result_id": result.pk, "run_id": run.pk},
            )
        except TransitionError as exc:
            raise PublishError(str(exc)) from exc
        transaction.on_commit(
            functools.partial(result_pages_changed, result_ids=[result.pk], removed=False)
        )
    return result


def _simulated_section(submission: Submission) -> StoredSimulated:
    """The config's `launcher.simulated` section (empty for a measured submission)."""
    if not submission.is_simulated:
        return StoredSimulated()
    return deployment_of(submission).launcher.simulated or StoredSimulated()


def twin_profile(submission: Submission) -> str:
    """The twin profile that served a simulated submission ("" for a measured one): what
    labels its result by the accuracy page's status (docs/simulator.md "Accuracy")."""
    profile = _simulated_section(submission).profile
    if profile is None:
        return ""
    # a profile given by its file (tests, the engine's `sim:PATH`) is named by its stem, as
    # the accuracy page names profiles: never a host's path on a public page
    return (Path(profile).stem if profile.endswith((".yaml", ".yml")) else profile)[:100]


def simulated_band(submission: Submission) -> TwinBand | None:
    """A simulated result's band: its profile's committed band (docs/simulator.md "Bands");
    None for a measured result, a profile without one or one patched by overrides."""
    if not submission.is_simulated:
        return None
    from agentperf.simulator.bands import result_band

    spec = _simulated_section(submission)
    return twin_band(result_band(spec.profile, spec.overrides))


def _agents_per_mw(
    max_agents: dict[str, int], points: list[PublishedPoint]
) -> dict[str, float | None] | None:
    """Agents per MW per tier from the power measured at that tier's max agents.

    None ("not measured") when no trial has measured power; never estimated.
    """
    if not any(p.power_w for p in points):
        return None
    out: dict[str, float | None] = {}
    for name, n in max_agents.items():
        watts = [w for p in points if p.concurrency == n and (w := p.power_w)]
        out[name] = n / (sum(watts) / len(watts) / 1e6) if watts else None
    return out


RETIRE_STATES = {Result.STATUS_SUPERSEDED: c.SUPERSEDED, Result.STATUS_INVALIDATED: c.INVALIDATED}


def result_set_status(*, result: Result, to: str, actor=None, reason: str) -> Result:
    """Supersede or invalidate a published result (reason kept; nothing is deleted)."""
    if to not in RETIRE_STATES:
        raise PublishError(f"a result can only become {' or '.join(RETIRE_STATES)}, not {to!r}")
    if not reason.strip():
        raise PublishError(f"marking a result {to} needs a reason")
    with transaction.atomic():
        updated = Result.objects.filter(pk=result.pk, status=Result.STATUS_PUBLISHED).update(
            status=to, status_reason=reason
        )
        if updated != 1:
            raise PublishError(f"result #{result.pk} is no longer published; nothing changed")
        receipts.sign_status(result_id=result.pk, to=to, reason=reason)
        try:
            submission_transition(
                submission=result.submission,
                to=RETIRE_STATES[to],
                actor=actor,
                reason=reason,
                expected_from=c.PUBLISHED,
                data={"result_id": result.pk},
            )
        except TransitionError as exc:
            raise PublishError(str(exc)) from exc
        transaction.on_commit(
            functools.partial(result_pages_changed, result_ids=[result.pk], removed=True)
        )
    result.status = to
    result.status_reason = reason
    return result
