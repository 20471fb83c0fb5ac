"""The signed measurement receipt of a published result (docs/verification.md "Receipt").

At publish (`leaderboard.publishing.result_publish`) the platform signs an in-toto Statement
naming the SHA-256 of the published config, the declared image digest, every raw-record
file as stored, the verification report, the run's inventory and the published figures;
the DSSE envelope is kept on the Result. When a result is superseded or invalidated a
second, status Statement is signed about the first (the first never changes). The signing
and checking themselves are DB-free (agentperf/receipt.py), so `agentperf verify` needs no
Django.

The documents are rebuilt from the database whenever they are served: a figure, a check or
a config changed after publish no longer matches its signed digest.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.utils import timezone

from agentperf import contract
from agentperf import receipt as rc
from leaderboard import configview
from leaderboard.cachetruth import result_cache_truth
from leaderboard.launch import result_launch
from leaderboard.models import Result
from runs.models import BenchmarkRun, VerificationReport
from submissions.models import Artifact
from submissions.services.artifacts import artifact_storage
from submissions.stored_config import read_published_config

log = logging.getLogger(__name__)

PROVES = (
    "The files named here are, byte for byte, the data the platform measured and published "
    "for this result: the raw request records as the runner uploaded them, the verification "
    "report, the inventory the run recorded, the published config and figures. The image is "
    "'pulled by digest and run' when the container launcher ran it (the runner host's "
    "report, not an attestation); otherwise it is as declared in the config, not run "
    "(a host process, an attached endpoint or the simulator)."
)
IMAGE_NOT_RUN = "as declared, not run"
IMAGE_RUN = "pulled by digest and run (container launcher)"
IMAGE_RUN_BY = "pulled by digest and run ({launcher} launcher)"


class ReceiptDataError(Exception):
    """The stored data cannot be receipted (a raw file missing or changed since upload)."""


# --- keys ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _load_key(path: str, mtime_ns: int) -> rc.SigningKey:
    return rc.SigningKey.from_file(Path(path))


def signing_key() -> rc.SigningKey | None:
    """The platform's signing key (settings.RECEIPT_SIGNING_KEY_FILE); None without one."""
    path = Path(settings.RECEIPT_SIGNING_KEY_FILE) if settings.RECEIPT_SIGNING_KEY_FILE else None
    if path is None or not path.is_file():
        return None
    return _load_key(str(path), path.stat().st_mtime_ns)


def ensure_key(path: Path | None = None) -> tuple[Path, rc.SigningKey, bool]:
    """(path, key, created): the key file, created when missing (`manage.py receipt_key`)."""
    path = path or Path(settings.RECEIPT_SIGNING_KEY_FILE)
    if path.is_file():
        return path, rc.SigningKey.from_file(path), False
    key = rc.SigningKey.generate()
    try:
        key.write(path)
    except FileExistsError:  # another process created it first: use that one
        return path, rc.SigningKey.from_file(path), False
    return path, key, True


def keys_document() -> dict[str, Any]:
    """The public key list: the current key (if any) and every retired key, by key id."""
    entries: list[dict[str, Any]] = []
    current = signing_key()
    if current is not None:
        entries.append(rc.key_entry(current.public, status="active"))
    for text in settings.RECEIPT_RETIRED_PUBLIC_KEYS:
        raw = rc.public_key_from_hex(text)
        if current is None or raw != current.public:
            entries.append(rc.key_entry(raw, status="retired"))
    return {
        "keys": entries,
        "keyid": "hex SHA-256 of the raw 32-byte Ed25519 public key",
        "signature": "DSSE v1 (Ed25519 over the PAE of the payload)",
        "predicate_types": [rc.PREDICATE_TYPE, rc.STATUS_PREDICATE_TYPE],
        "docs": "docs/verification.md#receipt",
    }


# --- documents ---------------------------------------------------------------------------------


