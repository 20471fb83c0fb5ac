import csv
import io
import json
import re
from pathlib import Path

import pytest
import yaml
from django.urls import reverse

from agentperf.engine.metrics import TTFT_PERCENTILES
from demo.synthetic import (
    make_hardware,
    make_model,
    make_org,
    make_published_result,
    make_tier_set,
    synthetic_points,
)
from leaderboard.publishing import result_set_status
from submissions.models import Artifact

# As stored: the JSON document of the vendor's YAML (dates become strings)
EXAMPLE_CONFIG = json.loads(
    json.dumps(
        yaml.safe_load(
            (Path(__file__).resolve().parents[2] / "docs/examples/attached.yaml").read_text()
        ),
        default=str,
    )
)


def figure_of(response, chart_id: str = "frontier") -> dict:
    html = response.content.decode()
    match = re.search(
        rf'<script type="application/json" id="{chart_id}-data">(.*?)</script>', html, re.S
    )
    assert match, f"no figure {chart_id!r} on the page"
    return json.loads(match.group(1))


def csv_rows(response) -> list[dict]:
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.fixture
def lineup(db):
    """One model on two systems (three measured results) plus one simulated result."""
    model = make_model(name="DeepSeek V4.1 Flash (max)")
    gb300 = make_hardware(name="GB300 NVL72")
    mi355 = make_hardware(name="MI355X")
    tiers = make_tier_set()
    a = make_published_result(
        model=model, hardware=gb300, tier_set=tiers, label="GB300 now (28 Oct)"
    )
    b = make_published_result(
        model=model,
        hardware=mi355,
        tier_set=tiers,
        label="MI355X (20 Oct)",
        points=synthetic_points(single_agent_speed=150, concurrencies=(1, 2, 4, 8, 16)),
    )
    c = make_published_result(
        model=model, hardware=gb300, tier_set=tiers, label="GB300 alt", accelerators=16
    )
    sim = make_published_result(
        model=model, hardware=gb300, tier_set=tiers, label="Dry run", simulated=True
    )
    return {"model": model, "gb300": gb300, "mi355": mi355, "results": [a, b, c], "sim": sim}


def test_model_page_draws_one_trace_per_measured_result_through_all_its_points(client, lineup):
    response = client.get(reverse("model-detail", args=[lineup["model"].slug]))
    assert response.status_code == 200
    fig = figure_of(response)
    traces = {t["meta"]["result_id"]: t for t in fig["data"]}
    assert set(traces) == {r.pk for r in lineup["results"]}
    for r in lineup["results"]:
        assert len(traces[r.pk]["x"]) == len(r.points)
        assert traces[r.pk]["customdata"][0][0] == 1  # concurrency of the first point


def test_model_page_marks_tier_speeds_as_vertical_guides(client, lineup):
    fig = figure_of(client.get(reverse("model-detail", args=[lineup["model"].slug])))
    guides = sorted(s["x0"] for s in fig["layout"]["shapes"] if s["x0"] == s["x1"])
    assert guides == [20, 60, 100, 180, 300]


def test_simulated_results_are_hidden_from_the_model_page_until_asked(client, lineup):
    url = reverse("model-detail", args=[lineup["model"].slug])
    hidden = client.get(url)
    assert lineup["sim"].pk not in [t["meta"]["result_id"] for t in figure_of(hidden)["data"]]
    assert "1 simulated result hidden" in hidden.content.decode()
    shown = client.get(url + "?simulated=1")
    trace = next(t for t in figure_of(shown)["data"] if t["meta"]["result_id"] == lineup["sim"].pk)
    # no accuracy row checks its profile: quarantined (docs/simulator.md "Accuracy")
    assert trace["name"].endswith("[simulated, quarantined twin]")
    assert trace["line"]["dash"] == "dot"


def test_the_visitor_picks_which_results_the_chart_shows(client, lineup):
    a, b, _ = lineup["results"]
    url = reverse("model-detail", args=[lineup["model"].slug])
    fig = figure_of(client.get(f"{url}?r={a.pk}&r={b.pk}"))
    assert sorted(t["meta"]["result_id"] for t in fig["data"]) == sorted([a.pk, b.pk])


def test_log_scale_is_in_the_url(client, lineup):
    url = reverse("model-detail", args=[lineup["model"].slug])
    assert figure_of(client.get(url + "?scale=log"))["layout"]["xaxis"]["type"] == "log"
    assert figure_of(client.get(url))["layout"]["xaxis"]["type"] == "linear"


def test_the_points_table_carries_every_charted_point_without_javascript(client, lineup):
    url = reverse("model-detail", args=[lineup["model"].slug])
    rows = csv_rows(client.get(url + "?format=csv&table=points"))
    assert len(rows) == sum(len(r.points) for r in lineup["results"])
    assert {row["simulated"] for row in rows} == {"false"}


