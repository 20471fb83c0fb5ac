"""Each dishonest mode of the simulator is caught by exactly the check meant for it, and an
honest run fails none (virtual time: a whole search with probes in a few seconds).

Each run (a mode, with or without a primed cache) is made once for the module and read by
every test that asks for it: the tests only read its checks."""

from __future__ import annotations

import functools

import pytest

from tests.verification.harness import failing
from tests.verification.harness import simulated_run as _simulated_run


@functools.cache
def simulated_run(cheat: str | None, *, prime_cache: bool = False) -> dict:
    return _simulated_run(cheat, prime_cache=prime_cache)


@pytest.fixture(scope="module")
def honest() -> dict:
    return simulated_run(None)


def test_an_honest_simulated_run_fails_no_check(honest):
    assert failing(honest) == set(), {n: c["summary"] for n, c in honest.items()}


def test_an_honest_run_passes_every_check_it_can_measure(honest):
    # warn only where nothing is measured (power on virtual time) or the statistics say the
    # short test trials are below the MLPerf-style minimum; everything else passes
    not_passing = {n for n, c in honest.items() if c["status"] != "pass"}
    assert not_passing <= {"telemetry", "statistics"}, not_passing
    assert honest["cache_honesty"]["evidence"]["over_bound"] == 0
    assert honest["cache_truth"]["status"] == "pass"
    assert honest["model_identity"]["summary"].startswith("6 of 6 canary answers match")


@pytest.mark.parametrize(
    ("mode", "caught_by"),
    [
        ("truncated", {"output_lengths"}),
        ("padded", {"token_counts"}),
        # more cached tokens than the sessions' own prefixes: over the per-request bound and
        # over the window's theoretical reusable prefix
        ("cache_shared", {"cache_honesty", "cache_truth"}),
        ("cache_inflated", {"cache_honesty", "cache_truth"}),
        ("other_model", {"model_identity"}),
        ("fake_spec", {"speculative_decoding"}),
        ("fewer_accelerators", {"accelerators"}),
    ],
)
def test_each_dishonest_mode_is_caught_by_exactly_its_checks(mode, caught_by):
    checks = simulated_run(mode)
    assert failing(checks) == caught_by, {n: c["summary"] for n, c in checks.items()}


def test_shared_cache_is_reported_with_the_requests_that_exceed_their_sessions_bound():
    checks = simulated_run("cache_shared")
    evidence = checks["cache_honesty"]["evidence"]
    assert evidence["over_bound"] >= 2
    example = evidence["examples"][0]
    assert example["cached"] > example["honest_max"] + 64


def test_forced_acceptance_reads_as_every_draft_accepted_in_the_metrics_deltas():
    checks = simulated_run("fake_spec")
    figures = checks["speculative_decoding"]["evidence"]["metrics"]
    assert figures["acceptance_rate"] == 1.0
    assert figures["mean_acceptance_length"] == pytest.approx(4.0)


def test_a_primed_cache_is_within_every_sessions_honest_bound():
    # Virtual-time searches start from a primed cache: a session's first request finds the
    # turn before it cached, which the replay marks on the record, so it is no violation...
    checks = simulated_run(None, prime_cache=True)
    assert failing(checks) == set(), {n: c["summary"] for n, c in checks.items()}
    assert checks["cache_honesty"]["evidence"]["over_bound"] == 0


def test_a_shared_cache_is_still_caught_on_a_primed_cache():
    # ...and a server sharing cache across agents is still caught beside it.
    checks = simulated_run("cache_shared", prime_cache=True)
    assert "cache_honesty" in failing(checks)


def test_an_honest_runs_cache_truth_is_a_little_under_theoretical_and_agrees_with_its_counters(
    honest,
):
    evidence = honest["cache_truth"]["evidence"]
    assert evidence["verdict"] == "pass"
    assert 0.95 <= evidence["ratio"] <= 1.0  # whole 16-token blocks, never the last token
    for row in evidence["trials"]:
        assert row["verdict"] == "pass", row
        assert row["counters"]["status"] == "agrees", row
        assert abs(row["counters"]["difference"]) < 0.01


def test_inflated_cache_reports_are_caught_over_the_window_with_the_ratio():
    checks = simulated_run("cache_inflated")
    evidence = checks["cache_truth"]["evidence"]
    assert evidence["ratio"] > 1.2
    assert {row["verdict"] for row in evidence["trials"]} == {"fail"}
    assert "hits over-reported" in checks["cache_truth"]["summary"]
