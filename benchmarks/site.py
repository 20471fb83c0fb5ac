"""Server time of the public chart pages with many results (target: under 100 ms at p95,
docs/benchmarks.md "Web").

Fills a throwaway database (SQLite in a temporary folder by default, or the PostgreSQL URL
given with --database-url, which is dropped and recreated) with one model that has
`--results` published results of `--points` trial points each, published through the real
`result_publish` service, then times GET requests through Django's test client (the whole
request/response cycle in-process: URL routing, middleware, cache, queries, template; no
network). Three figures per page, side by side:

- warm: served from the page cache;
- cold before: the first view after a publish as it was before the background rebuild: the
  cache dropped, the visitor rebuilds the page (still what a visitor pays when no worker
  has rebuilt the page within `leaderboard.cache.STALE_GRACE_S`);
- cold after: the first view after a publish now: the publish's commit hook bumps the cache
  (`chart_cache_added`), the `leaderboard.rebuild_pages` task rebuilds the affected pages
  (run here in-process, timed separately as "background rebuild"), then the visitor comes.

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
    from demo.synthetic import (
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


def _after_publish(client, urls: list[str], n: int, result_id: int) -> tuple[dict, list[float]]:
    """First view of each url after a publish whose background rebuild has run, and the
    rebuild's own time (the worker's, not a visitor's)."""
    from leaderboard.cache import chart_cache_added
    from leaderboard.rebuild import pages_rebuild

    views: dict[str, list[float]] = {url: [] for url in urls}
    rebuilds = []
    for _ in range(n):
        chart_cache_added()  # what result_publish's commit hook does
        t0 = time.perf_counter()
        paths = pages_rebuild(result_ids=[result_id])
        rebuilds.append((time.perf_counter() - t0) * 1000)
        assert set(urls) <= set(paths), (urls, paths)
        for url in urls:
            t0 = time.perf_counter()
            response = client.get(url)
            views[url].append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, (url, response.status_code)
    return views, rebuilds


def pages_rebuild_paths(result_id: int) -> list[str]:
    from leaderboard.models import Result
    from leaderboard.rebuild import affected_paths

    return affected_paths(Result.objects.select_related("model", "hardware").filter(pk=result_id))


def _pair(times: list[float]) -> str:
    return f"{statistics.median(times):.1f} / {_p(times, 95):.1f}"


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
        client = Client(HTTP_HOST="localhost")  # an allowed host outside the test runner
        url = f"/models/{slug}/"
        pages = {
            "model page": url,
            "model page incl. simulated": url + "?simulated=1",
            "home": "/",
        }
        _time(client, url, 3, cold=True)  # imports, template compilation
        print(
            f"{args.results} results x {args.points} points, "
            f"{settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}, "
            f"filled in {fill_s:.1f} s; {args.requests} requests per case\n"
        )
        from leaderboard.models import Result

        # the newest result is simulated (every tenth is), so its rebuild covers all pages
        newest = Result.objects.order_by("-published_at").values_list("pk", flat=True)[0]
        after, rebuilds = _after_publish(client, list(pages.values()), args.requests, newest)
        print(f"{'ms':28} {'warm':>15} {'cold before':>15} {'cold after':>15}")
        print(f"{'':28} {'p50 / p95':>15} {'p50 / p95':>15} {'p50 / p95':>15}")
        for name, path in pages.items():
            cells = [
                _time(client, path, args.requests, cold=False),
                _time(client, path, args.requests, cold=True),
                after[path],
            ]
            print(f"{name:28} " + " ".join(f"{_pair(t):>15}" for t in cells))
        api = _time(client, "/api/v1/public/results/?model=" + slug, args.requests, cold=True)
        print(f"{'results API, cold':28} {'':>15} {_pair(api):>15}")
        print(
            f"\nbackground rebuild of the {len(pages_rebuild_paths(newest))} pages a publish "
            f"affects (worker, not a visitor): {_pair(rebuilds)} ms p50 / p95"
        )
        size = len(client.get(url).content)
        print(f"model page size: {size / 1024:.0f} KiB (figure JSON inline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
