"""A simulated deployment with profile overrides goes through the real pipeline
(docs/simulator.md "Overrides"): the vendor API validates the patch, dispatch carries it in
the run spec, the database-free pool worker serves the patched profile on virtual time, and
the result is the what-if's, not the stock profile's."""

from __future__ import annotations

import json

import pytest
import yaml

from runs.models import BenchmarkRun
from tests.pipeline.conftest import EXAMPLES, http, submit, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SLOWER = {"efficiency": {"iteration_overhead_us": 8000}}


def _config(overrides: dict | None) -> str:
    doc = yaml.safe_load((EXAMPLES / "simulated.yaml").read_text())
    if overrides is not None:
        doc["launcher"]["simulated"]["overrides"] = overrides
    return json.dumps(doc)


def _single_agent_speed(run: BenchmarkRun) -> float:
    trial = run.trials.filter(concurrency=1).order_by("index").first()
    assert trial is not None, [t.concurrency for t in run.trials.all()]
    return float(trial.metrics["p25_output_speed"])


def test_a_profile_override_is_validated_carried_and_served(
    pipeline_settings, live_server, vendor, pool_worker_factory
):
    _, token = vendor
    bad = _config({"efficiency": {"compute": -1}}).encode()
    status, body = http("POST", f"{live_server.url}/api/v1/submissions/", token=token, body=bad)
    assert status == 400, body
    assert "launcher.simulated.overrides.efficiency.compute" in body["error"]["fields"]

    pool_worker_factory(pools=("simulated",))
    runs = {}
    for name, overrides in (("stock", None), ("slower", SLOWER)):
        created = submit(live_server.url, token, _config(overrides))
        done = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
        assert done["status"] == "in_review", done
        runs[name] = BenchmarkRun.objects.get(submission_id=created["id"])
    launcher = runs["slower"].run_spec["launcher"]
    assert launcher["overrides"] == SLOWER and launcher["clock"] == "virtual"
    assert launcher["profile_label"].endswith("with overrides")
    assert "overrides" not in runs["stock"].run_spec["launcher"]
    # 2 ms → 8 ms of fixed step time: the single agent is much slower on the patched profile
    assert _single_agent_speed(runs["slower"]) < 0.7 * _single_agent_speed(runs["stock"])
