"""`manage.py export_public` (issue 16 item 7): a versioned JSON + CSV bundle of every
published result, point and provenance in artifact storage (SeaweedFS S3 here), linked
from /data/ (and the site footer)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import urllib.request
from io import StringIO

import pytest
from django.core.management import call_command

from demo.synthetic import make_published_result
from leaderboard.export import FORMAT_VERSION
from leaderboard.publishing import result_set_status

pytestmark = pytest.mark.django_db


def _fetch(client, name: str) -> bytes:
    response = client.get(f"/data/latest/{name}")
    assert response.status_code == 302, response
    with urllib.request.urlopen(response["Location"], timeout=30) as handle:
        return handle.read()


def test_the_dump_holds_every_result_point_and_provenance_and_is_linked(client):
    measured = make_published_result(label="Measured box", power_w=8000.0)
    simulated = make_published_result(label="Twin", simulated=True)
    retired = make_published_result(label="Old box")
    result_set_status(result=retired, to="superseded", reason="newer run")
    out = StringIO()
    call_command("export_public", stdout=out)
    assert "3 results" in out.getvalue()
    page = client.get("/data/").content.decode()
    assert "results.json" in page and "points.csv" in page and "3 results" in page
    assert 'href="/data/"' in client.get("/").content.decode()

    manifest = json.loads(_fetch(client, "manifest.json"))
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["folder"].startswith(f"public-exports/v{FORMAT_VERSION}/")
    for entry in manifest["files"]:
        assert hashlib.sha256(_fetch(client, entry["name"])).hexdigest() == entry["sha256"]

    bundle = json.loads(_fetch(client, "results.json"))
    by_id = {r["id"]: r for r in bundle["results"]}
    assert set(by_id) == {measured.pk, simulated.pk, retired.pk}
    assert by_id[simulated.pk]["is_simulated"] is True
    assert by_id[retired.pk]["status"] == "superseded"
    assert by_id[measured.pk]["provenance"]["run_id"] == measured.run_id
    assert by_id[measured.pk]["energy"]["measured"] is True
    assert len(by_id[measured.pk]["points"]) == len(measured.points)

    rows = list(csv.DictReader(io.StringIO(_fetch(client, "results.csv").decode())))
    mine = [r for r in rows if r["result_id"] == str(measured.pk)]
    assert {r["tier"] for r in mine} == set(measured.tier_set.tiers.values_list("name", flat=True))
    tier = next(r for r in mine if r["tier"] == "20 tok/s")
    assert int(tier["max_agents"]) == measured.max_agents["20 tok/s"]
    assert float(tier["tokens_per_joule"]) > 0
    points = list(csv.DictReader(io.StringIO(_fetch(client, "points.csv").decode())))
    total = len(measured.points) + len(simulated.points) + len(retired.points)
    assert len(points) == total and points[0]["power_tool"] in ("nvml", "")


def test_a_second_export_is_a_new_bundle_and_latest_follows_it(client):
    make_published_result()
    call_command("export_public", stdout=StringIO())
    first = json.loads(_fetch(client, "manifest.json"))["folder"]
    make_published_result()
    call_command("export_public", stdout=StringIO())
    second = json.loads(_fetch(client, "manifest.json"))
    assert second["folder"] != first and second["counts"]["results"] == 2


def test_an_unknown_dump_file_is_404(client):
    call_command("export_public", stdout=StringIO())
    assert client.get("/data/latest/secrets.txt").status_code == 404
