"""Both profiles' caches are shared by every process (docs/security.md "Shared state across
processes"); the per-process memory cache is never chosen."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from core.cache import PrefixedRedisCache

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"


def _python(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    setup = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='config.settings'; "
        "django.setup(); from django.conf import settings; from django.core.cache import cache; "
    )
    return subprocess.run(
        [sys.executable, "-c", setup + code],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "AGENTPERF_VAR_DIR": str(tmp_path), **env},
        timeout=120,
    )


def test_the_embedded_profile_caches_in_the_database_and_two_processes_share_it(tmp_path):
    # migrate alone creates the cache table (leaderboard.apps), as `make migrate` does too
    made = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "AGENTPERF_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    wrote = _python(
        "print(settings.CACHES['default']['BACKEND']); cache.set('k', 'from-one', None)",
        tmp_path,
    )
    assert wrote.stdout.split() == ["core.cache.DatabaseCache"], wrote.stderr
    read = _python("print(cache.get('k'))", tmp_path)
    assert read.stdout.split() == ["from-one"], read.stderr


def test_the_database_caches_cheaper_read_keeps_djangos_answers(tmp_path):
    """core.cache.DatabaseCache overrides get_many: values, misses and expiry as Django's."""
    code = (
        "from django.core.cache import caches; "
        "from django.core.cache.backends.db import DatabaseCache as D; "
        "fast, plain = caches['default'], D('agentperf_cache', "
        "{'KEY_PREFIX': settings.CACHE_KEY_PREFIX}); "
        # timeout 0: stored with an expiry already past, so read as a miss (and deleted)
        "fast.set('a', {'x': [1, 2]}, None); plain.set('b', 'two', 60); "
        "plain._base_set('set', fast.make_key('soon'), 1, 0); "
        "print(type(fast).__name__, fast.get_many(['a', 'b', 'soon', 'none']) == "
        "plain.get_many(['a', 'b', 'soon', 'none']) == {'a': {'x': [1, 2]}, 'b': 'two'}, "
        "fast.get('soon', 'gone'), plain.get('soon', 'gone'))"
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "AGENTPERF_VAR_DIR": str(tmp_path)},
        check=True,
        timeout=300,
    )
    proc = _python(code, tmp_path)
    assert proc.stdout.split() == ["DatabaseCache", "True", "gone", "gone"], proc.stderr


def test_cache_redis_url_selects_redis_with_the_key_prefix(tmp_path):
    proc = _python(
        "d = settings.CACHES['default']; print(d['BACKEND'], d['KEY_PREFIX'])",
        tmp_path,
        CACHE_REDIS_URL=REDIS_URL,
        CACHE_KEY_PREFIX="site-a",
    )
    assert proc.stdout.split() == ["core.cache.PrefixedRedisCache", "site-a"], proc.stderr


@pytest.mark.parametrize("value", ["http://127.0.0.1:6379", "redis://", "redis://h:port/0"])
def test_a_malformed_cache_redis_url_stops_start_up_naming_it(value, tmp_path):
    proc = _python("print('started')", tmp_path, CACHE_REDIS_URL=value)
    assert proc.returncode != 0 and "started" not in proc.stdout
    assert "Environment variable CACHE_REDIS_URL=" in proc.stderr


def test_clearing_the_redis_cache_keeps_other_prefixes_keys():
    ours, theirs = f"ours-{uuid.uuid4().hex[:8]}", f"theirs-{uuid.uuid4().hex[:8]}"
    mine = PrefixedRedisCache(REDIS_URL, {"KEY_PREFIX": ours})
    other = PrefixedRedisCache(REDIS_URL, {"KEY_PREFIX": theirs})
    try:
        mine.set_many({f"k{i}": i for i in range(2500)})
        other.set("kept", "yes")
        mine.clear()
        assert mine.get("k0") is None and mine.get("k2499") is None
        assert other.get("kept") == "yes"
        assert not list(redis.Redis.from_url(REDIS_URL).scan_iter(match=f"{ours}:*"))
    finally:
        other.clear()
