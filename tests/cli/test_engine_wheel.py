"""The engine's own distribution (packages/agentperf, docs/engine.md "Install"): the
wheel is built from the checkout, installed into a fresh venv that has no Django, and used
from a folder outside the checkout: `agentperf validate` on every example and on a bad
one, a `sim:tiny` trial through `agentperf-engine`, and the Reproduce block exactly as a
published simulated result's page prints it (its `pip install ./packages/agentperf`
included, against the platform's live vendor API for the tuning subset).

The wheel's dependencies come from a local wheelhouse of the versions requirements*.txt
pin, built once with `pip wheel` and kept under ~/.cache/agentperf (PyPI the first time
only); every install here runs with `--no-index`."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pipeline.conftest import REPO

pytestmark = pytest.mark.slow

PACKAGE = REPO / "packages" / "agentperf"
EXAMPLES = sorted(
    p for p in (REPO / "docs" / "examples").glob("*.yaml") if not p.name.startswith("ladder")
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentperf"
HANG_GUARD_S = 600  # a stuck command fails the test instead of hanging the session


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S, **kwargs)
    assert done.returncode == 0, (cmd, done.stdout[-3000:], done.stderr[-3000:])
    return done


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    """name -> `name==version` of every pin in requirements*.txt."""
    pins = {}
    for req in ("requirements.txt", "requirements-dev.txt"):
        for line in (REPO / req).read_text().splitlines():
            spec = line.split("#", 1)[0].strip()
            if "==" in spec:
                name = spec.split("==", 1)[0].split("[", 1)[0]
                pins[_canonical(name)] = spec
    return pins


def _requires(wheel: Path) -> list[str]:
    """The wheel's own dependency names (its METADATA's Requires-Dist)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [
        _canonical(re.split(r"[ ;<>=!~\[]", line.split(":", 1)[1].strip(), maxsplit=1)[0])
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def _wheelhouse(requires: list[str]) -> Path:
    """Wheels of the pinned versions of `requires` (and of what they need), plus pip and
    hatchling for the Reproduce block's own `pip install` of the package folder."""
    pins = _pins()
    missing = [name for name in requires if name not in pins]
    assert not missing, f"pin these in requirements.txt: {missing}"
    wanted = sorted({pins[n] for n in requires} | {pins["hatchling"], f"pip=={_pip_version()}"})
    key = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]
    house = CACHE / f"wheelhouse-{key}"
    if not (house / ".complete").exists():
        partial = CACHE / f"wheelhouse-{key}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        _run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(partial), *wanted])
        (partial / ".complete").write_text("\n".join(wanted) + "\n")
        shutil.rmtree(house, ignore_errors=True)
        partial.rename(house)
    return house


def _pip_version() -> str:
    import pip

    return pip.__version__


@dataclass
class EngineVenv:
    root: Path
    wheel: Path
    house: Path
    home: Path

    def env(self, **extra: str) -> dict[str, str]:
        """Only the venv on the PATH: no PYTHONPATH, no Django settings, no checkout."""
        return {
            "PATH": f"{self.root / 'bin'}:/usr/bin:/bin",
            "HOME": str(self.home),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(self.house),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **extra,
        }

    def run(self, *cmd: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(cmd),
            cwd=cwd,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=HANG_GUARD_S,
        )


