"""Server time of the public chart pages with many results (DESIGN.md §8: < 100 ms at p95).

Fills a throwaway database (SQLite in a temporary folder by default, or the PostgreSQL URL
given with --database-url, which is dropped and recreated) with one model that has
`--results` published results of `--points` trial points each, published through the real
`result_publish` service, then times GET requests through Django's test client (the whole
request/response cycle in-process: URL routing, middleware, cache, queries, template; no
network). Cold = cache generation bumped before every request (as after a publish); warm =
served from the chart cache.

    .venv/bin/python -m benchmarks.site                  # 200 results x 30 points, SQLite
    .venv/bin/python -m benchmarks.site --database-url postgresql://postgres@127.0.0.1:5432/x
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _setup(database_url: str | None, folder: Path) -> None:
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{folder / 'site-bench.sqlite3'}"
    os.environ["AGENTPERF_VAR_DIR"] = str(folder / "var")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    for name in ("CACHE_REDIS_URL", "S3_ENDPOINT_URL", "CELERY_BROKER_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()


def _fill(results: int, points: int) -> str:
    import datetime as dt

    from django.core.management import call_command
    from django.utils import timezone

    call_command("migrate", verbosity=0, interactive=False)
    from tests.support.builders import (
        make_hardware,
        make_model,
        make_org,
        make_published_result,
        make_tier_set,
        synthetic_points,
    )

    model = make_model(slug="bench-model", name="Bench model")
    tiers = make_tier_set(model=model)
    systems = [make_hardware(name=f"System {i}") for i in range(20)]
    orgs = [make_org(f"Vendor {i}") for i in range(10)]
    concurrencies = [max(1, round(1.3**i)) + i for i in range(points)]
    start = timezone.now() - dt.timedelta(days=results)
    for i in range(results):
        make_published_result(
            model=model,
            hardware=systems[i % len(systems)],
            org=orgs[i % len(orgs)],
            tier_set=tiers,
            label=f"System {i % len(systems)} run {i}",
            simulated=i % 10 == 9,
            points=synthetic_points(
                single_agent_speed=120 + (i % 17) * 10,
                knee=10 + i % 23,
                concurrencies=concurrencies,
            ),
            published_at=start + dt.timedelta(days=i),
        )
    return model.slug


def _time(client, url: str, n: int, *, cold: bool) -> list[float]:
    from leaderboard.cache import chart_cache_invalidate

    out = []
    for _ in range(n):
        if cold:
            chart_cache_invalidate()
        t0 = time.perf_counter()
        response = client.get(url)
        out.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return out


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=200)
    parser.add_argument("--points", type=int, default=30)
    parser.add_argument("--requests", type=int, default=100, help="per case")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="agentperf-site-bench-") as tmp:
        folder = Path(tmp)
        if args.database_url and args.database_url.startswith("postgres"):
            import psycopg

            name = args.database_url.rsplit("/", 1)[1]
            admin = args.database_url.rsplit("/", 1)[0] + "/postgres"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
                conn.execute(f'CREATE DATABASE "{name}"')
        _setup(args.database_url, folder)
        from django.conf import settings
        from django.test import Client

        t0 = time.perf_counter()
        slug = _fill(args.results, args.points)
        fill_s = time.perf_counter() - t0
        client = Client()
        url = f"/models/{slug}/"
        cases = {
            "model page, cold cache": (url, True),
            "model page, warm cache": (url, False),
            "model page with simulated, cold": (url + "?simulated=1", True),
            "home, cold": ("/", True),
            "results API, cold": ("/api/v1/public/results/?model=" + slug, True),
        }
        _time(client, url, 3, cold=True)  # imports, template compilation
        print(
            f"{args.results} results x {args.points} points, "
            f"{settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, "
            f"filled in {fill_s:.1f} s; {args.requests} requests per case\n"
        )
        print(f"{'case':36} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        for name, (path, cold) in cases.items():
            times = _time(client, path, args.requests, cold=cold)
            print(
                f"{name:36} {statistics.median(times):8.1f} {_p(times, 95):8.1f} {max(times):8.1f}"
            )
        size = len(client.get(url).content)
        print(f"\nmodel page size: {size / 1024:.0f} KiB (figure JSON inline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
