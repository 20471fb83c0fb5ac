"""After a publish or a status change commits, the affected pages are rebuilt in the
background (`leaderboard.rebuild_pages`), visitors get the previous page meanwhile, and a
retired result never appears on a page once its status change has committed.

Locmem caches are per process, so a worker process could not fill this process's cache:
the tests that need the rebuild to land run the real task in this process (Celery eager
mode, through the same `apply_async` the commit hook calls). The others send it to the test
session's RabbitMQ queue, where no worker consumes it, which is "the rebuild has not run yet".
"""

import pytest
from django.urls import reverse

from demo.synthetic import (
    make_hardware,
    make_model,
    make_published_result,
    make_tier_set,
    synthetic_points,
)
from leaderboard import cache as lb_cache
from leaderboard.publishing import result_set_status
from leaderboard.tasks import rebuild_pages
from tests.leaderboard.test_queries import MODEL_PAGE_QUERIES


@pytest.fixture
def lineup(db):
    model, tiers = make_model(), make_tier_set()
    systems = [make_hardware(), make_hardware()]

    def publish(label: str, i: int = 0):
        return make_published_result(
            model=model,
            hardware=systems[i % 2],
            tier_set=tiers,
            label=label,
            points=synthetic_points(concurrencies=(1, 2, 4, 8)),
        )

    results = [publish(f"Alpha run {i}", i) for i in range(3)]
    return model, results, publish


def _page(client, model) -> str:
    response = client.get(reverse("model-detail", args=[model.slug]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_publish_rebuilds_its_pages_in_the_background_so_the_next_view_runs_no_query(
    client, lineup, tasks_in_process, django_capture_on_commit_callbacks, django_assert_num_queries
):
    model, _, publish = lineup
    with django_capture_on_commit_callbacks(execute=True):
        fresh = publish("Fresh run")
    with django_assert_num_queries(0):
        html = _page(client, model)
    assert "Fresh run" in html
    with django_assert_num_queries(0):
        response = client.get(reverse("result-detail", args=[fresh.pk]))
    assert "Fresh run" in response.content.decode()


def test_until_the_rebuild_lands_a_visitor_gets_the_previous_page_without_a_query(
    client, lineup, django_capture_on_commit_callbacks, django_assert_num_queries
):
    model, _, publish = lineup
    assert "Alpha run 0" in _page(client, model)
    with django_capture_on_commit_callbacks(execute=True):
        fresh = publish("Fresh run")  # rebuild queued to the broker, no worker here
    with django_assert_num_queries(0):
        assert "Fresh run" not in _page(client, model)
    rebuild_pages.apply(args=[[fresh.pk]]).get()  # the worker's turn
    with django_assert_num_queries(0):
        assert "Fresh run" in _page(client, model)


def test_after_the_grace_period_a_visitor_rebuilds_the_page_itself(
    client, lineup, monkeypatch, django_capture_on_commit_callbacks, django_assert_num_queries
):
    model, _, publish = lineup
    _page(client, model)
    monkeypatch.setattr(lb_cache, "STALE_GRACE_S", 0.0)
    with django_capture_on_commit_callbacks(execute=True):
        publish("Fresh run")
    with django_assert_num_queries(MODEL_PAGE_QUERIES):  # the fresh result's points too
        assert "Fresh run" in _page(client, model)


def test_an_invalidated_result_disappears_from_the_cached_page_immediately(
    client, lineup, django_capture_on_commit_callbacks
):
    model, (gone, *_), publish = lineup
    _page(client, model)
    with django_capture_on_commit_callbacks(execute=True):
        publish("Fresh run")  # the previous page is now served stale
    html = _page(client, model)
    assert "Alpha run 0" in html and "Fresh run" not in html
    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=gone, to="invalidated", reason="wrong model served")
    # no rebuild has run: the stale page, which shows the result, must not be served
    html = _page(client, model)
    assert "Alpha run 0" not in html
    assert "Alpha run 1" in html and "Fresh run" in html


def test_after_an_invalidation_the_rebuilt_page_omits_the_result_and_runs_no_query(
    client, lineup, tasks_in_process, django_capture_on_commit_callbacks, django_assert_num_queries
):
    model, (gone, *_), _ = lineup
    assert "Alpha run 0" in _page(client, model)
    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=gone, to="invalidated", reason="wrong model served")
    with django_assert_num_queries(0):
        html = _page(client, model)
    assert "Alpha run 0" not in html and "Alpha run 1" in html


def test_the_rebuild_task_is_idempotent_and_skips_unknown_ids(
    client, lineup, django_assert_num_queries
):
    model, (first, *_), _ = lineup
    paths = rebuild_pages.apply(args=[[first.pk, 999_999]]).get()
    assert reverse("model-detail", args=[model.slug]) in paths
    assert reverse("result-detail", args=[first.pk]) in paths
    with django_assert_num_queries(0):
        once = _page(client, model)
    assert rebuild_pages.apply(args=[[first.pk, 999_999]]).get() == paths
    with django_assert_num_queries(0):
        assert _page(client, model) == once
    assert rebuild_pages.apply(args=[[999_999]]).get() == []


def test_signed_in_users_never_get_a_stale_page(
    client, lineup, django_capture_on_commit_callbacks, django_user_model
):
    model, _, publish = lineup
    _page(client, model)
    with django_capture_on_commit_callbacks(execute=True):
        publish("Fresh run")
    client.force_login(django_user_model.objects.create_user("visitor", password="x" * 12))
    assert "Fresh run" in _page(client, model)


def test_writing_a_result_does_not_import_the_web_views():
    """Publishing renders pages through the page-rendering service (leaderboard.rendering),
    never through the views with a made-up request: a fresh interpreter that imports
    leaderboard.publishing (and with it the rebuild task) has not loaded leaderboard.views."""
    import subprocess
    import sys

    probe = (
        "import django, sys; django.setup(); import leaderboard.publishing, leaderboard.tasks; "
        "print(sorted(m for m in sys.modules if m.startswith('leaderboard.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = done.stdout.strip().splitlines()[-1]
    assert "'leaderboard.publishing'" in loaded and "'leaderboard.rendering'" in loaded
    assert "'leaderboard.views'" not in loaded
