"""The server images the `container` launcher runs in the demo, the tests and
benchmarks/launch_cost.py, built from local files (no network): a minimal root filesystem
holding this host's Python (its version and multiarch folder; standard library only) and
the shared libraries its programs need, plus one engine:

- `LLAMACPP`: the venv's `xllamacpp` and `runner/launchers/llamacpp_server.py` as
  `runner.launchers.llamacpp_server`;
- `VLLM`: every package of the vLLM CPU environment (runner/launchers/vllm_env.py, built from
  the host's wheelhouse) in the image's site-packages, and the two programs its CPU worker
  runs, `sh` and `lscpu` (docs/engine.md "vLLM on CPU").

- `rootfs_tarball(recipe)`: the tarball, cached under the agentperf cache folder keyed by
  the hash of what goes in, so a session builds it once and later sessions reuse it;
- `push_image(podman, registry, recipe)`: `podman import` of the tarball into the session's
  storage and `podman push` to the loopback registry; returns
  `host:port/agentperf/<engine>@sha256:…`.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentperf.engine.datasets.aa_local import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[1]
_SKIP_STDLIB = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "site-packages", "lib2to3"}


def _site_package(name: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"{name} is not installed in the venv"
    return Path(spec.origin).parent


def _libraries(binaries: list[Path]) -> set[Path]:
    """The shared libraries `binaries` load (ldd), resolved to their files."""
    found: set[Path] = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for match in re.finditer(r"(/\S+\.so[^\s]*)", out):
            found.add(Path(match.group(1)))
    return found


def _python_dir() -> str:
    """The image's library folder for this host's Python (usr/local/lib/pythonX.Y)."""
    return f"usr/local/lib/python{sys.version_info.major}.{sys.version_info.minor}"


def _multiarch() -> str:
    """This host's multiarch triplet (x86_64-linux-gnu, aarch64-linux-gnu): the folder of
    the image's shared libraries."""
    import platform

    return str(sysconfig.get_config_var("MULTIARCH") or f"{platform.machine()}-linux-gnu")


def _system_files(binaries: list[Path]) -> list[tuple[str, Path]]:
    """(path in the image, host file) for the shared libraries `binaries` load."""
    files: list[tuple[str, Path]] = []
    triplet = _multiarch()
    seen: set[str] = set()
    for lib in sorted(_libraries(binaries)):
        # a wheel's own bundled libraries (torch/lib, numpy.libs) load from beside it
        if "site-packages" in lib.parts or lib.name in seen:
            continue
        seen.add(lib.name)
        real = Path(os.path.realpath(lib))
        # the dynamic loader where binaries look for it (/lib64 on x86_64, /lib on aarch64)
        target = (
            str(lib.parent).lstrip("/") if lib.name.startswith("ld-linux") else f"usr/lib/{triplet}"
        )
        files.append((f"{target}/{lib.name}", real))
    return files


def _python_files() -> tuple[list[tuple[str, Path]], list[Path]]:
    """This host's Python and its standard library, and the binaries among them."""
    files: list[tuple[str, Path]] = []
    pydir = _python_dir()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*")):
        rel = path.relative_to(stdlib)
        if rel.parts[0] in _SKIP_STDLIB or "__pycache__" in rel.parts or not path.is_file():
            continue
        files.append((f"{pydir}/{rel}", path))
    executable = Path(os.path.realpath(sys.executable))
    files.append(("usr/local/bin/python3", executable))
    return files, [executable, *stdlib.glob("lib-dynload/*.so")]


def _package_files(root: Path, names: list[str] | None = None) -> list[tuple[str, Path]]:
    """The files of `root` (a site-packages folder; only its entries `names` when given)
    under the image's site-packages, without byte-code caches."""
    pydir = _python_dir()
    entries = [root / n for n in names] if names is not None else sorted(root.iterdir())
    files: list[tuple[str, Path]] = []
    for entry in entries:
        paths = [entry] if entry.is_file() else sorted(entry.rglob("*"))
        for path in paths:
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append((f"{pydir}/site-packages/{path.relative_to(root)}", path))
    return files


