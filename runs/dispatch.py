"""Dispatch: from a validated submission to a task on its hardware pool's queue.

`run_prepare` decides everything from data in one place (the habit of Read the Docs'
`prepare_build`): it creates the BenchmarkRun, picks the queue `pool.<pool>`, sets the soft
and hard time limits, mints the run token (only its hash is stored), picks the private test
set and builds the run spec the pool worker gets in the task message (with the seed the
pool host derives the run token from: docs/security.md "Run tokens and upload grants"). The worker needs
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

from agentperf import contract
from catalog.datasets import SIZE_SMALL, SIZE_STANDARD, file_sha256, private_test_set
from catalog.services import default_tier_set_for
from core.queues import loadgen_queue, pool_queue
from runs.models import BenchmarkRun
from submissions import constants as c
from submissions.models import LaunchApproval, PoolEndpoint, RunnerPool, Submission
from submissions.services.lifecycle import TransitionError, submission_transition
from submissions.stored_config import (
    LauncherKind,
    StoredAttached,
    StoredConfig,
    StoredConfigError,
    StoredLaunch,
    StoredSecret,
    StoredSimulated,
)

log = logging.getLogger(__name__)

RUN_TOKEN_PREFIX = contract.RUN_TOKEN_PREFIX
SPEC_VERSION = contract.SPEC_VERSION
SIMULATED_POOL = "simulated"
ACTOR = "dispatch"


class DispatchError(Exception):
    """The submission cannot be run as configured (the message is shown to the vendor)."""


def pool_token_key(pool: str) -> str:
    """The key `pool`'s hosts derive run tokens with (settings RUNNER_TOKEN_KEYS, else
    RUNNER_TOKEN_KEY): the same value is the pool hosts' RUNNER_TOKEN_KEY."""
    return str(settings.RUNNER_TOKEN_KEYS.get(pool) or settings.RUNNER_TOKEN_KEY)


def run_token_mint(run: BenchmarkRun, spec: contract.RunSpec | None = None) -> tuple[str, str]:
    """(seed, token hash) of a new token for `run` (docs/security.md "Run tokens and upload
    grants"): the seed goes in the task message, the hash in the database; the token is
    derived here only to hash it, and on the pool host from the seed and the pool's key.
    `spec`: the run's spec when it is at hand (at dispatch), else the stored one."""
    seed = secrets.token_urlsafe(32)
    pool = (spec or run.spec).pool
    return seed, run_token_hash(contract.run_token(pool_token_key(pool), run.pk, seed))


def run_token_for(run: BenchmarkRun, seed: str) -> str:
    """The token a pool host derives from `seed` (what the tests act with)."""
    return contract.run_token(pool_token_key(run.spec.pool), run.pk, seed)


