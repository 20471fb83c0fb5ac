"""Start and stop the real services the tests use.

PostgreSQL, RabbitMQ and Redis are machine services: started if they are not running, never
stopped. SeaweedFS (S3) is private to one test session: its own ports, a fresh data folder,
keys, telemetry off, loopback only; stopped by PID at the end.
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


def _free_base_port() -> int:
    """A base port whose neighbourhood (base..base+12 and +10000) is free."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(21000, 29000, 20)
        ports = [base + i for i in range(12)] + [base + 10000 + i for i in range(12)]
        if not any(port_open(p, timeout=0.05) for p in ports):
            return base
    raise RuntimeError("no free port range for SeaweedFS")


@dataclass
class SeaweedFS:
    process: subprocess.Popen
    data_dir: Path
    s3_port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.data_dir, ignore_errors=True)


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


def ensure_database(name: str = "agentperf") -> None:
    """Create the services-profile database (Celery results live there) if it is missing."""
    import psycopg

    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


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
    weed = None
    if not env.get("S3_ENDPOINT_URL"):
        weed = start_seaweedfs()
        env.update(s3_env(weed))
    print(f"services: PostgreSQL, RabbitMQ, S3 at {env['S3_ENDPOINT_URL']}", flush=True)
    try:
        return subprocess.call([sys.executable, "-m", "pytest", *argv], env=env)
    finally:
        if weed is not None:
            weed.stop()
        try:
            drop_cache_keys(env["CACHE_REDIS_URL"], env["CACHE_KEY_PREFIX"])
        except Exception as exc:  # the run's result stands; stale keys only cost memory
            print(f"could not drop the session's cache keys: {exc}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
