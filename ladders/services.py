"""Ladders on the platform (docs/ladders.md): submit, measure every rung as a run, attribute,
review once, publish.

- ``ladder_create``: a baseline (a config, or a published result of the same organization)
  plus ordered changes, each a JSON Merge Patch of the deployment config; every rung's
  config is validated by the deployment-config schema, an error naming the rung and path
  (``rungs.2.patch.speculative.draft_tokens``). Every rung runs on the same hardware pool
  with the same search settings (a patch may not touch ``benchmark`` or the hardware); the
  dataset, tier set and seed are the pool's and dispatch's, the same for every rung. A rung
  whose config equals an already verified submission of the organization reuses its run;
  rungs with equal configs share one submission.
- ``ladder_refresh``: once every rung's run is verified (its submission in review or
  published), the attribution is computed from the stored trials (raw records read back
  for the session bootstrap) with the runner's ladder maths (``agentperf.ladder.attribute``).
  Called by the ``ladders.refresh`` task when a rung's submission changes state
  (``ladders/receivers.py``, ``ladders/tasks.py``) and by the review: a read never moves a
  ladder on.
- ``ladder_review``: one decision for the whole ladder; approving publishes every rung
  still in review.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from agentperf.engine import rawrecords
from agentperf.ladder.attribute import TrialMeasure, attribute, bootstrap_trial, ladder_document
from agentperf.ladder.measure import server_figures_parsed
from agentperf.ladder.plan import RungConfig, RungPlan
from agentperf.ladder.spec import Change, LadderSpec, TrialPlan
from agentperf.mergepatch import merge_patch, patch_paths
from catalog.models import WORKLOAD_CODING
from ladders.models import Ladder, LadderRung
from ladders.schema import BaselineConfig, BaselineResult, LadderBody, Rung
from ladders.schema import error_fields as ladder_body_errors
from leaderboard.purge import purge_on_commit
from runs.models import BenchmarkRun, Trial
from submissions import constants as c
from submissions.models import Organization, Submission
from submissions.schema import ConfigError, parse_config
from submissions.services.lifecycle import audit_record

# identical conditions: the search settings and the model; the hardware (hence the pool) is
# checked on each rung's config, so a rung may change the topology on the same system
FIXED_PATHS = ("benchmark", "model.id")
RESAMPLES = 200


class LadderError(ConfigError):
    """A ladder body that cannot be accepted; ``fields`` names each path."""


def _err(path: str, message: str) -> LadderError:
    return LadderError(f"{path}: {message}", fields={path: [message]})


def _sha(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def _baseline(
    org: Organization, baseline: BaselineConfig | BaselineResult
) -> tuple[dict[str, Any], str, str]:
    if isinstance(baseline, BaselineConfig):
        config = baseline.config
        if isinstance(config, str):
            try:
                config = parse_config(config, "application/yaml").model_dump(mode="json")
            except ConfigError as exc:
                raise _prefixed(exc, "baseline.config.", None) from None
        if not isinstance(config, dict):
            raise _err("baseline.config", "a deployment config (mapping or YAML text)")
        return config, baseline.name or "baseline", WORKLOAD_CODING
    from leaderboard.models import Result

    result = (
        Result.objects.filter(pk=baseline.result, submission__org=org)
        .select_related("submission")
        .first()
    )
    if result is None:
        raise _err(
            "baseline.result", f"no published result {baseline.result!r} of your organization"
        )
    return (
        dict(result.submission.config),
        baseline.name or result.label,
        result.submission.workload,
    )


def _prefixed(exc: ConfigError, prefix: str, owner: Any) -> LadderError:
    """A rung's schema errors under the field that set each path: ``rungs.j.patch.P`` for
    the latest applied change touching P (``owner(P)``), else ``baseline.config.P``."""
    fields: dict[str, list[str]] = {}
    for path, messages in (exc.fields or {"": [exc.message]}).items():
        j = owner(path) if owner is not None else None
        name = f"rungs.{j}.patch.{path}" if j is not None else f"{prefix}{path}"
        fields.setdefault(name.rstrip("."), []).extend(messages)
    first = next(iter(fields))
    return LadderError(f"{first}: {fields[first][0]}", fields=fields)


def _no_clear_secrets(body: dict[str, Any]) -> None:
    """A ladder is public once published: its and its rungs' names and descriptions go
    through the config's secret detector (each rung's patch does, in its rung's config)
    (docs/security.md "Secrets in configs")."""
    from agentperf.schema.secrets import clear_secrets

    texts: dict[str, Any] = {k: body[k] for k in ("name", "description") if k in body}
    rungs = body.get("rungs")
    for i, rung in enumerate(rungs if isinstance(rungs, list) else []):
        if isinstance(rung, dict):
            texts[f"rungs.{i}"] = {k: rung[k] for k in ("name", "description") if k in rung}
    found = clear_secrets(texts)
    if found:
        first = next(iter(found))
        raise LadderError(f"{first}: {found[first][0]}", fields=found)


def _changes(rungs: list[Rung]) -> list[dict[str, Any]]:
    """The rungs' changes (each named once: the body's model checks it), leaving the fixed
    paths alone (identical conditions)."""
    out = []
    for i, rung in enumerate(rungs):
        change = rung.change()
        for path in patch_paths(change["patch"]):
            if any(
                path == f or path.startswith(f + ".") or f.startswith(path + ".")
                for f in FIXED_PATHS
            ):
                raise _err(
                    f"rungs.{i}.patch.{path}",
                    "every rung runs on the same hardware, model and search settings "
                    "(identical conditions); this field may not change",
                )
        out.append(change)
    return out


def _rung_workload(baseline: str, changes: list[dict[str, Any]], applied: list[int]) -> str:
    """The workload of a rung: the latest applied change that names one, else the
    baseline's (docs/ladders.md "Workloads")."""
    named = [changes[i]["workload"] for i in applied if "workload" in changes[i]]
    return named[-1] if named else baseline


