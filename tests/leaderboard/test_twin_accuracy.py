"""The twin's accuracy page (docs/simulator.md "Accuracy"): `manage.py twin_accuracy` stores
every bundled profile against its held-out figures from the committed records; the page and
its API list each figure's error, each profile's MAPE and status; a simulated result of a
quarantined profile says so in its label, on its page, in the API and above any chart that
draws it, and loses the label when its profile is admitted."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from agentperf.simulator.accuracy import (
    MEASURED,
    HeldOutFigure,
    ProfileAccuracy,
    accuracy_table,
)
from agentperf.simulator.profile import available_profiles
from demo.synthetic import make_published_result
from leaderboard.accuracy import twin_accuracy_rebuild
from leaderboard.models import TwinAccuracy
from tests.leaderboard.test_pages import figure_of

POINTS = [(1, 160.0, 2_000.0, 0.1), (4, 120.0, 12_000.0, 0.2), (16, 40.0, 40_000.0, 0.5)]
TINY = {"launcher": {"simulated": {"profile": "tiny"}}}


def _admitted_tiny() -> ProfileAccuracy:
    return ProfileAccuracy(
        profile="tiny",
        figures=(
            HeldOutFigure(
                figure="1 agent",
                unit="tok/s per agent",
                reference=100.0,
                simulated=110.0,
                basis=MEASURED,
            ),
        ),
        sources=("a record made for this test",),
    )


@pytest.mark.django_db
def test_the_command_stores_every_profile_and_the_page_and_api_list_them(client):
    out = StringIO()
    call_command("twin_accuracy", stdout=out)
    rows = {r.profile: r for r in TwinAccuracy.objects.all()}
    assert set(rows) == set(available_profiles())
    expected = {acc.profile: acc.dump() for acc in accuracy_table()}
    for name, row in rows.items():
        assert row.record == json.loads(json.dumps(expected[name]))
        assert row.status == expected[name]["status"]
        assert f"{name}: {row.status}" in out.getvalue()
    # the llama.cpp twin: 18 figures measured on this CPU, each with its error
    cpu = rows["local-cpu-llamacpp"].record
    assert cpu["figures_total"] == 18
    assert {f["basis"] for f in cpu["figures"]} == {MEASURED}
    assert cpu["mape"] == pytest.approx(sum(abs(f["error"]) for f in cpu["figures"]) / 18, abs=1e-3)

    html = client.get(reverse("twin-accuracy")).content.decode()
    for name in rows:
        assert f'id="twin-{name}"' in html
    assert "q4_0/p2/t1, 1 agent: p25 speed" in html
    admitted = sum(r.status == "admitted" for r in rows.values())
    assert f"{admitted} of {len(rows)}" in html

    api = client.get(reverse("public-api-twin-accuracy")).json()
    assert [p["profile"] for p in api] == sorted(rows)
    first = api[0]["figures"][0] if api[0]["figures"] else None
    if first is not None:
        assert set(first) >= {"figure", "reference", "simulated", "error", "within", "basis"}

    csv = client.get(reverse("twin-accuracy"), {"format": "csv", "table": "twin-accuracy"})
    assert csv.status_code == 200 and b"local-cpu-llamacpp" in csv.content


@pytest.mark.django_db
def test_a_quarantined_profiles_results_say_so_everywhere_until_it_is_admitted(
    client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("twin_accuracy", stdout=StringIO())
    assert TwinAccuracy.objects.get(profile="tiny").status == "quarantined"  # nothing checks it
    rack = make_published_result(points=POINTS, label="Rack")
    sim = make_published_result(
        model=rack.model, points=POINTS, simulated=True, label="Twin", config=TINY
    )
    assert sim.twin_profile == "tiny"

    page = client.get(reverse("result-detail", args=[sim.pk])).content.decode()
    assert 'id="twin-status"' in page and "quarantined twin" in page
    detail = client.get(reverse("public-api-result", args=[sim.pk])).json()
    assert detail["twin"] == {
        "profile": "tiny",
        "status": "quarantined",
        "accuracy_url": reverse("twin-accuracy") + "#twin-tiny",
    }
    model_response = client.get(reverse("model-detail", args=[sim.model.slug]), {"simulated": "1"})
    model_page = model_response.content.decode()
    assert 'class="notice quarantine"' in model_page
    names = [
        t["name"]
        for t in figure_of(model_response)["data"]
        if (t.get("meta") or {}).get("result_id")
    ]
    assert "Twin [simulated, quarantined twin]" in names and "Rack" in names
    listed = client.get(reverse("public-api-results"), {"simulated": "1"}).json()
    twins = {r["id"]: r["twin"] for r in listed}
    assert twins[sim.pk]["status"] == "quarantined"
    assert [v for k, v in twins.items() if k != sim.pk] == [None]  # measured: no twin

    with django_capture_on_commit_callbacks(execute=True):
        report = twin_accuracy_rebuild([_admitted_tiny()])
    assert report.changed == ("tiny",) and report.admitted == 1
    assert TwinAccuracy.objects.count() == 1  # profiles no longer listed are dropped
    page = client.get(reverse("result-detail", args=[sim.pk])).content.decode()
    assert 'id="twin-status"' not in page and "admitted" in page
    assert client.get(reverse("public-api-result", args=[sim.pk])).json()["twin"]["status"] == (
        "admitted"
    )
    model_response = client.get(reverse("model-detail", args=[sim.model.slug]), {"simulated": "1"})
    model_page = model_response.content.decode()
    assert 'class="notice quarantine"' not in model_page
    names = [
        t["name"]
        for t in figure_of(model_response)["data"]
        if (t.get("meta") or {}).get("result_id")
    ]
    assert "Twin [simulated]" in names


@pytest.mark.django_db
def test_a_profile_with_no_row_is_quarantined_not_admitted(client):
    sim = make_published_result(points=POINTS, simulated=True, label="Unchecked", config=TINY)
    assert not TwinAccuracy.objects.exists()
    assert sim.twin_status == "quarantined"
    assert sim.display_label == "Unchecked [simulated, quarantined twin]"
    html = client.get(reverse("twin-accuracy")).content.decode()
    assert "has not been built yet" in html
