"""Measured energy on published results: agents per MW and tokens per joule, with the
coverage and the denominator (accelerators measured / used) stated; never modelled.

The trials' telemetry comes from `demo.synthetic.measured_telemetry`: NVML-shaped
samples through the real window maths (no GPU here; runner/telemetry/ is tested against a
fake NVML in tests/pipeline/test_telemetry.py)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from pydantic import ValidationError

from agentperf.contract import TrialTelemetry
from demo.synthetic import (
    make_org,
    make_published_result,
    make_run,
    make_submission,
    make_tier_set,
    measured_telemetry,
)
from leaderboard.energy import result_energy
from leaderboard.publishing import result_publish
from runs.models import Trial
from submissions import constants as c

POINTS = [
    (1, 180.0, 50.0, 0.5),
    (2, 150.0, 90.0, 0.6),
    (4, 110.0, 160.0, 1.0),
    (8, 70.0, 250.0, 2.0),
    (16, 40.0, 330.0, 6.0),
    (32, 15.0, 380.0, 12.0),
]


def _publish_with(telemetry_of, *, accelerators: int = 8, metrics_extra=None):
    sub = make_submission(org=make_org(), status=c.IN_REVIEW)
    run = make_run(
        submission=sub, points=POINTS, tier_set=make_tier_set(), accelerators=accelerators
    )
    for trial in run.trials.all():
        trial.telemetry = telemetry_of(trial)
        trial.metrics = {**trial.metrics, **(metrics_extra or {})}
        trial.save(update_fields=["telemetry", "metrics"])
    return result_publish(submission=sub, run=run)


@pytest.mark.django_db
def test_tokens_per_joule_and_agents_per_mw_come_from_the_measured_energy():
    result = make_published_result(points=POINTS, power_w=8_000.0, accelerators=8)
    n = result.max_agents["60 tok/s"]  # N = 8
    point = next(p for p in result.points if p["concurrency"] == n)
    energy = point["energy"]
    assert energy["tool"] == "nvml" and energy["method"].startswith("energy counter delta")
    assert energy["accelerators_measured"] == 8 and energy["accelerators_used"] == 8
    assert energy["coverage"] == pytest.approx(1.0)
    # 250 tok/s per accelerator × 8 accelerators ÷ the measured watts
    assert energy["tokens_per_joule"] == pytest.approx(250.0 * 8 / energy["power_w"])
    summary = result_energy(result)
    tier = summary["tiers"]["60 tok/s"]
    assert tier["agents_per_mw"] == pytest.approx(n / (energy["power_w"] / 1e6))
    assert result.agents_per_mw["60 tok/s"] == pytest.approx(tier["agents_per_mw"])
    assert summary["complete"] is True and summary["coverage_min"] == pytest.approx(1.0)
    assert "8 accelerators in use" in summary["denominators"][0]


@pytest.mark.django_db
def test_power_of_fewer_accelerators_than_used_is_partial_and_computes_nothing():
    result = _publish_with(lambda t: measured_telemetry(power_w=4000.0, accelerators=4))
    assert result.agents_per_mw is None
    summary = result_energy(result)
    assert summary["measured"] is True and summary["complete"] is False
    assert summary["accelerators_measured"] == 4 and summary["accelerators_used"] == 8
    tier = summary["tiers"]["20 tok/s"]
    assert tier["power_w"] == pytest.approx(4000.0)
    assert tier["agents_per_mw"] is None and tier["tokens_per_joule"] is None


@pytest.mark.django_db
def test_a_modelled_power_figure_is_never_read_as_measured():
    """A twin's power (in the metrics, with its telemetry not measured) stays out; a stray
    power field in the telemetry is not even part of the contract (agentperf/contract.py)."""
    modelled = {"measured": False, "reason": "not measured: simulated on virtual time"}
    with pytest.raises(ValidationError):
        TrialTelemetry.model_validate({**modelled, "modelled_power_w": 9000.0})
    result = _publish_with(lambda t: modelled, metrics_extra={"power_w": 9000.0})
    assert result.agents_per_mw is None
    assert all(p["power_w"] is None and not p["energy"]["measured"] for p in result.points)
    assert result_energy(result) == {
        "measured": False,
        "reason": "not measured: simulated on virtual time",
    }


@pytest.mark.django_db
def test_the_result_page_states_method_coverage_and_denominator(client):
    result = make_published_result(points=POINTS, power_w=8_000.0)
    html = client.get(reverse("result-detail", args=[result.pk])).content.decode()
    assert "energy counter delta" in html and "8 of the 8 accelerators used" in html
    assert "Tokens / J" in html and "Measured energy at max agents" in html
    csv = client.get(
        reverse("result-detail", args=[result.pk]), {"format": "csv", "table": "energy"}
    ).content.decode()
    assert csv.splitlines()[0].startswith("tier,max_agents,power_w,agents_per_mw,tokens_per_joule")


@pytest.mark.django_db
def test_an_unmeasured_result_page_says_why(client):
    result = make_published_result(points=POINTS)
    html = client.get(reverse("result-detail", args=[result.pk])).content.decode()
    assert "not measured: no accelerator telemetry" in html
    assert "Measured energy at max agents" not in html


@pytest.mark.django_db
def test_the_public_api_carries_the_energy_summary(client):
    result = make_published_result(points=POINTS, power_w=8_000.0)
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    assert body["energy"]["measured"] is True
    assert body["energy"]["tiers"]["20 tok/s"]["tokens_per_joule"] > 0
    assert Trial.objects.filter(run=result.run, telemetry__tool="nvml").count() == len(POINTS)
