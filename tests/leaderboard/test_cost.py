"""Cost per result (docs/catalog.md "Prices", leaderboard/cost.py): $ per million output
tokens, per million total tokens and per agent-hour at each tier's max agents, for each price
class, computed when read from the catalog; a missing price is "—", never 0."""

from __future__ import annotations

import csv
import io
import shutil

import pytest
import yaml

from agentperf.catalog_data import DEFAULT_CATALOG_DIR, CatalogError, load_catalog
from catalog.models import HardwarePrice, HardwareSystem
from catalog.services import catalog_seed
from demo.synthetic import make_hardware, make_published_result, synthetic_points
from leaderboard.cost import result_cost
from leaderboard.export import bundle_files
from leaderboard.models import Result

pytestmark = pytest.mark.django_db

H100 = "h100-sxm-hgx8"


@pytest.fixture
def seeded() -> None:
    catalog_seed()


def _catalog_copy(tmp_path, prices: str | None = None):
    for name in ("models.yaml", "hardware.yaml", "tiers.yaml", "prices.yaml"):
        shutil.copy(DEFAULT_CATALOG_DIR / name, tmp_path / name)
    if prices is not None:
        (tmp_path / "prices.yaml").write_text(prices)
    return tmp_path


def _price(slug: str) -> dict:
    return load_catalog().prices[slug]


def _point(result: Result, n: int) -> dict:
    return [p for p in result.points if p["concurrency"] == n][-1]


def _published(simulated: bool = True, **kw) -> Result:
    return make_published_result(
        hardware=HardwareSystem.objects.get(slug=H100),
        simulated=simulated,
        accelerators=8,
        points=synthetic_points(accelerators=8),
        **kw,
    )


def test_every_figure_comes_from_the_catalog_price_and_the_result(seeded) -> None:
    result = _published(modelled_power_w=6000.0)
    cost = result_cost(result)
    on_demand = _price(f"{H100}-on-demand")["usd_per_accelerator_hour"]["value"]
    owned = _price(f"{H100}-owned")
    name, n = next(iter(result.max_agents.items()))
    point = _point(result, n)
    tier = cost["tiers"][name]
    hourly = on_demand * 8
    c = tier["classes"]["on-demand"]
    assert c["usd_per_hour"] == pytest.approx(hourly)
    assert c["usd_per_agent_hour"] == pytest.approx(hourly / n)
    out_tok_s = point["output_throughput_per_accelerator"] * 8
    assert c["usd_per_m_output_tokens"] == pytest.approx(hourly / (out_tok_s * 3600) * 1e6)
    total_tok_s = point["throughput_per_accelerator"] * 8
    assert c["usd_per_m_total_tokens"] == pytest.approx(hourly / (total_tok_s * 3600) * 1e6)
    # owned: capex over 3 years plus the result's (modelled) power at PUE and $/kWh
    power = point["modelled_energy"]["power_w"]
    expected = owned["capex_usd_per_system"]["value"] / 8 * 8 / (3 * 8760) + (
        power / 1000 * owned["pue"]["value"] * owned["usd_per_kwh"]["value"]
    )
    o = tier["classes"]["owned"]
    assert o["usd_per_hour"] == pytest.approx(expected)
    assert o["power_source"] == "modelled" and o["power_w"] == pytest.approx(power)
    assert cost["prices"]["on-demand"]["source"].startswith("https://")
    assert cost["prices"]["on-demand"]["date"] == _price(f"{H100}-on-demand")["date"]


