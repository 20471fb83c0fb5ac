"""A submission's stored deployment config, read back as a model (``Submission.deployment``).

A config is checked against the schema when it is submitted (agentperf/schema/deployment.py
``DeploymentConfig``: strict, every section required, the vendor's errors by field). What
the database holds is read here: the sections the platform acts on — the launcher and the
one launch description (dispatch, runs/dispatch.py), the engine, the topology and the
benchmark options (dispatch, publishing, the review console, ladders) — each with the
defaults an absent field reads as. Reading is lenient where checking was strict: a config
stored by an earlier schema, or a test's partial config, reads with what it has, and
fields the platform does not act on are kept as stored (``extra="allow"``); the document
itself (its text, digest and redacted view) stays the stored JSON.

A stored value of the wrong type is a stored document that no schema produced; it raises
:class:`StoredConfigError` naming the field, which dispatch reports as the run's reason.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from agentperf.fielderrors import validation_fields

LauncherKind = Literal["attached", "container", "process", "simulated", "slurm"]
LAUNCHER_KINDS: tuple[LauncherKind, ...] = (
    "attached",
    "container",
    "process",
    "simulated",
    "slurm",
)


class StoredConfigError(ValueError):
    """The stored config does not read as a config: ``fields`` maps each path to its
    messages (the platform's one error map, agentperf/fielderrors.py)."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields
        where = "; ".join(f"{path}: {', '.join(messages)}" for path, messages in fields.items())
        super().__init__(f"the stored config does not read: {where}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class StoredEngine(_Section):
    name: str = ""
    version: str = ""
    image: str | None = None


class StoredRole(_Section):
    """One role of the topology; its parallelism degrees and hardware stay as stored."""

    name: str = "both"
    workers: int = 1
    accelerators_per_worker: int = 1

    @property
    def accelerators(self) -> int:
        return self.workers * self.accelerators_per_worker


class StoredTopology(_Section):
    accelerators_used: int | None = None
    accelerators_in_system: int | None = None
    roles: list[StoredRole] = Field(default_factory=list)

    @property
    def used(self) -> int:
        """Accelerators serving: the stated figure, else the roles' sum (the schema derives
        and checks one against the other), else one."""
        return self.accelerators_used or sum(r.accelerators for r in self.roles) or 1


class StoredSecret(_Section):
    """A secret by name, in the long form the schema stores (``{secret: true, name: N}`` as
    an argument, ``{secret: true}`` as an environment value)."""

    secret: Literal[True]
    name: str | None = None


class StoredLaunch(_Section):
    """The one launch description (the schema's ``Launch``); ``None`` fields are those a
    config stored before it was the one description lacks."""

    command: str | None = None
    args: list[str | StoredSecret] = Field(default_factory=list)
    port: int | None = None
    ready_timeout_s: int | None = None
    served_model_name: str | None = None


class StoredAttached(_Section):
    endpoint_id: str | None = None
    served_model_name: str | None = None


class StoredSimulated(_Section):
    profile: str | None = None
    seed: int = 0
    # a JSON Merge Patch of the profile's deployment section (docs/simulator.md "Overrides")
    overrides: dict[str, JsonValue] | None = None


class StoredLauncher(_Section):
    """Exactly one of these names the launcher (the schema's ``Launcher``); ``container: {}``
    names the kind with no options. The Slurm section is read whole by the runner's own
    reading of a config (agentperf/launchspec.py)."""

    attached: StoredAttached | None = None
    container: dict[str, JsonValue] | None = None
    process: dict[str, JsonValue] | None = None
    simulated: StoredSimulated | None = None
    slurm: dict[str, JsonValue] | None = None

    @property
    def kind(self) -> LauncherKind | None:
        return next((k for k in LAUNCHER_KINDS if getattr(self, k) is not None), None)


class StoredBenchmark(_Section):
    max_concurrency: int | None = None
    arrival: Literal["closed", "open"] | None = None


class StoredConfig(_Section):
    engine: StoredEngine = Field(default_factory=StoredEngine)
    topology: StoredTopology = Field(default_factory=StoredTopology)
    launcher: StoredLauncher = Field(default_factory=StoredLauncher)
    launch: StoredLaunch | None = None
    env: dict[str, str | StoredSecret] = Field(default_factory=dict)
    benchmark: StoredBenchmark = Field(default_factory=StoredBenchmark)


def read_config(document: object) -> StoredConfig:
    """The stored config ``document`` (a JSON object, or nothing) as a model."""
    try:
        return StoredConfig.model_validate(document or {})
    except ValidationError as exc:
        raise StoredConfigError(validation_fields(exc)) from None


def read_published_config(document: object) -> StoredConfig:
    """A published config (secrets and a reviewer's redactions replaced by text,
    leaderboard/configview.py) as a model: a top-level section with a redacted value where
    the model expects a number, a list or a mapping reads as absent — the page shows what
    was published, never a guess at what was redacted."""
    try:
        return read_config(document)
    except StoredConfigError as exc:
        if not isinstance(document, dict):
            return StoredConfig()
        redacted = {path.split(".")[0] for path in exc.fields}
        return read_config({k: v for k, v in document.items() if k not in redacted})
