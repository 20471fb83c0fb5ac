"""The config's ``launcher`` section (docs/api.md "The config, in short"): exactly one way
to reach the deployment — an ``attached`` endpoint from the pool's allowlist, ``launch`` run
in a ``container`` or a sandboxed ``process``, the ``simulated`` twin, or the topology as a
``slurm`` job (docs/pipeline.md "Slurm")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, StringConstraints, field_validator, model_validator

from agentperf.schema.fields import (
    ArgText,
    ModelName,
    SecretArg,
    SecretEnv,
    Slug,
    Strict,
    field_error,
)
from agentperf.simulator.profile import (
    PROFILES_DIR,
    ProfileError,
    available_profiles,
    load_profile_with,
)


class AttachedLauncher(Strict):
    """An endpoint already running next to the hardware, named by its id in the pool's
    allowlist (never a free URL)."""

    endpoint_id: Slug
    served_model_name: ModelName


_MOVED = {
    "command": "launch.command and launch.args",
    "env": "env (the config's engine environment)",
    "port": "launch.port",
    "ready_timeout_s": "launch.ready_timeout_s",
    "served_model_name": "launch.served_model_name",
}


def _refuse_old_launch(value: Any) -> Any:
    """A config of the old shape (``launcher.process.command`` beside ``launch``) is refused
    at each moved field: there is one launch description (docs/api.md "The config, in
    short")."""
    if isinstance(value, dict):
        for key, where in _MOVED.items():
            if key in value:
                raise field_error(
                    key,
                    f"moved to {where}: `launch` is the one launch description, what runs "
                    "is what a result publishes",
                )
    return value


class ContainerLauncher(Strict):
    """Run `launch` in `engine.image`, pulled by digest from a registry the pool allows,
    with Podman (docs/security.md "Container launcher"). The default where the pool host
    has a container runtime."""

    @model_validator(mode="before")
    @classmethod
    def _one_launch(cls, value: Any) -> Any:
        return _refuse_old_launch(value)


class ProcessLauncher(Strict):
    """Run `launch` on the pool host itself, in the bubblewrap sandbox, for hosts without a
    container runtime: the image is not run, and its results say so."""

    @model_validator(mode="before")
    @classmethod
    def _one_launch(cls, value: Any) -> Any:
        return _refuse_old_launch(value)


def simulator_profile_targets(profile: str) -> tuple[str | None, str | None]:
    """(system slug, model slug) a profile names from the catalog; None where it is inline."""
    for suffix in (".yaml", ".yml"):
        path = PROFILES_DIR / f"{profile}{suffix}"
        if path.is_file():
            doc = yaml.safe_load(path.read_text()) or {}
            system, model = doc.get("system"), doc.get("model")
            return (
                system if isinstance(system, str) else None,
                model if isinstance(model, str) else None,
            )
    return None, None


def available_simulator_profiles() -> list[str]:
    return list(available_profiles())


class SimulatedLauncher(Strict):
    """The platform's simulated serving system; results are labelled simulated."""

    profile: Slug = Field(description="A profile in agentperf/simulator/profiles/ (file stem).")
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    overrides: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Merge Patch (RFC 7396) of the profile's `deployment` section: a "
        'what-if on the twin (docs/simulator.md "Overrides"), e.g. '
        '{"speculative": {"k": 4}}. Every patched value is checked by the profile\'s rules.',
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        known = available_simulator_profiles()
        if value not in known:
            raise ValueError(f"unknown simulator profile; one of: {', '.join(known) or 'none'}")
        return value

    @model_validator(mode="after")
    def _overrides_fit(self) -> SimulatedLauncher:
        if not self.overrides:
            return self
        try:
            load_profile_with(self.profile, self.overrides)
        except ProfileError as exc:
            # "deployment.a.b: message" names the patched field
            where, sep, message = str(exc).partition(": ")
            if sep and (where == "deployment" or where.startswith("deployment.")):
                path = "overrides" + where[len("deployment") :]
                raise field_error(path, message) from None
            raise field_error("overrides", str(exc)) from None
        return self


LAUNCHER_KINDS = ("attached", "container", "process", "simulated", "slurm")
LAUNCHED_KINDS = ("container", "process")  # the runner starts `launch`


class SlurmFrontend(Strict):
    """A frontend the config declares (a router or a disaggregation frontend): one task on
    its own node, serving the OpenAI API on ${PORT}."""

    command: list[ArgText | SecretArg] = Field(min_length=1, max_length=500)
    env: SecretEnv = Field(default_factory=dict, max_length=200)


class SlurmLauncher(Strict):
    """The topology as one Slurm job on the pool's cluster (docs/pipeline.md "Slurm"): a
    heterogeneous job component per role (`workers` tasks of `accelerators_per_worker` GPUs),
    each task running `command` in `engine.image` through the pool's container runtime, and
    a frontend the runner measures: `frontend`, or the pool's router (nginx, round-robin over
    the serving role). ``${PORT}``, ``${HOST}``, ``${ROLE}``, ``${TASK_INDEX}``,
    ``${ROLE_<role>_HOSTS}`` (host:port of every task of a role) and
    ``${ROLE_<role>_NODES}`` are replaced per task; no shell is involved."""

    command: list[ArgText | SecretArg] = Field(
        min_length=1, max_length=500, description="What every worker task runs."
    )
    role_args: dict[Literal["prefill", "decode", "both"], list[ArgText | SecretArg]] = Field(
        default_factory=dict, description="Arguments appended to command for one role's tasks."
    )
    env: SecretEnv = Field(default_factory=dict, max_length=200)
    frontend: SlurmFrontend | None = Field(
        default=None,
        description="The frontend serving the OpenAI API; absent: the pool's router "
        "(aggregated topologies only).",
    )
    ready_path: Annotated[
        str, StringConstraints(pattern=r"^/[A-Za-z0-9/._-]*$", max_length=200)
    ] = Field(default="/health", description="A worker task is ready when this answers 2xx.")
    ready_timeout_s: int = Field(default=900, ge=1, le=7200)
    time_limit_min: int = Field(
        default=240, ge=1, le=10080, description="The job's time limit (sbatch --time)."
    )
    served_model_name: ModelName


class Launcher(Strict):
    attached: AttachedLauncher | None = None
    container: ContainerLauncher | None = None
    process: ProcessLauncher | None = None
    simulated: SimulatedLauncher | None = None
    slurm: SlurmLauncher | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Launcher:
        given = [k for k in LAUNCHER_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise field_error(
                "",
                f"give exactly one of {', '.join(LAUNCHER_KINDS)}"
                + (f" (got {', '.join(given)})" if given else ""),
            )
        return self

    @property
    def kind(self) -> str:
        return next(k for k in LAUNCHER_KINDS if getattr(self, k) is not None)
