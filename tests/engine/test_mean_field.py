"""Which slice a mean-field trial runs on, and where it is refused (docs/engine.md
"Mean-field trials"); the approximation itself is tested against whole trials in
tests/simulator/test_mean_field_trials.py."""

from __future__ import annotations

import pytest

from agentperf.engine import cli
from agentperf.engine.meanfield import MeanField, MeanFieldError, check_mean_field
from agentperf.engine.replay import ARRIVAL_CLOSED, ARRIVAL_OPEN, ReplayConfig
from agentperf.engine.trial import TrialConfig

RACK_FACTORS = (1, 2, 3, 4, 6, 8, 9, 12, 18, 24, 36, 72)  # the divisors of 72 ranks


def _config(n: int, accelerators: int = 72, total: int | None = None) -> TrialConfig:
    return TrialConfig(
        concurrency=n,
        warmup_s=60,
        duration_s=120,
        accelerators=accelerators,
        accelerators_total=total,
        replay=ReplayConfig(model="m"),
    )


@pytest.mark.parametrize(
    ("n", "min_agents", "k"),
    [
        (16384, 256, 8),  # 2^14: the powers of two among 72's divisors stop at 8
        (11776, 256, 8),
        (2304, 256, 9),  # 9 divides 2304 and leaves 256 agents
        (2112, 256, 8),  # 2112 / 12 = 176 < 256
        (512, 256, 2),
        (256, 256, 1),  # a slice would hold fewer than 256 agents
        (1, 1, 1),
        (72 * 5, 5, 72),
    ],
)
def test_the_slice_is_the_largest_factor_dividing_n_that_leaves_enough_agents(
    n: int, min_agents: int, k: int
) -> None:
    assert MeanField(min_agents).factor(_config(n), RACK_FACTORS) == k


def test_the_factor_must_divide_the_accelerator_counts_too() -> None:
    assert MeanField(8).factor(_config(1024, accelerators=72, total=36), RACK_FACTORS) == 4
    assert MeanField(8).factor(_config(1024, accelerators=9), RACK_FACTORS) == 1
    assert MeanField(8).factor(_config(1024), (1,)) == 1  # a deployment that cannot be cut


def test_mean_field_trials_are_refused_on_a_real_server_and_with_open_loop_arrivals() -> None:
    with pytest.raises(MeanFieldError, match="at least 1 agent"):
        MeanField(0)
    with pytest.raises(MeanFieldError, match="need a simulated target"):
        check_mean_field(MeanField(8), simulated=False, arrival=ARRIVAL_CLOSED)
    with pytest.raises(MeanFieldError, match="closed loop"):
        check_mean_field(MeanField(8), simulated=True, arrival=ARRIVAL_OPEN)
    check_mean_field(None, simulated=False, arrival=ARRIVAL_OPEN)
    check_mean_field(MeanField(8), simulated=True, arrival=ARRIVAL_CLOSED)


def test_the_cli_names_the_option_when_a_real_server_is_asked_for_mean_field_trials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        "search", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
        "--dataset", "missing.jsonl.gz", "--accelerators", "8", "--out", "/tmp/unused",
        "--tiers", "missing.json", "--mean-field", "64",
    ]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--mean-field: mean-field trials need a simulated target" in err
    argv[argv.index("64")] = "0"
    with pytest.raises(SystemExit) as exit_info:  # argparse: not a positive integer
        cli.main(argv)
    assert exit_info.value.code == 2