def run_token_hash(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _deployment(submission: Submission) -> StoredConfig:
    """The submission's stored config as a model; a stored document that does not read is
    the vendor's reason (DispatchError)."""
    try:
        return submission.deployment
    except StoredConfigError as exc:
        raise DispatchError(str(exc)) from None


def _launcher(config: StoredConfig) -> LauncherKind:
    kind = config.launcher.kind
    if kind is None:
        raise DispatchError("the config has no launcher")
    return kind


def _stored(value: str | StoredSecret) -> str | dict[str, Any]:
    """An argument or environment value as the run spec carries it: text, or a secret by
    name in its long form."""
    return value if isinstance(value, str) else value.model_dump(exclude_none=True)


def _launched(kind: str, config: StoredConfig) -> dict[str, Any]:
    """The run spec's section for a launcher that starts `launch` (container or process):
    the config's one launch description, as published (docs/security.md "Vendor commands")."""
    launch = config.launch or StoredLaunch()
    required = {
        "command": launch.command,
        "port": launch.port,
        "served_model_name": launch.served_model_name,
    }
    for name, value in required.items():
        if value is None:  # a config stored before the one launch description
            raise DispatchError(f"launch.{name} is missing: resubmit the config in its new shape")
    section: dict[str, Any] = {
        "kind": kind,
        "command": [str(launch.command), *map(_stored, launch.args)],
        "env": {name: _stored(value) for name, value in config.env.items()},
        "port": launch.port,
        "ready_timeout_s": launch.ready_timeout_s or 600,
        "served_model_name": launch.served_model_name,
    }
    if kind == "container":
        section["image"] = config.engine.image
    return section


def _simulated_launcher(spec: StoredSimulated) -> dict[str, Any]:
    from agentperf.simulator.profile import ProfileError, load_profile_with

    if spec.profile is None:
        raise DispatchError("launcher.simulated.profile is missing")
    overrides = spec.overrides or None
    try:
        profile = load_profile_with(spec.profile, overrides)
    except ProfileError as exc:
        raise DispatchError(f"simulator profile {spec.profile!r}: {exc}") from exc
    small = profile.accelerators_used <= settings.SIM_REALTIME_MAX_ACCELERATORS
    launcher: dict[str, Any] = {
        "kind": "simulated",
        "profile": spec.profile,
        "seed": spec.seed,
        "clock": "real" if small else "virtual",
        "served_model_name": profile.served_model_names[0],
        "profile_label": profile.label + (" with overrides" if overrides else ""),
        "accelerators_used": profile.accelerators_used,
        "accelerators_total": profile.accelerators_total,
    }
    if overrides:  # docs/simulator.md "Overrides"
        launcher["overrides"] = overrides
    return launcher


def _attached_launcher(submission: Submission, spec: StoredAttached) -> dict[str, Any]:
    pool = submission.hardware.runner_pool
    endpoint = PoolEndpoint.objects.filter(
        Q(org__isnull=True) | Q(org=submission.org),
        pool=pool,
        endpoint_id=spec.endpoint_id,
        enabled=True,
    ).first()
    if endpoint is None:
        raise DispatchError(
            f"endpoint {spec.endpoint_id!r} is not in the allowlist of pool {pool!r}"
        )
    return {
        "kind": "attached",
        "endpoint_id": endpoint.endpoint_id,
        "url": endpoint.url,
        "api_key_env": endpoint.api_key_env,
        "served_model_name": spec.served_model_name,
    }


def _slurm_launcher(submission: Submission) -> dict[str, Any]:
    """The run spec's `slurm` section: the topology's roles with the command each role's
    tasks run (docs/pipeline.md "Slurm"); the runner's own reading of a config, so a job
    rendered outside the platform (`python -m runner.launchers.slurm render`) is the same.
    It reads the stored document as the vendor's file would read."""
    from agentperf.launchspec import launcher_section

    return launcher_section(dict(submission.config or {}))


def launcher_spec(submission: Submission) -> tuple[str, dict[str, Any]]:
    """(pool, the run spec's launcher section) for `submission`."""
    config = _deployment(submission)
    kind = _launcher(config)  # the one kind launch_gate judges too
    if kind == "simulated" and config.launcher.simulated is not None:
        return SIMULATED_POOL, _simulated_launcher(config.launcher.simulated)
    pool = submission.hardware.runner_pool
    if kind == "attached" and config.launcher.attached is not None:
        return pool, _attached_launcher(submission, config.launcher.attached)
    if kind == "slurm":
        return pool, _slurm_launcher(submission)
    return pool, _launched(kind, config)


def launch_identity(submission: Submission) -> dict[str, Any] | None:
    """What a reviewer approves for a `container` or `process` launch, canonical (None for
    other kinds): the launcher, the command with its arguments (secrets by name), the
    environment (names, clear values, secrets by name), the port and the image digest. Any
    change gives another digest. The stored fields only (`exclude_unset`): a default read
    into the model never changes a digest a reviewer approved."""
    try:
        config = _deployment(submission)
    except DispatchError:  # nothing that could run (dispatch refuses it with the reason)
        return None
    topology = config.topology
    if config.launcher.slurm:  # a Slurm launch runs the vendor's commands on the pool's cluster
        return {
            "kind": "slurm",
            "pool": submission.hardware.runner_pool,
            "launcher": config.launcher.slurm,
            "roles": (
                [r.model_dump(exclude_unset=True) for r in topology.roles]
                if "roles" in topology.model_fields_set
                else None
            ),
            "image": config.engine.image,
        }
    try:
        kind = _launcher(config)
        if kind not in ("container", "process"):
            return None
        section = _launched(kind, config)
    except DispatchError:  # nothing that could run (dispatch refuses it with the reason)
        return None
    return {
        "kind": kind,
        "pool": submission.hardware.runner_pool,
        "command": section["command"],
        "env": dict(sorted(section["env"].items())),
        "port": section["port"],
        "image": config.engine.image,
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
    if _launcher(_deployment(submission)) == "simulated":
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
    """The settings' search options, the pool's overrides, then the vendor's cap and
    arrival mode."""
    options = copy.deepcopy(settings.RUN_SEARCH_OPTIONS)
    key = pool
    if launcher["kind"] == "simulated":
        key = f"simulated-{'realtime' if launcher['clock'] == 'real' else 'virtual'}"
    options.update(settings.RUN_SEARCH_OPTIONS_BY_POOL.get(key) or {})
    benchmark = _deployment(submission).benchmark
    if benchmark.max_concurrency:
        options["cap"] = min(int(options["cap"]), benchmark.max_concurrency)
    if benchmark.arrival:  # the open loop beside the closed (docs/engine.md)
        options["arrival"] = benchmark.arrival
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


def dataset_size(submission: Submission, pool: str, launcher: contract.Launcher) -> str:
    if isinstance(launcher, contract.SimulatedLauncher) and launcher.clock == "real":
        return SIZE_SMALL
    if _deployment(submission).engine.name == "llamacpp" or pool == "local-cpu":
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
    topology = _deployment(submission).topology
    total = topology.accelerators_in_system or submission.hardware.accelerators_per_system
    out: dict[str, Any] = {"used": topology.used, "total": int(total) if total else None}
    if launcher.get("kind") in ("process", "container"):
        # the devices the pool host grants a launched server: accelerators_per_worker for each
        # engine worker (docs/security.md "Devices")
        per_worker = [
            role.accelerators_per_worker
            for role in topology.roles
            for _ in range(min(role.workers, 1025))
        ]
        if 0 < len(per_worker) <= 1024 and sum(per_worker) == out["used"]:
            out["per_worker"] = per_worker
    return out


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


def spec_message(
    spec: contract.RunSpec,
    *,
    dataset: contract.DatasetRef,
    api: contract.ApiRef | None = None,
) -> contract.RunSpec:
    """The task message's spec: the run's spec plus what is never stored, the private test
    set's section with its fresh presigned URL and the runner API's (its base URL and the
    token's seed); nothing is validated again (docs/pipeline.md "The contract")."""
    update: dict[str, Any] = {"dataset": dataset}
    if api is not None:
        update["api"] = api
    return spec.model_copy(update=update)


def run_spec_message(
    run: BenchmarkRun, seed: str, spec: contract.RunSpec | None = None
) -> dict[str, Any]:
    """The JSON task message of `run`: its spec (`spec` at dispatch, else the stored one)
    with the token's seed and fresh presigned URLs."""
    message = spec_message(
        spec or run.spec,
        dataset=contract.DatasetRef(**dataset_section(run)),
        api=contract.ApiRef(base_url=runner_api_url(run), seed=seed),
    )
    return message.dump()


def run_spec_build(fields: dict[str, Any], run_id: int) -> contract.RunSpec:
    """The run spec of `fields` (everything but the run id) as a contract document; a
    DispatchError naming each field that does not fit (a settings or catalog mistake)."""
    try:
        return contract.RunSpec.model_validate({"run_id": run_id, **fields})
    except ValidationError as exc:
        raise DispatchError(
            f"the run spec does not fit the contract: {contract.error_fields(exc)}"
        ) from None


# The pool host's task (runner/worker/tasks.py), named, not imported: the web side never
# imports the runtime (docs/architecture.md "Packages"); tests/pipeline sends it through.
EXECUTE_RUN_TASK = "runner.execute_run"


def run_signature(run: BenchmarkRun, seed: str, spec: contract.RunSpec | None = None) -> Signature:
    """The task that executes `run`: its message (run_spec_message) on the pool's queue,
    with the run's time limits."""
    return Signature(
        EXECUTE_RUN_TASK,
        args=[run_spec_message(run, seed, spec)],
        queue=run.queue,
        soft_time_limit=run.soft_time_limit_s,
        time_limit=run.time_limit_s,
    )


def run_spec_for(
    submission: Submission,
    *,
    pool: str,
    launcher: dict[str, Any],
    tier_set: contract.TierSetRef,
    tiers: list[dict[str, Any]],
) -> contract.RunSpec:
    """The run spec of `submission`, validated once, here (its run id 0 until the run
    exists): the launcher's section, the search options with their time limits, the
    accelerators, the load generation and the tiers. Reads no table for a simulated or
    launched submission; secret-free (the token's seed and presigned URLs are added per
    message: spec_message)."""
    search = search_options(submission, pool, launcher)
    soft, hard = time_limits(search, launcher)
    fields = {
        "version": SPEC_VERSION,
        "submission_id": submission.pk,
        "pool": pool,
        "launcher": launcher,
        "model": {
            "slug": submission.model.slug,
            "served_model_name": launcher["served_model_name"],
        },
        "tier_set": tier_set,
        "tiers": tiers,
        "accelerators": accelerators(submission, launcher),
        "search": search,
        "loadgen": loadgen_section(pool, search),
        "heartbeat_interval_s": settings.RUN_HEARTBEAT_INTERVAL_S,
        "telemetry_interval_s": 1.0,
        "limits": {"soft_s": soft, "hard_s": hard},
        "simulated": launcher["kind"] == "simulated",
    }
    return run_spec_build(fields, 0)  # refused before a run exists


def spec_of(
    submission: Submission, *, tier_set: contract.TierSetRef, tiers: list[dict[str, Any]]
) -> contract.RunSpec:
    """The run spec of `submission` before its run exists (run id 0): its pool and launcher
    section (`launcher_spec`) and everything `run_spec_for` adds, validated once. What
    `run_prepare` stores, and what the verification harness runs without a database
    (tests/verification/harness.py)."""
    pool, launcher = launcher_spec(submission)
    return run_spec_for(submission, pool=pool, launcher=launcher, tier_set=tier_set, tiers=tiers)


def run_prepare(*, submission: Submission) -> tuple[BenchmarkRun, Signature]:
    """Create the run of `submission` and the task signature that executes it."""
    tier_set = default_tier_set_for(submission.model, submission.workload)
    if tier_set is None or not tier_set.tiers.exists():
        raise DispatchError(f"no SLO tier set for model {submission.model.slug!r}")
    spec = spec_of(
        submission,
        tier_set=contract.TierSetRef(slug=tier_set.slug, version=tier_set.version),
        tiers=tier_set.as_engine_tiers(),
    )
    dataset = private_test_set(
        size=dataset_size(submission, spec.pool, spec.launcher), workload=submission.workload
    )
    run = BenchmarkRun.objects.create(
        submission=submission,
        dataset=dataset,
        tier_set=tier_set,
        status=BenchmarkRun.STATUS_PENDING,
        queue=pool_queue(spec.pool),
        soft_time_limit_s=spec.limits.soft_s,
        time_limit_s=spec.limits.hard_s,
    )
    spec = spec.model_copy(update={"run_id": run.pk})  # the one field it did not know
    run.run_spec = spec.stored()
    seed, run.token_hash = run_token_mint(run, spec)
    run.save(update_fields=["run_spec", "token_hash"])
    return run, run_signature(run, seed, spec)


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
    with transaction.atomic():
        locked = BenchmarkRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != BenchmarkRun.STATUS_RUNNING:
            raise TransitionError(f"run #{run.pk} is {locked.status}; only running runs requeue")
        seed, token_hash = run_token_mint(locked)
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
        signature = run_signature(locked, seed)
        transaction.on_commit(signature.apply_async)
    return locked
