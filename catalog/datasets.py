"""The private test sets runs use, generated with the engine's synthetic generator when
none is stored yet, and kept in the `datasets` storage (never served publicly)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import IntegrityError, transaction

from agentperf.engine.datasets.synthetic import DECODE_HEAVY, ShapeParams
from catalog.models import WORKLOAD_CHAT, WORKLOAD_CODING, WORKLOAD_DECODE_HEAVY, WORKLOADS, Dataset

log = logging.getLogger(__name__)

SIZE_STANDARD = "standard"
SIZE_SMALL = "small"

# "chat" replays the same sessions with every turn's text labelled prose; "decode-heavy"
# sessions of its own shape whose long answers (reasoning) are prose too
_OUTPUT_KIND = {WORKLOAD_CHAT: "prose", WORKLOAD_DECODE_HEAVY: "prose"}


@dataclass(frozen=True, slots=True)
class TestSetSpec:
    name: str
    seed: int
    trajectories: int
    small: bool
    workload: str = WORKLOAD_CODING

    @property
    def version(self) -> str:
        shape = "small" if self.small else "full"
        suffix = "" if self.workload == WORKLOAD_CODING else f"-{self.workload}"
        return f"synthetic-v1-{shape}-seed{self.seed}-n{self.trajectories}{suffix}"


def test_set_spec(size: str, workload: str = WORKLOAD_CODING) -> TestSetSpec:
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; one of {', '.join(WORKLOADS)}")
    if size == SIZE_SMALL:
        return TestSetSpec(
            name=settings.RUN_DATASET_SMALL_NAME,
            seed=settings.RUN_DATASET_SEED,
            trajectories=settings.RUN_DATASET_SMALL_TRAJECTORIES,
            small=True,
            workload=workload,
        )
    return TestSetSpec(
        name=settings.RUN_DATASET_NAME,
        seed=settings.RUN_DATASET_SEED,
        trajectories=settings.RUN_DATASET_TRAJECTORIES,
        small=False,
        workload=workload,
    )


def small_shape() -> ShapeParams:
    # Prompts of a few hundred to ~2.5k tokens and short answers: sessions a CPU llama.cpp
    # server (4k-token slots) and the real-time simulator on two cores can carry.
    return ShapeParams(
        turns_median=6,
        initial_min=400,
        initial_max=900,
        output_median=40,
        output_sigma=0.8,
        output_max=256,
        result_median=80,
        result_max=400,
        delay_median_s=0.5,
        context_tokens=2500,
    )


def decode_heavy_small_shape() -> ShapeParams:
    # The small set's prompts with answers long for their context: 256-2,048 tokens (p50
    # ~600) in a 4,096-token context, what a CPU llama.cpp slot and the real-time simulator
    # carry; the standard set uses DECODE_HEAVY (2,048-16,384 tokens, docs/datasets.md).
    return dataclasses.replace(
        small_shape(),
        turns_median=4,
        output_min=256,
        output_median=600,
        output_sigma=0.6,
        output_max=2_048,
        context_tokens=4_096,
    )


def shape_of(spec: TestSetSpec) -> ShapeParams:
    """The generator's shape of a test set: its workload's, at its size."""
    if spec.workload == WORKLOAD_DECODE_HEAVY:
        return decode_heavy_small_shape() if spec.small else DECODE_HEAVY
    return small_shape() if spec.small else ShapeParams()


@functools.lru_cache(maxsize=4)
def _generated(spec: TestSetSpec) -> tuple[bytes, str, dict]:
    """(file bytes, canonical digest, stats) of a synthetic test set; deterministic, so a
    process generates each one once."""
    from agentperf.engine.datasets.stats import dataset_stats
    from agentperf.engine.datasets.synthetic import generate_dataset
    from agentperf.engine.trajectory import dataset_to_bytes, with_output_kind

    params = shape_of(spec)
    log.info("generating synthetic dataset %s@%s", spec.name, spec.version)
    dataset = generate_dataset(
        seed=spec.seed,
        trajectories=spec.trajectories,
        params=params,
        name=spec.name,
        version=spec.version,
    )
    kind = _OUTPUT_KIND.get(spec.workload)
    if kind is not None:
        dataset = dataclasses.replace(
            dataset,
            trajectories=with_output_kind(dataset.trajectories, kind),
            metadata={**dataset.metadata, "workload": spec.workload},
        )
    dataset.validate()
    content = dataset_to_bytes(dataset)
    stats = dataset_stats(dataset).to_dict()
    stats["file_sha256"] = hashlib.sha256(content).hexdigest()
    stats["max_prompt_tokens"] = dataset.max_prompt_tokens()
    return content, dataset.digest(), stats


def _stored(spec: TestSetSpec, visibility: str) -> Dataset:
    """The dataset row of `spec`, its file generated and stored the first time it is asked
    for; idempotent, also when two processes generate it at once (the same bytes)."""
    existing = Dataset.objects.filter(
        name=spec.name, version=spec.version, visibility=visibility
    ).first()
    if existing is not None:
        return existing
    content, digest, stats = _generated(spec)
    if Dataset.objects.filter(sha256=digest).exists():  # the same bytes under another name
        return Dataset.objects.get(sha256=digest)
    key = f"{visibility}/{spec.name}/{spec.version}/{digest}.jsonl.gz"
    storage = storages["datasets"]
    if not storage.exists(key):
        storage.save(key, ContentFile(content))
    try:
        with transaction.atomic():
            return Dataset.objects.create(
                name=spec.name,
                version=spec.version,
                visibility=visibility,
                sha256=digest,
                storage_key=key,
                size=len(content),
                stats=dict(stats),
            )
    except IntegrityError:  # generated concurrently by another request: same bytes
        return Dataset.objects.get(sha256=digest)


def private_test_set(*, size: str = SIZE_STANDARD, workload: str = WORKLOAD_CODING) -> Dataset:
    """The private test set of `size` and `workload`; generated and stored the first time it
    is needed."""
    return _stored(test_set_spec(size, workload), Dataset.VISIBILITY_PRIVATE)


def file_sha256(dataset: Dataset) -> str:
    """sha256 of the stored file's bytes (recorded at creation; computed for older rows)."""
    recorded = (dataset.stats or {}).get("file_sha256")
    if recorded:
        return str(recorded)
    with storages["datasets"].open(dataset.storage_key, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    stats = {**(dataset.stats or {}), "file_sha256": digest}
    Dataset.objects.filter(pk=dataset.pk).update(stats=stats)
    return digest


# --- the public tuning subset ------------------------------------------------------------

TUNING_NAME = "agentperf-tuning-subset"
# Its own seed: the same generator and shape as the small private set, never its sessions.
TUNING_SEED = 20261201
TUNING_TRAJECTORIES = 32


def tuning_subset_spec() -> TestSetSpec:
    return TestSetSpec(
        name=TUNING_NAME, seed=TUNING_SEED, trajectories=TUNING_TRAJECTORIES, small=True
    )


def public_tuning_subset() -> Dataset:
    """The downloadable tuning subset (visibility public), stored and listed the first time
    it is asked for; idempotent. Vendors tune on it; runs use the private test set only
    (docs/datasets.md "Public tuning subset")."""
    return _stored(tuning_subset_spec(), Dataset.VISIBILITY_PUBLIC)
