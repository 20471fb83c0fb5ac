"""Writes on runs, called by the runner API (ingest), the reaper and the review actions.

Every run state change is a conditional UPDATE or happens under `select_for_update`, and
every submission state change goes through the lifecycle service, so a redelivered task,
a retried HTTP call or a second worker does nothing twice.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Protocol

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from agentperf import contract
from core.contention import is_contention
from runs.models import BenchmarkRun, Trial, VerificationReport
from runs.progress import progress_settled
from submissions import constants as c
from submissions.models import Artifact
from submissions.services.lifecycle import TransitionError, audit_record, submission_transition

log = logging.getLogger(__name__)

ACTOR = "runner"
VERIFY_HASH_MAX_BYTES = 256 * 1024 * 1024


class RunConflict(Exception):
    """The call does not fit the run's state (stale attempt, finished run, index gap).

    ``run_status``: the run's final state when it is final, so the runner API can tell the
    worker how its run ended (the `X-Run-Status` header, docs/pipeline.md "Runner API")."""

    def __init__(self, message: str, *, run_status: str | None = None) -> None:
        super().__init__(message)
        self.run_status = run_status


def final_status(run: BenchmarkRun) -> str | None:
    return run.status if run.status in BenchmarkRun.FINAL_STATES else None


class RunInvalid(Exception):
    """The payload is wrong (missing raw records, bad sizes); the message says what."""


def _stored_tier_names(run: BenchmarkRun) -> list[str]:
    """The tiers of the run's stored spec ([] for a run never dispatched); a spec stored by
    another contract version is a conflict the runner is told about, never a 500."""
    if not run.run_spec:
        return []
    try:
        return [t.name for t in run.spec.tiers]
    except ValidationError as exc:
        raise RunConflict(
            f"run #{run.pk}'s stored spec does not fit the contract ({exc.error_count()} "
            "problems): dispatch it again"
        ) from exc


def _locked(run: BenchmarkRun) -> BenchmarkRun:
    return BenchmarkRun.objects.select_for_update().select_related("submission").get(pk=run.pk)


def _check_attempt(run: BenchmarkRun, attempt: int | None) -> None:
    if run.status != BenchmarkRun.STATUS_RUNNING:
        raise RunConflict(
            f"run #{run.pk} is {run.status}, not running", run_status=final_status(run)
        )
    if attempt != run.attempt:
        raise RunConflict(
            f"attempt {attempt} of run #{run.pk} was superseded by attempt {run.attempt}"
        )


def search_trial_dict(trial: Trial) -> dict[str, Any]:
    """A stored trial in the engine's SearchTrial shape (what `prior_trials` takes), its
    verdicts read through the contract (docs/pipeline.md "The contract")."""
    verdicts = trial.tier_verdicts
    return {
        "index": trial.index,
        "concurrency": trial.concurrency,
        "phase": trial.phase,
        "verdicts": {name: v.passed for name, v in verdicts.items()},
        "marginal": sorted(name for name, v in verdicts.items() if v.marginal),
        "data": {"summary": trial.metrics, "verdicts": trial.verdicts},
    }


def run_start(*, run: BenchmarkRun, runner_info: contract.RunnerInfo) -> BenchmarkRun:
    """A worker took the run: pending → running (queued → running), or a redelivered task
    resumes a running run under a new attempt number (the old attempt is fenced off)."""
    now = timezone.now()
    with transaction.atomic():
        # Locks the run and its submission (one SELECT … FOR UPDATE over the join), so a
        # concurrent withdrawal either saw `queued` before this or waits for it and then
        # withdraws from `running`: either way the run ends cancelled (docs/security.md
        # "Every run ends").
        locked = _locked(run)
        submission = locked.submission
        if locked.status in BenchmarkRun.FINAL_STATES:
            raise RunConflict(
                f"run #{locked.pk} is already {locked.status}", run_status=locked.status
            )
        withdrawn = submission.status == c.WITHDRAWN
        if withdrawn:  # committed, then refused (raising here would roll it back)
            BenchmarkRun.objects.filter(pk=locked.pk).update(
                status=BenchmarkRun.STATUS_CANCELLED,
                finished_at=now,
                error=f"cancelled: submission #{submission.pk} was withdrawn",
            )
    if withdrawn:
        raise RunConflict(
            f"submission #{submission.pk} was withdrawn", run_status=BenchmarkRun.STATUS_CANCELLED
        )
    with transaction.atomic():
        locked = _locked(run)
        submission = locked.submission
        if locked.status in BenchmarkRun.FINAL_STATES:
            raise RunConflict(
                f"run #{locked.pk} is already {locked.status}", run_status=locked.status
            )
        if submission.status == c.WITHDRAWN:
            raise RunConflict(f"submission #{submission.pk} was withdrawn")
        resumed = locked.status == BenchmarkRun.STATUS_RUNNING or locked.attempt > 0
        if submission.status == c.QUEUED:
            submission_transition(
                submission=submission,
                to=c.RUNNING,
                actor_label=ACTOR,
                data={"run_id": locked.pk, "attempt": locked.attempt + 1},
            )
        elif submission.status != c.RUNNING:
            raise RunConflict(f"submission #{submission.pk} is {submission.status}")
        locked.status = BenchmarkRun.STATUS_RUNNING
        locked.attempt += 1
        locked.started_at = locked.started_at or now
        locked.heartbeat_at = now
        locked.runner_host = runner_info.hostname[:200]
        locked.runner_info = runner_info.dump()
        locked.progress = {"phase": "starting", "attempt": locked.attempt}
        locked.save(
            update_fields=[
                "status",
                "attempt",
                "started_at",
                "heartbeat_at",
                "runner_host",
                "runner_info",
                "progress",
            ]
        )
        if resumed:
            audit_record(
                actor_label=ACTOR,
                obj=locked,
                action="run_resumed",
                reason=f"attempt {locked.attempt} resumes after {locked.trials.count()} trials",
                data={"attempt": locked.attempt, "runner_host": locked.runner_host},
            )
    return locked


def run_heartbeat(*, run: BenchmarkRun, attempt: int | None, progress: contract.Progress) -> bool:
    """Record a beat; True when the worker should stop (the submission was withdrawn)."""
    fresh = BenchmarkRun.objects.select_related("submission").get(pk=run.pk)
    _check_attempt(fresh, attempt)
    updated = BenchmarkRun.objects.filter(
        pk=run.pk, status=BenchmarkRun.STATUS_RUNNING, attempt=attempt
    ).update(heartbeat_at=timezone.now(), progress=progress.dump())
    if updated != 1:
        raise RunConflict(f"run #{run.pk} changed while beating")
    return fresh.submission.status == c.WITHDRAWN


def run_record_qualification(
    *, run: BenchmarkRun, attempt: int | None, report: contract.QualificationReport
) -> None:
    with transaction.atomic():
        locked = _locked(run)
        _check_attempt(locked, attempt)
        locked.qualification = [check.dump() for check in report.checks]
        locked.runner_info = {**(locked.runner_info or {}), **report.runner_info.dump()}
        locked.save(update_fields=["qualification", "runner_info"])


# A load-generator shard's raw records (docs/engine.md "Sharded trials"): transient, the
# coordinator merges them into the trial's raw records.
SHARD_RECORDS = "shard_records"
SHARD_TRIAL_ID = re.compile(r"^t\d{1,4}a\d{1,3}$")


def shard_key(run: BenchmarkRun, trial_id: str, shard: int, suffix: str = ".jsonl.gz") -> str:
    if not SHARD_TRIAL_ID.match(trial_id):
        raise RunInvalid("trial_id must look like t<index>a<attempt>")
    if not 0 <= shard < 4096:
        raise RunInvalid("shard must be in [0, 4096)")
    return f"runs/{run.pk}/a{run.attempt}/shards/{trial_id}/shard-{shard:04d}{suffix}"


def upload_key(
    run: BenchmarkRun,
    *,
    kind: str,
    trial_index: int | None,
    trial_id: str | None = None,
    shard: int | None = None,
) -> str:
    if kind == SHARD_RECORDS:
        if trial_id is None or shard is None:
            raise RunInvalid("shard records need a trial_id and a shard")
        return shard_key(run, trial_id, shard)
    if kind == Artifact.KIND_RAW_RECORDS:
        if trial_index is None:
            raise RunInvalid("raw records need a trial_index")
        return f"runs/{run.pk}/a{run.attempt}/raw/trial-{trial_index:03d}.jsonl.gz"
    if kind == Artifact.KIND_LOG:
        return f"runs/{run.pk}/a{run.attempt}/logs/launcher.log.gz"
    raise RunInvalid(f"unknown upload kind {kind!r}")


def _stored_matches(key: str, *, sha256: str, size: int) -> None:
    """The object is in storage with the declared size and sha256; RunInvalid otherwise."""
    storage = storages["artifacts"]
    if not storage.exists(key):
        raise RunInvalid(f"{key} is not in storage; upload it before reporting it")
    actual = storage.size(key)
    if actual != size:
        raise RunInvalid(f"{key} is {actual} bytes in storage, {size} declared")
    if size <= VERIFY_HASH_MAX_BYTES:
        with storage.open(key, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        if digest != sha256:
            raise RunInvalid(f"{key}: stored sha256 {digest} differs from the declared one")


def _artifact_for(
    run: BenchmarkRun, *, kind: str, ref: contract.ArtifactRef, checked: bool = False
) -> Artifact:
    """The Artifact row of an uploaded object, made once. ``checked``: the object's size
    and sha256 in storage were already checked, before the caller's transaction
    (`_artifact_checked`): storage is never read under the write lock."""
    key = ref.key
    if not key.startswith(f"runs/{run.pk}/"):
        raise RunInvalid(f"{key!r} is not a key of run #{run.pk}")
    sha256, size = ref.sha256, ref.size
    existing = Artifact.objects.filter(storage_key=key).first()
    if existing is not None:
        if existing.sha256 != sha256:
            raise RunInvalid(f"{key} was already recorded with other content")
        return existing
    if not checked:
        _stored_matches(key, sha256=sha256, size=size)
    return Artifact.objects.create(
        kind=kind,
        storage_key=key,
        sha256=sha256,
        size=size,
        content_type="application/gzip",
        org=run.submission.org,
        run=run,
    )


def _artifact_checked(run: BenchmarkRun, ref: contract.ArtifactRef) -> None:
    """Before a write transaction: the object of ``ref`` is this run's and in storage as
    declared (unless already recorded); RunInvalid otherwise."""
    if not ref.key.startswith(f"runs/{run.pk}/"):
        raise RunInvalid(f"{ref.key!r} is not a key of run #{run.pk}")
    if not Artifact.objects.filter(storage_key=ref.key).exists():
        _stored_matches(ref.key, sha256=ref.sha256, size=ref.size)


def run_record_trial(
    *, run: BenchmarkRun, attempt: int | None, report: contract.TrialReport
) -> tuple[Trial, bool]:
    """Store one finished trial; (trial, created). The same index twice stores it once.

    What is stored is the report's own documents (docs/pipeline.md "The contract"): the
    metrics, the verdicts (one per tier of the run spec) and the window's telemetry. The raw
    records are read back from storage before the write transaction, not under its lock
    (docs/pipeline.md "Contention")."""
    index = report.index
    if not Trial.objects.filter(run_id=run.pk, index=index).exists():
        _artifact_checked(run, report.raw_records)
    with transaction.atomic():
        locked = _locked(run)
        existing = Trial.objects.filter(run=locked, index=index).first()
        if existing is not None:
            same = existing.concurrency == report.concurrency and existing.phase == report.phase
            if not same:
                raise RunConflict(f"trial {index} of run #{run.pk} is stored with other data")
            return existing, False
        _check_attempt(locked, attempt)
        count = Trial.objects.filter(run=locked).count()
        if index != count:
            raise RunConflict(f"run #{run.pk} has {count} trials; the next index is {count}")
        tiers = _stored_tier_names(locked)
        if sorted(report.verdicts) != sorted(tiers):
            raise RunInvalid(
                f"the verdicts name tiers {sorted(report.verdicts)}; the run's tiers are "
                f"{sorted(tiers)}"
            )
        artifact = _artifact_for(
            locked, kind=Artifact.KIND_RAW_RECORDS, ref=report.raw_records, checked=True
        )
        trial = trial_row(locked, report)
        trial.raw_records_key = artifact.storage_key
        trial.raw_records_sha256 = artifact.sha256
        trial.raw_records_count = report.raw_records.count
        try:
            trial.save(force_insert=True)
        except IntegrityError as exc:  # a concurrent identical post won the insert
            raise RunConflict(f"trial {index} of run #{run.pk} was stored concurrently") from exc
    return trial, True


class TrialDocuments(Protocol):
    """What a trial row is made of: a worker's `contract.TrialReport` less its raw records
    (test builders' synthetic trials have the same attributes: demo/synthetic.py)."""

    @property
    def index(self) -> int: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def phase(self) -> str: ...
    @property
    def metrics(self) -> contract.TrialMetrics: ...
    @property
    def verdicts(self) -> Mapping[str, contract.TierVerdict]: ...
    @property
    def telemetry(self) -> contract.TrialTelemetry: ...


def trial_row(run: BenchmarkRun, report: TrialDocuments) -> Trial:
    """The (unsaved) trial row of a report's documents, in `run`'s current attempt; the
    caller sets its raw records and saves it (`run_record_trial`)."""
    return Trial(
        run=run,
        index=report.index,
        concurrency=report.concurrency,
        phase=report.phase,
        window_start_s=report.metrics.window_start_ns / 1e9,
        window_end_s=report.metrics.window_end_ns / 1e9,
        metrics=report.metrics.dump(),
        verdicts={name: v.dump() for name, v in report.verdicts.items()},
        telemetry=report.telemetry.dump(),
        attempt=run.attempt,
    )


def run_fail(
    *, run: BenchmarkRun, reason: str, attempt: int | None = None, actor_label: str = ACTOR
) -> BenchmarkRun:
    """The run failed for good: run failed, submission → failed with the reason."""
    now = timezone.now()
    with transaction.atomic():
        locked = _locked(run)
        if attempt is not None:
            _check_attempt(locked, attempt)
        if locked.status in BenchmarkRun.FINAL_STATES:
            raise RunConflict(
                f"run #{locked.pk} is already {locked.status}", run_status=locked.status
            )
        submission = locked.submission
        withdrawn = submission.status == c.WITHDRAWN
        locked.status = BenchmarkRun.STATUS_CANCELLED if withdrawn else BenchmarkRun.STATUS_FAILED
        locked.error = reason[:5000]
        locked.finished_at = now
        locked.save(update_fields=["status", "error", "finished_at"])
        if submission.status in (c.QUEUED, c.RUNNING, c.VERIFYING):
            submission_transition(
                submission=submission,
                to=c.FAILED,
                actor_label=actor_label,
                reason=reason[:5000],
                data={"run_id": locked.pk, "attempt": locked.attempt},
            )
    return locked


def completion_repeats(
    run: BenchmarkRun, attempt: int | None, report: contract.CompletionReport
) -> bool:
    """True when ``report`` is the completion this run already finished with, from the
    attempt that sent it: a retry whose first answer was lost (a 503, a dropped connection,
    a worker killed mid-call). It changes nothing and is answered as the first was."""
    return (
        run.status == BenchmarkRun.STATUS_DONE
        and attempt == run.attempt
        and run.search_summary == report.search_summary.dump()
        and run.telemetry == report.telemetry.dump()
    )


def run_complete(
    *, run: BenchmarkRun, attempt: int | None, report: contract.CompletionReport
) -> BenchmarkRun:
    """The search finished: running → verifying → (verification report) → in_review.

    Refused unless every trial's raw records are in storage: nothing is marked done on
    numbers whose evidence is missing.

    Idempotent and resumable (docs/pipeline.md "Contention"): storage is read and the
    verification computed outside the write transactions, which are short and conditional;
    the same completion sent again is a no-op once the run is done, and resumes the
    verification when an earlier call stopped after storing the completion (its answer
    lost, a 503, the worker killed). The reaper finishes such a run if nobody sends it
    again (`reap_stale_runs`).
    """
    fresh = BenchmarkRun.objects.select_related("submission").get(pk=run.pk)
    if completion_repeats(fresh, attempt, report):
        return fresh
    _check_attempt(fresh, attempt)
    if fresh.submission.status != c.VERIFYING:
        _completion_accept(fresh, attempt=attempt, report=report)
    return run_verify(run=fresh, attempt=attempt)


def _completion_accept(
    run: BenchmarkRun, *, attempt: int | None, report: contract.CompletionReport
) -> None:
    """running → verifying with the completion's documents, its evidence checked first."""
    trials = list(run.trials.order_by("index"))
    if not trials:
        raise RunInvalid("a run cannot complete without trials")
    storage = storages["artifacts"]
    missing = [t.index for t in trials if not t.raw_records_key]
    missing += [
        t.index for t in trials if t.raw_records_key and not storage.exists(t.raw_records_key)
    ]
    if missing:
        raise RunInvalid(f"raw records of trials {sorted(set(missing))} are not in storage")
    for log_ref in report.logs:
        _artifact_checked(run, log_ref)
    with transaction.atomic():
        locked = _locked(run)
        _check_attempt(locked, attempt)
        if locked.submission.status == c.VERIFYING:  # a concurrent call stored it first
            return
        if locked.trials.count() != len(trials):
            raise RunConflict(f"run #{run.pk} got a trial while completing; complete again")
        for log_ref in report.logs:
            _artifact_for(locked, kind=Artifact.KIND_LOG, ref=log_ref, checked=True)
        completion_store(
            locked,
            documents={
                "search_summary": report.search_summary.dump(),
                "telemetry": report.telemetry.dump(),
                "runner_info": {**(locked.runner_info or {}), **report.runner_info.dump()},
            },
            trials=len(trials),
        )


def completion_store(run: BenchmarkRun, *, documents: dict[str, Any], trials: int) -> None:
    """running → verifying: the completion's `documents` (run fields: the search summary,
    the host telemetry, the runner info) stored on `run` and its submission moved on. The
    step `run_complete` ends with, on a run it has checked and locked; test builders make
    their completed runs with it too (demo/synthetic.py)."""
    for name, value in documents.items():
        setattr(run, name, value)
    run.progress = progress_settled(run.last_progress, "verifying")
    run.heartbeat_at = timezone.now()
    run.save(update_fields=[*documents, "progress", "heartbeat_at"])
    submission_transition(
        submission=run.submission,
        to=c.VERIFYING,
        actor_label=ACTOR,
        expected_from=c.RUNNING,
        data={"run_id": run.pk, "trials": trials},
    )


def run_verify(
    *, run: BenchmarkRun, attempt: int | None = None, actor_label: str = "verification"
) -> BenchmarkRun:
    """A stored completion's verification: the report computed outside any transaction
    (it reads the raw records and the dataset), then stored with run → done and submission
    verifying → in_review in one short one. A run another call finished meanwhile is
    returned as it is. A crash of the verification fails the run with the reason; a
    database that stayed busy leaves it verifying for a retry (core/contention.py)."""
    from runs.verification_report import verification_checks, verification_store

    # as stored now: a completion just stored its documents (telemetry, the inventory) on
    # another instance of this run
    run = BenchmarkRun.objects.select_related("submission").get(pk=run.pk)
    try:
        checks = verification_checks(run)
    except Exception as exc:
        if is_contention(exc):
            raise
        log.exception("verification of run #%s failed", run.pk)
        run_fail(run=run, reason=f"verification failed: {type(exc).__name__}: {exc}")
        raise
    with transaction.atomic():
        locked = _locked(run)
        if locked.status == BenchmarkRun.STATUS_DONE and locked.submission.status != c.VERIFYING:
            return locked
        _check_attempt(locked, attempt if attempt is not None else locked.attempt)
        if locked.submission.status != c.VERIFYING:
            raise RunConflict(f"submission #{locked.submission_id} is not verifying")
        run_verified(
            locked, report=verification_store(run=locked, checks=checks), actor_label=actor_label
        )
    return locked


def run_verified(
    run: BenchmarkRun, *, report: VerificationReport | None, actor_label: str = "verification"
) -> None:
    """verifying → in_review with the run done: the step `run_verify` ends with once its
    `report` is stored, on a run it has locked (None: a run whose report was never made,
    as test builders leave some: demo/synthetic.py)."""
    run.status = BenchmarkRun.STATUS_DONE
    run.finished_at = timezone.now()
    run.progress = progress_settled(run.last_progress, BenchmarkRun.STATUS_DONE)
    run.save(update_fields=["status", "finished_at", "progress"])
    submission_transition(
        submission=run.submission,
        to=c.IN_REVIEW,
        actor_label=actor_label,
        expected_from=c.VERIFYING,
        data={"run_id": run.pk, "verification": report.status if report else None},
    )


def run_cancel(*, run: BenchmarkRun, reason: str, actor_label: str = ACTOR) -> bool:
    """pending/running → cancelled with a finish time (a conditional UPDATE, so a worker's
    report and the reaper cannot both do it). True when this call cancelled it."""
    now = timezone.now()
    with transaction.atomic():
        updated = BenchmarkRun.objects.filter(
            pk=run.pk, status__in=(BenchmarkRun.STATUS_PENDING, BenchmarkRun.STATUS_RUNNING)
        ).update(status=BenchmarkRun.STATUS_CANCELLED, finished_at=now, error=reason[:5000])
        if updated:
            audit_record(actor_label=actor_label, obj=run, action="run_cancelled", reason=reason)
    return bool(updated)


def stale_runs(*, now: dt.datetime | None = None, stale_s: int | None = None):
    now = now or timezone.now()
    cutoff = now - dt.timedelta(seconds=stale_s or settings.RUN_HEARTBEAT_STALE_S)
    return BenchmarkRun.objects.filter(status=BenchmarkRun.STATUS_RUNNING, heartbeat_at__lt=cutoff)


def reap_stale_runs(
    *, now: dt.datetime | None = None, stale_s: int | None = None, max_attempts: int | None = None
) -> list[tuple[int, str]]:
    """Runs whose heartbeat is older than RUN_HEARTBEAT_STALE_S are retried (a new message
    with a new token; the search resumes from the stored trials) or, after
    RUN_MAX_ATTEMPTS attempts, failed with the reason; one whose completion is stored is
    verified instead (`_reap_verifying`). Returns [(run id, action)]."""
    from runs.dispatch import run_requeue

    limit = max_attempts or settings.RUN_MAX_ATTEMPTS
    stale = stale_s or settings.RUN_HEARTBEAT_STALE_S
    actions: list[tuple[int, str]] = []
    actions += _reap_withdrawn()
    for run in stale_runs(now=now, stale_s=stale).select_related("submission"):
        last = run.heartbeat_at.isoformat() if run.heartbeat_at else "never"
        if run.submission.status == c.WITHDRAWN:
            if run_cancel(
                run=run, reason=f"withdrawn; no heartbeat since {last}", actor_label="reaper"
            ):
                actions.append((run.pk, "cancelled"))
            continue
        if run.submission.status == c.VERIFYING:
            actions += _reap_verifying(run)
            continue
        try:
            if run.attempt < limit:
                reason = (
                    f"no heartbeat for over {stale} s (last {last}); retrying, attempt "
                    f"{run.attempt + 1} of {limit} resumes from {run.trials.count()} stored trials"
                )
                run_requeue(run=run, reason=reason)
                actions.append((run.pk, "retried"))
            else:
                reason = (
                    f"no heartbeat for over {stale} s (last {last}) after {run.attempt} "
                    "attempts; the runner host or its worker is gone"
                )
                run_fail(run=run, reason=reason, actor_label="reaper")
                actions.append((run.pk, "failed"))
        except (TransitionError, RunConflict) as exc:  # changed under us: next pass decides
            log.info("reaper skipped run #%s: %s", run.pk, exc)
    actions += _reap_never_started(now or timezone.now())
    return actions


def _reap_verifying(run: BenchmarkRun) -> list[tuple[int, str]]:
    """A stale run whose completion is stored but not verified: its worker was killed
    mid-completion, or its retries ran out while the database was busy. Nothing is left
    to run; the reaper verifies it as the completion would have, so the run ends as its
    worker reported it (docs/pipeline.md "Contention"), never requeued or failed."""
    try:
        run_verify(run=run)
    except (TransitionError, RunConflict) as exc:  # finished meanwhile: nothing to do
        log.info("reaper skipped run #%s: %s", run.pk, exc)
        return []
    except Exception as exc:
        if is_contention(exc):  # busy: the next pass verifies it
            log.info("reaper left run #%s verifying: %s", run.pk, exc)
            return []
        return [(run.pk, "failed")]  # run_verify failed the run with the reason
    return [(run.pk, "verified")]


def _reap_withdrawn() -> list[tuple[int, str]]:
    """Pending runs of withdrawn submissions: nothing will ever start them."""
    actions: list[tuple[int, str]] = []
    pending = BenchmarkRun.objects.filter(
        status=BenchmarkRun.STATUS_PENDING, submission__status=c.WITHDRAWN
    )
    for run in pending:
        if run_cancel(run=run, reason="the submission was withdrawn", actor_label="reaper"):
            actions.append((run.pk, "cancelled"))
    return actions


def _reap_never_started(now: dt.datetime) -> list[tuple[int, str]]:
    """Fail runs left pending (never started, or requeued and never restarted) for longer
    than RUN_PENDING_STALE_S: no pool worker took their message."""
    wait = settings.RUN_PENDING_STALE_S
    cutoff = now - dt.timedelta(seconds=wait)
    pending = BenchmarkRun.objects.filter(
        status=BenchmarkRun.STATUS_PENDING, created_at__lt=cutoff
    ).filter(Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff))
    actions: list[tuple[int, str]] = []
    for run in pending.select_related("submission"):
        reason = (
            f"no pool worker started this run within {wait} s on queue '{run.queue}' "
            "(its pool is offline or the message was lost); submit it again"
        )
        try:
            run_fail(run=run, reason=reason, actor_label="reaper")
            actions.append((run.pk, "failed"))
        except (TransitionError, RunConflict) as exc:
            log.info("reaper skipped run #%s: %s", run.pk, exc)
    return actions