def test_a_price_change_in_the_catalog_changes_the_figures_without_rerunning(
    seeded, tmp_path, client, django_capture_on_commit_callbacks
) -> None:
    result = _published()
    name = next(iter(result.max_agents))
    before = result_cost(result)["tiers"][name]["classes"]["on-demand"]
    points_before = list(Result.objects.get(pk=result.pk).points)
    cached = client.get(f"/api/v1/public/results/{result.pk}/").json()  # now in the cache
    assert cached["cost"]["tiers"][name]["classes"]["on-demand"][
        "usd_per_agent_hour"
    ] == pytest.approx(before["usd_per_agent_hour"])

    doc = yaml.safe_load((DEFAULT_CATALOG_DIR / "prices.yaml").read_text())
    entry = next(p for p in doc["prices"] if p["slug"] == f"{H100}-on-demand")
    entry["usd_per_accelerator_hour"]["value"] *= 2
    with django_capture_on_commit_callbacks(execute=True):  # the seed's commit
        catalog_seed(directory=_catalog_copy(tmp_path, yaml.safe_dump(doc)))

    fresh = Result.objects.get(pk=result.pk)
    assert fresh.points == points_before  # nothing was re-run or re-published
    after = result_cost(fresh)["tiers"][name]["classes"]["on-demand"]
    for figure in ("usd_per_m_output_tokens", "usd_per_m_total_tokens", "usd_per_agent_hour"):
        assert after[figure] == pytest.approx(2 * before[figure])
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    api = body["cost"]["tiers"][name]["classes"]["on-demand"]
    assert api["usd_per_agent_hour"] == pytest.approx(2 * before["usd_per_agent_hour"])


def test_a_missing_price_is_a_dash_never_zero(seeded, client) -> None:
    result = make_published_result(hardware=make_hardware(), points=synthetic_points())
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert body["cost"]["prices"] == {"on-demand": None, "neocloud": None, "owned": None}
    for tier in body["cost"]["tiers"].values():
        for figures in tier["classes"].values():
            assert figures["usd_per_agent_hour"] is None
            assert figures["usd_per_m_output_tokens"] is None
    html = client.get(f"/results/{result.pk}/").content.decode()
    section = html[html.index('id="cost"') : html.index("</section>", html.index('id="cost"'))]
    assert "Cost at max agents" in section and "no price in the catalog" in section
    assert "—" in section and "0.000" not in section
    # a price whose figure is unknown in the catalog (GB300 on demand) is "—" too
    catalog_seed()
    assert HardwarePrice.objects.get(slug="gb300-nvl72-on-demand").usd_per_accelerator_hour is None


def test_an_owned_system_without_power_has_no_owned_figure(seeded) -> None:
    measured_no_power = _published(simulated=False)
    tier = next(iter(result_cost(measured_no_power)["tiers"].values()))
    assert tier["classes"]["owned"]["usd_per_hour"] is None
    assert tier["classes"]["owned"]["power_source"] is None
    assert tier["classes"]["on-demand"]["usd_per_hour"] is not None
    measured = _published(simulated=False, power_w=8000.0)
    tier = next(iter(result_cost(measured)["tiers"].values()))
    assert tier["classes"]["owned"]["power_source"] == "measured"
    assert tier["classes"]["owned"]["usd_per_hour"] > 0


def test_the_compare_page_and_api_show_the_cost_ratio_at_iso_speed(seeded, client) -> None:
    h200 = HardwareSystem.objects.get(slug="h200-hgx8")
    a = _published()
    b = make_published_result(
        hardware=h200, simulated=True, accelerators=8, points=synthetic_points(accelerators=8)
    )
    body = client.get(f"/api/v1/public/compare/?r={a.pk}&r={b.pk}").json()
    row = next(r for r in body["iso_speed"] if r["throughput_per_accelerator"][0])
    usd = row["cost"]["on-demand"]["usd_per_m_total_tokens"]
    rate_a = _price(f"{H100}-on-demand")["usd_per_accelerator_hour"]["value"]
    rate_b = _price("h200-hgx8-on-demand")["usd_per_accelerator_hour"]["value"]
    t_a, t_b = row["throughput_per_accelerator"]
    assert usd[0] == pytest.approx(rate_a / (t_a * 3600) * 1e6)
    assert row["cost"]["on-demand"]["ratio_to_first"][1] == pytest.approx(
        (rate_b / t_b) / (rate_a / t_a)
    )
    html = client.get(f"/compare/?r={a.pk}&r={b.pk}").content.decode()
    assert "$ per million total tokens at the same per-agent speed" in html
    assert row["cost"]["owned"]["usd_per_m_total_tokens"] == [None, None]  # no power


