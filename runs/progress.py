"""What a run's progress says to the vendor (API, portal, CLI): a selector, no writes.

- **Queued** (`pending`): the position on its pool's queue (1 = next), the runs ahead
  (queued before it, plus those running on the queue), and an estimate of the wait from
  the mean wall time of the last finished runs on that queue, one run at a time per pool
  worker (stated in `estimate_basis`); no estimate without history.
- **Finished** (`done` / `failed` / `cancelled`): `phase` and `search_phase` say so; the
  live fields of a search in progress (trial k, N) are dropped, `trials_done` and the last
  trial stay.
- Otherwise the worker's last heartbeat; once the search is over (completing, verifying)
  `search_phase` says `finished` and the live search fields are dropped.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone

from agentperf import contract
from runs.models import BenchmarkRun

LIVE_SEARCH_KEYS = ("search_phase", "trial", "max_trials", "concurrency")
HISTORY_RUNS = 20
# Worker phases after the search (runner/worker/director.py) and the web side's verifying
POST_SEARCH = ("task check (under load)", "completing", "stopping", "verifying")


def progress_settled(progress: contract.Progress | None, phase: str) -> dict[str, Any]:
    """`progress` once the search is over: `phase` (and `search_phase`) set to `phase`,
    the live search fields dropped; the document to store. ``progress``: the run's
    ``last_progress``."""
    kept = (
        progress.model_dump(mode="json", exclude_unset=True, exclude=set(LIVE_SEARCH_KEYS))
        if progress is not None
        else {}
    )
    search_phase = phase if phase in BenchmarkRun.FINAL_STATES else "finished"
    settled = {**kept, "phase": phase, "search_phase": search_phase}
    return contract.Progress.model_validate(settled).dump()


def queue_estimate(run: BenchmarkRun) -> dict[str, Any]:
    """Position, runs ahead and an estimated wait for a pending run."""
    same_queue = BenchmarkRun.objects.filter(queue=run.queue)
    ahead = same_queue.filter(status=BenchmarkRun.STATUS_PENDING).filter(
        Q(created_at__lt=run.created_at) | Q(created_at=run.created_at, pk__lt=run.pk)
    )
    position = ahead.count() + 1
    running = list(
        same_queue.filter(status=BenchmarkRun.STATUS_RUNNING).values_list("started_at", flat=True)
    )
    finished = (
        same_queue.filter(
            status=BenchmarkRun.STATUS_DONE, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list("started_at", "finished_at")[:HISTORY_RUNS]
    )
    durations = [(end - start).total_seconds() for start, end in finished]
    out: dict[str, Any] = {
        "phase": "queued",
        "queue": run.queue,
        "queue_position": position,
        "runs_ahead": position - 1 + len(running),
        "running_on_queue": len(running),
        "estimated_start_s": None,
        "estimate_basis": "no finished run on this queue yet",
    }
    if durations:
        mean = sum(durations) / len(durations)
        now = timezone.now()
        left = sum(max(0.0, mean - (now - s).total_seconds()) for s in running if s is not None)
        out["estimated_start_s"] = round(left + (position - 1) * mean)
        out["estimate_basis"] = (
            f"mean wall time {mean:.0f} s of the last {len(durations)} finished runs on this "
            "queue, one run at a time per worker"
        )
    return contract.QueueEstimate.model_validate(out).dump()


def run_progress(run: BenchmarkRun) -> dict[str, Any]:
    """The progress document the vendor sees for `run`."""
    if run.status == BenchmarkRun.STATUS_PENDING:
        return queue_estimate(run)
    progress = run.last_progress
    if run.status in BenchmarkRun.FINAL_STATES:
        return progress_settled(progress, run.status)
    if progress is None:  # running, nothing beaten yet
        return {}
    if progress.phase in POST_SEARCH:
        return progress_settled(progress, progress.phase)
    return progress.dump()


__all__ = ["progress_settled", "queue_estimate", "run_progress"]
