"""Start and stop the real services the tests use.

PostgreSQL, RabbitMQ and Redis are machine services: started if they are not running, never
stopped. SeaweedFS (S3) is private to one test session: its own ports, a fresh data folder,
keys, telemetry off, loopback only; stopped by PID at the end. So is Varnish (the reverse
proxy, deploy/varnish/): its own loopback port and work folder, its backend a port the
proxy tests start the site on.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

S3_ACCESS_KEY = "agentperf-test"
S3_SECRET_KEY = "agentperf-test-secret-key-0123456789"
S3_BUCKETS = ("artifacts", "datasets")


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(port: int, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not open 127.0.0.1:{port} within {seconds:.0f} s")


def ensure_postgres() -> None:
    if port_open(5432):
        return
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions:
        raise RuntimeError("PostgreSQL is not running and no cluster is installed")
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"], check=True
    )
    wait_port(5432, 30, "PostgreSQL")


def ensure_rabbitmq() -> None:
    if port_open(5672):
        return
    subprocess.run(["rabbitmq-server", "-detached"], check=True)
    wait_port(5672, 60, "RabbitMQ")


def ensure_redis() -> None:
    if port_open(6379):
        return
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
    )
    wait_port(6379, 15, "Redis")


def _bindable(port: int) -> bool:
    """Nothing holds `port` on this host (any address): a bind succeeds."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def _free_base_port(count: int = 12) -> int:
    """A base port whose `count` ports (base..base+count-1, and the same +10000) bind."""
    rng = random.Random()
    step = max(20, count)
    for _ in range(200):
        base = rng.randrange(21000, 29000 - count, step)
        ports = [base + i for i in range(count)] + [base + 10000 + i for i in range(count)]
        if all(_bindable(p) for p in ports):
            return base
    raise RuntimeError(f"no free range of {count} ports")


