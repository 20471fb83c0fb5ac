"""The token-count check (agentperf.verification.checks.check_token_counts) on hand-made records."""

from __future__ import annotations

from agentperf.engine.metrics import RequestRecord
from agentperf.verification.checks import TrialData, check_token_counts
from tests.support.records import request_record


def _record(i: int, n_out: int, local_out: int) -> RequestRecord:
    return request_record(
        t=i,
        request_id=f"r{i}",
        agent_id=i,
        session_id="s",
        target_output_tokens=local_out,
        n_reads=1,
        n_output_events=1,
        n_out=n_out,
        n_cached=0,
        local_prompt_tokens=100,
        local_output_tokens=local_out,
    )


def _trial(index: int, concurrency: int, n_out: int) -> TrialData:
    return TrialData(
        index=index, concurrency=concurrency, records=[_record(i, n_out, 50) for i in range(4)]
    )


def test_counts_in_line_with_the_lowest_load_trial_pass():
    check = check_token_counts([_trial(0, 1, 50), _trial(1, 8, 51)])
    assert check["status"] == "pass", check["summary"]


def test_a_server_that_counts_no_output_fails_instead_of_dividing_by_zero():
    check = check_token_counts([_trial(0, 1, 0), _trial(1, 8, 0)])
    assert check["status"] == "fail"
    assert "0.00× the local count" in check["summary"]
