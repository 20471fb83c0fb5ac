"""Issue 28 items 1 and 4 through the real pipeline: a simulated run (virtual time, the
H100 example) reports each trial's session SLOs through the contract, and the published
result shows them with its cost at max agents, on its page and in the public API."""

from __future__ import annotations

import pytest

from agentperf import contract
from review.services import review_publish
from runs.models import BenchmarkRun
from tests.pipeline.conftest import EXAMPLES, http, submit, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_simulated_run_publishes_session_slos_and_cost(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, client
):
    _, token = vendor
    pool_worker_factory(pools=("simulated",))
    created = submit(live_server.url, token, (EXAMPLES / "simulated.yaml").read_text())
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    assert body["status"] == "in_review", body
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    tiers = [t["name"] for t in run.run_spec["tiers"]]
    assert all(t["criterion"] == "requests" for t in run.run_spec["tiers"])

    trials = list(run.trials.order_by("index"))
    for trial in trials:
        sessions = contract.trial_metrics(trial.metrics).sessions
        assert sessions is not None and sessions.sessions >= 1
        assert set(sessions.tiers) == set(tiers)
        for share in sessions.tiers.values():
            assert share.sessions == sessions.sessions and 0 <= share.met <= share.sessions
            assert share.low is not None and share.low <= share.share <= share.high
    # at one agent the sessions of the window met the easiest tier (the twin is fast alone)
    assert contract.trial_metrics(trials[0].metrics).sessions.tiers[tiers[0]].share == 1.0

    result = review_publish(submission=run.submission, actor=cast.rita, reason="CI")
    status, api = http("GET", f"{live_server.url}/api/v1/public/results/{result.pk}/")
    assert status == 200
    assert api["sessions"]["criterion"] == "requests"
    name, n = next(iter(result.max_agents.items()))
    at_max = api["sessions"]["tiers"][name]
    assert at_max["max_agents"] == n and at_max["share"] is not None
    cost = api["cost"]["tiers"][name]["classes"]
    assert cost["on-demand"]["usd_per_agent_hour"] > 0
    assert (
        cost["on-demand"]["usd_per_m_output_tokens"] > cost["on-demand"]["usd_per_m_total_tokens"]
    )
    assert cost["owned"]["power_source"] == "modelled" and cost["owned"]["usd_per_hour"] > 0
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert "Sessions: what each agent" in html and "Cost at max agents" in html
    assert f"{at_max['met']} of {at_max['sessions']}" in html
    # whole-task time: the tasks cut at the window's end are counted as censored, on the
    # trial's block and in the page's sessions table (docs/metrics.md "Whole-task time")
    whole = [contract.trial_metrics(t.metrics).sessions.whole_task_model_time_s for t in trials]
    assert all(w.sessions + w.censored >= 1 for w in whole)
    assert any(w.censored >= 1 for w in whole)  # the agents' last tasks were still running
    assert "Tasks still running at the end (censored)" in html