def _applied_for(order: str, n: int) -> list[tuple[str, str, int | None, list[int]]]:
    """(name kind, description kind, change, applied) per rung of ``order``."""
    rows: list[tuple[str, str, int | None, list[int]]] = [("baseline", "", None, [])]
    if order in ("forward", "reverse"):
        idx = list(range(n)) if order == "forward" else list(range(n - 1, -1, -1))
        rows += [("change", "", i, idx[: k + 1]) for k, i in enumerate(idx)]
    else:
        rows.append(("all", "", None, list(range(n))))
        rows += [("but", "", i, [j for j in range(n) if j != i]) for i in range(n)]
    return rows


def _rung_config(
    baseline: dict[str, Any],
    changes: list[dict[str, Any]],
    applied: list[int],
    hardware: str | None = None,
) -> dict[str, Any]:
    """The rung's config: the baseline with the ``applied`` changes, validated; its
    hardware must be ``hardware`` (identical conditions: the same system, hence pool)."""
    config = baseline
    for i in applied:
        config = merge_patch(config, changes[i]["patch"])

    def owner(path: str) -> int | None:
        for i in reversed(applied):
            for p in patch_paths(changes[i]["patch"]):
                if path == p or path.startswith(p + ".") or p.startswith(path + "."):
                    return i
        return None

    try:
        parsed = parse_config(json.dumps(config), "application/json")
    except ConfigError as exc:
        raise _prefixed(exc, "baseline.config.", owner) from None
    if hardware is not None and parsed.hardware != hardware:
        j = owner("topology.roles")
        where = f"rungs.{j}.patch.topology.roles" if j is not None else "baseline.config.topology"
        raise _err(
            where,
            f"every rung runs on the baseline's hardware {hardware!r} (identical conditions), "
            f"not {parsed.hardware!r}",
        )
    return parsed.model_dump(mode="json")


def _reusable(org: Organization, sha: str, workload: str) -> Submission | None:
    """An earlier submission of the org with this exact config and workload whose run was
    verified."""
    subs = Submission.objects.filter(
        org=org, status__in=(c.IN_REVIEW, c.PUBLISHED), workload=workload
    )
    for sub in subs:
        if _sha(sub.config) == sha and sub.runs.filter(verification__isnull=False).exists():
            return sub
    return None


