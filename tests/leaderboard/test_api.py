import pytest
from drf_spectacular.generators import SchemaGenerator

from demo.synthetic import make_hardware, make_model, make_org, make_published_result, make_tier_set
from leaderboard.publishing import result_set_status

API = "/api/v1/public"


@pytest.fixture
def pair(db):
    model, hw, tiers = make_model(slug="ds-v4"), make_hardware(slug="gb300"), make_tier_set()
    measured = make_published_result(
        model=model,
        hardware=hw,
        tier_set=tiers,
        org=make_org("NVIDIA"),
        config={"engine": {"name": "vllm", "version": "0.14.0"}, "env": {"HF_TOKEN": "hf_x"}},
    )
    simulated = make_published_result(model=model, hardware=hw, tier_set=tiers, simulated=True)
    return measured, simulated


def test_results_list_leaves_simulated_out_unless_asked(client, pair):
    measured, simulated = pair
    ids = [r["id"] for r in client.get(f"{API}/results/").json()]
    assert ids == [measured.pk]
    with_sim = {
        r["id"]: r["is_simulated"] for r in client.get(f"{API}/results/?simulated=1").json()
    }
    assert with_sim == {measured.pk: False, simulated.pk: True}


def test_results_list_filters_by_model_hardware_and_status(client, pair):
    measured, _ = pair
    other = make_published_result()
    result_set_status(result=other, to="superseded", actor=None, reason="newer run")
    assert [r["id"] for r in client.get(f"{API}/results/?model=ds-v4").json()] == [measured.pk]
    assert [r["id"] for r in client.get(f"{API}/results/?hardware=gb300").json()] == [measured.pk]
    superseded = client.get(f"{API}/results/?status=superseded").json()
    assert [(r["id"], r["status_reason"]) for r in superseded] == [(other.pk, "newer run")]


def test_an_unknown_status_filter_is_a_400_in_the_project_error_shape(client, db):
    body = client.get(f"{API}/results/?status=draft").json()
    assert body["error"]["fields"]["status"]


def test_result_detail_has_points_tiers_and_provenance_with_secrets_redacted(client, pair):
    measured, _ = pair
    body = client.get(f"{API}/results/{measured.pk}/").json()
    assert len(body["points"]) == len(measured.points)
    assert body["points"][0]["concurrency"] == 1
    assert [t["name"] for t in body["tier_set"]["tiers"]][0] == "20 tok/s"
    assert body["max_agents"] == measured.max_agents
    assert body["agents_per_mw"] is None
    assert body["provenance"]["submitter"] == "NVIDIA"
    assert body["provenance"]["source"] == "vendor_submitted"
    assert body["engine"] == {"name": "vllm", "version": "0.14.0"}
    assert body["config"]["env"]["HF_TOKEN"] == "[redacted]"


def test_a_missing_result_is_a_404(client, db):
    assert client.get(f"{API}/results/999999/").status_code == 404


def test_models_and_hardware_count_published_results(client, pair):
    models = {m["slug"]: m for m in client.get(f"{API}/models/").json()}
    assert models["ds-v4"]["published_results"] == 2
    model = client.get(f"{API}/models/ds-v4/").json()
    assert model["tier_set"] is not None
    hardware = client.get(f"{API}/hardware/gb300/").json()
    assert hardware["published_results"] == 2


def test_compare_api_gives_the_known_ratio(client, db):
    model, tiers = make_model(), make_tier_set()
    base = make_published_result(
        model=model,
        tier_set=tiers,
        points=[(1, 200.0, 100.0, 0.5), (8, 100.0, 400.0, 1.0), (32, 50.0, 1000.0, 3.0)],
    )
    new = make_published_result(
        model=model,
        tier_set=tiers,
        points=[(1, 220.0, 150.0, 0.5), (8, 100.0, 700.0, 1.0), (32, 50.0, 1400.0, 3.0)],
    )
    body = client.get(f"{API}/compare/?r={base.pk}&r={new.pk}&speed=75").json()
    at75 = next(row for row in body["iso_speed"] if row["speed"] == 75)
    assert at75["throughput_per_accelerator"] == pytest.approx([700.0, 1050.0])
    assert at75["ratio_to_first"][1] == pytest.approx(1.5)
    # 75 tok/s lies between both results' trials at 100 and 50: a reading, so marked
    assert at75["read"] == ["read between measured points"] * 2
    at100 = next(row for row in body["iso_speed"] if row["speed"] == 100)
    assert at100["read"] == ["at a measured point"] * 2
    assert body["single_agent_speed"]["ratio_to_first"][1] == pytest.approx(1.1)


def test_compare_api_needs_two_to_four_ids(client, db):
    body = client.get(f"{API}/compare/?r=1").json()
    assert "2 to 4" in body["error"]["fields"]["r"][0]


def test_api_responses_are_cached_until_the_next_publish(client, db, django_assert_num_queries):
    make_published_result()
    client.get(f"{API}/results/")
    with django_assert_num_queries(0):
        client.get(f"{API}/results/")


def test_the_public_api_is_in_the_generated_openapi_schema(db):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    for path in (
        "/api/v1/public/results/",
        "/api/v1/public/results/{id}/",
        "/api/v1/public/compare/",
        "/api/v1/public/models/{slug}/",
    ):
        assert path in schema["paths"], path