def test_the_results_csv_labels_simulated_rows_when_they_are_shown(client, lineup):
    url = reverse("model-detail", args=[lineup["model"].slug])
    rows = csv_rows(client.get(url + "?simulated=1&format=csv&table=results"))
    by_id = {int(r["result_id"]): r for r in rows}
    assert by_id[lineup["sim"].pk]["simulated"] == "true"
    assert by_id[lineup["sim"].pk]["label"] == "Dry run [simulated, quarantined twin]"
    assert by_id[lineup["results"][0].pk]["simulated"] == "false"


def test_an_unknown_csv_table_is_a_404_naming_the_tables(client, lineup):
    url = reverse("model-detail", args=[lineup["model"].slug])
    response = client.get(url + "?format=csv&table=nope")
    assert response.status_code == 404
    assert "results" in response.content.decode()


def test_home_matrix_shows_the_best_max_agents_per_model_and_hardware(client, lineup):
    a, b, c = lineup["results"]
    rows = csv_rows(client.get("/?tier=20+tok/s&format=csv&table=matrix"))
    assert len(rows) == 1
    gb300 = max(a.max_agents["20 tok/s"], c.max_agents["20 tok/s"])
    assert int(rows[0][f"hw:{lineup['gb300'].slug}"]) == gb300
    assert int(rows[0][f"hw:{lineup['mi355'].slug}"]) == b.max_agents["20 tok/s"]


def test_home_leaves_simulated_results_out_of_the_ranking(client, db):
    model, hw, tiers = make_model(), make_hardware(), make_tier_set()
    sim = make_published_result(
        model=model,
        hardware=hw,
        tier_set=tiers,
        simulated=True,
        points=synthetic_points(single_agent_speed=900),
    )
    measured = make_published_result(tier_set=tiers)  # with one measured result, the
    rows = csv_rows(client.get("/?format=csv&table=matrix"))  # ranking is measured only
    assert [r["model"] for r in rows] == [measured.model.name]
    with_sim = csv_rows(client.get("/?simulated=1&format=csv&table=latest"))
    assert {(int(r["result_id"]), r["simulated"]) for r in with_sim} == {
        (sim.pk, "true"),
        (measured.pk, "false"),
    }
    # (With no measured result at all, home shows the simulated ones, labelled: issue 16,
    # tests/submissions/test_friction.py.)


def test_hardware_page_lists_every_model_measured_on_it(client, lineup):
    other = make_model(name="Other model")
    make_published_result(model=other, hardware=lineup["gb300"])
    response = client.get(reverse("hardware-detail", args=[lineup["gb300"].slug]))
    html = response.content.decode()
    assert "DeepSeek V4.1 Flash (max)" in html and "Other model" in html
    assert len(figure_of(response)["data"]) == 3  # two measured DeepSeek results + other


def test_result_page_shows_tiers_power_provenance_and_config(client, db):
    org = make_org("NVIDIA")
    result = make_published_result(
        org=org,
        config=EXAMPLE_CONFIG,
        label="GB300 now (28 Oct)",
        verification=[
            {
                "name": "output_fingerprint",
                "status": "pass",
                "summary": "greedy outputs match the reference",
                "rule": "32 of 32 canary prompts identical",
                "evidence": {"matched": 32, "prompts": 32},
            }
        ],
    )
    response = client.get(reverse("result-detail", args=[result.pk]))
    html = response.content.decode()
    assert "<title>GB300 now (28 Oct) —" in html
    assert "NVIDIA" in html and "Vendor-submitted" in html
    assert "dynamo 0.9.0" in html
    assert "not measured" in html
    assert "output_fingerprint" in html and "greedy outputs match the reference" in html
    assert "<dt>matched</dt>" in html
    # every config field grouped and readable, secrets never shown
    assert "Speculative" in html and "Draft tokens" in html
    assert "secret (resolved on the runner host)" in html
    # the roles diagram: prefill 4 × 4 and decode 1 × 48
    assert "16 accelerators" in html and "48 accelerators" in html
    assert "64 accelerators across 2 roles" in html


def test_result_page_tables_export_max_agents_and_trials(client, db):
    result = make_published_result(points=synthetic_points(concurrencies=(1, 2, 4, 8)))
    url = reverse("result-detail", args=[result.pk])
    tiers = {r["tier"]: r for r in csv_rows(client.get(url + "?format=csv&table=tiers"))}
    assert int(tiers["20 tok/s"]["max_agents"]) == result.max_agents["20 tok/s"]
    assert tiers["20 tok/s"]["agents_per_mw"] == ""  # not measured
    trials = csv_rows(client.get(url + "?format=csv&table=trials"))
    assert [int(t["concurrency"]) for t in trials] == [1, 2, 4, 8]


