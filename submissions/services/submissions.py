"""Creating, withdrawing and resubmitting submissions (the vendor's writes)."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from catalog.models import WORKLOAD_CODING, AIModel, HardwareSystem
from submissions import constants as c
from submissions.models import Organization, PoolEndpoint, RunnerPool, Submission
from submissions.schema import SCHEMA_VERSION, ConfigError, DeploymentConfig, parse_config
from submissions.services.lifecycle import TransitionError, submission_transition
from submissions.signals import submission_validated, submission_withdrawn

log = logging.getLogger(__name__)

WITHDRAWABLE_STATES = tuple(s for s in c.PRE_PUBLISH_STATES)


class IdempotencyConflict(Exception):
    """The idempotency key was already used with a different body."""

    def __init__(self, submission: Submission) -> None:
        super().__init__(
            f"idempotency key already used for submission #{submission.pk} with another body"
        )
        self.submission = submission


def _sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def _actor_label(actor, actor_label: str) -> str:
    if actor_label:
        return actor_label
    return actor.get_username() if actor is not None else "system"


def config_resolve_catalog(
    *, config: DeploymentConfig, org: Organization
) -> tuple[AIModel, HardwareSystem]:
    """The catalog rows a config names, and its allowlisted endpoint; ConfigError otherwise."""
    fields: dict[str, list[str]] = {}
    model = AIModel.objects.filter(slug=config.model.id).first()
    if model is None:
        fields["model.id"] = [f"{config.model.id!r} is not in the model catalog"]
    hardware = HardwareSystem.objects.filter(slug=config.hardware).first()
    if hardware is None:
        fields["topology.roles.0.hardware"] = [
            f"{config.hardware!r} is not in the hardware catalog"
        ]
    if hardware is not None and not config.is_simulated:
        pool = RunnerPool.objects.filter(slug=hardware.runner_pool).first()
        if pool is not None and pool.vendor_operated and pool.operator_org_id != org.pk:
            fields["topology.roles.0.hardware"] = [
                f"{hardware.slug!r} runs on pool {pool.slug!r}, which another organization "
                "operates; only its operator's submissions run there"
            ]
        platform_pool = pool is None or not pool.vendor_operated
        if config.launcher.slurm is not None and not config.engine.image and platform_pool:
            # without an image a Slurm task would run the command bare on the node, with
            # every GPU of it (runner/launchers/slurm.py check_runtime)
            fields["engine.image"] = [
                f"a Slurm launch on platform pool {hardware.runner_pool!r} runs each task in "
                "its pinned image (registry/name@sha256:<digest>); name one. Only a vendor's "
                "own pool runs a command without an image"
            ]
    attached = config.launcher.attached
    if attached is not None and hardware is not None:
        allowed = PoolEndpoint.objects.filter(
            Q(org__isnull=True) | Q(org=org),
            pool=hardware.runner_pool,
            endpoint_id=attached.endpoint_id,
            enabled=True,
        ).exists()
        if not allowed:
            fields["launcher.attached.endpoint_id"] = [
                f"{attached.endpoint_id!r} is not in the allowlist of pool {hardware.runner_pool!r}"
            ]
    # the registries the pools pull from, at submission (the container launcher and every
    # Slurm task pull engine.image), not after a reviewer approved the launch
    pulled = config.launcher.container is not None or config.launcher.slurm is not None
    if pulled and config.engine.image and settings.RUNNER_REGISTRIES:
        from agentperf.launchspec import allowed_registries, image_problem

        problem = image_problem(config.engine.image, allowed_registries(settings.RUNNER_REGISTRIES))
        if problem:
            fields["engine.image"] = [problem]
    if fields:
        raise ConfigError("the config names unknown catalog entries", fields=fields)
    assert model is not None and hardware is not None
    return model, hardware


def _dispatch_on_commit(submission_id: int) -> None:
    """Tell the layers above that a validated submission is committed: `runs` dispatches
    it (`submissions/signals.py`)."""
    transaction.on_commit(
        lambda: submission_validated.send(sender=Submission, submission_id=submission_id)
    )


@dataclass(frozen=True, slots=True)
class Submitted:
    """What an idempotent submit did: the submission, and whether it was a replay of one
    already made with the same key and config (the API answers 200 instead of 201)."""

    submission: Submission
    replayed: bool


def submission_create(**kwargs: Any) -> Submission:
    """`submission_submit` for callers that do not care whether it was a replay."""
    return submission_submit(**kwargs).submission


def submission_submit(
    *,
    org: Organization,
    config_text: str | bytes,
    content_type: str = "application/yaml",
    idempotency_key: str | None = None,
    created_by=None,
    actor_label: str = "",
    source: str = c.SOURCE_VENDOR,
    previous: Submission | None = None,
    workload: str = WORKLOAD_CODING,
) -> Submitted:
    """Validate `config_text` and record a submission that goes on to the runner.

    `workload` is what its run replays (a ladder rung may ask for another than agentic
    coding: docs/ladders.md "Workloads"); not a field of the vendor's config.

    Same `idempotency_key` and the same parsed config (YAML or JSON alike) → the submission
    already made (`Submitted.replayed`); same key with another config →
    IdempotencyConflict. An invalid config raises
    ConfigError (fields by path) and writes nothing. A valid one goes draft → submitted →
    validated and is dispatched after commit.
    """
    digest = _sha256(config_text)
    key = (idempotency_key or "").strip() or None
    config = parse_config(config_text, content_type)
    document = config.model_dump(mode="json")
    if key is not None:
        existing = Submission.objects.filter(org=org, idempotency_key=key).first()
        if existing is not None:
            return _replay(existing, document)
    model, hardware = config_resolve_catalog(config=config, org=org)
    text = config_text.decode("utf-8") if isinstance(config_text, bytes) else config_text
    label = _actor_label(created_by, actor_label)
    user = created_by if getattr(created_by, "pk", None) else None
    try:
        with transaction.atomic():
            submission = Submission.objects.create(
                org=org,
                model=model,
                hardware=hardware,
                config=document,
                config_text=text,
                config_sha256=digest,
                schema_version=SCHEMA_VERSION,
                source=source,
                status=c.DRAFT,
                previous=previous,
                baseline=previous,
                idempotency_key=key,
                is_simulated=config.is_simulated,
                workload=workload,
                created_by=user,
            )
            for to in (c.SUBMITTED, c.VALIDATED):
                submission_transition(
                    submission=submission, to=to, actor=created_by, actor_label=label
                )
            _dispatch_on_commit(submission.pk)
    except IntegrityError:
        # A concurrent request with the same key won the insert; answer as a replay of it.
        if key is None:
            raise
        existing = Submission.objects.filter(org=org, idempotency_key=key).first()
        if existing is None:
            raise
        return _replay(existing, document)
    return Submitted(submission, replayed=False)


def _replay(existing: Submission, document: dict) -> Submitted:
    """The same key with the same *parsed* config is a replay, whatever the encoding (YAML
    or JSON, key order, comments, whitespace); another config is a conflict."""
    if existing.config != document:
        raise IdempotencyConflict(existing)
    return Submitted(existing, replayed=True)


def submission_withdraw(
    *, submission: Submission, actor=None, actor_label: str = "", reason: str = ""
) -> Submission:
    """Withdraw a submission that is not yet published; TransitionError otherwise.

    Final at any moment (docs/security.md "Every run ends"): the row is locked and read
    afresh, so a run that went queued → running since the caller read it is withdrawn from
    where it is now, never lost to a 409; its runs end `cancelled` in the same transaction
    (runs/receivers.py)."""
    label = _actor_label(actor, actor_label)
    with transaction.atomic():
        fresh = Submission.objects.select_for_update().get(pk=submission.pk)
        submission.status = fresh.status
        if submission.status not in WITHDRAWABLE_STATES:
            raise TransitionError(
                f"submission #{submission.pk} is {submission.status!r}; only submissions that "
                "are not yet published or decided can be withdrawn"
            )
        submission_transition(
            submission=submission,
            to=c.WITHDRAWN,
            actor=actor,
            actor_label=label,
            reason=reason or "withdrawn by the vendor",
        )
        submission_withdrawn.send(sender=Submission, submission=submission, label=label)
    return submission


def submission_resubmit(
    *,
    previous: Submission,
    config_text: str | bytes,
    content_type: str = "application/yaml",
    idempotency_key: str | None = None,
    created_by=None,
    actor_label: str = "",
) -> Submitted:
    """A new submission linked to `previous` (its baseline for "what changed").

    A previous submission still on its way (not published, not decided) is withdrawn in
    the same transaction, so one deployment never has two live submissions.
    """
    label = _actor_label(created_by, actor_label)
    with transaction.atomic():
        submitted = submission_submit(
            org=previous.org,
            config_text=config_text,
            content_type=content_type,
            idempotency_key=idempotency_key,
            created_by=created_by,
            actor_label=label,
            source=previous.source,
            previous=previous,
        )
        new = submitted.submission
        if submitted.replayed:
            if new.previous_id != previous.pk:
                raise IdempotencyConflict(new)
            return submitted
        fresh = Submission.objects.select_for_update().get(pk=previous.pk)
        if fresh.status in WITHDRAWABLE_STATES:
            submission_transition(
                submission=fresh,
                to=c.WITHDRAWN,
                actor=created_by,
                actor_label=label,
                reason=f"replaced by resubmission #{new.pk}",
            )
            # its runs end cancelled too (docs/security.md "Every run ends")
            submission_withdrawn.send(sender=Submission, submission=fresh, label=label)
            previous.status = fresh.status
    return submitted