@dataclass(frozen=True)
class ImageRecipe:
    """One engine's image: its repository name and what goes in beside Python."""

    engine: str
    repository: str

    def inputs(self) -> list[tuple[str, Path]]:
        """(path in the image, host file) for every file of the image."""
        files, binaries = _python_files()
        if self.engine == "llamacpp":
            xllamacpp = _site_package("xllamacpp")
            files += _package_files(xllamacpp.parent, ["xllamacpp"])
            binaries += list(xllamacpp.glob("*.so"))
            server = REPO_ROOT / "runner" / "launchers" / "llamacpp_server.py"
            files.append(("app/runner/launchers/llamacpp_server.py", server))
        elif self.engine == "vllm":
            from runner.launchers.vllm_env import ensure_venv

            site = next((ensure_venv().parent.parent / "lib").glob("python3*/site-packages"))
            packages = _package_files(site)
            files += packages
            binaries += [p for _, p in packages if ".so" in p.name and not p.is_symlink()]
            # vLLM's CPU worker runs `lscpu` through a shell to pick its threads
            for name, target in (("lscpu", "usr/bin/lscpu"), ("sh", "usr/bin/sh")):
                program = Path(os.path.realpath(shutil.which(name) or f"/usr/bin/{name}"))
                files.append((target, program))
                binaries.append(program)
        else:
            raise ValueError(f"no image recipe for engine {self.engine!r}")
        return files + _system_files(binaries)

    def content_hash(self, files: list[tuple[str, Path]]) -> str:
        digest = hashlib.sha256()
        for name, path in files:
            stat = path.stat()
            digest.update(f"{name}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
        if self.engine == "llamacpp":
            digest.update((REPO_ROOT / "runner/launchers/llamacpp_server.py").read_bytes())
        digest.update(Path(__file__).read_bytes())
        return digest.hexdigest()[:16]


LLAMACPP = ImageRecipe("llamacpp", "agentperf/llamacpp")
VLLM = ImageRecipe("vllm", "agentperf/vllm")


def _inputs() -> list[tuple[str, Path]]:
    """The llama.cpp image's files (tests/demo/test_demo_registry.py reads them)."""
    return LLAMACPP.inputs()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
    tar.addfile(info)


def rootfs_tarball(recipe: ImageRecipe = LLAMACPP) -> Path:
    """The image's root filesystem as a tarball, built once per content hash."""
    files = recipe.inputs()
    out = cache_dir() / "container" / f"{recipe.engine}-rootfs-{recipe.content_hash(files)}.tar"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".tmp")
    os.close(fd)
    with tarfile.open(tmp, "w") as tar:
        made: set[str] = set()
        for d in ("tmp", "sandbox", "proc", "dev", "sys", "etc", "usr/bin", "app/runner"):
            _add_dir(tar, d, 0o1777 if d in ("tmp", "sandbox") else 0o755)
            made.add(d)
        for name, path in files:
            parts = Path(name).parts
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in made:
                    _add_dir(tar, parent)
                    made.add(parent)
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            with open(path, "rb") as fh:
                tar.addfile(info, fh)
        for link, target in (("bin", "usr/bin"), ("lib", "usr/lib")):
            info = tarfile.TarInfo(link)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name in ("python", "python3.11"):
            info = tarfile.TarInfo(f"usr/local/bin/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, "python3"
            tar.addfile(info)
        _add_bytes(tar, "app/runner/__init__.py", b"")
        _add_bytes(tar, "app/runner/launchers/__init__.py", b"")
        _add_bytes(tar, "etc/passwd", b"root:x:0:0::/root:/bin/false\n")
        _add_bytes(tar, "etc/group", b"root:x:0:\n")
    os.replace(tmp, out)
    return out


def push_image(podman: list[str], registry: str, recipe: ImageRecipe = LLAMACPP) -> str:
    """Import the rootfs into `podman`'s storage and push it to `registry` (plain HTTP on
    loopback); the reference pinned by the digest the registry holds."""
    tarball = rootfs_tarball(recipe)
    # tagged with the rootfs's content hash: a registry that holds it already (the demo's,
    # kept under var/) gives the same digest again, so the config and its approval stay
    tag = f"{registry}/{recipe.repository}:{tarball.stem.rsplit('-', 1)[-1]}"
    if shutil.which("skopeo"):
        held = subprocess.run(
            [
                "skopeo",
                "inspect",
                "--tls-verify=false",
                "--format",
                "{{.Digest}}",
                f"docker://{tag}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if held.returncode == 0 and held.stdout.strip().startswith("sha256:"):
            return f"{registry}/{recipe.repository}@{held.stdout.strip()}"
    changes = [
        "ENV PATH=/usr/local/bin:/usr/bin",
        "ENV PYTHONPATH=/app",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "ENV LANG=C.UTF-8",
        # the unprivileged user has no home in the image; caches go to the writable /tmp
        "ENV HOME=/tmp",
        "WORKDIR /app",
        'CMD ["python3"]',
    ]
    argv = [*podman, "import", "--quiet"]
    for change in changes:
        argv += ["--change", change]
    subprocess.run([*argv, str(tarball), tag], check=True, capture_output=True, timeout=600)
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        subprocess.run(
            [
                *podman,
                "push",
                "--quiet",
                "--tls-verify=false",
                "--digestfile",
                str(digest_file),
                tag,
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
        digest = digest_file.read_text().strip()
    return f"{registry}/{recipe.repository}@{digest}"


@dataclass
class Registry:
    """A loopback OCI registry (Debian docker-registry) serving `folder`, stopped by PID."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def start_registry(folder: Path, port: int) -> Registry:
    """`docker-registry serve` on 127.0.0.1:`port` (plain HTTP), storage under `folder`.
    RuntimeError where the port is taken (found by bind before starting: another registry
    there would take the pushed image), or where the process started does not answer `/v2/`
    while running."""
    if not _port_free(port):
        raise RuntimeError(f"127.0.0.1:{port} is taken")
    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {folder / 'data'}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: {os.urandom(16).hex()}\n"
    )
    log = open(folder / "registry.log", "ab")
    process = subprocess.Popen(
        [binary, "serve", str(folder / "config.yml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: see {folder / 'registry.log'}")
        try:
            with direct.open(f"http://127.0.0.1:{port}/v2/", timeout=2) as answer:
                ok = answer.status == 200
        except OSError:
            ok = False
        # the answer is this process's: it still runs (had another held the port, it exited)
        if ok and process.poll() is None:
            return Registry(process, port)
        time.sleep(0.1)
    process.kill()
    process.wait()
    raise RuntimeError(f"docker-registry did not open 127.0.0.1:{port} within 30 s")