def test_owned_cost_at_iso_speed_interpolates_the_power(seeded, client) -> None:
    points = synthetic_points(accelerators=8)
    a = _published(modelled_power_w=6000.0)
    b = _published(modelled_power_w=3000.0)
    speed = (points[2][1] + points[3][1]) / 2  # between two frontier points
    query = f"/api/v1/public/compare/?r={a.pk}&r={b.pk}&speed={speed!r}"
    row = next(r for r in client.get(query).json()["iso_speed"] if r["speed"] == speed)
    owned = _price(f"{H100}-owned")
    lo, hi = _point(a, points[3][0]), _point(a, points[2][0])  # slower, faster
    frac = (speed - lo["p25_speed"]) / (hi["p25_speed"] - lo["p25_speed"])
    power = lo["modelled_energy"]["power_w"] + frac * (
        hi["modelled_energy"]["power_w"] - lo["modelled_energy"]["power_w"]
    )
    throughput = row["throughput_per_accelerator"][0]
    hourly = owned["capex_usd_per_system"]["value"] / (3 * 8760) + power / 1000 * (
        owned["pue"]["value"] * owned["usd_per_kwh"]["value"]
    )
    usd = row["cost"]["owned"]["usd_per_m_total_tokens"]
    assert usd[0] == pytest.approx(hourly / (throughput * 8 * 3600) * 1e6)
    assert 0 < row["cost"]["owned"]["ratio_to_first"][1] < 1  # half the power, same speed


def test_the_dumps_carry_the_cost_and_a_missing_price_is_empty(seeded) -> None:
    priced = _published(modelled_power_w=6000.0)
    unpriced = make_published_result(hardware=make_hardware(), points=synthetic_points())
    files, _ = bundle_files(now=priced.published_at)
    rows = list(csv.DictReader(io.StringIO(files["results.csv"].decode())))
    name, n = next(iter(priced.max_agents.items()))
    row = next(r for r in rows if r["result_id"] == str(priced.pk) and r["tier"] == name)
    expected = result_cost(priced)["tiers"][name]["classes"]["on-demand"]["usd_per_agent_hour"]
    assert float(row["usd_per_agent_hour_on_demand"]) == pytest.approx(expected)
    assert row["owned_power_source"] == "modelled"
    empty = [r for r in rows if r["result_id"] == str(unpriced.pk)]
    assert empty and all(r["usd_per_agent_hour_on_demand"] == "" for r in empty)
    assert b'"cost"' in files["results.json"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("{slug: x, system: h100-sxm-hgx8, class: rented, date: 2026-01-01}", "x.class"),
        ("{slug: x, system: nope, class: neocloud, date: 2026-01-01, "
         "usd_per_accelerator_hour: {value: 1, source: s}}", "unknown hardware system 'nope'"),
        ("{slug: x, system: h100-sxm-hgx8, class: neocloud, "
         "usd_per_accelerator_hour: {value: 1, source: s}}", "x.date: a price needs the date"),
        ("{slug: x, system: h100-sxm-hgx8, class: neocloud, date: 2026-01-01, "
         "usd_per_accelerator_hour: {value: 0, source: s}}", "expected a positive number"),
        ("{slug: x, system: h100-sxm-hgx8, class: neocloud, date: 2026-01-01, "
         "usd_per_accelerator_hour: {value: 2}}", "value 2 has no source"),
    ],
)  # fmt: skip
def test_a_malformed_price_is_refused_naming_the_field(tmp_path, entry, message) -> None:
    directory = _catalog_copy(tmp_path, f"prices:\n  - {entry}\n")
    with pytest.raises(CatalogError, match=message):
        load_catalog(directory)
    with pytest.raises(CatalogError, match=message):
        catalog_seed(directory=directory)


def test_the_methodology_page_defines_session_slos_and_cost(seeded, client) -> None:
    html = client.get("/methodology/").content.decode()
    assert 'id="sessions"' in html and "whole-task model time" in html
    assert 'id="cost"' in html and "$ per agent-hour" in html and "never 0" in html
    assert "criterion: requests: p25 over requests (default)" in html
