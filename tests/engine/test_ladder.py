"""Ladders (docs/engine.md "ladder"): the spec, the rungs, the attribution maths on real
virtual-time trials of the tiny simulated system, and the CLI's ladder.json + HTML."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from agentperf.catalog_data import CATALOG_DIR_ENV, DEFAULT_CATALOG_DIR
from agentperf.engine.cli import main
from agentperf.ladder.attribute import value_at_speed
from agentperf.ladder.measure import run_ladder
from agentperf.ladder.plan import plan_rungs
from agentperf.ladder.spec import LadderError, load_ladder, parse_ladder
from agentperf.mergepatch import merge_patch, overlapping
from agentperf.simulator.profile import resolve_profile_path

ROOT = Path(__file__).resolve().parents[2]
GB300 = ROOT / "docs" / "examples" / "ladder-gb300.yaml"

HBM = {"deployment": {"efficiency": {"bandwidth": 0.95}}}
LAUNCH = {"deployment": {"efficiency": {"iteration_overhead_us": 600}}}
NOOP = {"deployment": {"eos": {"mean_tokens": 250}}}  # unused: the replay ignores EOS


def tiny_ladder(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "tiny-test",
        "baseline": {"name": "tiny as shipped", "target": "sim:tiny"},
        "steps": [
            {"name": "faster HBM kernels", "description": "95% of HBM bandwidth", "patch": HBM},
            {"name": "no-op", "description": "an EOS length the run never uses", "patch": NOOP},
            {"name": "fewer launches", "description": "overhead 1000 -> 600 us", "patch": LAUNCH},
        ],
        "dataset": {"generate": {"seed": 1, "trajectories": 40}},
        "speeds": [120],
        "trials": {"concurrencies": [1, 8, 32], "warmup_s": 10, "duration_s": 40, "ramp_s": 5},
        "orders": ["forward", "reverse", "leave_one_out"],
        "bootstrap": {"resamples": 100},
    }
    doc.update(over)
    return doc


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ladder")
    return run_ladder(parse_ladder(tiny_ladder()), out)


def test_merge_patch_follows_rfc_7396() -> None:
    # RFC 7396 §3's example
    target = {
        "title": "Goodbye!",
        "author": {"givenName": "John", "familyName": "Doe"},
        "tags": ["example", "sample"],
        "content": "This will be unchanged",
    }
    patch = {
        "title": "Hello!",
        "phoneNumber": "+01-123-456-7890",
        "author": {"familyName": None},
        "tags": ["example"],
    }
    assert merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "content": "This will be unchanged",
        "phoneNumber": "+01-123-456-7890",
    }
    assert target["title"] == "Goodbye!"  # not modified
    assert overlapping(HBM, LAUNCH) == []
    assert overlapping({"a": {"b": 1}}, {"a": None}) == ["a.b"]


def test_gb300_ladder_ends_at_the_28_oct_profile() -> None:
    spec = load_ladder(GB300)
    assert [c.name for c in spec.steps] == [
        "newer vLLM",
        "model kernels on GB300",
        "FlashInfer autotuning",
        "fuller CUDA graphs",
        "tuned speculative decoding",
        "co-located prefill/decode",
    ]
    oct28 = yaml.safe_load(resolve_profile_path("gb300-nvl72-dsv41-flash").read_text())
    oct08 = yaml.safe_load(resolve_profile_path("gb300-nvl72-dsv41-flash-oct08").read_text())
    for order in ("forward", "reverse"):
        rungs = plan_rungs(spec, order)
        assert rungs[0].config.profile_doc is not None
        assert rungs[0].config.profile_doc["deployment"] == oct08["deployment"]
        last = rungs[-1].config.profile_doc
        assert last is not None and last["deployment"] == oct28["deployment"], order
    # the six changes touch disjoint parameters: order cannot change the final profile
    assert plan_rungs(spec, "forward")[-1].digest == plan_rungs(spec, "reverse")[-1].digest
    loo = plan_rungs(spec, "leave_one_out")
    assert loo[1].digest == plan_rungs(spec, "forward")[-1].digest
    assert len(loo) == 2 + 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"patch": {"deployment": {"speculative": {"bogus": 1}}}}, "steps[1]: the patched"),
        ({"patch": [1]}, "steps[1].patch: a JSON Merge Patch must be a mapping"),
        ({"patch": None}, "steps[1]: a change needs a patch"),
        ({"description": "two\nlines"}, "steps[1].description: one line"),
        ({"colour": "red"}, "steps[1].colour: unknown key"),
    ],
)
def test_a_bad_rung_is_named(change: dict[str, Any], message: str) -> None:
    doc = tiny_ladder()
    doc["steps"][1] = {**doc["steps"][1], **change}
    with pytest.raises(LadderError) as err:
        spec = parse_ladder(doc)
        plan_rungs(spec, "forward")
    assert message in str(err.value)


def test_a_tier_set_slug_is_read_through_the_catalog_loader(tmp_path: Path) -> None:
    tiers = "tier_sets:\n  - {slug: two, name: T, tiers: [{name: fast, min_p25_output_speed: 90, max_ttft_s: 2}]}\n"
    for name in ("models.yaml", "hardware.yaml"):
        (tmp_path / name).write_text((DEFAULT_CATALOG_DIR / name).read_text())
    (tmp_path / "tiers.yaml").write_text(tiers)
    default = parse_ladder(tiny_ladder())
    assert [t.name for t in default.tiers][:1] == ["20 tok/s"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CATALOG_DIR_ENV, str(tmp_path))
        spec = parse_ladder(tiny_ladder(tiers="two"))
        assert [(t.name, t.min_p25_output_speed) for t in spec.tiers] == [("fast", 90)]
        with pytest.raises(LadderError, match="tiers: tier set 'agentperf-default-v1' is not"):
            parse_ladder(tiny_ladder())


def test_a_tier_sets_criterion_applies_to_each_of_its_tiers(tmp_path: Path) -> None:
    """A set's ``criterion: sessions`` (and its share) judges a ladder run outside the platform
    as the platform's run spec would; a set without one keeps the request-level rule."""
    tiers = (
        "tier_sets:\n"
        "  - {slug: by-session, name: S, criterion: sessions, min_session_share: 0.9,\n"
        "     tiers: [{name: a, min_p25_output_speed: 20, max_ttft_s: 5},\n"
        "             {name: b, min_p25_output_speed: 60, max_ttft_s: 5}]}\n"
        "  - {slug: by-request, name: R, tiers: [{name: c, min_p25_output_speed: 20, max_ttft_s: 5}]}\n"
    )
    for name in ("models.yaml", "hardware.yaml"):
        (tmp_path / name).write_text((DEFAULT_CATALOG_DIR / name).read_text())
    (tmp_path / "tiers.yaml").write_text(tiers)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CATALOG_DIR_ENV, str(tmp_path))
        spec = parse_ladder(tiny_ladder(tiers="by-session"))
        assert [(t.name, t.criterion, t.min_session_share) for t in spec.tiers] == [
            ("a", "sessions", 0.9),
            ("b", "sessions", 0.9),
        ]
        plain = parse_ladder(tiny_ladder(tiers="by-request"))
        assert [(t.criterion, t.min_session_share) for t in plain.tiers] == [("requests", 0.95)]
    # the ladder's document and its rungs' digest carry the rule
    assert [t.to_dict()["criterion"] for t in spec.tiers] == ["sessions", "sessions"]


