"""The `container` launcher: the config's image, pinned by digest, run with Podman
(docs/security.md "Container launcher").

- The image is `engine.image`, `registry/name@sha256:<64 hex>`, pulled only from a registry
  the pool host allows (`RUNNER_REGISTRIES`); a tag-only reference or another registry is
  refused, and the digest of the pulled image must be the config's.
- What runs is the config's `launch.command` (the entrypoint) and `launch.args`: the one
  launch description a result publishes.
- Isolation at least as strict as the bubblewrap sandbox (runner/launchers/sandbox.py):
  `--network=none` (only `lo`; the runner connects from inside the container's network
  namespace, no proxy in the measured path), an unprivileged user, `--cap-drop=all`,
  `no-new-privileges`, a read-only root with tmpfs for `/tmp` and the working folder, a
  clean environment (declared env, secrets by name, `PORT`), no host path but the pool's
  weights folders read-only, pids and memory limits.
- Every container carries labels (`agentperf.run`, `agentperf.worker`); it is removed at
  the end of the run, on cancel, and by `reap_orphans` after the worker was killed.

`podman_run_argv(spec)` is pure: the argv of `podman run` for a `ContainerSpec`, also used
to run other containers (e.g. one per Slurm task) with the same isolation.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from socket import socket as Socket
from typing import IO, Any

from agentperf import contract
from agentperf.inventory import runtime_from_inspect
from agentperf.launchspec import Registry, allowed_registries, image_problem
from runner.launchers.base import Endpoint, LauncherError, wait_for_models
from runner.launchers.devices import DeviceGrant, DevicePool
from runner.launchers.sandbox import (
    extra_read_only_paths,
    launch_variables,
    netns_connect,
    netns_socket,
    redact_output,
    redacted_log,
    sandbox_ids,
)
from runner.launchers.sections import WrittenContainer, read_section

LABEL_LAUNCHER = "agentperf.launcher"
LABEL_RUN = "agentperf.run"
LABEL_WORKER = "agentperf.worker"  # "<hostname>:<pid>:<process start time>"
WORK_DIR = "/sandbox"
LOG_TAIL_BYTES = 4000
IMAGE_FIELD = "engine.image"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ContainerSpec:
    """One container, fully described; `podman_run_argv` turns it into an argv.

    Environment values never appear on the argv: `env_names` are passed as `--env NAME`,
    and the caller puts the values in podman's own environment (see `ContainerLauncher`).
    `platform_env` is the platform's own, never a secret (which GPUs a hook may add), and is
    written on the argv, after the names, so a vendor's value cannot replace it."""

    image: str
    command: list[str]  # the entrypoint and its arguments, run as given (no shell)
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    env_names: list[str] = field(default_factory=list)
    user: str = "65534:65534"
    network: str = "none"
    read_only_mounts: list[str] = field(default_factory=list)  # host path = container path
    tmpfs: dict[str, str] = field(
        default_factory=lambda: {"/tmp": "rw,nosuid,nodev,mode=1777", WORK_DIR: "rw,mode=1777"}
    )
    workdir: str = WORK_DIR
    memory: str | None = None  # e.g. "8g"
    pids_limit: int | None = 4096
    shm_size: str | None = None  # e.g. "16g"; None: the runtime's default (64 MiB)
    memlock: str | None = None  # e.g. "-1" (unlimited) or bytes, as --ulimit memlock=X:X
    devices: list[str] = field(default_factory=list)  # device nodes or CDI names
    platform_env: dict[str, str] = field(default_factory=dict)  # DeviceGrant.visible_env()
    ulimits: dict[str, str] = field(
        default_factory=lambda: {"nofile": "1024:1024", "nproc": "1024:1024"}
    )
    podman: list[str] = field(default_factory=lambda: ["podman"])  # binary + global options
    remove: bool = True
    # conmon kills the container after this many seconds (`podman run --timeout`), so one
    # cannot outlive a dead worker indefinitely; None: no limit
    timeout_s: int | None = None