def figures_document(result: Result) -> dict[str, Any]:
    """The result's published figures, as the public API shows them. The result's cache
    truth (derived from its points) is a figure only where its points carry one, so the
    figures of a result published before it are the ones its receipt signed."""
    cache_truth = result_cache_truth(result)
    return {
        **({"cache_truth": cache_truth} if cache_truth is not None else {}),
        "result_id": result.pk,
        "label": result.label,
        "model": result.model.slug,
        "hardware": result.hardware.slug,
        "tier_set": result.tier_set.slug,
        "workload": result.workload,
        "is_simulated": result.is_simulated,
        "accelerators_used": result.accelerators_used,
        "accelerators_in_system": result.accelerators_in_system,
        "max_agents": result.max_agents,
        "brackets": result.brackets,
        "agents_per_accelerator": result.agents_per_accelerator,
        "agents_per_mw": result.agents_per_mw,
        "modelled_power": result.modelled_power,
        "points": result.points,
        "engine": {"name": result.engine_name, "version": result.engine_version},
        "quality": result.quality,
        "dataset_sha256": result.dataset_sha256,
        "published_at": result.published_at.isoformat(),
    }


def published_config(result: Result) -> tuple[dict | None, str]:
    """(the config as every public surface serves it, why it is withheld): the same
    document the result page and the public API show (docs/security.md "Secrets in
    configs"); None with the reason once it is no longer published."""
    doc = configview.public_config(result)
    if doc is None:
        return None, configview.config_withheld(result) or "the config is no longer published"
    return doc, ""


def documents(result: Result) -> dict[str, Any]:
    """{subject name: document} of everything receipted that is not a raw file; the
    verification report and the inventory are left out when the run has none, the config
    once it is withheld (`withheld`)."""
    run = result.run
    docs: dict[str, Any] = {rc.FIGURES: figures_document(result)}
    config, _ = published_config(result)
    if config is not None:
        docs[rc.CONFIG] = config
    report = VerificationReport.objects.filter(run_id=run.pk).first()
    if report is not None:
        docs[rc.VERIFICATION] = {"status": report.status, "checks": report.checks}
    if run.telemetry:
        docs[rc.INVENTORY] = run.telemetry
    return docs


@dataclass(frozen=True)
class RawFile:
    name: str
    artifact_id: int
    storage_key: str
    sha256: str
    size: int
    trials: tuple[int, ...]
    records: int


def raw_files(run: BenchmarkRun) -> list[RawFile]:
    """The run's raw-record files, one per stored object, named raw/<file name>."""
    by_key: dict[str, list[Any]] = {}
    for trial in run.trials.exclude(raw_records_key="").order_by("index"):
        by_key.setdefault(trial.raw_records_key, []).append(trial)
    artifacts = {
        a.storage_key: a
        for a in Artifact.objects.filter(
            run=run, kind=Artifact.KIND_RAW_RECORDS, storage_key__in=list(by_key)
        )
    }
    names: set[str] = set()
    out: list[RawFile] = []
    for key, trials in by_key.items():
        artifact = artifacts.get(key)
        if artifact is None:
            raise ReceiptDataError(f"trial {trials[0].index}: no artifact records {key}")
        base = PurePosixPath(key).name
        name = rc.RAW_PREFIX + base
        if name in names or not rc.is_file_subject(name):
            name = f"{rc.RAW_PREFIX}{artifact.pk}-{''.join(c for c in base if c.isalnum())}"
        names.add(name)
        out.append(
            RawFile(
                name=name,
                artifact_id=artifact.pk,
                storage_key=key,
                sha256=artifact.sha256,
                size=artifact.size,
                trials=tuple(t.index for t in trials),
                records=sum(t.raw_records_count for t in trials),
            )
        )
    return out


