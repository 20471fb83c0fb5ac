"""Settings that fake speculative acceptance, and acceptance figures from /metrics deltas."""

from __future__ import annotations

import pytest

from agentperf.verification.checks import TrialData, check_speculative
from agentperf.verification.speculative import (
    fake_acceptance_findings,
    parse_metrics,
    spec_figures,
    window_delta,
)

VLLM_START = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{model_name="m"} 100
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 300
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 150
vllm:prefix_cache_queries_total{model_name="m"} 1000
vllm:prefix_cache_hits_total{model_name="m"} 400
vllm:num_requests_running{model_name="m"} 7
"""
VLLM_END = (
    VLLM_START.replace(" 100\n", " 1100\n")
    .replace(" 300\n", " 3300\n")
    .replace(" 150\n", " 1950\n")
    .replace(" 1000\n", " 11000\n")
    .replace(" 400\n", " 8400\n")
)


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}}, "env.SGLANG_SIMULATE_ACC_LEN"),
        (
            {"env": {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "2"}},
            "env.TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS",
        ),
        (
            {
                "launch": {
                    "command": "vllm serve",
                    "args": [
                        "--speculative-config",
                        '{"method": "mtp", "rejection_sample_method": "synthetic"}',
                    ],
                }
            },
            "launch.args.1",
        ),
        (
            {
                "launch": {
                    "command": "vllm",
                    "args": ["--speculative-config", '{"synthetic_acceptance_length": 2.5}'],
                }
            },
            "launch.args.1",
        ),
    ],
)
def test_a_config_that_fakes_acceptance_is_found_where_it_hides(config, path):
    findings = fake_acceptance_findings(config)
    assert [f["path"] for f in findings] == [path]


def test_notes_and_honest_speculative_settings_are_not_findings():
    config = {
        "speculative": {"method": "mtp", "draft_tokens": 3},
        "env": {"VLLM_USE_V1": "1"},
        "notes": "we never set SGLANG_SIMULATE_ACC_LEN",
    }
    assert fake_acceptance_findings(config) == []


def test_acceptance_rate_and_mean_length_come_from_counter_deltas():
    delta = window_delta(parse_metrics(VLLM_START), parse_metrics(VLLM_END))
    figures = spec_figures(delta)
    assert figures["acceptance_rate"] == pytest.approx(1800 / 3000)
    assert figures["mean_acceptance_length"] == pytest.approx(1 + 1800 / 1000)


def test_the_check_fails_a_faking_config_and_reports_honest_acceptance():
    trial = TrialData(
        index=0,
        concurrency=1,
        telemetry={
            "server_metrics": {"start": parse_metrics(VLLM_START), "end": parse_metrics(VLLM_END)}
        },
    )
    honest = check_speculative({"speculative": {"method": "mtp", "draft_tokens": 3}}, [trial])
    assert honest["status"] == "pass"
    assert honest["evidence"]["prefix_cache_hit_rate"] == pytest.approx(8000 / 10000)
    faked = check_speculative({"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}}, [trial])
    assert faked["status"] == "fail" and "SGLANG_SIMULATE_ACC_LEN" in faked["summary"]


def test_declared_speculation_without_counters_is_not_measured():
    check = check_speculative({"speculative": {"method": "mtp", "draft_tokens": 3}}, [])
    assert check["status"] == "warn" and "not measured" in check["summary"]
