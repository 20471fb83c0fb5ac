"""The `container` launcher with real Podman and a loopback registry (docs/security.md
"Container launcher"): the image is pulled by digest from an allowed registry only, the
served process is contained (only `lo`, no host file, no host environment, not root, no
capabilities, read-only root), and its container is gone after the run, or reaped by label
once its worker was killed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agentperf import contract
from agentperf.inventory import Inventory
from demo.synthetic import make_published_result
from runner.launchers import launcher_for
from runner.launchers.base import LauncherError, http_get, list_models
from runner.launchers.container import (
    LABEL_RUN,
    ContainerLauncher,
    ContainerSpec,
    container_timeout_s,
    podman_global_argv,
    podman_run_argv,
    reap_orphans,
)
from runner.worker.host_inventory import runtime_record

REPO = Path(__file__).resolve().parents[2]

# Runs in the image (its Python, no packages): answers /v1/models with what it sees.
PROBE = r"""
import http.server, json, os, socket, sys

def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs"):
            out[key] = value.strip()
    return out

def writable(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return True
    except OSError:
        return False

seen = {
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "uid": os.getuid(),
    "gid": os.getgid(),
    "env": dict(os.environ),
    "host_paths": {p: os.path.exists(p) for p in sys.argv[1:]},
    "status": status(),
    "root_writable": writable("/probe-file"),
    "weights_writable": writable(os.path.join(os.path.dirname(sys.argv[1]), "probe-file")),
    "tmp_writable": writable("/tmp/probe-file"),
}

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "probe"}], "seen": seen}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def launch(image: str, command: list, **extra) -> dict:
    return {
        "kind": "container",
        "image": image,
        "command": command,
        "env": extra.pop("env", {}),
        "port": extra.pop("port", 18500),
        "ready_timeout_s": 60,
        "served_model_name": extra.pop("served_model_name", "probe"),
        **extra,
    }


