"""A result's cache truth where it is published (docs/metrics.md "Cache truth"): each point
carries its trial's, and the result's sum and worst verdict are in the public API, the data
dump and the receipt's figures; a result published before it has none of them."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json

import pytest

from agentperf import contract
from agentperf.engine import cachetruth as ct
from demo.synthetic import make_org, make_published_result, make_run, make_submission, make_tier_set
from leaderboard import receipts
from leaderboard.export import bundle_files
from leaderboard.publishing import result_publish
from submissions import constants as c

pytestmark = pytest.mark.django_db

POINTS = [(1, 180.0, 50.0, 0.5), (4, 110.0, 160.0, 1.0), (16, 40.0, 330.0, 6.0)]
# per trial: theoretical, observed, the counters' queried tokens over the window (None: not
# scraped)
FIGURES = [(8_000, 7_600, 50_000), (30_000, 28_900, 90_000), (90_000, 30_000, None)]


def trial_truth(theoretical: int, observed: int, queries: int | None) -> dict:
    """What the worker stores on a trial: the engine's cache truth with the window's
    counters (runner/worker/director.py trial_report), through the contract."""
    prompt = theoretical + 2_000
    truth = ct.CacheTruth(
        verdict=ct.NOT_CHECKED,
        reasons=[],
        requests=100,
        reporting=100,
        source=ct.SOURCE_USAGE,
        prompt_tokens=prompt,
        theoretical_tokens=theoretical,
        observed_tokens=observed,
        slack_tokens=100 * ct.SLACK_TOKENS_PER_REQUEST,
        ratio=observed / theoretical,
        theoretical_share=theoretical / prompt,
        observed_share=observed / prompt,
        requests_over_bound=0,
        examples=[],
    )
    if queries is None:
        judged = ct.with_counters(truth, None, None)
    else:  # the counters saw other traffic too, with the same share of hits
        start = {ct.VLLM_QUERIES: 1_000.0, ct.VLLM_HITS: 500.0}
        end = {
            ct.VLLM_QUERIES: 1_000.0 + queries,
            ct.VLLM_HITS: 500.0 + queries * observed / prompt,
        }
        judged = ct.with_counters(truth, start, end)
    return contract.CacheTruth.model_validate(judged.to_dict()).dump()


def published_with_cache_truth():
    submission = make_submission(org=make_org(), status=c.IN_REVIEW)
    run = make_run(submission=submission, points=POINTS, tier_set=make_tier_set(), accelerators=4)
    for trial, figures in zip(run.trials.order_by("index"), FIGURES, strict=True):
        trial.metrics = {**trial.metrics, "cache_truth": trial_truth(*figures)}
        trial.save(update_fields=["metrics"])
    return result_publish(submission=submission, run=run)


def test_each_point_carries_its_trials_cache_truth_as_the_worker_stored_it():
    result = published_with_cache_truth()
    truths = [p["cache_truth"] for p in result.points]
    assert [t["verdict"] for t in truths] == ["pass", "pass", "flagged"]
    assert [t["observed_tokens"] for t in truths] == [7_600, 28_900, 30_000]
    assert truths[0]["counters"]["status"] == "agrees"
    assert truths[2]["counters"]["reason"] == (
        "the server's counters were not scraped at both window edges"
    )
    assert "the cache is too small" in truths[2]["reasons"][0]


def test_the_api_and_the_receipt_figures_sum_the_trials_with_the_worst_verdict(client):
    result = published_with_cache_truth()
    body = client.get(f"/api/v1/public/results/{result.pk}/").json()
    got = body["cache_truth"]
    assert got["theoretical_tokens"] == 128_000
    assert got["observed_tokens"] == 66_500
    assert got["prompt_tokens"] == 134_000
    assert got["ratio"] == pytest.approx(66_500 / 128_000)
    assert got["verdict"] == "flagged"
    assert [t["verdict"] for t in got["trials"]] == ["pass", "pass", "flagged"]
    assert [t["counters"] for t in got["trials"]] == ["agrees", "agrees", "not_checked"]
    assert receipts.figures_document(result)["cache_truth"] == got


def test_a_result_published_before_cache_truth_has_none_and_its_figures_are_unchanged(client):
    result = make_published_result(label="Before")
    assert all(p["cache_truth"] is None for p in result.points)
    assert client.get(f"/api/v1/public/results/{result.pk}/").json()["cache_truth"] is None
    # the receipt of a result published before signed figures without the key
    assert "cache_truth" not in receipts.figures_document(result)


def test_the_data_dump_has_the_cache_truth_per_result_and_per_point():
    result = published_with_cache_truth()
    files, _ = bundle_files(now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    document = json.loads(files["results.json"])["results"][0]
    assert document["cache_truth"]["verdict"] == "flagged"
    points = list(csv.DictReader(io.StringIO(files["points.csv"].decode())))
    assert [
        (p["cache_theoretical_tokens"], p["cache_observed_tokens"], p["cache_verdict"])
        for p in points
    ] == [
        ("8000", "7600", "pass"),
        ("30000", "28900", "pass"),
        ("90000", "30000", "flagged"),
    ]
    assert float(points[0]["cache_counter_hit_share"]) == pytest.approx(7_600 / 10_000)
    rows = list(csv.DictReader(io.StringIO(files["results.csv"].decode())))
    assert {r["result_id"] for r in rows} == {str(result.pk)}
    assert {(r["cache_verdict"], r["cache_observed_tokens"]) for r in rows} == {
        ("flagged", "66500")
    }


def test_the_result_page_states_the_verdict_in_words_not_checked_included(client):
    result = published_with_cache_truth()
    page = client.get(f"/results/{result.pk}/").content.decode()
    assert "Verdict: <strong>flagged</strong>" in page
    # a server that reported no cached count and no counters: "not checked", as two words
    submission = make_submission(org=make_org(), status=c.IN_REVIEW)
    run = make_run(submission=submission, points=POINTS, tier_set=make_tier_set(), accelerators=4)
    for trial in run.trials.all():
        truth = ct.CacheTruth(
            verdict=ct.NOT_CHECKED,
            reasons=[],
            requests=100,
            reporting=0,
            source=None,
            prompt_tokens=10_000,
            theoretical_tokens=8_000,
            observed_tokens=None,
            slack_tokens=100 * ct.SLACK_TOKENS_PER_REQUEST,
            ratio=None,
            theoretical_share=0.8,
            observed_share=None,
            requests_over_bound=0,
            examples=[],
        )
        judged = ct.with_counters(truth, None, None)
        stored = contract.CacheTruth.model_validate(judged.to_dict()).dump()
        trial.metrics = {**trial.metrics, "cache_truth": stored}
        trial.save(update_fields=["metrics"])
    unchecked = result_publish(submission=submission, run=run)
    page = client.get(f"/results/{unchecked.pk}/").content.decode()
    assert "Verdict: <strong>not checked</strong>" in page