def test_raw_data_link_appears_only_when_the_run_has_raw_records(client, db):
    result = make_published_result()
    url = reverse("result-detail", args=[result.pk])
    assert "/raw/" not in client.get(url).content.decode()
    artifact = Artifact.objects.create(
        kind=Artifact.KIND_RAW_RECORDS,
        storage_key=f"runs/{result.run_id}/trial-0/requests.jsonl.gz",
        sha256="0" * 64,
        size=1234,
        run=result.run,
    )
    from leaderboard.cache import chart_cache_invalidate

    chart_cache_invalidate()
    html = client.get(url).content.decode()
    assert reverse("result-raw-data", args=[result.pk, artifact.pk]) in html


def test_raw_data_of_another_run_is_not_served_through_a_result(client, db):
    mine, other = make_published_result(), make_published_result()
    artifact = Artifact.objects.create(
        kind=Artifact.KIND_RAW_RECORDS,
        storage_key="x/requests.jsonl",
        sha256="0" * 64,
        size=1,
        run=other.run,
    )
    response = client.get(reverse("result-raw-data", args=[mine.pk, artifact.pk]))
    assert response.status_code == 404


def test_an_invalidated_result_page_says_so_with_its_reason(client, db):
    result = make_published_result()
    result_set_status(result=result, to="invalidated", actor=None, reason="wrong weights")
    html = client.get(reverse("result-detail", args=[result.pk])).content.decode()
    assert "Invalidated." in html and "wrong weights" in html


def test_a_simulated_result_page_is_labelled(client, db):
    result = make_published_result(simulated=True)
    html = client.get(reverse("result-detail", args=[result.pk])).content.decode()
    assert "Simulated result." in html
    assert "[simulated, quarantined twin]" in html  # title and chart trace


@pytest.fixture
def known_pair(db):
    """Two results whose ratio at 75 tok/s is 1.5 by construction (700 vs 1050)."""
    model, tiers = make_model(), make_tier_set()
    base = make_published_result(
        model=model,
        tier_set=tiers,
        label="Base",
        points=[(1, 200.0, 100.0, 0.5), (8, 100.0, 400.0, 1.0), (32, 50.0, 1000.0, 3.0)],
        config={"engine": {"name": "vllm", "version": "0.13.0"}, "kv_cache": {"dtype": "fp8"}},
    )
    new = make_published_result(
        model=model,
        tier_set=tiers,
        label="New",
        points=[(1, 220.0, 150.0, 0.5), (8, 100.0, 700.0, 1.0), (32, 50.0, 1400.0, 3.0)],
        config={"engine": {"name": "vllm", "version": "0.14.0"}, "kv_cache": {"dtype": "fp8"}},
    )
    return base, new


def test_compare_reads_both_frontiers_at_the_visitors_speed(client, known_pair):
    base, new = known_pair
    url = reverse("compare") + f"?r={base.pk}&r={new.pk}&speed=75"
    rows = csv_rows(client.get(url + "&format=csv&table=iso_speed"))
    mine = next(r for r in rows if r["label"].startswith("your speed"))
    assert float(mine["v0"]) == pytest.approx(700.0)
    assert float(mine["v1"]) == pytest.approx(1050.0)
    assert float(mine["ratio1"]) == pytest.approx(1.5)
    assert "1.50×" in client.get(url).content.decode()


def test_compare_has_no_iso_speed_value_outside_a_measured_range(client, known_pair):
    base, new = known_pair
    url = reverse("compare") + f"?r={base.pk}&r={new.pk}&format=csv&table=iso_speed"
    rows = {r["label"]: r for r in csv_rows(client.get(url))}
    assert rows["20 tok/s (20 tok/s)"]["v0"] == ""  # below both frontiers: not measured
    assert rows["20 tok/s (20 tok/s)"]["ratio1"] == ""
    assert float(rows["100 tok/s (100 tok/s)"]["ratio1"]) == pytest.approx(700 / 400)


def test_compare_gives_iso_concurrency_and_single_agent_ratios(client, known_pair):
    base, new = known_pair
    url = reverse("compare") + f"?r={base.pk}&r={new.pk}&n=20&format=csv&table="
    by_n = {r["label"]: r for r in csv_rows(client.get(url + "iso_concurrency"))}
    assert float(by_n["N = 8"]["ratio1"]) == pytest.approx(700 / 400)
    assert float(by_n["your N = 20"]["v0"]) == pytest.approx(700.0)  # halfway 8→32
    single = csv_rows(client.get(url + "single_agent"))[0]
    assert float(single["ratio1"]) == pytest.approx(220 / 200)