def podman_run_argv(spec: ContainerSpec) -> list[str]:
    """The `podman run` argv for `spec` (pure: reads nothing, starts nothing)."""
    if not spec.command:
        raise LauncherError("a container needs a command")
    argv = [
        *spec.podman,
        "run",
        "--name",
        spec.name,
        "--pull",
        "never",
        "--network",
        spec.network,
        "--user",
        spec.user,
        "--cap-drop",
        "all",
        "--security-opt",
        "no-new-privileges",
        "--read-only",
        "--read-only-tmpfs=false",
        "--no-hosts",
        "--hostname",
        "sandbox",
        "--workdir",
        spec.workdir,
        "--log-driver",
        "none",
    ]
    if spec.remove:
        argv.append("--rm")
    if spec.timeout_s:
        argv += ["--timeout", str(int(spec.timeout_s))]
    for path, options in spec.tmpfs.items():
        argv += ["--tmpfs", f"{path}:{options}" if options else path]
    for path in spec.read_only_mounts:
        argv += ["--volume", f"{path}:{path}:ro"]
    for key, value in sorted(spec.labels.items()):
        argv += ["--label", f"{key}={value}"]
    for name in spec.env_names:
        argv += ["--env", name]
    for name, value in sorted(spec.platform_env.items()):
        argv += ["--env", f"{name}={value}"]
    if spec.memory:
        argv += ["--memory", spec.memory, "--memory-swap", spec.memory]
    if spec.pids_limit:
        argv += ["--pids-limit", str(spec.pids_limit)]
    if spec.shm_size:
        argv += ["--shm-size", spec.shm_size]
    ulimits = dict(spec.ulimits)
    if spec.memlock:
        ulimits["memlock"] = f"{spec.memlock}:{spec.memlock}"
    for key, value in ulimits.items():
        argv += ["--ulimit", f"{key}={value}"]
    for device in spec.devices:
        argv += ["--device", device]
    argv += ["--entrypoint", json.dumps([spec.command[0]]), spec.image, *spec.command[1:]]
    return argv


# --- the pool host's settings -----------------------------------------------------------


def container_timeout_s(hard_s: int | None = None) -> int:
    """The run's budget: the run spec's hard time limit (`limits.hard_s`) where given, else
    the pool host's RUN_HARD_TIME_LIMIT_S (the same setting as its Celery hard time limit,
    config/settings.py), else 6 h. A container section has no limit of its own."""
    raw: int | str = hard_s or os.environ.get("RUN_HARD_TIME_LIMIT_S") or 6 * 3600
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise LauncherError(f"the container time limit {raw!r} is not an integer") from None
    if value < 1:
        raise LauncherError(f"the container time limit {value} is not positive")
    return value


def podman_binary() -> str:
    found = shutil.which("podman")
    if not found:
        raise LauncherError(
            "Podman is not installed on this runner host; the container launcher needs it "
            "(install the Debian package `podman`, or use the `process` launcher)"
        )
    return found


def podman_available() -> bool:
    return shutil.which("podman") is not None


def podman_global_argv() -> list[str]:
    """`podman` and its global options from the pool host's environment: the OCI runtime
    (`RUNNER_PODMAN_RUNTIME`, default runc), the cgroup manager (`RUNNER_PODMAN_CGROUP_MANAGER`,
    default cgroupfs), and a storage root (`RUNNER_PODMAN_ROOT`, `RUNNER_PODMAN_RUNROOT`;
    default: Podman's own)."""
    argv = [
        podman_binary(),
        "--runtime",
        os.environ.get("RUNNER_PODMAN_RUNTIME") or "runc",
        "--cgroup-manager",
        os.environ.get("RUNNER_PODMAN_CGROUP_MANAGER") or "cgroupfs",
        "--events-backend",
        "file",
    ]
    root = os.environ.get("RUNNER_PODMAN_ROOT")
    if root:
        argv += ["--root", root]
    runroot = os.environ.get("RUNNER_PODMAN_RUNROOT")
    if runroot:
        argv += ["--runroot", runroot]
    return argv