@pytest.fixture(scope="module")
def engine_venv(tmp_path_factory) -> EngineVenv:
    """The wheel, built from the checkout, in a fresh venv (one per session)."""
    built = tmp_path_factory.mktemp("engine-wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(built), str(PACKAGE)]
    )
    (wheel,) = built.glob("agentperf-*.whl")
    house = _wheelhouse(_requires(wheel))
    root = tmp_path_factory.mktemp("engine-venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)])
    # the current venv's pip installs into the new one (faster than ensurepip); pip itself
    # goes in too, for the Reproduce block's `pip install`
    _run(
        [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install"]
        + ["-q", "--no-compile", "--no-index", "--find-links", str(house), str(wheel), "pip"]
    )
    return EngineVenv(root, wheel, house, tmp_path_factory.mktemp("engine-home"))


def test_the_wheel_holds_the_engine_and_the_cli_and_no_web_app(engine_venv):
    with zipfile.ZipFile(engine_venv.wheel) as zf:
        tops = {n.split("/", 1)[0] for n in zf.namelist()}
        names = set(zf.namelist())
    assert tops == {"agentperf_cli", "agentperf", "agentperf-0.1.0.dist-info"}, tops
    for path in (
        "agentperf/engine/cli.py",
        "agentperf/simulator/virtual.py",
        "agentperf/simulator/profiles/tiny.yaml",
        "agentperf/schema/deployment.py",
        "agentperf/contract.py",
        "agentperf/engine/report.py",
        "agentperf/engine/datasets/__init__.py",
    ):
        assert path in names, path
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith("runner/") for n in names)  # the pool-host runtime stays out
    entry_points = engine_venv.root.glob("lib/python*/site-packages/*.dist-info/entry_points.txt")
    text = "".join(p.read_text() for p in entry_points)
    assert "agentperf-engine = agentperf.engine.cli:main" in text
    assert "sim = agentperf.simulator.virtual:sim_target" in text


def test_the_fresh_venv_has_no_django(engine_venv, tmp_path):
    done = engine_venv.run("python", "-c", "import django", cwd=tmp_path)
    assert done.returncode != 0 and "No module named 'django'" in done.stderr, done
    where = engine_venv.run(
        "python", "-c", "import agentperf; print(agentperf.__file__)", cwd=tmp_path
    )
    assert where.returncode == 0 and str(engine_venv.root) in where.stdout, where
    runtime = engine_venv.run("python", "-c", "import runner", cwd=tmp_path)
    assert "No module named 'runner'" in runtime.stderr, runtime


def test_installed_validate_accepts_every_example_and_names_a_bad_field(engine_venv, tmp_path):
    for example in EXAMPLES:
        done = engine_venv.run("agentperf", "validate", str(example), cwd=tmp_path)
        assert done.returncode == 0, (example.name, done.stdout, done.stderr)
        assert "valid (schema_version 1)" in done.stdout, done.stdout
    bad = tmp_path / "bad.yaml"
    text = (REPO / "docs" / "examples" / "simulated.yaml").read_text()
    bad.write_text(text.replace("schema_version: 1", "schema_version: 99", 1))
    done = engine_venv.run("agentperf", "validate", str(bad), cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "schema_version" in done.stdout + done.stderr


def test_installed_engine_generates_a_dataset_and_runs_a_sim_tiny_trial(engine_venv, tmp_path):
    made = engine_venv.run(
        "agentperf-engine", "dataset", "generate", "--seed", "0", "--trajectories", "12",
        "--stdlib-only", "--out", "syn.jsonl.gz", cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, (made.stdout[-3000:], made.stderr[-3000:])
    done = engine_venv.run(
        "agentperf-engine", "trial", "--target", "sim:tiny", "--model", "tiny-1b",
        "--dataset", "syn.jsonl.gz", "--concurrency", "2", "--warmup", "2",
        "--duration", "20", "--accelerators", "1", "--out", "trial", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    trial = json.loads((tmp_path / "trial" / "trial.json").read_text())
    assert trial["simulated"] is True and trial["concurrency"] == 2, trial.keys()
    assert trial["summary"]["requests"] > 0


@pytest.mark.django_db(transaction=True)
def test_the_printed_reproduce_block_runs_in_the_fresh_venv(
    engine_venv, live_server, vendor, client, tmp_path
):
    from catalog.datasets import public_tuning_subset
    from demo.synthetic import make_published_result, run_spec, synthetic_points

    _, token = vendor
    public_tuning_subset()
    result = make_published_result(
        simulated=True, points=synthetic_points(concurrencies=(1, 2, 4), accelerators=8)
    )
    run = result.run
    # short search settings, as the pipeline's simulated pool gives a run (tests/pipeline)
    run.run_spec = run_spec(
        run=run, accelerators=8, cap=4, warmup_s=5.0, duration_s=20.0, max_trials=6,
        min_requests=4, tool_delay_scale=0.3,
    )  # fmt: skip
    run.save(update_fields=["run_spec"])

    page = client.get(f"/results/{result.pk}/").content.decode()
    block = re.search(r'<pre class="cmd"><code>(.*?)</code></pre>', page, re.S)
    assert block, "no reproduce block on the result page"
    command = html.unescape(block.group(1))
    assert "pip install ./packages/agentperf\n" in command
    assert "agentperf-engine search --target sim:tiny" in command

    # a clone's folders the install reads (the package builds from the checkout's modules)
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("packages", "agentperf", "agentperf_cli"):
        (clone / name).symlink_to(REPO / name)
    done = engine_venv.run(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        command,
        cwd=clone,
        AGENTPERF_URL=live_server.url,
        AGENTPERF_TOKEN=token,
        AGENTPERF_CONFIG=str(tmp_path / "cli.json"),
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    spec = run.run_spec
    assert json.loads((clone / "tiers.json").read_text()) == spec["tiers"]
    summary = json.loads((clone / "results" / "search.json").read_text())
    assert set(summary["max_agents"]) == {t["name"] for t in spec["tiers"]}
    assert summary["cap"] == 4 and summary["simulated"] is True
