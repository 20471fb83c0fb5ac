"""Dispatch: from a validated submission to a task on its hardware pool's queue.

`run_prepare` decides everything from data in one place (the habit of Read the Docs'
`prepare_build`): it creates the BenchmarkRun, picks the queue `pool.<pool>`, sets the soft
and hard time limits, mints the run token (only its hash is stored), picks the private test
set and builds the run spec the pool worker gets in the task message. The worker needs
nothing else: no database, no settings of the web tier.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import secrets
from typing import Any
from urllib.parse import urljoin

from celery.canvas import Signature
from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from pydantic import ValidationError

from catalog.datasets import SIZE_SMALL, SIZE_STANDARD, file_sha256, private_test_set
from catalog.services import default_tier_set_for
from core.queues import loadgen_queue, pool_queue
from runner import contract
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import LaunchApproval, PoolEndpoint, RunnerPool, Submission
from submissions.services.lifecycle import TransitionError, submission_transition

log = logging.getLogger(__name__)

RUN_TOKEN_PREFIX = "aprun_"
SPEC_VERSION = contract.SPEC_VERSION
SIMULATED_POOL = "simulated"
ACTOR = "dispatch"


class DispatchError(Exception):
    """The submission cannot be run as configured (the message is shown to the vendor)."""


def run_token_mint() -> tuple[str, str]:
    """A new run token and its sha256; only the hash is stored."""
    plaintext = RUN_TOKEN_PREFIX + secrets.token_urlsafe(32)
    return plaintext, run_token_hash(plaintext)


def run_token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _launcher(config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    launcher = config.get("launcher") or {}
    for kind in ("attached", "process", "simulated"):
        if launcher.get(kind):
            return kind, dict(launcher[kind])
    raise DispatchError("the config has no launcher")


def _simulated_launcher(spec: dict[str, Any]) -> dict[str, Any]:
    from runner.simulator.profile import ProfileError, load_profile_with

    overrides = spec.get("overrides") or None
    try:
        profile = load_profile_with(spec["profile"], overrides)
    except ProfileError as exc:
        raise DispatchError(f"simulator profile {spec['profile']!r}: {exc}") from exc
    small = profile.accelerators_used <= settings.SIM_REALTIME_MAX_ACCELERATORS
    launcher = {
        "kind": "simulated",
        "profile": spec["profile"],
        "seed": int(spec.get("seed") or 0),
        "clock": "real" if small else "virtual",
        "served_model_name": profile.served_model_names[0],
        "profile_label": profile.label + (" with overrides" if overrides else ""),
        "accelerators_used": profile.accelerators_used,
        "accelerators_total": profile.accelerators_total,
    }
    if overrides:  # docs/simulator.md "Overrides"
        launcher["overrides"] = overrides
    return launcher


def _attached_launcher(submission: Submission, spec: dict[str, Any]) -> dict[str, Any]:
    pool = submission.hardware.runner_pool
    endpoint = PoolEndpoint.objects.filter(
        Q(org__isnull=True) | Q(org=submission.org),
        pool=pool,
        endpoint_id=spec.get("endpoint_id"),
        enabled=True,
    ).first()
    if endpoint is None:
        raise DispatchError(
            f"endpoint {spec.get('endpoint_id')!r} is not in the allowlist of pool {pool!r}"
        )
    return {
        "kind": "attached",
        "endpoint_id": endpoint.endpoint_id,
        "url": endpoint.url,
        "api_key_env": endpoint.api_key_env,
        "served_model_name": spec["served_model_name"],
    }


def launcher_spec(submission: Submission) -> tuple[str, dict[str, Any]]:
    """(pool, the run spec's launcher section) for `submission`."""
    kind, spec = _launcher(submission.config or {})
    if kind == "simulated":
        return SIMULATED_POOL, _simulated_launcher(spec)
    pool = submission.hardware.runner_pool
    if kind == "attached":
        return pool, _attached_launcher(submission, spec)
    return pool, {
        "kind": "process",
        "command": list(spec["command"]),
        "env": dict(spec.get("env") or {}),
        "port": int(spec["port"]),
        "ready_timeout_s": int(spec.get("ready_timeout_s") or 600),
        "served_model_name": spec["served_model_name"],
    }


def launch_identity(submission: Submission) -> dict[str, Any] | None:
    """What a reviewer approves for a `process` launch, canonical (None for other kinds):
    the command with its arguments (secrets by name), the environment (names, clear values,
    secrets by name), the port and the image digest. Any change gives another digest."""
    config = submission.config or {}
    process = (config.get("launcher") or {}).get("process")
    if not process:
        return None
    return {
        "kind": "process",
        "pool": submission.hardware.runner_pool,
        "command": list(process.get("command") or []),
        "env": dict(sorted((process.get("env") or {}).items())),
        "port": process.get("port"),
        "image": (config.get("engine") or {}).get("image"),
    }


def launch_digest(identity: dict[str, Any]) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def launch_gate(submission: Submission) -> str | None:
    """Who may run this submission's launch where (docs/security.md "Vendor commands").

    Raises DispatchError when a vendor-operated pool belongs to another organization;
    returns the launch digest that still needs a reviewer's approval, or None when the
    submission may run now (no launched process, a vendor on its own pool, or an approval
    of exactly this launch on a platform pool)."""
    kind, _ = _launcher(submission.config or {})
    if kind == "simulated":
        return None
    pool = RunnerPool.objects.filter(slug=submission.hardware.runner_pool).first()
    if pool is not None and pool.vendor_operated:
        if pool.operator_org_id != submission.org_id:
            raise DispatchError(
                f"pool {pool.slug!r} is operated by another organization; only its "
                "operator's submissions run there"
            )
        return None
    identity = launch_identity(submission)
    if identity is None:
        return None
    digest = launch_digest(identity)
    return None if launch_approval(submission, identity) is not None else digest


def launch_approval(submission: Submission, identity: dict[str, Any]) -> LaunchApproval | None:
    """The live approval of exactly this launch of this organization on this pool."""
    return (
        LaunchApproval.objects.filter(
            pool=identity["pool"],
            org_id=submission.org_id,
            launch_sha256=launch_digest(identity),
            revoked_at__isnull=True,
        )
        .select_related("approved_by")
        .first()
    )


def search_options(submission: Submission, pool: str, launcher: dict[str, Any]) -> dict[str, Any]:
    """The settings' search options, the pool's overrides, then the vendor's cap."""
    options = copy.deepcopy(settings.RUN_SEARCH_OPTIONS)
    key = pool
    if launcher["kind"] == "simulated":
        key = f"simulated-{'realtime' if launcher['clock'] == 'real' else 'virtual'}"
    options.update(settings.RUN_SEARCH_OPTIONS_BY_POOL.get(key) or {})
    vendor_cap = ((submission.config or {}).get("benchmark") or {}).get("max_concurrency")
    if vendor_cap:
        options["cap"] = min(int(options["cap"]), int(vendor_cap))
    return options


def loadgen_section(pool: str, search: dict[str, Any]) -> dict[str, Any]:
    """How the pool worker generates load (docs/engine.md "Sharded trials"): ``shards`` per
    trial (K or "auto"), in local processes, or on the pool's load-generator hosts (the
    search option ``loadgen_hosts``) through the ``loadgen.<pool>`` queue."""
    hosts = [str(h) for h in search.get("loadgen_hosts") or []]
    return {
        "shards": search.get("shards", 1),
        "hosts": hosts,
        "queue": loadgen_queue(pool) if hosts else None,
    }


def dataset_size(submission: Submission, pool: str, launcher: dict[str, Any]) -> str:
    engine = ((submission.config or {}).get("engine") or {}).get("name")
    if launcher["kind"] == "simulated" and launcher["clock"] == "real":
        return SIZE_SMALL
    if engine == "llamacpp" or pool == "local-cpu":
        return SIZE_SMALL
    return SIZE_STANDARD


def time_limits(search: dict[str, Any], launcher: dict[str, Any]) -> tuple[int, int]:
    """(soft, hard) seconds: the longest this run's search can take, within the settings."""
    per_trial = (
        float(search["warmup_s"])
        + float(search["duration_s"])
        + min(float(search["request_timeout_s"]), 300.0)
    )
    estimate = int(
        float(launcher.get("ready_timeout_s") or 120) + int(search["max_trials"]) * per_trial + 600
    )
    hard = max(120, min(settings.RUN_HARD_TIME_LIMIT_S, estimate))
    soft = max(60, hard - min(300, hard // 10))
    return soft, hard


def accelerators(submission: Submission, launcher: dict[str, Any]) -> dict[str, Any]:
    topology = (submission.config or {}).get("topology") or {}
    used = topology.get("accelerators_used")
    if not used:
        used = sum(
            int(r.get("workers", 1)) * int(r.get("accelerators_per_worker", 1))
            for r in topology.get("roles") or []
        )
    total = topology.get("accelerators_in_system") or submission.hardware.accelerators_per_system
    return {"used": int(used or 1), "total": int(total) if total else None}


def runner_api_url(run: BenchmarkRun) -> str:
    base = settings.RUNNER_API_BASE_URL.rstrip("/") + "/"
    return urljoin(base, reverse("runner-api-root", kwargs={"run_id": run.pk}).lstrip("/"))


def storage_get_url(key: str, storage: str = "datasets") -> str:
    """A presigned (S3) or signed (filesystem) GET URL, absolute for the runner host."""
    url = storages[storage].url(key, expire=settings.RUN_PRESIGN_SECONDS)
    if url.startswith("/"):
        url = settings.RUNNER_API_BASE_URL.rstrip("/") + url
    return url


def dataset_url(key: str) -> str:
    return storage_get_url(key, "datasets")


def dataset_section(run: BenchmarkRun) -> dict[str, Any]:
    dataset = run.dataset
    return {
        "name": dataset.name,
        "version": dataset.version,
        "sha256": dataset.sha256,
        "file_sha256": file_sha256(dataset),
        "size": dataset.size,
        "url": dataset_url(dataset.storage_key),
    }


def run_spec_message(run: BenchmarkRun, token: str) -> dict[str, Any]:
    """The stored spec plus what must not be stored: the token and fresh presigned URLs,
    as one contract document (docs/pipeline.md "The contract")."""
    spec = copy.deepcopy(run.run_spec)
    spec["api"] = {"base_url": runner_api_url(run), "token": token}
    spec["dataset"] = dataset_section(run)
    return contract.RunSpec.model_validate(spec).dump()


def run_spec_build(fields: dict[str, Any], run_id: int) -> contract.RunSpec:
    """The run spec of `fields` (everything but the run id) as a contract document; a
    DispatchError naming each field that does not fit (a settings or catalog mistake)."""
    try:
        return contract.RunSpec.model_validate({"run_id": run_id, **fields})
    except ValidationError as exc:
        raise DispatchError(
            f"the run spec does not fit the contract: {contract.error_fields(exc)}"
        ) from None


def run_signature(run: BenchmarkRun, token: str) -> Signature:
    from runner.worker.tasks import execute_run

    return execute_run.signature(
        args=[run_spec_message(run, token)],
        queue=run.queue,
        soft_time_limit=run.soft_time_limit_s,
        time_limit=run.time_limit_s,
    )


def run_prepare(*, submission: Submission) -> tuple[BenchmarkRun, Signature]:
    """Create the run of `submission` and the task signature that executes it."""
    pool, launcher = launcher_spec(submission)
    tier_set = default_tier_set_for(submission.model)
    if tier_set is None or not tier_set.tiers.exists():
        raise DispatchError(f"no SLO tier set for model {submission.model.slug!r}")
    search = search_options(submission, pool, launcher)
    dataset = private_test_set(
        size=dataset_size(submission, pool, launcher), workload=submission.workload
    )
    soft, hard = time_limits(search, launcher)
    # Secret-free: the token and presigned URLs are added per message (run_spec_message).
    fields = {
        "version": SPEC_VERSION,
        "submission_id": submission.pk,
        "pool": pool,
        "launcher": launcher,
        "model": {
            "slug": submission.model.slug,
            "served_model_name": launcher["served_model_name"],
        },
        "tier_set": {"slug": tier_set.slug, "version": tier_set.version},
        "tiers": tier_set.as_engine_tiers(),
        "accelerators": accelerators(submission, launcher),
        "search": search,
        "loadgen": loadgen_section(pool, search),
        "heartbeat_interval_s": settings.RUN_HEARTBEAT_INTERVAL_S,
        "telemetry_interval_s": 1.0,
        "limits": {"soft_s": soft, "hard_s": hard},
        "simulated": launcher["kind"] == "simulated",
    }
    run_spec_build(fields, 0)  # refused before a run exists
    token, token_hash = run_token_mint()
    run = BenchmarkRun.objects.create(
        submission=submission,
        dataset=dataset,
        tier_set=tier_set,
        status=BenchmarkRun.STATUS_PENDING,
        queue=pool_queue(pool),
        token_hash=token_hash,
        soft_time_limit_s=soft,
        time_limit_s=hard,
    )
    run.run_spec = run_spec_build(fields, run.pk).stored()
    run.save(update_fields=["run_spec"])
    return run, run_signature(run, token)


# validated: first run; awaiting_approval: a reviewer approved the launch; failed /
# in_review: a re-run decided by a reviewer or operator.
DISPATCHABLE_STATES = (c.VALIDATED, c.AWAITING_APPROVAL, c.FAILED, c.IN_REVIEW)


def submission_dispatch(*, submission: Submission) -> BenchmarkRun | None:
    """→ queued with a new run, enqueued once committed. Idempotent: a submission that is
    not dispatchable any more (already queued, running, decided) is left alone (None)."""
    with transaction.atomic():
        locked = Submission.objects.select_for_update().get(pk=submission.pk)
        if locked.status not in DISPATCHABLE_STATES:
            log.info("submission #%s is %s; not dispatched", locked.pk, locked.status)
            return None
        try:
            needs_approval = launch_gate(locked)
            if needs_approval is not None:
                if locked.status != c.AWAITING_APPROVAL:
                    submission_transition(
                        submission=locked,
                        to=c.AWAITING_APPROVAL,
                        actor_label=ACTOR,
                        reason="the launch waits for a reviewer's approval before it runs",
                        data={"launch_sha256": needs_approval},
                    )
                submission.status = locked.status
                return None
            run, signature = run_prepare(submission=locked)
        except DispatchError as exc:
            if locked.status != c.FAILED:
                submission_transition(submission=locked, to=c.QUEUED, actor_label=ACTOR)
            else:
                raise
            submission_transition(
                submission=locked, to=c.FAILED, actor_label=ACTOR, reason=f"dispatch: {exc}"
            )
            submission.status = locked.status
            return None
        submission_transition(
            submission=locked,
            to=c.QUEUED,
            actor_label=ACTOR,
            data={"run_id": run.pk, "queue": run.queue},
        )
        transaction.on_commit(signature.apply_async)
    submission.status = locked.status
    return run


def run_requeue(*, run: BenchmarkRun, reason: str, actor_label: str = "reaper") -> BenchmarkRun:
    """Send `run` again with a fresh token (the old attempt's token stops working), after a
    worker died or went silent. The search resumes from the stored trials."""
    token, token_hash = run_token_mint()
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != BenchmarkRun.STATUS_RUNNING:
            raise TransitionError(f"run #{run.pk} is {locked.status}; only running runs requeue")
        locked.status = BenchmarkRun.STATUS_PENDING
        locked.token_hash = token_hash
        locked.error = reason
        locked.save(update_fields=["status", "token_hash", "error"])
        submission_transition(
            submission=locked.submission,
            to=c.QUEUED,
            actor_label=actor_label,
            reason=reason,
            expected_from=c.RUNNING,
            data={"run_id": locked.pk, "attempt": locked.attempt},
        )
        signature = run_signature(locked, token)
        transaction.on_commit(signature.apply_async)
    return locked
