"""The token-count check (agentperf.verification.checks.check_token_counts) on hand-made records."""

from __future__ import annotations

import json

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


def _noisy_trial(index: int, concurrency: int, pairs: list[tuple[int, int]]) -> TrialData:
    """A trial whose requests each have their own (server, local) output counts: a random
    model's text tokenizes unevenly, request by request."""
    return TrialData(
        index=index,
        concurrency=concurrency,
        records=[_record(i, n_out, local) for i, (n_out, local) in enumerate(pairs)],
    )


def test_a_deviation_few_requests_cannot_tell_from_chance_warns_instead_of_failing():
    """An honest server's ratio over a handful of uneven requests: the second trial lands
    past ±15 % of the first, but its three requests spread more than that."""
    first = _noisy_trial(0, 1, [(40, 30), (40, 52), (40, 38)])
    second = _noisy_trial(1, 4, [(40, 26), (40, 45), (40, 24)])
    check = check_token_counts([first, second])
    assert check["status"] == "warn", check["summary"]
    assert "within chance over 3 requests" in check["summary"]
    deviated = check["evidence"]["trials"][1]
    assert abs(deviated["deviation"]) > 0.15
    z = check["evidence"]["sampling_z"]
    assert abs(deviated["deviation"]) - z * deviated["deviation_sd"] <= 0.15


def test_inflated_counts_over_enough_requests_fail_whatever_the_spread():
    """The padded mode's signature on uneven text: every count doubled, 40 requests a trial."""
    local = [30 + (7 * i) % 25 for i in range(40)]
    honest = _noisy_trial(0, 1, [(round(b * 1.3), b) for b in local])
    padded = _noisy_trial(1, 4, [(round(b * 2.6) + (i % 3), b) for i, b in enumerate(local)])
    check = check_token_counts([honest, padded])
    assert check["status"] == "fail", check["summary"]
    assert "trial 1 (N=4)" in check["summary"]


def test_a_single_request_is_judged_with_an_honest_servers_spread():
    """One request has no spread of its own: it gets an honest server's. A request 30 % off
    is within chance; one counted at twice its text is not."""
    off = check_token_counts([_noisy_trial(0, 1, [(40, 40)]), _noisy_trial(1, 2, [(52, 40)])])
    assert off["status"] == "warn", off["summary"]
    doubled = check_token_counts([_noisy_trial(0, 1, [(40, 40)]), _noisy_trial(1, 2, [(80, 40)])])
    assert doubled["status"] == "fail", doubled["summary"]
    json.dumps(doubled, allow_nan=False)  # stored as JSON: no infinity, no NaN


def test_padding_every_other_request_fails_though_it_widens_the_spread():
    """A server that inflates only some answers widens its own per-request spread; the
    check never takes a trial's standard error above an honest server's, so a quarter more
    tokens over 40 requests fails."""
    local = [30 + (7 * i) % 25 for i in range(40)]
    # an honest server's ±12 % per-request wobble around 0.6 tokens per local token
    honest = [round(b * 0.6 * (1 + 0.12 * ((-1) ** i) * (i % 3) / 2)) for i, b in enumerate(local)]
    padded = [round(a * 1.5) if i % 2 == 0 else a for i, a in enumerate(honest)]
    first = _noisy_trial(0, 1, list(zip(honest, local, strict=True)))
    second = _noisy_trial(1, 4, list(zip(padded, local, strict=True)))
    check = check_token_counts([first, second])
    assert check["status"] == "fail", check["summary"]
    assert check["evidence"]["trials"][1]["deviation"] > 0.2


def test_a_reference_ratio_has_no_sampling_error_of_its_own():
    """Against the model's reference (the simulator's exact 1.0), a trial of identical
    requests has no spread: any deviation past the tolerance fails."""
    check = check_token_counts([_noisy_trial(0, 1, [(60, 50)] * 5)], expected_output_ratio=1.0)
    assert check["status"] == "fail", check["summary"]
    assert check["evidence"]["trials"][0]["deviation_sd"] == 0.0
