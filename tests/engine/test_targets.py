"""In-process targets (agentperf.engine.targets, docs/engine.md "Targets"): the engine finds the
simulator's ``sim:`` scheme through its entry point, without importing the simulator."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from agentperf.engine import targets
from agentperf.engine.cli import build_parser, main
from agentperf.engine.jobs import Target, run_on_target
from agentperf.engine.targets import UnknownTarget
from agentperf.engine.transport import Clock, Transport

ROOT = Path(__file__).resolve().parents[2]


async def _clock_kind(transport: Transport, clock: Clock) -> str:
    await clock.sleep(5.0)
    return f"{type(transport).__name__} virtual={clock.is_virtual} t={clock.now_ns() // 10**9}"


def test_the_sim_scheme_is_found_through_the_entry_point_registry():
    from agentperf.simulator.virtual import run_with_simulator

    targets.unregister("sim")  # nothing registered in process: the entry point serves it
    assert "sim" in {ep.name for ep in entry_points(group=targets.ENTRY_POINT_GROUP)}
    assert targets.runner_for("sim") is run_with_simulator
    assert "sim" in targets.schemes()
    target = Target.parse("sim:tiny", seed=3)
    assert target.address == "sim:tiny" and target.simulated and target.base_url is None
    assert Target(sim_profile="tiny", seed=3) == target
    # five seconds of virtual time pass at once
    assert run_on_target(target, _clock_kind) == "SimTransport virtual=True t=5"


def test_the_engine_imports_the_simulator_only_for_a_sim_target():
    code = (
        "import sys\n"
        "from agentperf.engine import cli, jobs, targets\n"
        "assert jobs.Target.parse('http://127.0.0.1:9/v1').base_url\n"
        "bad = sorted(m for m in sys.modules if m.startswith('agentperf.simulator'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_an_unknown_scheme_is_an_error_that_names_it():
    with pytest.raises(UnknownTarget) as caught:
        Target.parse("nosuch:profile")
    assert "'nosuch'" in str(caught.value) and "sim:" in str(caught.value)
    with pytest.raises(UnknownTarget, match="'nosuch'"):
        run_on_target(Target(address="nosuch:profile"), _clock_kind)


def test_the_cli_names_an_unknown_scheme(capsys, tmp_path):
    argv = ["trial", "--target", "nosuch:x", "--model", "m", "--dataset", str(tmp_path / "d")]
    argv += ["--accelerators", "1", "--out", str(tmp_path), "--concurrency", "1"]
    assert main([*argv, "--warmup", "0", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "--target nosuch:x: unknown target scheme 'nosuch'" in err and "sim:" in err


def test_a_registered_scheme_serves_its_addresses():
    seen: list[tuple[str, int]] = []

    def fake(spec, main, *, seed):
        seen.append((spec, seed))
        return "served"

    targets.register("fake", fake)
    try:
        assert targets.schemes() == sorted({"fake", *targets.schemes()})
        assert run_on_target(Target.parse("fake:a:b", seed=7), _clock_kind) == "served"
    finally:
        targets.unregister("fake")
    assert seen == [("a:b", 7)]
    with pytest.raises(UnknownTarget, match="'fake'"):
        Target.parse("fake:a")


def test_a_url_is_an_endpoint_not_a_scheme():
    assert targets.split_address("http://host:8000/v1") is None
    assert targets.split_address("sim:gb300") == ("sim", "gb300")
    target = Target.parse("https://host/v1", api_key="k")
    assert target.base_url == "https://host/v1" and target.address is None
    assert not target.simulated


def test_the_ladder_command_comes_from_its_entry_point():
    names = {ep.name for ep in entry_points(group="agentperf.engine_commands")}
    assert "ladder" in names
    args = build_parser().parse_args(["ladder", "--steps", "x.yaml", "--out", "o"])
    from agentperf.ladder.cli import cmd_ladder

    assert args.func is cmd_ladder
