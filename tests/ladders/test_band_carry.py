"""A ladder on the twin carries the twin's band into each rung's share (docs/simulator.md
"Bands"): every rung is measured again under each band sample, each change's share gets a
band, and a share whose band holds 0 is "not distinguishable"."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from agentperf.ladder.attribute import carry_band
from agentperf.ladder.measure import run_ladder
from agentperf.ladder.report import ladder_html, print_summary
from agentperf.ladder.spec import LadderError, parse_ladder

TINY_FIT = str(Path(__file__).resolve().parents[1] / "simulator/fit/tiny-fit.yaml")


def _est(x: float, lo: float, hi: float) -> dict[str, Any]:
    return {"estimate": x, "low": lo, "high": hi, "confidence": 0.95}


def _doc(shares: list[tuple[float, float, float]]) -> dict[str, Any]:
    """A hand-built ladder.json of one order: a baseline and one rung per share."""
    rungs: list[dict[str, Any]] = [
        {
            "index": 0,
            "name": "baseline",
            "description": "",
            "single_agent_speed": _est(100, 99, 101),
            "max_agents": {},
            "server_metrics": {},
            "speeds": {"100": {"throughput_per_accelerator": _est(1000, 990, 1010)}},
        }
    ]
    for i, (share, lo, hi) in enumerate(shares, start=1):
        rungs.append(
            {
                "index": i,
                "name": f"change {i}",
                "description": "",
                "single_agent_speed": _est(100, 99, 101),
                "max_agents": {},
                "server_metrics": {},
                "speeds": {
                    "100": {
                        "throughput_per_accelerator": _est(1000, 990, 1010),
                        "gain": _est(share * 1000, lo * 1000, hi * 1000),
                        "share": _est(share, lo, hi),
                        "within_noise": lo <= 0 <= hi,
                    }
                },
            }
        )
    return {
        "order": "forward",
        "orders": {"forward": {"order": "forward", "rungs": rungs}},
        "rungs": [dict(r, speeds={k: dict(v) for k, v in r["speeds"].items()}) for r in rungs],
    }


def test_a_share_whose_band_crosses_zero_is_not_distinguishable():
    # nominal: change 1 buys 60 % (interval 50-70 %), change 2 40 % (30-50 %)
    nominal = _doc([(0.6, 0.5, 0.7), (0.4, 0.3, 0.5)])
    # with the open parameter at one end, change 2 costs throughput (-10 %)
    low_end = _doc([(1.1, 1.0, 1.2), (-0.1, -0.2, 0.0)])
    high_end = _doc([(0.7, 0.6, 0.8), (0.3, 0.2, 0.4)])
    doc = carry_band(nominal, {"chunk 2048": low_end, "chunk 8192": high_end})
    one = doc["orders"]["forward"]["rungs"][1]["speeds"]["100"]
    two = doc["orders"]["forward"]["rungs"][2]["speeds"]["100"]
    assert one["share_band"]["low"] == pytest.approx(0.5)
    assert one["share_band"]["high"] == pytest.approx(1.1)
    assert one["not_distinguishable"] is False
    assert two["share_band"]["low"] == pytest.approx(-0.1)
    assert two["share_band"]["by_sample"] == {"chunk 2048": -0.1, "chunk 8192": 0.3}
    assert two["not_distinguishable"] is True
    assert doc["rungs"][2]["speeds"]["100"]["not_distinguishable"] is True  # primary order
    assert doc["band"]["samples"] == ["chunk 2048", "chunk 8192"]
    out = io.StringIO()
    print_summary(doc, out)
    lines = out.getvalue().splitlines()
    assert any(
        "change 2" in a and "not distinguishable" in b
        for a, b in zip(lines, lines[1:], strict=False)
    )
    assert not any(
        "change 1" in a and "not distinguishable" in b
        for a, b in zip(lines, lines[1:], strict=False)
    )


def test_a_ladder_on_the_twin_measures_each_band_sample_and_reports_the_band(tmp_path: Path):
    spec = parse_ladder(
        {
            "name": "tiny band ladder",
            "baseline": {"name": "tiny-fit", "target": f"sim:{TINY_FIT}"},
            "steps": [
                {
                    "name": "HBM",
                    "description": "95% of HBM bandwidth",
                    "patch": {"deployment": {"efficiency": {"bandwidth": 0.95}}},
                }
            ],
            "dataset": {"generate": {"seed": 1, "trajectories": 20}},
            "speeds": [100],
            # up to 16 agents, so every sample's rungs get slower than 100 tok/s: a rung that
            # never does reads a floor there, and a gain against a floor is no value
            "trials": {"concurrencies": [1, 8, 16], "warmup_s": 5, "duration_s": 20, "ramp_s": 2},
            "bootstrap": {"resamples": 20},
            "band": "open",
        }
    )
    # the profile's open chunk size at both ends, and the fit's ±1.96 σ pair
    assert [name for name, _ in spec.band] == [
        "deployment.aggregated.chunk_tokens = 2048",
        "deployment.aggregated.chunk_tokens = 8192",
        "fit +1.96σ (widest axis)",
        "fit −1.96σ (widest axis)",
    ]
    doc = run_ladder(spec, tmp_path)
    row = doc["rungs"][1]["speeds"]["100"]
    band = row["share_band"]
    assert set(band["by_sample"]) == {name for name, _ in spec.band}
    assert all(v is not None for v in band["by_sample"].values())
    assert band["low"] <= row["share"]["estimate"] <= band["high"]
    assert isinstance(row["not_distinguishable"], bool)
    assert "band" in ladder_html(doc)


def test_a_band_on_an_endpoint_ladder_is_refused():
    with pytest.raises(LadderError, match="band: bands are for ladders on the twin"):
        parse_ladder(
            {
                "name": "x",
                "baseline": {"name": "b", "target": "http://127.0.0.1:9/v1"},
                "steps": [{"name": "s", "description": "d", "target": "http://127.0.0.1:8/v1"}],
                "dataset": {"generate": {"seed": 1, "trajectories": 5}},
                "trials": {"concurrencies": [1]},
                "model": "m",
                "accelerators": 1,
                "band": "open",
            }
        )