def test_compare_config_diff_flags_only_what_changed(client, known_pair):
    base, new = known_pair
    url = reverse("compare") + f"?r={base.pk}&r={new.pk}&format=csv&table=config_diff"
    rows = {r["field"]: r for r in csv_rows(client.get(url))}
    assert rows["engine.version"]["changed"] == "true"
    assert (rows["engine.version"]["c0"], rows["engine.version"]["c1"]) == ("0.13.0", "0.14.0")
    assert rows["kv_cache.dtype"]["changed"] == "false"


def test_compare_with_fewer_than_two_results_asks_for_more(client, known_pair):
    html = client.get(reverse("compare") + f"?r={known_pair[0].pk}").content.decode()
    assert "Pick 2 to 4 results" in html


def test_history_puts_one_pair_on_one_chart_across_dates(client, db):
    import datetime as dt

    model, hw, tiers = make_model(), make_hardware(name="GB300"), make_tier_set()
    before = make_published_result(
        model=model,
        hardware=hw,
        tier_set=tiers,
        label="GB300 before (8 Oct)",
        published_at=dt.datetime(2026, 10, 8, tzinfo=dt.UTC),
    )
    now = make_published_result(
        model=model,
        hardware=hw,
        tier_set=tiers,
        label="GB300 now (28 Oct)",
        published_at=dt.datetime(2026, 10, 28, tzinfo=dt.UTC),
    )
    result_set_status(result=before, to="superseded", actor=None, reason="newer engine")
    response = client.get(reverse("history", args=[model.slug, hw.slug]))
    names = [t["name"] for t in figure_of(response)["data"]]
    assert names == ["GB300 before (8 Oct)", "GB300 now (28 Oct)"]
    assert now.pk in [t["meta"]["result_id"] for t in figure_of(response)["data"]]


def test_methodology_is_generated_from_the_engine_and_tier_data(client, db):
    make_tier_set()
    html = client.get(reverse("methodology")).content.decode()
    assert "p" + ", p".join(str(p) for p in TTFT_PERCENTILES) in html
    assert "nearest-rank" in html
    assert "Ramp N = 1, 2, 4" in html
    assert "20 tok/s" in html
    # the real endpoint's defaults of `agentperf.engine search` (the CLI's own default is None)
    from agentperf.engine.cli import REAL_DURATION_S, REAL_WARMUP_S

    assert f"Warm-up of {REAL_WARMUP_S:.0f} s" in html
    assert f"measurement window of {REAL_DURATION_S:.0f} s" in html
    # cache truth's tolerance, from agentperf/engine/cachetruth.py
    assert "Observed above theoretical + 64 tokens per request + 2% fails" in html
    assert "below 50% of theoretical is flagged" in html
    assert "within 5 points" in html


@pytest.mark.parametrize("name", ["home", "model-list", "hardware-list", "compare", "methodology"])
def test_every_page_has_its_own_title(client, db, name):
    html = client.get(reverse(name)).content.decode()
    title = re.search(r"<title>(.*?)</title>", html, re.S).group(1)
    assert "AgentPerf" in title


def test_model_page_offers_a_checkbox_per_result_to_pick_and_compare(client, lineup):
    html = client.get(reverse("model-detail", args=[lineup["model"].slug])).content.decode()
    boxes = re.findall(r'<input type="checkbox" name="r" value="(\d+)" checked>', html)
    assert sorted(map(int, boxes)) == sorted(r.pk for r in lineup["results"])
    assert f'formaction="{reverse("compare")}"' in html


def test_raw_data_link_redirects_to_a_fresh_signed_url_of_the_stored_records(client, db):
    from submissions.services.artifacts import artifact_store

    result = make_published_result()
    artifact = artifact_store(
        kind=Artifact.KIND_RAW_RECORDS,
        key=f"test-leaderboard/run-{result.run_id}/requests.jsonl",
        content=b'{"request_id": "a"}\n',
        run=result.run,
    )
    response = client.get(reverse("result-raw-data", args=[result.pk, artifact.pk]))
    assert response.status_code == 302
    location = response["Location"]
    assert artifact.storage_key in location
    assert "Signature" in location or "signature" in location.lower()


@pytest.mark.django_db
def test_the_reproduce_command_carries_the_runs_own_warmup_window_and_cap(client):
    """Dispatch stores the search options under run_spec["search"]; the page read another key
    and printed placeholders for every real result."""
    from demo.synthetic import make_published_result

    result = make_published_result()
    search = result.run.run_spec["search"]
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert f"--warmup {search['warmup_s']:g} --duration {search['duration_s']:g}" in html
    assert f"--cap {search['cap']} --max-trials {search['max_trials']}" in html
    assert "&lt;warm-up s&gt;" not in html and "agentperf datasets download" in html
    tiers = result.run.run_spec["tiers"]
    assert all(f'"name": "{t["name"]}"' in html.replace("&quot;", '"') for t in tiers)