def _validated_body(org: Organization, body: Any) -> LadderBody:
    """The body as the ladder document, or a LadderError naming every field at fault (a
    well-formed baseline naming no result of the org among them)."""
    if isinstance(body, dict):
        _no_clear_secrets(body)
    try:
        return LadderBody.model_validate(body)
    except ValidationError as exc:
        fields = ladder_body_errors(exc)
        raw = body.get("baseline") if isinstance(body, dict) else None
        if (
            isinstance(raw, dict)
            and "result" in raw
            and not any(f.startswith("baseline") for f in fields)
        ):
            try:  # a well-formed baseline that names no result of the org is named too
                _baseline(org, BaselineResult.model_validate(raw))
            except LadderError as missing:
                fields = {**(missing.fields or {}), **fields}
        first = next(iter(fields))
        raise LadderError(f"{first}: {fields[first][0]}", fields=fields) from None


@dataclass(frozen=True)
class _PlannedRung:
    """One rung of one order, validated before anything is written."""

    order: str
    index: int
    name: str
    description: str
    change: int | None
    applied: list[int]
    config: dict[str, Any]
    workload: str


def _planned_rungs(
    orders: list[str],
    baseline: dict[str, Any],
    baseline_name: str,
    baseline_workload: str,
    changes: list[dict[str, Any]],
) -> list[_PlannedRung]:
    """Every rung of every order with its validated config, all on the baseline's hardware
    (identical conditions)."""
    hardware = parse_config(
        json.dumps(_rung_config(baseline, changes, [])), "application/json"
    ).hardware
    planned: list[_PlannedRung] = []
    for order in orders:
        for k, (kind, _, change, applied) in enumerate(_applied_for(order, len(changes))):
            config = _rung_config(baseline, changes, applied, hardware)
            if kind == "baseline":
                rung_name, desc = baseline_name, "baseline"
            elif kind == "all":
                rung_name, desc = "all changes", "every change applied"
            else:
                assert change is not None
                ch = changes[change]
                rung_name = ch["name"] if kind == "change" else f"all but {ch['name']}"
                desc = ch["description"]
            workload = _rung_workload(baseline_workload, changes, applied)
            planned.append(
                _PlannedRung(order, k, rung_name, desc, change, applied, config, workload)
            )
    return planned


def _create_rungs(
    ladder: Ladder, org: Organization, planned: list[_PlannedRung], created_by: Any
) -> int:
    """The ladder's rungs, one submission per distinct (config, workload): equal rungs share
    a run, and a config already verified for the org reuses its submission. Returns the
    number of submissions the rungs name."""
    from submissions.services.submissions import submission_create

    by_sha: dict[tuple[str, str], tuple[Submission, bool]] = {}
    for rung in planned:
        sha = _sha(rung.config)
        # what identifies a rung's measurement: its config, and its workload when not
        # the benchmark's (a workload change alone leaves the config as it was)
        digest = sha if rung.workload == WORKLOAD_CODING else _sha([rung.config, rung.workload])
        if (sha, rung.workload) not in by_sha:
            prior = _reusable(org, sha, rung.workload)
            if prior is not None:
                by_sha[sha, rung.workload] = (prior, True)
            else:
                sub = submission_create(
                    org=org,
                    config_text=json.dumps(rung.config),
                    content_type="application/json",
                    created_by=created_by,
                    workload=rung.workload,
                )
                by_sha[sha, rung.workload] = (sub, False)
        sub, reused = by_sha[sha, rung.workload]
        LadderRung.objects.create(
            ladder=ladder,
            order=rung.order,
            index=rung.index,
            name=rung.name,
            description=rung.description,
            change=rung.change,
            applied=rung.applied,
            config=rung.config,
            config_sha256=digest,
            submission=sub,
            reused=reused,
        )
    return len(by_sha)


