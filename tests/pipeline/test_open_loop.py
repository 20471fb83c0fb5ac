"""A run with ``arrival: open`` (issue #28 item 2; docs/engine.md "Arrival modes"): the
vendor's config asks for the open loop, dispatch puts it in the run spec's search options,
the database-free pool worker runs the closed search and then the open-loop search over
the same dataset on the twin's virtual time, the completion carries both, and the
published result and the compare page draw them side by side."""

from __future__ import annotations

import json
import re

import pytest

from agentperf import contract
from demo.synthetic import make_published_result
from review.services import review_publish
from runs.models import BenchmarkRun
from tests.pipeline.conftest import EXAMPLES, FAST_SEARCH, submit, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEP = 30.0  # sessions per minute per search step
CAP = 240.0  # sessions per minute


def _open_loop_config() -> str:
    text = (EXAMPLES / "simulated.yaml").read_text()
    text = re.sub(r"max_concurrency: \d+", "max_concurrency: 16\n  arrival: open", text)
    assert "arrival: open" in text
    return text


def test_a_simulated_run_with_open_arrivals_publishes_both_loops(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, client
):
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL = {
        **pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL,
        "simulated-virtual": dict(
            FAST_SEARCH,
            warmup_s=5.0,
            duration_s=20.0,
            cap=16,
            prime_cache=True,
            rate_step=STEP,
            rate_cap=CAP,
        ),
    }
    _, token = vendor
    worker = pool_worker_factory(pools=("simulated",))
    created = submit(live_server.url, token, _open_loop_config())
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    assert body["status"] == "in_review", (body, worker.log()[-3000:])
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    assert run.run_spec["search"]["arrival"] == "open"
    assert run.run_spec["launcher"]["clock"] == "virtual"

    summary = contract.search_summary(run.search_summary)
    assert summary is not None and summary.open_loop is not None
    open_loop = summary.open_loop
    tier_names = {t["name"] for t in run.run_spec["tiers"]}
    # both loops over the same dataset and tiers: every tier has a closed N and an open rate
    assert set(summary.max_agents) == tier_names == set(open_loop.tiers)
    assert open_loop.rate_step_per_min == STEP and open_loop.rate_cap_per_min == CAP
    assert open_loop.trials >= 2
    passing = {n: t for n, t in open_loop.tiers.items() if t.max_rate_per_min > 0}
    assert passing, open_loop
    for tier in passing.values():
        assert tier.max_rate_per_min % STEP == 0 and tier.max_rate_per_min <= CAP
        assert tier.mean_concurrent_sessions is not None and tier.peak_concurrent_sessions
        assert 0 < tier.mean_concurrent_sessions <= tier.peak_concurrent_sessions
        assert tier.ttft_s["p75"] is not None
    # the open loop's trials are not the closed loop's: its trial list is unchanged
    assert all(t.concurrency <= 16 for t in run.trials.all())

    result = review_publish(submission=run.submission, actor=cast.rita, reason="CI")
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert 'id="t-loops"' in html and "Open loop: max rate (sessions/min)" in html
    name, tier = next(iter(passing.items()))
    assert f"{tier.max_rate_per_min:,.1f}" in html
    # drawn side by side: closed N against the open loop's sessions, and both TTFT curves
    chart = json.loads(
        html.split('<script type="application/json" id="loops-chart-data">')[1].split("</script>")[
            0
        ]
    )
    closed_bars, open_bars = chart["data"][0], chart["data"][1]
    at = closed_bars["x"].index(name)
    assert closed_bars["y"][at] == result.max_agents[name]
    assert open_bars["y"][at] == tier.mean_concurrent_sessions
    assert open_bars["error_y"]["array"][at] == pytest.approx(
        tier.peak_concurrent_sessions - tier.mean_concurrent_sessions
    )
    curves = {t["name"]: t["y"] for t in chart["data"][2:]}
    assert curves[f"{name}: open loop TTFT"][1] == pytest.approx(tier.ttft_s["p75"])
    # beside a closed-loop-only result on the compare page: rows for the one that has both
    other = make_published_result(model=result.model, hardware=result.hardware, simulated=True)
    page = client.get(f"/compare/?r={other.pk}&r={result.pk}").content.decode()
    assert 'id="t-loops"' in page and "Open: mean concurrent sessions" in page
    assert f"{tier.max_rate_per_min:,.1f}" in page