def run_store_shard_report(
    *,
    run: BenchmarkRun,
    attempt: int | None,
    report: contract.ShardReport,
) -> str:
    """Store a shard's report (``contract.ShardReport``) beside its uploaded records
    (checked against the declared digest); the coordinator reads both back. Returns the
    records' key."""
    if run.status != BenchmarkRun.STATUS_RUNNING or attempt != run.attempt:
        raise RunConflict(f"attempt {attempt} of run #{run.pk} may not report shards")
    key = shard_key(run, report.trial_id, report.shard)
    _stored_matches(key, sha256=report.sha256, size=report.size)
    body = json.dumps(report.dump()).encode()
    storage = storages["artifacts"]
    report_key = shard_key(run, report.trial_id, report.shard, ".report.json")
    if storage.exists(report_key):
        storage.delete(report_key)
    storage.save(report_key, ContentFile(body))
    return key


def run_shard_reports(*, run: BenchmarkRun, trial_id: str, shards: int) -> list[dict[str, Any]]:
    """The stored reports of ``trial_id``'s shards (those that reported so far)."""
    if not 1 <= shards <= 4096:
        raise RunInvalid("shards must be in [1, 4096]")
    storage = storages["artifacts"]
    out = []
    for s in range(shards):
        report_key = shard_key(run, trial_id, s, ".report.json")
        if not storage.exists(report_key):
            continue
        with storage.open(report_key, "rb") as fh:
            try:
                report = contract.ShardReport.model_validate_json(fh.read())
            except ValidationError as exc:  # stored before a contract change: say so, no 500
                raise RunConflict(
                    f"shard {s}'s stored report does not fit the contract "
                    f"({exc.error_count()} problems); the shard must report again"
                ) from exc
        out.append({**report.dump(), "key": shard_key(run, trial_id, s)})
    return out