def stop_private(process: subprocess.Popen, folder: Path) -> None:
    """Stop a service this session started (SIGTERM, then SIGKILL after 15 s) and remove
    its private folder."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    shutil.rmtree(folder, ignore_errors=True)


@dataclass
class SeaweedFS:
    process: subprocess.Popen
    data_dir: Path
    s3_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def stop(self) -> None:
        stop_private(self.process, self.data_dir)


def start_seaweedfs() -> SeaweedFS:
    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    data_dir = Path(tempfile.mkdtemp(prefix="agentperf-s3-"))
    keys = {
        "identities": [
            {
                "name": "agentperf",
                "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    (data_dir / "keys.json").write_text(json.dumps(keys))
    base = _free_base_port()
    ports = {
        "master.port": base,
        "volume.port": base + 1,
        "filer.port": base + 2,
        "s3.port": base + 3,
        "webdav.port": base + 4,
        "admin.port": base + 5,
        "debug.port": base + 6,
        "volume.port.public": base + 1,
        "master.port.grpc": base + 10000,
        "volume.port.grpc": base + 10001,
        "filer.port.grpc": base + 10002,
        "s3.port.grpc": base + 10003,
    }
    args = [
        weed,
        "mini",
        f"-dir={data_dir / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        f"-s3.config={data_dir / 'keys.json'}",
        "-webdav=false",
        "-admin.ui=false",
        f"-bucket={','.join(S3_BUCKETS)}",
        # fixed default ports otherwise (8181, 9101): two test sessions would collide
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        *[f"-{name}={port}" for name, port in ports.items()],
    ]
    (data_dir / "data").mkdir()
    log = open(data_dir / "weed.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    handle = SeaweedFS(process, data_dir, ports["s3.port"])
    try:
        wait_port(handle.s3_port, 60, "SeaweedFS S3")
        _wait_buckets(handle)
    except Exception:
        tail = (data_dir / "weed.log").read_text(errors="replace")[-2000:]
        handle.stop()
        raise RuntimeError(f"SeaweedFS failed to start:\n{tail}") from None
    return handle


def _wait_buckets(handle: SeaweedFS) -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "s3",
        endpoint_url=handle.endpoint,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )
    deadline = time.monotonic() + 60
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
            for bucket in S3_BUCKETS:
                if bucket not in existing:
                    client.create_bucket(Bucket=bucket)
            client.put_object(Bucket=S3_BUCKETS[0], Key="ready", Body=b"1")
            return
        except Exception as exc:
            last = exc
            time.sleep(0.5)
    raise RuntimeError(f"S3 buckets not ready: {last}")


def s3_env(handle: SeaweedFS) -> dict[str, str]:
    return {
        "S3_ENDPOINT_URL": handle.endpoint,
        "S3_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "S3_SECRET_ACCESS_KEY": S3_SECRET_KEY,
        "S3_BUCKET_ARTIFACTS": S3_BUCKETS[0],
        "S3_BUCKET_DATASETS": S3_BUCKETS[1],
    }


REPO = Path(__file__).resolve().parent.parent
VCL = REPO / "deploy" / "varnish" / "agentperf.vcl"


@dataclass
class Varnish:
    """A private Varnish (deploy/varnish/agentperf.vcl) on its own loopback port, its
    backend a loopback port the proxy tests start the site on; stopped by PID."""

    process: subprocess.Popen
    work_dir: Path
    port: int
    backend_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_private(self.process, self.work_dir)


def start_varnish() -> Varnish:
    """varnishd in the foreground with the repository's VCL, its backend port replaced."""
    varnishd = shutil.which("varnishd") or "/usr/sbin/varnishd"
    if not Path(varnishd).exists():
        raise RuntimeError("varnishd is not installed (make varnish)")
    work_dir = Path(tempfile.mkdtemp(prefix="agentperf-varnish-"))
    base = _free_base_port()
    port, backend_port = base + 7, base + 8
    vcl = VCL.read_text().replace('.port = "8000";', f'.port = "{backend_port}";')
    (work_dir / "agentperf.vcl").write_text(vcl)
    args = [
        varnishd,
        "-F",  # foreground: this process is the one we stop
        "-j",
        "none",
        "-n",
        str(work_dir / "state"),
        "-a",
        f"127.0.0.1:{port}",
        "-T",
        "none",
        "-f",
        str(work_dir / "agentperf.vcl"),
        "-s",
        "malloc,128m",
    ]
    log = open(work_dir / "varnishd.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    handle = Varnish(process, work_dir, port, backend_port)
    try:
        wait_port(port, 30, "Varnish")
    except Exception:
        tail = (work_dir / "varnishd.log").read_text(errors="replace")[-2000:]
        handle.stop()
        raise RuntimeError(f"Varnish failed to start:\n{tail}") from None
    return handle


def varnish_env(handle: Varnish) -> dict[str, str]:
    """What the proxy tests read (tests/leaderboard/test_varnish.py); the purge URL is not
    set for the whole session: only the tests that start the site behind it purge."""
    return {
        "TEST_VARNISH_URL": handle.url,
        "TEST_VARNISH_BACKEND_PORT": str(handle.backend_port),
    }


@dataclass
class Registry:
    """A private OCI registry (Debian docker-registry) on its own loopback port, storage in
    a temporary folder; stopped by PID. The container launcher's tests push the images they
    build here (tests/support/container_image.py)."""

    process: subprocess.Popen
    work_dir: Path
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_private(self.process, self.work_dir)


def start_registry() -> Registry:
    """`docker-registry serve` with a config of its own (plain HTTP on loopback), started and
    awaited by the demo's own starter (demo/container_image.py `start_registry`: the port
    checked free by bind, ready when this process answers `/v2/`)."""
    from demo.container_image import start_registry as serve_registry

    binary = shutil.which("docker-registry") or "/usr/bin/docker-registry"
    if not Path(binary).exists():
        raise RuntimeError("docker-registry is not installed (make containers)")
    work_dir = Path(tempfile.mkdtemp(prefix="agentperf-registry-"))
    port = _free_base_port() + 9
    try:
        served = serve_registry(work_dir, port)
    except RuntimeError as exc:
        tail = (work_dir / "registry.log").read_text(errors="replace")[-2000:]
        shutil.rmtree(work_dir, ignore_errors=True)
        raise RuntimeError(f"the registry failed to start ({exc}):\n{tail}") from None
    return Registry(served.process, work_dir, port)


def registry_env(handle: Registry) -> dict[str, str]:
    """The registry the container tests push to and pull from (tests/containers/)."""
    return {"TEST_REGISTRY": handle.host}


def podman_storage_env() -> dict[str, str]:
    """A Podman storage of the tests' own, whichever registry they use: the root (images,
    kept between sessions) under the agentperf cache folder, the runroot (container state,
    locks) in a temporary folder ($XDG_RUNTIME_DIR, else the temp folder), one per user and
    fixed (Podman refuses a root whose runroot changed). The machine's global store is
    never touched."""
    from agentperf.engine.datasets.aa_local import cache_dir

    run_base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return {
        "RUNNER_PODMAN_ROOT": str(cache_dir() / "podman-tests" / "root"),
        "RUNNER_PODMAN_RUNROOT": str(Path(run_base) / f"agentperf-podman-{os.getuid()}"),
    }


# Advisory-lock key of ensure_database ("APDB"): the shards of one `make test` start at once.
DATABASE_LOCK = 0x41504442


def ensure_database(name: str = "agentperf") -> None:
    """Create the services-profile database (Celery results live there) if it is missing.

    The test shards start together on a fresh machine: without the lock both found the
    database missing and the second CREATE DATABASE failed (pg_database_datname_index),
    ending that shard before any test ran. The check and the create now run under a
    session-level advisory lock (CREATE DATABASE cannot run in a transaction)."""
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (DATABASE_LOCK,))
        try:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if not found.fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (DATABASE_LOCK,))