def test_floor_below_the_frontier_and_none_above() -> None:
    pts = [(100.0, 10.0), (50.0, 30.0), (20.0, 40.0)]
    assert value_at_speed(pts, 75.0) == (20.0, False)
    assert value_at_speed(pts, 10.0) == (40.0, True)
    assert value_at_speed(pts, 150.0) == (None, False)


def _row(doc: dict[str, Any], order: str, name: str) -> dict[str, Any]:
    rungs = doc["orders"][order]["rungs"]
    return next(r for r in rungs if r["change"] == name)


def test_shares_add_up_to_the_total_gain(tiny: dict[str, Any]) -> None:
    for order in ("forward", "reverse"):
        od = tiny["orders"][order]
        for speed in ("120", "100"):
            total = od["total_gain"][speed]["estimate"]
            assert total is not None and total > 0
            gains = [r["speeds"][speed]["gain"]["estimate"] for r in od["rungs"][1:]]
            shares = [r["speeds"][speed]["share"]["estimate"] for r in od["rungs"][1:]]
            assert math.isclose(sum(gains), total, rel_tol=1e-9)
            assert math.isclose(sum(shares), 1.0, rel_tol=1e-9)
        single = [r["single_agent_speed"]["gain"]["estimate"] for r in od["rungs"][1:]]
        assert math.isclose(sum(single), od["single_agent_total_gain"]["estimate"])


def test_a_no_op_change_sits_inside_the_noise_and_a_real_one_does_not(
    tiny: dict[str, Any],
) -> None:
    noop = _row(tiny, "forward", "no-op")["speeds"]["120"]
    assert noop["share"]["low"] <= 0 <= noop["share"]["high"]
    assert noop["within_noise"] is True
    real = _row(tiny, "forward", "faster HBM kernels")["speeds"]["120"]
    assert real["gain"]["low"] > 0, real
    assert real["within_noise"] is False
    assert _row(tiny, "forward", "faster HBM kernels")["single_agent_speed"]["gain"]["low"] > 0