def hash_stored(files: list[RawFile]) -> dict[str, str]:
    """{name: sha256} of each raw file as it is stored now, read back from storage; a file
    missing or changed since the runner uploaded it is refused (ReceiptDataError)."""
    storage = artifact_storage()
    digests: dict[str, str] = {}
    for f in files:
        digest = hashlib.sha256()
        try:
            with storage.open(f.storage_key, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        except OSError as exc:
            raise ReceiptDataError(
                f"{f.name} (trials {list(f.trials)}): unreadable: {exc}"
            ) from None
        actual = digest.hexdigest()
        if actual != f.sha256:
            raise ReceiptDataError(
                f"{f.name} (trials {list(f.trials)}): stored sha256 {actual} differs from the "
                f"{f.sha256} recorded at upload"
            )
        digests[f.name] = actual
    return digests


# --- signing -------------------------------------------------------------------------------------


def _image(
    reference: str, ran: str | None = None, launcher: str = "container"
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The image subject and its predicate for the published config's image `reference`
    ("" for none); `ran` is the image the run's `launcher` (a container, or a Slurm job's
    tasks) reported it pulled and ran (docs/security.md "Container launcher")."""
    if not reference:
        return {"reference": None, "status": "no image declared"}, None
    digest = rc.image_digest(reference)
    status = IMAGE_NOT_RUN
    if ran and ran == reference:
        status = IMAGE_RUN if launcher == "container" else IMAGE_RUN_BY.format(launcher=launcher)
    predicate = {"reference": reference, "digest": digest, "status": status}
    if digest is None:
        return predicate, None
    return predicate, rc.subject(rc.IMAGE_PREFIX + reference, digest)


def _endpoint(run: BenchmarkRun) -> contract.Endpoint | None:
    """The endpoint the run's launcher reported (``run.runner``); None when none was."""
    return run.runner.endpoint if run.runner is not None else None


def publication_statement(
    result: Result, raw: list[RawFile], raw_digests: dict[str, str], *, keyid: str
) -> dict[str, Any]:
    docs = documents(result)
    subjects = [
        rc.subject(name, rc.sha256_hex(rc.canonical_json(doc))) for name, doc in docs.items()
    ]
    # the image as the published config names it (secrets redacted), never the submitted one;
    # run by a container, or by a Slurm job's tasks (leaderboard.launch)
    launched = result_launch(result)
    ran = launched["image"] if launched and launched["image_run"] else None
    published_image = read_published_config(docs.get(rc.CONFIG)).engine.image or ""
    image_predicate, image_subject = _image(
        published_image, ran, launched["launcher"] if launched else "container"
    )
    if image_subject is not None:
        subjects.append(image_subject)
    subjects += [rc.subject(f.name, raw_digests[f.name]) for f in raw]
    run = result.run
    predicate = {
        "result": {"id": result.pk, "url": f"/results/{result.pk}/", "label": result.label},
        "run_id": run.pk,
        "submission_id": result.submission_id,
        "published_at": result.published_at.isoformat(),
        "signed_at": timezone.now().isoformat(),
        "keyid": keyid,
        "config": {
            "document": rc.CONFIG,
            "form": "the published config (secrets redacted), canonical JSON",
            "submitted_sha256": result.submission.config_sha256 or None,
        },
        "figures": {"document": rc.FIGURES, "form": "canonical JSON"},
        "verification": (
            {"document": rc.VERIFICATION, "status": docs[rc.VERIFICATION]["status"]}
            if rc.VERIFICATION in docs
            else {"recorded": False, "reason": "the run has no verification report"}
        ),
        "inventory": (
            {"document": rc.INVENTORY, "source": "runner host telemetry (the run's inventory)"}
            if rc.INVENTORY in docs
            else {"recorded": False, "reason": "the run recorded no inventory"}
        ),
        "image": image_predicate,
        "raw_records": [
            {"name": f.name, "trials": list(f.trials), "records": f.records, "size": f.size}
            for f in raw
        ],
        "launcher": endpoint.launcher if (endpoint := _endpoint(run)) else None,
        "proves": PROVES,
    }
    return rc.statement(subjects, predicate)


def prepare(run: BenchmarkRun) -> tuple[list[RawFile], dict[str, str]] | None:
    """Before the publish transaction: the run's raw files, hashed as stored; None when
    the platform has no signing key (nothing will be signed)."""
    if signing_key() is None:
        return None
    files = raw_files(run)
    return files, hash_stored(files)


def attach_receipt(result: Result, prepared: tuple[list[RawFile], dict[str, str]] | None) -> None:
    """Sign the receipt of a result just created (inside the publish transaction), from
    the row as stored."""
    key = signing_key()
    if prepared is None or key is None:
        log.warning("result #%s published without a receipt: no signing key", result.pk)
        return
    stored = Result.objects.select_related(
        "submission", "run", "model", "hardware", "tier_set"
    ).get(pk=result.pk)
    files, digests = prepared
    envelope = rc.sign(publication_statement(stored, files, digests, keyid=key.keyid), key)
    Result.objects.filter(pk=result.pk).update(receipt=envelope)
    result.receipt = envelope


def sign_status(
    *, result_id: int, to: str, reason: str, config_redacted: dict[str, Any] | None = None
) -> None:
    """Sign a status Statement about a result's receipt (inside the status or redact
    transaction); nothing when the result has no receipt or the platform no key.

    ``config_redacted`` ({sha256, paths}): the digest of the public config a reviewer
    redacted, which `verify` checks config.json against from then on; a later statement
    (superseded, invalidated) carries the last redaction forward.

    ``withheld`` ({name: why}, signed; {} when nothing is): what the platform no longer
    serves, read from the row as it stands in this transaction: the config, once the result
    is invalidated or withdrawn (`configview.config_withheld`). `verify` lets no other file
    be missing."""
    key = signing_key()
    stored = Result.objects.select_related("submission").filter(pk=result_id).first()
    if key is None or stored is None or not stored.receipt:
        return
    _, why = published_config(stored)
    if config_redacted is None and stored.receipt_status:
        previous = stored.status_predicate
        if not isinstance(previous, dict):  # never re-sign past it: its redaction would go
            raise ValueError(
                f"result #{result_id}'s stored status statement cannot be read; not re-signed"
            )
        config_redacted = previous.get("config_redacted")
    predicate: dict[str, Any] = {
        "result_id": result_id,
        "status": to,
        "reason": reason,
        "at": timezone.now().isoformat(),
        "keyid": key.keyid,
        "withheld": {rc.CONFIG: why} if why else {},
    }
    if config_redacted is not None:
        predicate["config_redacted"] = config_redacted
    doc = rc.status_statement(stored.receipt, predicate)
    Result.objects.filter(pk=result_id).update(receipt_status=rc.sign(doc, key))


# --- serving ----------------------------------------------------------------------------------


def receipt_file(result: Result) -> dict[str, Any]:
    """What the page's download link gives: the envelopes, for `agentperf verify --offline`."""
    return {
        "result_id": result.pk,
        "status": result.status,
        "receipt": result.receipt or None,
        "status_receipt": result.receipt_status or None,
        "keys_url": "/.well-known/agentperf-keys.json",
    }


def receipt_bundle(result: Result, *, absolute: Any) -> dict[str, Any]:
    """The receipt API: the envelopes, every document as served now, and a download link
    of every raw file (absolute(path) makes a URL absolute)."""
    from django.urls import reverse

    body = receipt_file(result)
    body["keys_url"] = absolute("/.well-known/agentperf-keys.json")
    if not result.receipt:
        body["unsigned_reason"] = "published while the platform had no signing key"
    body["documents"] = documents(result)
    _, why = published_config(result)
    body["withheld"] = {rc.CONFIG: why} if why else {}
    body["raw_records"] = [
        {
            "name": f.name,
            "sha256": f.sha256,
            "size": f.size,
            "trials": list(f.trials),
            "url": absolute(reverse("result-raw-data", args=[result.pk, f.artifact_id])),
        }
        for f in raw_files(result.run)
    ]
    return body


def summary(result: Result) -> dict[str, Any] | None:
    """For the result page: key id, subjects and status statement; None without a receipt."""
    doc = result.receipt_statement
    if doc is None:
        return None
    predicate = doc.get("predicate") or {}
    return {
        "keyid": result.receipt_keyid,
        "subjects": doc.get("subject") or [],
        "predicate_type": doc.get("predicateType"),
        "image": predicate.get("image") or {},
        "inventory": predicate.get("inventory") or {},
        "status": result.status_predicate,
    }
