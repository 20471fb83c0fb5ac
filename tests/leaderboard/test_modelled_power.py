"""Modelled power (issue 13 item 5): a simulated result shows agents per MW and tokens per
joule from the simulator's power model, labelled "modelled" on every page, table, CSV and
API field that carries them; a measured result never shows a modelled figure.

Trials get ``metrics["modelled_energy"]`` from `demo.synthetic.modelled_energy`: the
simulator's counter names as /metrics text through the worker's parser and
runner.telemetry.modelled, as a simulated run's worker stores them. The pipeline test
(tests/pipeline/test_e2e_simulated.py) runs the whole path with the real simulator."""

from __future__ import annotations

import io
from csv import DictReader, reader

import pytest
from django.urls import reverse

from demo.synthetic import make_model, make_published_result
from leaderboard.energy import power_source

POINTS = [
    (1, 180.0, 50.0, 0.5),
    (2, 150.0, 90.0, 0.6),
    (4, 110.0, 160.0, 1.0),
    (8, 70.0, 250.0, 2.0),
    (16, 40.0, 330.0, 6.0),
    (32, 15.0, 380.0, 12.0),
]


def _page(client, name: str, *args, **params) -> str:
    return client.get(reverse(name, args=list(args)), params).content.decode()


@pytest.mark.django_db
def test_a_simulated_result_carries_modelled_agents_per_mw_and_tokens_per_joule():
    result = make_published_result(points=POINTS, simulated=True, modelled_power_w=6_000.0)
    assert result.agents_per_mw is None  # the measured field stays empty
    assert power_source(result) == "modelled"
    n = result.max_agents["60 tok/s"]  # N = 8
    point = next(p for p in result.points if p["concurrency"] == n)
    block = point["modelled_energy"]
    assert block["modelled"] is True and block["label"] == "modelled"
    assert not point["energy"]["measured"] and point["power_w"] is None
    # 250 tok/s per accelerator × 8 accelerators ÷ the modelled watts
    assert block["tokens_per_joule"] == pytest.approx(250.0 * 8 / block["power_w"])
    tier = result.modelled_power["tiers"]["60 tok/s"]
    assert tier["agents_per_mw"] == pytest.approx(n / (block["power_w"] / 1e6))
    assert tier["tokens_per_joule"] == pytest.approx(block["tokens_per_joule"])
    assert result.modelled_power["label"] == "modelled"


@pytest.mark.django_db
def test_every_page_labels_the_simulated_figures_modelled(client):
    model = make_model()
    sim = make_published_result(
        model=model, points=POINTS, simulated=True, modelled_power_w=6_000.0, label="Twin"
    )
    measured = make_published_result(model=model, points=POINTS, power_w=8_000.0, label="Rack")
    html = _page(client, "result-detail", sim.pk)
    assert "Modelled power at max agents" in html and "Agents / MW (modelled)" in html
    assert "Tokens / J (modelled)" in html and "not measured" in html
    apm = sim.modelled_power["tiers"]["60 tok/s"]["agents_per_mw"]
    assert f"{apm:,.0f}" in html
    csv = _page(client, "result-detail", sim.pk, format="csv", table="modelled_energy")
    assert csv.splitlines()[0].startswith("tier,max_agents,power_w")
    assert csv.splitlines()[1].endswith(",modelled")
    model_page = _page(client, "model-detail", model.slug, simulated="1")
    assert f"{sim.modelled_power['tiers']['20 tok/s']['agents_per_mw']:,.0f}" in model_page
    assert "(modelled)" in model_page and "(measured)" in model_page
    csv = _page(client, "model-detail", model.slug, simulated="1", format="csv", table="results")
    rows = {row[0].split(" ")[0]: row for row in reader(io.StringIO(csv))}
    power = rows["label"].index("power:20 tok/s")
    assert rows["Twin"][power].endswith("(modelled)") and "tok/J" in rows["Twin"][power]
    assert rows["Rack"][power].endswith("(measured)")
    compare = client.get(reverse("compare") + f"?r={measured.pk}&r={sim.pk}").content.decode()
    assert "Agents per MW at max agents" in compare and "(modelled)" in compare
    hardware = _page(client, "hardware-detail", sim.hardware.slug, simulated="1")
    assert "(modelled)" in hardware