def default_memory_limit() -> str:
    """Nine tenths of the host's memory (`RUNNER_CONTAINER_MEMORY` sets another figure)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{max(1, int(total * 0.9) // 2**20)}m"


@dataclass(frozen=True, slots=True)
class ImageRef:
    registry: str
    repository: str
    digest: str  # sha256:<64 hex>

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}@{self.digest}"


def parse_image(reference: str, registries: list[Registry]) -> tuple[ImageRef, Registry]:
    """`registry/name@sha256:<hex>` from an allowed registry; LauncherError naming
    `engine.image` otherwise."""
    problem = image_problem(reference, registries)
    if problem:
        raise LauncherError(f"{IMAGE_FIELD}: {problem}")
    name, _, digest = reference.partition("@")
    first, _, rest = name.partition("/")
    repository = rest.split(":", 1)[0]  # a tag beside the digest says nothing; the digest pins
    registry = next(r for r in registries if r.host == first)
    return ImageRef(registry=first, repository=repository, digest=digest), registry


def _process_start(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def worker_label(pid: int | None = None) -> str:
    """This process, as the label a container it owns carries (pid reuse is told apart by
    the process's start time)."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start(pid)}"


def _owner_alive(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != socket.gethostname():
        return True  # another host's container (a shared store): not ours to judge
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    return _process_start(pid) == started and started != ""


def reap_orphans(podman: list[str] | None = None) -> list[str]:
    """Remove this host's launcher containers whose worker process is gone (a worker killed
    with SIGKILL leaves its container running under conmon). Returns the names removed."""
    podman = podman or podman_global_argv()
    listed = subprocess.run(
        [
            *podman,
            "ps",
            "--all",
            "--filter",
            f"label={LABEL_LAUNCHER}=container",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if listed.returncode != 0:
        raise LauncherError(f"podman ps failed: {listed.stderr.strip()[-500:]}")
    removed: list[str] = []
    for item in json.loads(listed.stdout or "[]"):
        labels = item.get("Labels") or {}
        if _owner_alive(str(labels.get(LABEL_WORKER, ""))):
            continue
        names = item.get("Names") or [item.get("Id")]
        name = str(names[0])
        subprocess.run(
            [*podman, "rm", "--force", "--ignore", "--time", "0", name],
            capture_output=True,
            timeout=120,
        )
        removed.append(name)
    return removed


def reap_at_startup() -> list[str]:
    """The sweep a pool worker runs when it starts (runner/worker/tasks.py): the containers
    its killed predecessor left, before any run comes. No Podman here, or a failed sweep:
    nothing removed (the next container launch sweeps again)."""
    if not podman_available():
        return []
    try:
        return reap_orphans()
    except (LauncherError, subprocess.SubprocessError, OSError, ValueError):
        return []


# --- the launcher ---------------------------------------------------------------------------


def _host_secret(name: str) -> str:
    if name not in os.environ:
        raise LauncherError(f"secret {name} is not set in the runner host's environment")
    return os.environ[name]


def _substitute(
    items: Sequence[str | contract.SecretArg], variables: dict[str, str], secrets: list[str]
) -> list[str]:
    def one(item: str | contract.SecretArg) -> str:
        if isinstance(item, contract.SecretArg):
            value = _host_secret(item.name)
            secrets.append(value)
            return value

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in variables:
                raise LauncherError(
                    f"${{{name}}} in launch.args is not set: an argument may name its declared "
                    "env, PORT and the pool host's RUNNER_LAUNCH_VARS"
                )
            return variables[name]

        return _VAR.sub(repl, item)

    return [one(item) for item in items]


def _as_written(items: Sequence[str | contract.SecretArg]) -> list[str]:
    """The launch's arguments as the config wrote them, a secret as ``<secret NAME>`` and a
    ``${NAME}`` not expanded: what the inventory publishes (never a substituted value)."""
    return [
        f"<secret {item.name}>" if isinstance(item, contract.SecretArg) else item for item in items
    ]


class ContainerLauncher:
    """Pull the pinned image, run the launch in it (Podman), wait for `/v1/models` inside its
    network namespace, stop and remove it after."""

    kind = "container"

    def __init__(
        self,
        section: contract.ContainerLauncher | Mapping[str, Any],
        *,
        log_dir: str,
        run_id: int | str | None = None,
        hard_s: int | None = None,
    ) -> None:
        self.section = read_section(contract.ContainerLauncher, WrittenContainer, section)
        self.hard_s = hard_s  # the run spec's hard time limit: the container's too
        self.log_path = Path(log_dir) / "launcher.log"
        self.run_id = str(run_id if run_id is not None else "none")
        self.name = f"agentperf-run-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self._netns_fd: int | None = None
        self._secrets: list[str] = []
        self._log: IO[bytes] | None = None  # the launch's output, open while it runs
        self._host_paths = sorted({str(Path(log_dir).resolve()), tempfile.gettempdir()})
        self._podman: list[str] = []
        self.image_digest: str | None = None
        # the accelerators the pool granted this run (runner/launchers/devices.py, set by
        # the worker); None: none, with the pool's /dev/shm size and memlock limit
        self.devices: DeviceGrant | None = None

    # what the vendor sees of the output (as the process launcher)
    def _tail(self) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        text = data[-LOG_TAIL_BYTES:].decode(errors="replace")
        return redact_output(text, secrets=self._secrets, paths=self._host_paths)

    def _podman_run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [*self._podman, *args], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            raise LauncherError(f"podman {args[0]} took longer than {timeout:g} s") from exc

    def pull(self) -> ImageRef:
        """Pull `image` by digest from an allowed registry; the pulled digest must be it."""
        ref, registry = parse_image(self.section.image, allowed_registries())
        tls = ["--tls-verify=false"] if registry.plain_http else []
        pulled = self._podman_run(["pull", "--quiet", *tls, str(ref)], timeout=3600)
        if pulled.returncode != 0:
            raise LauncherError(
                f"{IMAGE_FIELD}: could not pull {ref}: {pulled.stderr.strip()[-800:]}"
            )
        # containers/image checks the manifest it fetched against the digest it asked for;
        # the image stored must then carry that digest among its repository digests
        inspected = self._podman_run(
            ["image", "inspect", "--format", "{{json .RepoDigests}}", str(ref)], timeout=120
        )
        if inspected.returncode != 0:
            raise LauncherError(f"{IMAGE_FIELD}: pulled {ref} but cannot inspect it")
        digests = {
            str(d).rpartition("@")[2]
            for d in json.loads(inspected.stdout or "[]") or []
            if str(d).startswith(f"{ref.registry}/{ref.repository}@")
        }
        if ref.digest not in digests:
            raise LauncherError(
                f"{IMAGE_FIELD}: the registry served {sorted(digests)} for {ref}, not {ref.digest}"
            )
        self.image_digest = ref.digest
        return ref

    def spec(self, image: str, command: list[str], env_names: list[str]) -> ContainerSpec:
        uid, gid = sandbox_ids()
        memory = os.environ.get("RUNNER_CONTAINER_MEMORY") or default_memory_limit()
        pids = os.environ.get("RUNNER_CONTAINER_PIDS") or "4096"
        try:
            pids_limit = int(pids)
        except ValueError:
            raise LauncherError(f"RUNNER_CONTAINER_PIDS={pids!r} is not an integer") from None
        grant = self.devices if self.devices is not None else DevicePool.from_env().grant([])
        grant.memlock_preflight()
        return ContainerSpec(
            shm_size=f"{grant.shm_bytes}b",
            memlock="-1" if grant.memlock_bytes is None else str(grant.memlock_bytes),
            devices=grant.podman_devices(),
            platform_env=grant.visible_env(),
            image=image,
            command=command,
            name=self.name,
            labels={
                LABEL_LAUNCHER: "container",
                LABEL_RUN: self.run_id,
                LABEL_WORKER: worker_label(),
            },
            env_names=env_names,
            user=f"{uid}:{gid}",
            read_only_mounts=[p for p in extra_read_only_paths() if os.path.exists(p)],
            memory=memory,
            pids_limit=pids_limit,
            podman=self._podman,
            timeout_s=container_timeout_s(self.hard_s),
        )

    def start(self) -> Endpoint:
        self._podman = podman_global_argv()
        try:
            reap_orphans(self._podman)
        except (LauncherError, subprocess.TimeoutExpired, ValueError):
            pass  # a failed sweep does not stop this run; the next one retries
        started = time.monotonic()
        ref = self.pull()
        pulled_after = time.monotonic() - started
        section = self.section
        port = section.port
        env: dict[str, str] = {}
        for name, value in section.env.items():
            if isinstance(value, contract.SecretRef):
                env[name] = _host_secret(name)
                self._secrets.append(env[name])
            else:
                env[name] = value
        env["PORT"] = str(port)
        variables = {**launch_variables(), **env}
        command = _substitute(section.command, variables, self._secrets)
        spec = self.spec(str(ref), command, sorted(env))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self._log = log
        try:
            self.process = subprocess.Popen(
                podman_run_argv(spec),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                # podman's environment: what `--env NAME` copies, and nothing else of the host
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env},
                close_fds=True,
            )
        except OSError as exc:
            log.close()
            raise LauncherError(f"could not start podman: {exc}") from exc
        self.pid = self._wait_running(deadline_s=120)
        try:
            self._netns_fd = os.open(f"/proc/{self.pid}/ns/net", os.O_RDONLY)
        except OSError as exc:
            raise LauncherError(f"the container exited at once: {exc}") from exc
        base_url = f"http://127.0.0.1:{port}/v1"
        models = wait_for_models(
            base_url,
            timeout_s=float(section.ready_timeout_s),
            process=self.process,
            log_tail=self._tail,
            connect=self.connect,
        )
        # the image as the runtime resolved it, its entrypoint and user, for the inventory
        shown = self._podman_run(["container", "inspect", self.name], timeout=60)
        written = _as_written(section.command)
        runtime = (
            runtime_from_inspect(
                json.loads(shown.stdout or "[]"), command=written, secrets=self._secrets
            )
            if shown.returncode == 0
            else {}
        )
        return Endpoint(
            served_model_name=section.served_model_name,
            base_url=base_url,
            connect=self.connect,
            info={
                "runtime": runtime,
                "launcher": "container",
                "sandbox": "podman",
                "image": str(ref),
                "command": written[:1],
                "pid": self.pid,
                "pull_s": round(pulled_after, 3),
                "ready_after_s": round(time.monotonic() - started, 3),
                "models": models,
            },
        )

    def _wait_running(self, *, deadline_s: float) -> int:
        """The container's init PID once it runs (`podman inspect`), or why it did not."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise LauncherError(
                    f"the container exited with status {self.process.returncode} before "
                    f"serving; last log lines:\n{self._tail()}"
                )
            shown = self._podman_run(
                ["inspect", "--format", "{{.State.Pid}} {{.State.Running}}", self.name],
                timeout=60,
            )
            if shown.returncode == 0:
                pid_text, _, running = shown.stdout.strip().partition(" ")
                if running == "true" and pid_text.isdigit() and int(pid_text) > 0:
                    return int(pid_text)
            time.sleep(0.1)
        raise LauncherError(f"the container did not start within {deadline_s:g} s")

    def socket(self) -> Socket:
        """A TCP socket inside the container's network namespace (its `lo` is the server's)."""
        if self._netns_fd is None:
            raise LauncherError("the container is not running")
        return netns_socket(self._netns_fd, what="container")

    def connect(self, host: str, port: int, timeout: float | None) -> Socket:
        return netns_connect(self._netns_fd, host, port, timeout, what="container")

    def stop(self) -> None:
        """Stop and remove the container (SIGTERM, then SIGKILL after 15 s); idempotent."""
        if self._netns_fd is not None:
            os.close(self._netns_fd)
            self._netns_fd = None
        if self._podman:
            self._podman_run(["stop", "--ignore", "--time", "15", self.name], timeout=120)
        if self.process is not None:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        if self._podman:
            self._remove()
        if self._log is not None and not self._log.closed:
            self._log.close()

    def _remove(self, attempts: int = 3) -> None:
        """Remove the stopped container and see that it is gone. `podman run --rm` removes it
        itself as it exits, but a stop racing that cleanup can leave it listed (state
        `stopping`); the removal is retried until `podman container exists` says no."""
        for _ in range(attempts):
            try:
                exists = self._podman_run(["container", "exists", self.name], timeout=60)
                if exists.returncode == 1:  # 0: it exists; 1: it does not; else an error
                    return
                self._podman_run(
                    ["rm", "--force", "--ignore", "--time", "0", self.name], timeout=120
                )
            except LauncherError as exc:
                logger.warning("removing container %s: %s", self.name, exc)
        logger.error("container %s is still listed after %d removals", self.name, attempts)

    def log_bytes(self) -> bytes:
        return redacted_log(self.log_path, secrets=self._secrets, paths=self._host_paths)

    def check(self) -> None:
        """Nothing watched between trials: a container that died fails the next requests."""