def ladder_create(*, org: Organization, body: Any, created_by: Any = None) -> Ladder:
    """Validate the whole ladder (every rung of every order) and create its rungs'
    submissions; nothing is written when any rung is invalid."""
    from submissions.services.submissions import config_resolve_catalog

    doc = _validated_body(org, body)
    baseline, baseline_name, baseline_workload = _baseline(org, doc.baseline)
    changes = _changes(doc.changes)
    planned = _planned_rungs(doc.orders, baseline, baseline_name, baseline_workload, changes)
    parsed = parse_config(json.dumps(planned[0].config), "application/json")
    model, hardware = config_resolve_catalog(config=parsed, org=org)
    with transaction.atomic():
        ladder = Ladder.objects.create(
            org=org,
            model=model,
            hardware=hardware,
            name=doc.name,
            description=doc.description,
            is_simulated=parsed.is_simulated,
            document={
                "baseline": {"name": baseline_name, "config": baseline},
                "rungs": changes,
            },
            orders=doc.orders,
            speeds=[float(s) for s in doc.speeds],
            created_by=created_by if getattr(created_by, "pk", None) else None,
        )
        submissions = _create_rungs(ladder, org, planned, created_by)
        audit_record(
            actor=created_by,
            obj=ladder,
            action="create",
            to_state=Ladder.STATUS_RUNNING,
            data={"rungs": len(planned), "submissions": submissions},
        )
    return ladder


# ------------------------------------------------------------------------- attribution


def _latest_verified_run(sub: Submission) -> Any:
    from runs.models import BenchmarkRun

    return BenchmarkRun.objects.done().latest_for(sub)


def _trial_measure(trial: Trial, accelerators: int, seed: int) -> TrialMeasure:
    """A stored trial as the engine's ladder measures one: point, limits, server counters
    (the worker's window scrapes) and, when its raw records are stored, the replicates."""
    m = trial.summary  # docs/pipeline.md "The contract"
    speeds: list[float] = []
    thr: list[float] = []
    sessions = 0
    if trial.raw_records_key:
        from runs.timeline import record_lines

        try:
            records = [rawrecords.parse(x) for x in record_lines(trial.raw_records_key)]
        except Exception:  # records not readable: the point without an interval
            records = []
        if records:
            speeds, thr, sessions = bootstrap_trial(
                records,
                m.window_start_ns,
                m.window_end_ns,
                accelerators,
                RESAMPLES,
                seed=seed,
                concurrency=trial.concurrency,
            )
    scraped = trial.window_telemetry.server_metrics
    verdicts = {name: v.passed for name, v in trial.tier_verdicts.items()}
    ttft = {k: (None if v is None or not math.isfinite(v) else v) for k, v in m.ttft_s.items()}
    return TrialMeasure(
        index=trial.index,
        concurrency=trial.concurrency,
        p25_speed=m.p25_output_speed,
        throughput=m.throughput_per_accelerator,
        error_rate=m.error_rate,
        ttft_s=ttft,
        requests=m.requests,
        sessions=sessions,
        verdicts=verdicts,
        server=server_figures_parsed(
            scraped.start if scraped else None, scraped.end if scraped else None
        ),
        speed_reps=speeds,
        throughput_reps=thr,
    )


def _spec(ladder: Ladder, tiers: list[Any], extra_speeds: list[float] = ()) -> LadderSpec:
    doc = ladder.document
    return LadderSpec(
        name=ladder.name,
        description=ladder.description,
        baseline_name=doc["baseline"]["name"],
        baseline_description="baseline",
        baseline_target="platform",
        baseline_patch=None,
        steps=[
            Change(
                r["name"],
                r["description"],
                r["patch"] or None,
                dataset={"workload": r["workload"]} if "workload" in r else None,
            )
            for r in doc["rungs"]
        ],
        dataset={"platform": "the pool's private test set of each rung's workload"},
        tiers=tiers,
        tier_set="run",
        speeds=[*ladder.speeds, *extra_speeds],
        trials=TrialPlan(),
        orders=list(ladder.orders),
        resamples=RESAMPLES,
    )


def _plans(ladder: Ladder) -> dict[str, list[RungPlan]]:
    plans: dict[str, list[RungPlan]] = {o: [] for o in ladder.orders}
    for r in ladder.rungs.select_related("submission").order_by("order", "index"):
        config = RungConfig(
            target=f"submission #{r.submission_id}",
            profile_doc=None,
            dataset={"submission": r.submission_id, "workload": r.submission.workload},
        )
        plans.setdefault(r.order, []).append(
            RungPlan(r.name, r.description, r.change, tuple(r.applied), config, r.config_sha256)
        )
    return plans


