"""No N+1: each page runs a fixed number of queries whatever the number of results, and a
cached page runs none."""

import pytest
from django.urls import reverse

from demo.synthetic import (
    make_hardware,
    make_model,
    make_published_result,
    make_tier_set,
    synthetic_points,
)


def _results(n: int, *, model=None, hardware=None, tiers=None):
    model = model or make_model()
    tiers = tiers or make_tier_set()
    hardware_list = [hardware or make_hardware() for _ in range(2)]
    out = [
        make_published_result(
            model=model,
            hardware=hardware_list[i % 2],
            tier_set=tiers,
            points=synthetic_points(concurrencies=(1, 2, 4, 8)),
        )
        for i in range(n)
    ]
    return model, out


# model, tier set (own, then default), its tiers, results, their points (first view only),
# hidden simulated count
MODEL_PAGE_QUERIES = 7


@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.django_db
def test_model_page_query_count_does_not_grow_with_results(client, django_assert_num_queries, n):
    model, _ = _results(n)
    with django_assert_num_queries(MODEL_PAGE_QUERIES):
        assert client.get(reverse("model-detail", args=[model.slug])).status_code == 200


@pytest.mark.django_db
def test_a_cached_model_page_runs_no_query(client, django_assert_num_queries):
    model, _ = _results(3)
    url = reverse("model-detail", args=[model.slug])
    client.get(url)
    with django_assert_num_queries(0):
        assert client.get(url).status_code == 200


@pytest.mark.django_db
def test_after_a_publish_only_the_pages_not_the_points_are_rebuilt(
    client, django_assert_num_queries
):
    from leaderboard.cache import chart_cache_invalidate

    model, _ = _results(3)
    url = reverse("model-detail", args=[model.slug])
    client.get(url)
    chart_cache_invalidate()  # what a publish does on commit
    with django_assert_num_queries(MODEL_PAGE_QUERIES - 1):  # points still cached
        assert client.get(url).status_code == 200


@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.django_db
def test_home_query_count_does_not_grow_with_results(client, django_assert_num_queries, n):
    _results(n)
    # results, default tier set + tiers, points of the latest, hidden simulated count,
    # model and hardware counts
    with django_assert_num_queries(7):
        assert client.get("/").status_code == 200


@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.django_db
def test_hardware_page_query_count_does_not_grow_with_results(client, django_assert_num_queries, n):
    hardware = make_hardware()
    _results(n, hardware=hardware)
    with django_assert_num_queries(6):
        assert client.get(reverse("hardware-detail", args=[hardware.slug])).status_code == 200


@pytest.mark.parametrize("trials", [(1, 2), (1, 2, 4, 8, 16, 32, 64)])
@pytest.mark.django_db
def test_result_page_query_count_does_not_grow_with_trials(
    client, django_assert_num_queries, trials
):
    result = make_published_result(points=synthetic_points(concurrencies=trials))
    # result with its joins, tiers, trials, raw-record artifacts, the ladders it is a rung of,
    # its hardware's catalog prices (leaderboard.cost)
    with django_assert_num_queries(6):
        assert client.get(reverse("result-detail", args=[result.pk])).status_code == 200


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.django_db
def test_compare_query_count_does_not_grow_with_results(client, django_assert_num_queries, n):
    _, results = _results(n)
    query = "&".join(f"r={r.pk}" for r in results)
    # the results with their joins and tiers, their hardware's catalog prices
    with django_assert_num_queries(3):
        assert client.get(reverse("compare") + "?" + query).status_code == 200


@pytest.mark.parametrize("n", [1, 6])
@pytest.mark.django_db
def test_results_api_query_count_does_not_grow_with_results(client, django_assert_num_queries, n):
    _results(n)
    with django_assert_num_queries(1):
        assert client.get("/api/v1/public/results/").status_code == 200