def test_swapping_independent_changes_keeps_each_share_within_its_interval(
    tiny: dict[str, Any],
) -> None:
    for name in ("faster HBM kernels", "fewer launches"):
        fwd = _row(tiny, "forward", name)["speeds"]["120"]["share"]
        rev = _row(tiny, "reverse", name)["speeds"]["120"]["share"]
        assert fwd["low"] <= rev["estimate"] <= fwd["high"], (name, fwd, rev)
        assert rev["low"] <= fwd["estimate"] <= rev["high"], (name, fwd, rev)


def test_reverse_order_runs_the_rungs_backwards(tiny: dict[str, Any]) -> None:
    fwd = tiny["orders"]["forward"]["rungs"]
    rev = tiny["orders"]["reverse"]["rungs"]
    assert [r["change"] for r in fwd[1:]] == ["faster HBM kernels", "no-op", "fewer launches"]
    assert [r["change"] for r in rev[1:]] == ["fewer launches", "no-op", "faster HBM kernels"]
    assert rev[1]["applied"] == ["fewer launches"]
    assert rev[2]["applied"] == ["fewer launches", "no-op"]
    # same baseline and same final config: measured once, reused
    assert rev[0]["digest"] == fwd[0]["digest"] and rev[-1]["digest"] == fwd[-1]["digest"]
    assert rev[-1]["reused"] is True
    assert rev[1]["digest"] != fwd[1]["digest"]


def test_leave_one_out_credits_and_interaction(tiny: dict[str, Any]) -> None:
    od = tiny["orders"]["leave_one_out"]
    assert od["rungs"][1]["name"] == "all changes"
    credits = [r["speeds"]["120"]["gain"]["estimate"] for r in od["rungs"][2:]]
    total = od["total_gain"]["120"]["estimate"]
    assert math.isclose(total - sum(credits), od["interaction"]["120"], abs_tol=1e-6)


def test_server_metrics_per_rung(tiny: dict[str, Any]) -> None:
    rung = tiny["rungs"][0]
    hit = rung["server_metrics"]["prefix_cache_hit_rate"]
    assert rung["server_metrics"]["scraped"] is True
    assert hit is not None and 0 < hit <= 1
    assert rung["server_metrics"]["spec_acceptance"] is None  # tiny does not speculate


def test_cli_writes_ladder_json_and_html(tmp_path: Path) -> None:
    doc = tiny_ladder(orders=["forward"], speeds=[120])
    doc["steps"] = doc["steps"][:1]
    doc["trials"] = {"concurrencies": [1, 8], "warmup_s": 5, "duration_s": 30, "ramp_s": 2}
    steps = tmp_path / "ladder.yaml"
    steps.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    assert main(["ladder", "--steps", str(steps), "--out", str(out), "--order", "reverse"]) == 0
    ladder = orjson.loads((out / "ladder.json").read_bytes())
    assert ladder["order"] == "reverse" and ladder["simulated"] is True
    assert [r["name"] for r in ladder["rungs"]] == ["tiny as shipped", "faster HBM kernels"]
    row = ladder["rungs"][1]
    assert row["single_agent_speed"]["estimate"] > 0
    assert set(row["speeds"]["120"]) >= {"throughput_per_accelerator", "share", "gain"}
    page = (out / "ladder.html").read_text()
    assert '"type":"waterfall"' in page and "Order matters" in page
    assert "https://" not in page.split("<script>")[0]  # nothing fetched


def test_cli_names_the_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = tiny_ladder()
    doc["trials"] = {"concurrencies": [0]}
    steps = tmp_path / "ladder.yaml"
    steps.write_text(yaml.safe_dump(doc))
    assert main(["ladder", "--steps", str(steps), "--out", str(tmp_path / "o")]) == 2
    assert "trials.concurrencies" in capsys.readouterr().err


def test_a_ladder_figure_says_how_it_was_read():
    from agentperf.ladder.attribute import AT_TRIAL, BETWEEN_TRIALS, FLOOR, reading

    trials = [{"p25_output_speed": 110.0}, {"p25_output_speed": 40.0}]
    assert reading(trials, 110.0, floor=False) == AT_TRIAL
    assert reading(trials, 100.0, floor=False) == BETWEEN_TRIALS
    assert reading(trials, 20.0, floor=True) == FLOOR
    assert reading([], 100.0, floor=False) is None