def _tiers_of(run: BenchmarkRun) -> list[Any]:
    from agentperf.engine.trial import Tier

    if run.run_spec:  # the run's own tiers, read through the contract (RunSpec)
        return run.spec.engine_tiers()
    return [
        Tier(
            t.name, t.min_p25_output_speed, t.max_ttft_s, float(t.ttft_percentile), t.max_error_rate
        )
        for t in run.tier_set.tiers.order_by("order")
    ]


def ladder_refresh(ladder: Ladder) -> Ladder:
    """Move a running ladder on: failed when a rung's submission failed or left the
    pipeline, in review (attribution computed) when every rung's run is verified."""
    if ladder.status != Ladder.STATUS_RUNNING or ladder.source != Ladder.SOURCE_PLATFORM:
        return ladder
    subs = {r.submission_id: r.submission for r in ladder.rungs.select_related("submission")}
    bad = [s for s in subs.values() if s.status in (c.FAILED, c.REJECTED, c.WITHDRAWN, c.INVALID)]
    if bad:
        return _transition(
            ladder, Ladder.STATUS_FAILED, f"rung submission #{bad[0].pk} is {bad[0].status}"
        )
    if any(s.status not in (c.IN_REVIEW, c.PUBLISHED) for s in subs.values()):
        return ladder
    runs = {pk: _latest_verified_run(s) for pk, s in subs.items()}
    if any(r is None for r in runs.values()):
        return ladder
    measured: dict[str, list[TrialMeasure]] = {}
    tiers: list[Any] = []
    for rung in ladder.rungs.all():
        run = runs[rung.submission_id]
        tiers = tiers or _tiers_of(run)
        if rung.config_sha256 in measured:
            continue
        accelerators = rung.deployment.topology.accelerators_used or 1
        measured[rung.config_sha256] = [
            _trial_measure(t, accelerators, seed=0) for t in run.trials.order_by("index")
        ]
    ladder.measurements = {k: [t.to_json() for t in v] for k, v in measured.items()}
    ladder.attribution = _document(ladder, tiers, measured)
    ladder.save(update_fields=["measurements", "attribution"])
    return _transition(ladder, Ladder.STATUS_IN_REVIEW, "every rung verified")


def _document(
    ladder: Ladder,
    tiers: list[Any],
    measured: dict[str, list[TrialMeasure]],
    extra_speeds: list[float] = (),
) -> dict[str, Any]:
    spec = _spec(ladder, tiers, list(extra_speeds))
    rungs = list(ladder.rungs.select_related("submission__result"))  # one query for all
    reused = {r.config_sha256: r.reused for r in rungs}
    by_digest: dict[str, LadderRung] = {}
    for r in rungs:
        by_digest.setdefault(r.config_sha256, r)
    doc = ladder_document(
        spec, _plans(ladder), measured, reused=reused, simulated=ladder.is_simulated
    )
    doc["conditions"]["trials"] = "the pool's search settings (dispatch), the same for every rung"
    for order_doc in doc["orders"].values():
        for row in order_doc["rungs"]:
            rung = by_digest.get(row["digest"])
            if rung is not None:
                row["submission"] = rung.submission_id
                result = getattr(rung.submission, "result", None)
                row["result"] = getattr(result, "pk", None)
                row["workload"] = rung.submission.workload
    doc["workloads"] = sorted(
        {(r.name, r.submission.workload) for r in rungs if r.submission.workload != WORKLOAD_CODING}
    )
    return doc


def ladder_at_speeds(ladder: Ladder, speeds: list[float]) -> dict[str, Any] | None:
    """The attribution with the reader's speeds added, from the stored measurements."""
    if not ladder.measurements or not ladder.attribution:
        return ladder.attribution
    from agentperf.engine.trial import parse_tiers

    measured = {k: [TrialMeasure.from_dict(t) for t in v] for k, v in ladder.measurements.items()}
    tiers = parse_tiers(ladder.attribution.get("tiers") or [])
    return _document(ladder, tiers, measured, speeds)