def free_port() -> int:
    """A loopback port no host process holds (found by bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def containers(label: str) -> list[dict]:
    listed = subprocess.run(
        [*podman_global_argv(), "ps", "--all", "--filter", f"label={label}", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(listed.stdout or "[]")


def test_the_podman_argv_carries_the_isolation_and_no_value_of_the_environment():
    spec = ContainerSpec(
        image="registry.example/x@sha256:" + "a" * 64,
        command=["python", "-m", "server", "--port", "8000"],
        name="agentperf-run-1-abc",
        labels={LABEL_RUN: "1"},
        env_names=["HF_TOKEN", "PORT"],
        read_only_mounts=["/models"],
        memory="8g",
        pids_limit=512,
        shm_size="16g",
        memlock="-1",
        devices=["nvidia.com/gpu=0", "/dev/dri/renderD128"],
        timeout_s=7200,
    )
    argv = podman_run_argv(spec)
    joined = " ".join(argv)
    for flag in (
        "--network none",
        "--user 65534:65534",
        "--cap-drop all",
        "--security-opt no-new-privileges",
        "--read-only",
        "--volume /models:/models:ro",
        "--env HF_TOKEN",
        "--env PORT",
        "--memory 8g",
        "--pids-limit 512",
        "--shm-size 16g",
        "--ulimit memlock=-1:-1",
        "--ulimit nofile=1024:1024",
        "--device nvidia.com/gpu=0",
        "--device /dev/dri/renderD128",
        f"--label {LABEL_RUN}=1",
        "--rm",
        "--timeout 7200",  # conmon kills it after the run's budget, worker or no worker
    ):
        assert flag in joined, flag
    # the launch as published: the entrypoint is the command, the arguments follow the image
    image_at = argv.index(spec.image)
    assert argv[image_at - 2 : image_at] == ["--entrypoint", '["python"]']
    assert argv[image_at + 1 :] == ["-m", "server", "--port", "8000"]
    assert "--privileged" not in argv and not any(a.startswith("HF_TOKEN=") for a in argv)
    assert argv.count("--volume") == 1  # no host path but the weights folder


def test_the_container_timeout_is_the_runs_budget(monkeypatch, tmp_path):
    monkeypatch.setenv("RUN_HARD_TIME_LIMIT_S", "5400")
    assert container_timeout_s(900) == 900  # the run spec's own hard limit
    assert container_timeout_s() == 5400  # else the pool host's hard time limit
    monkeypatch.setenv("RUN_HARD_TIME_LIMIT_S", "soon")
    with pytest.raises(LauncherError, match="not an integer"):
        container_timeout_s()
    monkeypatch.delenv("RUN_HARD_TIME_LIMIT_S")
    assert container_timeout_s() == 6 * 3600
    # the launcher the director makes for a run carries that run's hard limit to Podman
    section = contract.ContainerLauncher.model_validate(launch("img@sha256:" + "0" * 64, ["x"]))
    launcher = launcher_for(section, log_dir=str(tmp_path), run_id=7, hard_s=1200)
    assert isinstance(launcher, ContainerLauncher)
    assert launcher.spec(section.image, ["x"], []).timeout_s == 1200


@pytest.mark.parametrize(
    ("image", "registries", "expected"),
    [
        ("{registry}/agentperf/llamacpp:test", None, "not pinned by digest"),
        ("{image}", "http://127.0.0.1:1", "is not one this pool pulls from"),
        (
            "{registry}/agentperf/llamacpp@sha256:" + hashlib.sha256(b"other").hexdigest(),
            None,
            "could not pull",
        ),
    ],
    # a digest the registry does not hold: the pull itself fails, before any comparison
    # (the comparison: test_an_image_resolved_to_another_digest_fails_naming_both_digests)
    ids=["tag-only", "registry-not-allowed", "digest-the-registry-lacks"],
)
def test_an_image_the_pool_may_not_run_is_refused_naming_engine_image(
    pool_host, monkeypatch, tmp_path, image, registries, expected
):
    registry = os.environ["TEST_REGISTRY"]
    if registries:
        monkeypatch.setenv("RUNNER_REGISTRIES", registries)
    ref = image.format(registry=registry, image=pool_host)
    launcher = ContainerLauncher(launch(ref, ["python"]), log_dir=str(tmp_path), run_id="refused")
    try:
        with pytest.raises(LauncherError) as info:
            launcher.start()
    finally:
        launcher.stop()
    assert str(info.value).startswith("engine.image: "), info.value
    assert expected in str(info.value)
    assert containers(f"{LABEL_RUN}=refused") == []  # nothing was started


def _push_other_image(podman: list[str], repository: str, tmp_path: Path) -> str:
    """A second, tiny image in the same repository of the session registry (one file, its
    own label: another image id, so another digest); its reference pinned by digest."""
    tarball = tmp_path / "other.tar"
    with tarfile.open(tarball, "w") as tar:
        data = b"not the image the config asked for\n"
        info = tarfile.TarInfo("other.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = f"{repository}:swapped-{tmp_path.name}"
    imported = [*podman, "import", "--quiet", "--change", f"LABEL agentperf.test={tmp_path.name}"]
    subprocess.run([*imported, str(tarball), tag], check=True, capture_output=True, timeout=120)
    digest_file = tmp_path / "digest"
    subprocess.run(
        [*podman, "push", "--quiet", "--tls-verify=false", "--digestfile", str(digest_file), tag],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run([*podman, "rmi", "--force", tag], capture_output=True, timeout=120)
    return f"{repository}@{digest_file.read_text().strip()}"


def test_an_image_resolved_to_another_digest_fails_naming_both_digests(
    pool_host, monkeypatch, tmp_path
):
    """The pulled image is not the one asked for: a `podman` first in PATH (the real one
    underneath, against the session registry) resolves the config's reference to another
    image of the same repository at pull and inspect, as a registry or store that swapped
    the image would. The launcher's digest comparison refuses it, naming both digests,
    before anything runs."""
    real = shutil.which("podman")
    assert real is not None
    repository, _, asked = pool_host.partition("@")
    served = _push_other_image(podman_global_argv(), repository, tmp_path)
    assert served != pool_host
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "podman"
    wrapper.write_text(
        "#!/bin/bash\n"
        "# pull and inspect of the config's reference get another image; all else passes\n"
        "swap=0\n"
        'for a in "$@"; do case "$a" in pull|inspect) swap=1;; esac; done\n'
        "args=()\n"
        'for a in "$@"; do\n'
        f'  if [[ $swap == 1 && "$a" == {shlex.quote(pool_host)} ]]; then '
        f'args+=({shlex.quote(served)}); else args+=("$a"); fi\n'
        "done\n"
        f'exec {shlex.quote(real)} "${{args[@]}}"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper_dir}:{os.environ['PATH']}")
    assert podman_global_argv()[0] == str(wrapper)
    launcher = ContainerLauncher(
        launch(pool_host, ["python"]), log_dir=str(tmp_path / "logs"), run_id="swapped"
    )
    try:
        with pytest.raises(LauncherError) as info:
            launcher.start()
    finally:
        launcher.stop()
    message = str(info.value)
    assert message.startswith("engine.image: the registry served "), message
    assert served.partition("@")[2] in message and asked in message
    assert "could not pull" not in message
    assert launcher.image_digest is None
    assert containers(f"{LABEL_RUN}=swapped") == []  # nothing was started


@pytest.mark.django_db
def test_the_served_process_sees_only_lo_no_host_file_no_host_env_and_is_not_root(
    pool_host, monkeypatch, tmp_path, client
):
    marker = tmp_path / "runner-only.txt"
    marker.write_text("PRIVATE-TEST-SET-ROW")
    monkeypatch.setenv("HOST_ONLY_SECRET", "host-only-value-0123456789")
    monkeypatch.setenv("PROBE_SECRET", "by-name-0123456789")
    weights = os.environ["AGENTPERF_TINY_GGUF"]
    host_python = str(Path(sys.executable).resolve())  # the image has its own, elsewhere
    host_paths = [weights, str(marker), str(REPO / "manage.py"), host_python, "/etc/shadow"]
    port = free_port()  # free on the host: a refusal there is the container's isolation
    secret_arg = {"secret": True, "name": "PROBE_SECRET"}
    config = launch(
        pool_host,
        ["python", "-c", PROBE, *host_paths, secret_arg],
        env={"DECLARED": "1", "PROBE_SECRET": {"secret": True}},
        port=port,
    )
    launcher = ContainerLauncher(config, log_dir=str(tmp_path / "logs"), run_id="probe")
    try:
        endpoint = launcher.start()
        assert endpoint.info["launcher"] == "container" and endpoint.info["image"] == pool_host
        assert endpoint.info["runtime"] == {  # what the inventory records as the runtime
            "image_reference": pool_host,
            "image_digest": pool_host.split("@", 1)[1],
            # the args as the config wrote them: a secret by name, never its value
            "entrypoint": ["python", "-c", PROBE, *host_paths, "<secret PROBE_SECRET>"],
            "user": "65534:65534",
        }
        body = json.loads(
            http_get(endpoint.base_url + "/models", timeout_s=10, connect=endpoint.connect)
        )
        name = launcher.name
        running = containers(f"{LABEL_RUN}=probe")
        assert [c["Names"][0] for c in running] == [name]
        assert running[0]["Labels"]["agentperf.worker"].split(":")[1] == str(os.getpid())
        assert name not in reap_orphans()  # its worker (this process) is alive: kept
        # the port is not on the host's network: only the runner's namespace socket reaches it
        with pytest.raises(OSError):
            list_models(f"http://127.0.0.1:{port}", timeout_s=2)
    finally:
        launcher.stop()
    seen = body["seen"]
    assert seen["interfaces"] == ["lo"]
    assert seen["uid"] == 65534 and seen["gid"] == 65534
    assert seen["status"]["CapEff"] == "0000000000000000"
    assert seen["status"]["CapBnd"] == "0000000000000000"
    assert seen["status"]["NoNewPrivs"] == "1"
    assert seen["host_paths"] == {
        weights: True,  # the pool's weights folder, read-only
        str(marker): False,
        str(REPO / "manage.py"): False,
        host_python: False,
        "/etc/shadow": False,
        "by-name-0123456789": False,  # the secret argument reached the process
    }
    assert seen["root_writable"] is False and seen["weights_writable"] is False
    assert seen["tmp_writable"] is True
    env = seen["env"]
    assert "HOST_ONLY_SECRET" not in env and "RUNNER_REGISTRIES" not in env
    assert env["DECLARED"] == "1" and env["PORT"] == str(port)
    assert env["PROBE_SECRET"] == "by-name-0123456789"  # a secret by name, from the host
    assert set(env) <= {
        "DECLARED",
        "PROBE_SECRET",
        "PORT",
        "PATH",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "LANG",
        "HOSTNAME",
        "HOME",
        "container",
        "TERM",
        "NVIDIA_VISIBLE_DEVICES",  # the platform's: the GPUs granted, here none
    }, env
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    # removed at the end of the run; the secret's value is not in what the vendor reads
    assert containers(f"{LABEL_RUN}=probe") == []
    assert b"by-name-0123456789" not in launcher.log_bytes()
    # nor in the inventory, the result page or the public API
    document = Inventory(
        tool="none", accelerators=[], runtime=runtime_record(endpoint.info)
    ).model_dump(mode="json")
    assert "<secret PROBE_SECRET>" in document["runtime"]["entrypoint"]
    result = make_published_result(label="secret arg")
    result.run.telemetry = {**(result.run.telemetry or {}), "inventory": document}
    result.run.save(update_fields=["telemetry"])
    page = client.get(f"/results/{result.pk}/").content.decode()
    api = client.get(f"/api/v1/public/results/{result.pk}/")
    assert "&lt;secret PROBE_SECRET&gt;" in page
    assert api.json()["inventory"]["document"]["runtime"] == document["runtime"]
    published = "\n".join([json.dumps(document), page, api.content.decode()])
    assert "by-name-0123456789" not in published


def test_a_container_left_by_a_killed_worker_is_reaped_by_label(pool_host, tmp_path):
    config = launch(pool_host, ["python", "-c", PROBE, os.environ["AGENTPERF_TINY_GGUF"]])
    # a stand-in worker: starts the container, says so, and is SIGKILLed (no stop runs)
    code = (
        "import json, sys, time\n"
        "from runner.launchers.container import ContainerLauncher\n"
        "launcher = ContainerLauncher(json.loads(sys.argv[1]), log_dir=sys.argv[2], "
        "run_id='orphan')\n"
        "launcher.start()\n"
        "print(launcher.name, flush=True)\n"
        "time.sleep(3600)\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(config), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert worker.stdout is not None
        name = worker.stdout.readline().strip()
        assert name.startswith("agentperf-run-orphan-"), name
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
    left = containers(f"{LABEL_RUN}=orphan")
    assert [c["Names"][0] for c in left] == [name] and left[0]["State"] == "running"
    # a pool worker starting on this host removes it (its worker is dead)
    from celery.signals import worker_ready

    import runner.worker.tasks  # noqa: F401  (connects the worker's startup sweep)

    worker_ready.send(sender=None)
    assert containers(f"{LABEL_RUN}=orphan") == []
