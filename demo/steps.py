"""What `make demo` does once the site is up: real benchmark runs through the real pipeline.

- `prepare_environment(base_url)` (before the worker starts): where the runner API is, the
  tiny GGUF's path for the llama.cpp example (`${AGENTPERF_TINY_GGUF}`), and this venv's
  `python` first on PATH for the launched server. Where Podman and docker-registry are
  installed (`make containers`), the llama.cpp run goes through the `container` launcher:
  the image is built from local files (demo/container_image.py), pushed to a loopback
  registry kept under var/registry, and docs/examples/container.yaml is submitted with its
  digest; otherwise docs/examples/process.yaml runs as a host process ("host process, image
  not run"). `stop_environment()` stops the registry.
- `run_demo_steps(base_url)`: the admin account, then — in a background thread, so the site
  is usable meanwhile — a demo organization and token submit the runnable examples of
  docs/examples/ through the vendor API (`simulated`: the real-time simulator; `process`:
  a real llama.cpp server on this CPU; the H100 dry run asks for the open loop beside the
  closed one). The demo's worker runs them; a demo reviewer account
  approves each finished run. Results of the simulator are labelled simulated; llama.cpp's
  is measured, on the `local-cpu` hardware entry. Idempotent: an example whose submission
  is published or still on its way is not submitted again; runs left unfinished by a
  stopped demo are failed with that reason and dispatched again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "docs" / "examples"
DEMO_ORG = "AgentPerf Demo"
DEMO_REVIEWER = "demo-reviewer"
# Examples the demo machine can run; `attached` needs an operator-registered endpoint.
# The runs go in phases, one phase submitted only once the one before has finished, so a
# measured run never shares the two cores with a twin (issue 38): first the GB300 rack on
# virtual time (the quickest to publish, so the first result appears within the demo's
# first minutes), then the measured ones one after the other (llama.cpp, then vLLM, the
# engine the rack examples name, on this CPU), then the H100 dry run. The H100 dry run is simulated.yaml with `benchmark.arrival: open`: its result
# carries both loops (docs/engine.md "Arrival modes"). Every result shows its session SLOs;
# the two simulated ones have catalog prices (agentperf/catalog_data/prices.yaml), so their cost
# tables have figures, and the `local-cpu` runs have none, so their cost is "—"
# (docs/catalog.md "Prices").
MEASURED = ("process.yaml", "vllm-process.yaml")
SIMULATED = ("gb300-nvl72-dry-run.yaml", "simulated-open-loop.yaml")
RUNNABLE = (*MEASURED, *SIMULATED)
PHASES = (SIMULATED[:1], MEASURED, SIMULATED[1:])
LABELS = {
    "gb300-nvl72-dry-run.yaml": "GB300 NVL72 dry run, 28 Oct stack (simulated, demo)",
    "simulated-open-loop.yaml": "H100 SXM ×8 dry run, closed and open loop (simulated, demo)",
    "process.yaml": "llama.cpp on this CPU (measured, demo)",
    "vllm-process.yaml": "vLLM 0.32 on this CPU (measured, demo)",
}
# In a container where Podman runs: the example submitted instead, and the variable that
# holds its image's reference (prepare_container_launcher)
CONTAINER_VARIANTS = {
    "process.yaml": ("container.yaml", "AGENTPERF_DEMO_IMAGE"),
    "vllm-process.yaml": ("vllm-container.yaml", "AGENTPERF_DEMO_VLLM_IMAGE"),
}
ON_ITS_WAY = (
    "validated",
    "awaiting_approval",
    "queued",
    "running",
    "verifying",
    "in_review",
    "published",
)
POLL_S = 3.0


def prepare_environment(*, base_url: str) -> None:
    """Environment the demo's worker and web server inherit (call before starting them)."""
    from django.conf import settings

    os.environ.setdefault("RUNNER_API_BASE_URL", base_url.rstrip("/"))
    # This process dispatches too (the demo reviewer approves launches here): its settings
    # were read before the line above, so they must learn the address the same way.
    settings.RUNNER_API_BASE_URL = os.environ["RUNNER_API_BASE_URL"]
    os.environ.setdefault(
        "AGENTPERF_TINY_GGUF", str(Path(settings.VAR_DIR) / "models" / "tiny-llamacpp.gguf")
    )
    # vLLM's environment (built from the host's wheelhouse by `make vllm`) and its tiny model
    from runner.launchers import vllm_env

    os.environ.setdefault("AGENTPERF_VLLM", str(vllm_env.ensure_venv().parent.parent))
    os.environ.setdefault("AGENTPERF_TINY_HF", str(vllm_env.tiny_model(seed=0)))
    # The pool host shares the model files (and vLLM's environment) with the sandboxed
    # servers, by name (docs/security.md).
    os.environ.setdefault(
        "RUNNER_LAUNCH_VARS", "AGENTPERF_TINY_GGUF,AGENTPERF_VLLM,AGENTPERF_TINY_HF"
    )
    bindir = os.path.dirname(sys.executable)
    if not os.environ.get("PATH", "").startswith(bindir + os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    # The platform's receipt signing key (docs/verification.md "Receipt"): created once under
    # var/ (RECEIPT_SIGNING_KEY_FILE); the web server and this process read the same file.
    from leaderboard.receipts import ensure_key

    path, key, created = ensure_key()
    _say(f"receipt signing key {'created' if created else 'found'}: {path} (key id {key.keyid})")
    prepare_container_launcher()


_REGISTRY: list = []  # the demo's loopback registry, while it runs


def prepare_container_launcher() -> str | None:
    """The container launcher for the demo's llama.cpp run, where this host has Podman: the
    image pushed to a loopback registry, the pool settings a pool host would have; the
    image's reference (also in AGENTPERF_DEMO_IMAGE), or None (the process launcher runs)."""
    import shutil

    if not (shutil.which("podman") and shutil.which("docker-registry")):
        _say("no Podman here: llama.cpp runs as a host process (host process, image not run)")
        return None
    from agentperf.engine.datasets.aa_local import cache_dir
    from demo.container_image import VLLM, push_image, start_registry
    from runner.launchers.base import free_port
    from runner.launchers.container import podman_global_argv

    # The images (2.8 GB for vLLM) are kept in the host's cache, like the wheelhouse they
    # come from: a host's first demo builds and pushes them, later ones (a fresh clone
    # included) find them in the registry and in Podman's store (docs/engine.md "vLLM on CPU")
    kept = cache_dir() / "demo"
    os.environ.setdefault("RUNNER_PODMAN_ROOT", str(kept / "podman" / "root"))
    # the run root is paired with the store, never per clone: Podman refuses a store whose
    # run root changed, and every clone's demo shares the host's store
    run_base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    os.environ.setdefault(
        "RUNNER_PODMAN_RUNROOT", str(Path(run_base) / f"agentperf-demo-podman-{os.getuid()}")
    )
    port = int(os.environ.get("DEMO_REGISTRY_PORT") or 15055)
    # a port found free by bind and a registry of this process answering /v2/ on it; the
    # port taken (another registry would get the image), another one: the reference changes
    for attempt in range(3):
        try:
            registry = start_registry(kept / "registry", port if attempt == 0 else free_port())
            break
        except RuntimeError:
            if attempt == 2:
                raise
    _REGISTRY.append(registry)
    os.environ["RUNNER_REGISTRIES"] = f"http://{registry.host}"
    model = Path(os.environ["AGENTPERF_TINY_GGUF"])
    model.parent.mkdir(parents=True, exist_ok=True)
    # the pool's weights folders, mounted read-only in the container
    os.environ.setdefault(
        "RUNNER_SANDBOX_RO_PATHS", f"{model.parent}:{os.environ['AGENTPERF_TINY_HF']}"
    )
    _say(f"building the llama.cpp image and pushing it to {registry.host}")
    image = push_image(podman_global_argv(), registry.host)
    os.environ["AGENTPERF_DEMO_IMAGE"] = image
    _say(f"llama.cpp runs in {image} (container launcher)")
    _say(f"building the vLLM image and pushing it to {registry.host} (minutes, once)")
    vllm_image = push_image(podman_global_argv(), registry.host, VLLM)
    os.environ["AGENTPERF_DEMO_VLLM_IMAGE"] = vllm_image
    _say(f"vLLM runs in {vllm_image} (container launcher)")
    return image


def stop_environment() -> None:
    """Stop what prepare_environment started (the registry)."""
    while _REGISTRY:
        _REGISTRY.pop().stop()


def example_text(name: str) -> str:
    """What the demo submits for `name`: a measured example through the container launcher,
    pinned to the demo image's digest, where Podman is present."""
    variant, variable = CONTAINER_VARIANTS.get(name, (name, ""))
    image = os.environ.get(variable) if variable else None
    if not image:
        return (EXAMPLES / name).read_text()
    text = (EXAMPLES / variant).read_text()
    placeholder = text.split("image: ", 1)[1].split("\n", 1)[0]
    return text.replace(placeholder, image)


def run_demo_steps(*, base_url: str) -> threading.Thread | None:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    if not user_model.objects.filter(username="admin").exists():
        user_model.objects.create_superuser("admin", "admin@localhost", "admin-demo-password")
        print("admin login: admin / admin-demo-password (embedded demo only)")
    thread = threading.Thread(
        target=_guarded, args=(base_url.rstrip("/"),), name="demo-runs", daemon=True
    )
    thread.start()
    return thread


def _guarded(base_url: str) -> None:
    try:
        demo_runs(base_url=base_url)
    except Exception:  # the site keeps serving; the log says what went wrong
        print("demo runs stopped with an error:\n" + traceback.format_exc(), flush=True)


def _say(text: str) -> None:
    print(f"[demo] {text}", flush=True)


def _post_config(base_url: str, token: str, text: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{base_url}/api/v1/submissions/",
        data=text.encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def ensure_tiny_model(path: Path) -> Path:
    """The tiny llama GGUF the `process` example serves (built once, seeded)."""
    if path.exists():
        return path
    from runner.launchers.tiny_gguf import build_tiny_gguf

    _say(f"building the tiny llama.cpp model at {path}")
    return build_tiny_gguf(path, seed=0)


def _recover_unfinished(org) -> None:
    """Runs a previous demo left running or queued: fail them with the reason, re-dispatch."""
    from runs.dispatch import submission_dispatch
    from runs.models import BenchmarkRun
    from runs.services import RunConflict, run_fail
    from submissions.models import Submission

    stuck = Submission.objects.filter(org=org, status__in=("queued", "running", "verifying"))
    for submission in stuck:
        run = BenchmarkRun.objects.latest_for(submission)
        if run is not None and run.status not in BenchmarkRun.FINAL_STATES:
            try:
                run_fail(
                    run=run, reason="the demo stopped before this run finished", actor_label="demo"
                )
            except RunConflict:
                continue
        submission.refresh_from_db()
        if submission.status == "failed":
            submission_dispatch(submission=submission)
            _say(f"submission #{submission.pk} was unfinished; dispatched again")


# The GB300 8 Oct → 28 Oct ladder on agentic coding, and the same six changes re-run on
# decode-heavy work (docs/ladders.md "Workloads"): how much of each gain survives when decode
# dominates.
GB300_LADDERS = (
    ("GB300 ladder", EXAMPLES / "ladder-gb300.json"),
    ("GB300 ladder on decode-heavy work", EXAMPLES / "ladder-gb300-decode-heavy.json"),
)


def _publish_gb300_ladders(org) -> None:
    """The GB300 8 Oct → 28 Oct ladders (docs/examples/ladder-gb300.yaml and
    ladder-gb300-decode-heavy.yaml), as the engine's ladder command measured them on the twin
    (the .json beside each, regenerated by `python -m agentperf.engine ladder --steps FILE.yaml
    --out DIR`: about 15 min on one core for the coding ladder's 18 rungs, a few minutes for
    the decode-heavy one's 7): published labelled simulated and as engine ladders, since
    their rack-scale rungs would take the demo's worker that long again."""
    from catalog.models import AIModel, HardwareSystem
    from ladders.models import Ladder
    from ladders.services import ladder_import

    model = AIModel.objects.filter(slug="deepseek-v4.1-flash-max").first()
    hardware = HardwareSystem.objects.filter(slug="gb300-nvl72").first()
    for what, path in GB300_LADDERS:
        if not path.exists():
            _say(f"{what} skipped: {path.relative_to(REPO)} is missing")
            continue
        doc = json.loads(path.read_text())
        existing = Ladder.objects.filter(org=org, source=Ladder.SOURCE_ENGINE, name=doc["name"])
        if existing.exists():
            _say(f"{what} already published: /ladders/{existing.first().pk}/")
            continue
        if model is None or hardware is None:
            _say(f"{what} skipped: the catalog lacks deepseek-v4.1-flash-max or gb300-nvl72")
            continue
        ladder = ladder_import(org=org, doc=doc, model=model, hardware=hardware)
        _say(f"{what} published (simulated): /ladders/{ladder.pk}/")


def demo_runs(*, base_url: str) -> dict[int, str]:
    from django.contrib.auth import get_user_model

    from submissions.models import Membership, Organization
    from submissions.services.tokens import api_token_create

    ensure_tiny_model(Path(os.environ["AGENTPERF_TINY_GGUF"]))
    org, _ = Organization.objects.get_or_create(name=DEMO_ORG, defaults={"slug": "agentperf-demo"})
    reviewer, created = get_user_model().objects.get_or_create(
        username=DEMO_REVIEWER, defaults={"is_staff": True, "email": "reviewer@localhost"}
    )
    if created:
        reviewer.set_unusable_password()
        reviewer.save()
    vendor_user, _ = get_user_model().objects.get_or_create(username="demo-vendor")
    Membership.objects.get_or_create(user=vendor_user, org=org)
    _recover_unfinished(org)
    _publish_gb300_ladders(org)
    _, token = api_token_create(org=org, name=f"demo {time.strftime('%Y-%m-%d %H:%M:%S')}")

    outcome: dict[int, str] = {}
    for phase in PHASES:
        labels, started = _submit_examples(base_url, token, org, phase)
        outcome.update(_follow(labels, started, reviewer))
    _say(f"all demo runs finished: {outcome}")
    return outcome


def _submit_examples(
    base_url: str, token: str, org, names: tuple[str, ...]
) -> tuple[dict[int, str], dict[int, float]]:
    """Submit the examples `names` through the vendor API (or find them on their way)."""
    from submissions.models import Submission

    labels: dict[int, str] = {}
    started: dict[int, float] = {}
    for name in names:
        text = example_text(name)
        digest = hashlib.sha256(text.encode()).hexdigest()
        existing = (
            Submission.objects.filter(org=org, config_sha256=digest, status__in=ON_ITS_WAY)
            .order_by("-created_at")
            .first()
        )
        if existing is not None:
            labels[existing.pk] = LABELS[name]
            started[existing.pk] = time.monotonic()
            _say(f"{name}: submission #{existing.pk} is already {existing.status}")
            continue
        status, body = _post_config(base_url, token, text)
        if status not in (200, 201):
            _say(f"{name}: the vendor API refused it ({status}): {body.get('error')}")
            continue
        labels[body["id"]] = LABELS[name]
        started[body["id"]] = time.monotonic()
        _say(f"{name}: submitted as #{body['id']} ({body['status']})")
    return labels, started


def _follow(labels: dict[int, str], started: dict[int, float], reviewer) -> dict[int, str]:
    """Approve launches and publish results until every submission in `labels` is final."""
    from review.services import ReviewError, review_approve_launch, review_publish
    from runs.services import reap_stale_runs
    from submissions.models import Submission

    outcome: dict[int, str] = {}
    while len(outcome) < len(labels):
        time.sleep(POLL_S)
        reap_stale_runs()
        for submission in Submission.objects.filter(pk__in=list(labels)).exclude(
            pk__in=list(outcome)
        ):
            if submission.status == "awaiting_approval":
                # The demo reviewer approves the launch of the repository's own servers
                # (llama.cpp's wrapper, vLLM from the wheelhouse) through the same review
                # service a reviewer uses.
                review_approve_launch(
                    submission=submission,
                    actor=reviewer,
                    reason="the demo's own server from this repository, tiny test model",
                )
                _say(f"#{submission.pk}: launch approved by the demo reviewer; queued")
            elif submission.status == "in_review":
                try:
                    result = review_publish(
                        submission=submission,
                        actor=reviewer,
                        label=labels[submission.pk],
                        reason="auto-approved by the demo reviewer",
                    )
                except ReviewError as exc:
                    _say(f"#{submission.pk}: not published: {exc}")
                    outcome[submission.pk] = "in_review"
                    continue
                took = time.monotonic() - started[submission.pk]
                _say(
                    f"#{submission.pk} published as result #{result.pk} "
                    f"({'simulated' if result.is_simulated else 'measured'}, "
                    f"{len(result.points)} points, {took:.0f} s): {result.max_agents}"
                )
                outcome[submission.pk] = "published"
            elif submission.status in ("published", "failed", "rejected", "withdrawn"):
                if submission.status == "failed":
                    _say(f"#{submission.pk} failed: {submission.status_reason}")
                outcome[submission.pk] = submission.status
    return outcome