@pytest.mark.django_db
def test_the_public_api_says_modelled(client):
    sim = make_published_result(points=POINTS, simulated=True, modelled_power_w=6_000.0)
    body = client.get(f"/api/v1/public/results/{sim.pk}/").json()
    assert body["power_source"] == "modelled" and body["agents_per_mw"] is None
    assert body["modelled_power"]["label"] == "modelled"
    assert body["modelled_power"]["tiers"]["20 tok/s"]["tokens_per_joule"] > 0
    assert body["energy"]["measured"] is False
    listing = client.get("/api/v1/public/results/", {"simulated": "1"}).json()
    rows = listing["results"] if isinstance(listing, dict) else listing
    row = next(r for r in rows if r["id"] == sim.pk)
    assert row["power_source"] == "modelled" and row["modelled_power"]["tiers"]


@pytest.mark.django_db
def test_a_measured_result_never_shows_a_modelled_figure(client):
    """Even with modelled-power metrics in its trials (a runner that forged them)."""
    result = make_published_result(points=POINTS, power_w=8_000.0, modelled_power_w=6_000.0)
    assert result.modelled_power is None and power_source(result) == "measured"
    assert all(p["modelled_energy"] is None for p in result.points)
    html = _page(client, "result-detail", result.pk)
    assert "modelled" not in html.lower()
    model_page = _page(client, "model-detail", result.model.slug)
    assert "(modelled)" not in model_page and "(measured)" in model_page
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert body["power_source"] == "measured" and body["modelled_power"] is None
    assert body["agents_per_mw"]["20 tok/s"] > 0


@pytest.mark.django_db
def test_no_power_anywhere_is_no_figure_and_no_label(client):
    unmeasured = make_published_result(points=POINTS)
    assert power_source(unmeasured) is None and unmeasured.modelled_power is None
    html = _page(client, "result-detail", unmeasured.pk)
    assert "modelled" not in html.lower()
    # a simulated profile without a power model (the hypothetical tiny accelerator)
    twin = make_published_result(points=POINTS, simulated=True)
    assert twin.modelled_power is None and power_source(twin) is None
    html = _page(client, "result-detail", twin.pk)
    assert "models no power" in html and "Agents / MW (modelled)" not in html
    body = client.get(f"/api/v1/public/results/{twin.pk}/").json()
    assert body["power_source"] is None and body["modelled_power"] is None


@pytest.mark.django_db
def test_the_public_data_dump_carries_modelled_figures_only_for_simulated_results():
    from leaderboard.export import bundle_files

    sim = make_published_result(points=POINTS, simulated=True, modelled_power_w=6_000.0)
    measured = make_published_result(points=POINTS, power_w=8_000.0, modelled_power_w=6_000.0)
    files, _ = bundle_files(now=sim.published_at)
    rows = list(DictReader(io.StringIO(files["results.csv"].decode())))
    sim_row = next(r for r in rows if r["result_id"] == str(sim.pk) and r["tier"] == "20 tok/s")
    assert sim_row["power_source"] == "modelled" and sim_row["agents_per_mw"] == ""
    assert float(sim_row["modelled_agents_per_mw"]) == pytest.approx(
        sim.modelled_power["tiers"]["20 tok/s"]["agents_per_mw"]
    )
    for row in (r for r in rows if r["result_id"] == str(measured.pk)):
        assert row["power_source"] == "measured" and row["modelled_agents_per_mw"] == ""
    points = list(DictReader(io.StringIO(files["points.csv"].decode())))
    assert all(p["modelled_power_w"] for p in points if p["result_id"] == str(sim.pk))
    assert not any(p["modelled_power_w"] for p in points if p["result_id"] == str(measured.pk))
