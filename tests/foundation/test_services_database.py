"""tests/services.py `ensure_database`: the shards of one `make test` start together on a
fresh machine and each makes sure the services database exists; none may fail because
another created it first (a CI run lost a whole shard to that race)."""

from __future__ import annotations

import threading
import uuid

import psycopg

from tests.services import ensure_database

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"


def test_shards_creating_the_services_database_at_once_all_succeed() -> None:
    name = f"agentperf_race_{uuid.uuid4().hex[:8]}"
    starters = 6
    barrier = threading.Barrier(starters)
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            ensure_database(name)
        except BaseException as exc:  # what a shard would have died of
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            found = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
            assert found.fetchone() == (1,)
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