def services_env() -> dict[str, str]:
    """The services profile against this machine's PostgreSQL and RabbitMQ."""
    return {
        "DATABASE_URL": os.environ.get(
            "TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/agentperf"
        ),
        # One fixed place for task results, shared by the test process and its workers
        # (which point DATABASE_URL at pytest's test database).
        "CELERY_RESULT_BACKEND": os.environ.get(
            "TEST_CELERY_RESULT_BACKEND",
            "db+postgresql+psycopg://postgres@127.0.0.1:5432/agentperf",
        ),
        "CELERY_BROKER_URL": os.environ.get(
            "TEST_CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"
        ),
        # The services profile's shared cache; each session's keys under its own prefix
        # (CACHE_KEY_PREFIX, set by tests/conftest.py), cleared by prefix, never FLUSHDB.
        "CACHE_REDIS_URL": os.environ.get("TEST_CACHE_REDIS_URL", "redis://127.0.0.1:6379/0"),
    }


def drop_cache_keys(url: str, prefix: str) -> None:
    """Delete one session's cache keys (page epochs have no expiry)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    finally:
        client.close()


def main(argv: list[str]) -> int:
    """`python -m tests.services [pytest args]`: start services, run pytest, stop them."""
    ensure_postgres()
    ensure_rabbitmq()
    ensure_redis()
    ensure_database()
    env = dict(os.environ)
    env.update(services_env())
    env.setdefault("CACHE_KEY_PREFIX", f"test-{uuid.uuid4().hex[:8]}")
    # One queue namespace per session, so concurrent sessions on the shared RabbitMQ never
    # consume each other's messages (nor a demo's). In the environment before pytest starts:
    # pytest-django reads the settings before tests/conftest.py runs.
    env.setdefault("CELERY_QUEUE_PREFIX", f"test-{uuid.uuid4().hex[:8]}.")
    # No receipt signing key unless a test makes its own: the same on a fresh clone and on a
    # checkout whose `make demo` left a key under var/ (docs/verification.md "Receipt").
    env.setdefault(
        "RECEIPT_SIGNING_KEY_FILE",
        str(Path(tempfile.gettempdir()) / f"agentperf-no-key-{uuid.uuid4().hex[:8]}.pem"),
    )
    started: list[SeaweedFS | Varnish | Registry] = []  # stopped at the end, even when a
    try:  # later one fails to start (a missing varnishd must not leave SeaweedFS running)
        if not env.get("S3_ENDPOINT_URL"):
            started.append(weed := start_seaweedfs())
            env.update(s3_env(weed))
        if not env.get("TEST_VARNISH_URL"):
            started.append(varnish := start_varnish())
            env.update(varnish_env(varnish))
        if not env.get("TEST_REGISTRY"):
            started.append(registry := start_registry())
            env.update(registry_env(registry))
        if not env.get("RUNNER_PODMAN_ROOT"):  # private storage, also with a given registry
            env.update(podman_storage_env())
        print(
            f"services: PostgreSQL, RabbitMQ, S3 at {env['S3_ENDPOINT_URL']}, "
            f"Varnish at {env['TEST_VARNISH_URL']}, registry at {env['TEST_REGISTRY']}",
            flush=True,
        )
        return subprocess.call([sys.executable, "-m", "pytest", *argv], env=env)
    finally:
        for handle in started:
            handle.stop()
        try:
            drop_cache_keys(env["CACHE_REDIS_URL"], env["CACHE_KEY_PREFIX"])
        except Exception as exc:  # the run's result stands; stale keys only cost memory
            print(f"could not drop the session's cache keys: {exc}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