def _transition(ladder: Ladder, to: str, reason: str, actor: Any = None) -> Ladder:
    with transaction.atomic():
        fresh = Ladder.objects.select_for_update().get(pk=ladder.pk)
        before = fresh.status
        fresh.status = to
        fresh.status_reason = reason
        fields = ["status", "status_reason"]
        if to == Ladder.STATUS_PUBLISHED:
            fresh.published_at = timezone.now()
            fresh.reviewed_by = actor if getattr(actor, "pk", None) else None
            fields += ["published_at", "reviewed_by"]
        fresh.save(update_fields=fields)
        # the public ladder pages and answers drop from the reverse proxy (docs/caching.md)
        purge_on_commit(["ladders", f"ladder:{fresh.pk}"])
        audit_record(
            actor=actor,
            obj=fresh,
            action="transition",
            from_state=before,
            to_state=to,
            reason=reason,
        )
    return fresh


class LadderReviewError(Exception):
    pass


def ladder_review(*, ladder: Ladder, actor: Any, action: str, reason: str) -> Ladder:
    """One review of the whole ladder: ``publish`` publishes every rung still in review
    (each through the submission's own publish) and then the ladder; ``reject`` rejects it."""
    from review.services import ReviewError, review_publish

    ladder = ladder_refresh(ladder)
    if ladder.status != Ladder.STATUS_IN_REVIEW:
        raise LadderReviewError(f"ladder #{ladder.pk} is {ladder.status}, not in review")
    if not reason.strip():
        raise LadderReviewError("a reason is required")
    if action == "reject":
        return _transition(ladder, Ladder.STATUS_REJECTED, reason, actor)
    if action != "publish":
        raise LadderReviewError(f"unknown action {action!r}")
    with transaction.atomic():
        for sub in {r.submission_id: r.submission for r in ladder.rungs.all()}.values():
            sub.refresh_from_db()
            if sub.status == c.IN_REVIEW:
                try:
                    review_publish(
                        submission=sub,
                        actor=actor,
                        reason=f"ladder #{ladder.pk} {ladder.name}: {reason}",
                    )
                except ReviewError as exc:
                    raise LadderReviewError(f"rung submission #{sub.pk}: {exc}") from exc
        ladder = _transition(ladder, Ladder.STATUS_PUBLISHED, reason, actor)
        # result links on the rows, now that every rung has one
        from agentperf.engine.trial import parse_tiers

        if ladder.measurements and ladder.attribution:
            measured = {
                k: [TrialMeasure.from_dict(t) for t in v] for k, v in ladder.measurements.items()
            }
            tiers = parse_tiers(ladder.attribution.get("tiers") or [])
            ladder.attribution = _document(ladder, tiers, measured)
            ladder.save(update_fields=["attribution"])
    return ladder


def ladder_import(*, org: Organization, doc: dict[str, Any], model: Any, hardware: Any) -> Ladder:
    """Publish an engine ladder.json (``python -m agentperf.engine ladder``) as it is: its rungs
    ran outside the platform (labelled so on the page), so it has no rung runs to review."""
    if doc.get("kind") != "agentperf-ladder":
        raise _err("kind", "not a ladder.json of python -m agentperf.engine ladder")
    with transaction.atomic():
        ladder = Ladder.objects.create(
            org=org,
            model=model,
            hardware=hardware,
            name=str(doc.get("name"))[:200],
            description=str(doc.get("description") or ""),
            source=Ladder.SOURCE_ENGINE,
            is_simulated=bool(doc.get("simulated")),
            status=Ladder.STATUS_PUBLISHED,
            status_reason="engine ladder imported",
            document={"changes": doc.get("changes")},
            orders=list(doc.get("orders") or {}),
            speeds=[s["speed"] for s in doc.get("speeds") or []],
            attribution=doc,
            published_at=timezone.now(),
        )
        purge_on_commit(["ladders", f"ladder:{ladder.pk}"])
        audit_record(
            obj=ladder,
            action="import",
            to_state=Ladder.STATUS_PUBLISHED,
            actor_label="ladder_import",
        )
    return ladder


def attribute_order(ladder: Ladder, order: str) -> dict[str, Any] | None:
    """One order's attribution (for pages)."""
    doc = ladder.attribution or {}
    return (doc.get("orders") or {}).get(order)


__all__ = [
    "attribute",
    "ladder_create",
    "ladder_refresh",
    "ladder_review",
    "ladder_import",
]
