"""HTTP caching of the public site (docs/caching.md): every URL's cache class, strong ETags
and 304s, Vary, surrogate keys, and the fast path for a repeated anonymous read."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from demo.synthetic import make_published_result
from leaderboard.publishing import result_set_status

pytestmark = pytest.mark.django_db

PUBLIC = re.compile(
    r"^public, max-age=\d+, s-maxage=\d+, stale-while-revalidate=\d+$"
    r"|^public, max-age=0, s-maxage=\d+$"  # a public 404, purged with its keys
)
PRIVATE = "private, no-store"

# The test's own map of the site, by path (not the middleware's table): what must be
# public and what must never be. A URL pattern in neither fails the walk until classified.
PUBLIC_PREFIXES = (
    "",  # the home page (an exact match, see _expected)
    "models/",
    "hardware/",
    "results/",
    "compare/",
    "history/",
    "methodology/",
    "twin/",
    "data/",
    "ladders/",
    "api/v1/public/",
    "api/v1/schema/",
    "api/schema/",
    "llms.txt",
    ".well-known/",
    "embed/",
)
PRIVATE_PREFIXES = (
    "admin/",
    "portal/",
    "review/",
    "accounts/",
    "api/v1/runner/",
    "api/v1/submissions/",
    "api/v1/uploads/",
    "api/v1/runs/",
    "api/v1/datasets/",
    "api/v1/ladders/",
    "files/",
    "health",
    "api/docs/",  # Swagger UI sets the CSRF cookie for its "try it out"
)


def _patterns(resolver: URLResolver, prefix: str = ""):
    for p in resolver.url_patterns:
        route = prefix + str(p.pattern)
        if isinstance(p, URLResolver):
            yield from _patterns(p, route)
        elif isinstance(p, URLPattern):
            yield route, p


def _expected(route: str) -> str | None:
    # admin's own patterns are regexes (^…$): private by their prefix
    route = route.lstrip("^")
    for prefix in PRIVATE_PREFIXES:
        if route.startswith(prefix):
            return "private"
    if route in ("", "$"):
        return "public"
    for prefix in PUBLIC_PREFIXES[1:]:
        if route.startswith(prefix):
            return "public"
    return None


def _concrete(route: str, values: dict[str, str]) -> str | None:
    """A path for the route, its converters filled from `values` (None: a regex route)."""
    if route.startswith("^") or "(?P" in route:
        return None
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values.get(m.group(1), "1"), route)
    return "/" + path


def test_every_url_pattern_answers_with_its_cache_class(client, django_user_model):
    result = make_published_result()
    values = {
        "slug": result.model.slug,
        "model_slug": result.model.slug,
        "hardware_slug": result.hardware.slug,
        "pk": str(result.pk),
        "run_id": str(result.run_id),
        "run_pk": str(result.run_id),
        "index": "0",
        "name": "manifest.json",
        "alias": "x",
        "token": "x",
        "action": "publish",
        "artifact_pk": "1",
        "attachment_pk": "1",
        "uidb64": "x",
        "fmt": "svg",
    }
    unclassified, wrong, checked, public_ok = [], [], 0, 0
    client.raise_request_exception = False  # a 500 is reported as a wrong class below
    for route, pattern in _patterns(get_resolver()):
        expected = _expected(route)
        if expected is None:
            unclassified.append(route)
            continue
        path = _concrete(route, values)
        if path is None:  # admin's regex routes: the admin index stands for them
            path = "/admin/"
        response = client.get(path)
        got = response.get("Cache-Control", "")
        checked += 1
        if expected == "private" and got != PRIVATE:
            wrong.append(f"{path} ({pattern.name}): {got!r}, expected {PRIVATE!r}")
        if expected == "public":
            if response.status_code in (200, 301, 302, 404):
                ok = bool(PUBLIC.match(got))
            else:  # an error answer (a 400 naming the field) is never stored
                ok = got == PRIVATE
            if not ok:
                wrong.append(f"{path} ({pattern.name}) {response.status_code}: {got!r}")
            public_ok += ok and response.status_code == 200
    assert not unclassified, f"URL patterns with no cache class in this test: {unclassified}"
    assert not wrong, "\n".join(wrong)
    assert checked > 60
    assert public_ok >= 15  # the pages and answers of a published result, not only 404s


def test_a_signed_in_reader_gets_private_answers_even_on_public_pages(client, cast):
    result = make_published_result()
    client.force_login(cast.alice)
    for name, args in (("model-detail", [result.model.slug]), ("result-detail", [result.pk])):
        response = client.get(reverse(name, args=args))
        assert response.status_code == 200
        assert response["Cache-Control"] == PRIVATE
        assert "xkey" not in response


@pytest.mark.parametrize(
    "name,kind",
    [
        ("model-detail", "max-age=60, s-maxage=86400, stale-while-revalidate=60"),
        ("public-api-model", "max-age=60, s-maxage=86400, stale-while-revalidate=60"),
    ],
)
def test_pages_and_api_answers_carry_their_kind_keys_and_only_real_vary(client, name, kind):
    result = make_published_result()
    slug = result.model.slug
    response = client.get(reverse(name, args=[slug]))
    assert response.status_code == 200
    assert response["Cache-Control"] == f"public, {kind}"
    assert response["xkey"].split() == [f"model:{slug}", "catalog"]
    if name.startswith("public-api"):
        assert response["Vary"] == "Accept"  # JSON or the browsable API
    else:
        assert "Vary" not in response  # nothing about a public page depends on the request


def test_a_page_table_as_csv_is_cached_as_csv(client):
    result = make_published_result()
    response = client.get(reverse("model-detail", args=[result.model.slug]) + "?format=csv")
    assert response.status_code == 200, response.content[:200]
    assert response["Content-Type"].startswith("text/csv")
    assert response["Cache-Control"].startswith("public, max-age=300, s-maxage=86400")


def test_result_pages_carry_their_result_key(client):
    result = make_published_result()
    for name in ("result-detail", "public-api-result"):
        response = client.get(reverse(name, args=[result.pk]))
        assert response["xkey"].split() == [f"result:{result.pk}", "catalog"]
    response = client.get(reverse("compare") + f"?r={result.pk},{result.pk + 1000}")
    assert response["xkey"].split() == [
        f"result:{result.pk}",
        f"result:{result.pk + 1000}",
        "catalog",
    ]


def test_strong_etag_and_304_until_the_object_changes(client, django_capture_on_commit_callbacks):
    result = make_published_result()
    url = reverse("public-api-result", args=[result.pk])
    first = client.get(url)
    etag = first["ETag"]
    assert re.fullmatch(r'"[0-9a-f]{8}-[0-9a-f]{20}"', etag)
    again = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    assert again["ETag"] == etag
    assert again["Cache-Control"] == first["Cache-Control"]
    # a list of tags, one of them current, and a weak form of it: 304 (weak comparison)
    assert client.get(url, HTTP_IF_NONE_MATCH=f'"other", W/{etag}').status_code == 304
    assert client.get(url, HTTP_IF_NONE_MATCH='"other"').status_code == 200

    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
    changed = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200
    assert changed.json()["status"] == "invalidated"
    assert changed["ETag"] != etag


def test_a_repeated_anonymous_read_runs_no_query_and_a_signed_in_one_is_not_served_it(
    client, cast, django_assert_num_queries
):
    result = make_published_result()
    url = reverse("model-detail", args=[result.model.slug])
    first = client.get(url)
    with django_assert_num_queries(0):
        second = client.get(url)
        conditional = client.get(url, HTTP_IF_NONE_MATCH=first["ETag"])
    assert second.content == first.content
    assert second["ETag"] == first["ETag"]
    assert conditional.status_code == 304
    client.force_login(cast.alice)
    signed_in = client.get(url)
    assert signed_in["Cache-Control"] == PRIVATE


def test_the_fast_path_never_serves_a_retired_result(client, django_capture_on_commit_callbacks):
    result = make_published_result(label="Retired soon")
    url = reverse("home")
    assert "Retired soon" in client.get(url).content.decode()
    assert "Retired soon" in client.get(url).content.decode()  # from the fast path
    with django_capture_on_commit_callbacks(execute=True):
        result_set_status(result=result, to="invalidated", actor=None, reason="wrong model")
    assert "Retired soon" not in client.get(url).content.decode()


def test_a_page_served_stale_after_a_publish_is_not_stored_for_the_new_generation(
    client, django_capture_on_commit_callbacks
):
    first = make_published_result(label="First run")
    # the catalog rows the second publish uses exist before the page is cached (a catalog
    # change drops every page at once, with no stale grace: leaderboard.purge)
    same = {"model": first.model, "hardware": first.hardware, "tier_set": first.tier_set}
    url = reverse("model-detail", args=[first.model.slug])
    client.get(url)
    with django_capture_on_commit_callbacks(execute=True):  # no worker: no rebuild yet
        make_published_result(org=first.submission.org, label="Second run", **same)
    stale = client.get(url)
    assert "Second run" not in stale.content.decode()  # the stale grace (leaderboard.cache)
    assert stale["Cache-Control"] == "public, max-age=0, s-maxage=60"  # kept briefly
    from leaderboard.rebuild import pages_rebuild

    pages_rebuild(result_ids=[first.pk])  # what the rebuild task does
    assert "Second run" in client.get(url).content.decode()


@pytest.mark.django_db
def test_the_fast_path_is_keyed_by_origin_and_never_answers_a_refused_host(client, settings):
    """llms.txt builds absolute links from the request when PUBLIC_BASE_URL is unset: one
    origin's cached answer must not be replayed to another, nor to a Host Django refuses."""
    settings.PUBLIC_BASE_URL = ""
    settings.ALLOWED_HOSTS = ["testserver", "mirror.example"]
    url = reverse("llms-txt")
    first = client.get(url)
    assert first.status_code == 200 and "http://testserver/" in first.content.decode()
    repeat = client.get(url)  # the fast path: same origin, same bytes
    assert repeat.content == first.content
    other = client.get(url, HTTP_HOST="mirror.example")
    assert other.status_code == 200
    assert "http://mirror.example/" in other.content.decode()
    assert "http://testserver/" not in other.content.decode()
    assert client.get(url, HTTP_HOST="evil.example").status_code == 400
