"""The twin answers through a Behaviour (agentperf/simulator/behaviour.py): honest unless a
test gives another, so the verification tests' dishonest modes (tests/support/dishonest.py)
are a test-only plugin and the production server and transport carry none of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentperf.simulator.behaviour import HONEST, load_behaviour
from tests.support import dishonest

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = [
    ROOT / "agentperf" / "simulator" / "virtual.py",
    ROOT / "agentperf" / "simulator" / "behaviour.py",
    *sorted((ROOT / "runner" / "twin_server").glob("*.py")),
]


def test_the_production_server_and_transport_carry_no_dishonest_mode():
    for path in PRODUCTION:
        text = path.read_text()
        for mode in dishonest.MODES:
            assert f'"{mode}"' not in text, (path.name, mode)
    probe = (
        "import sys; import runner.twin_server.server, runner.twin_server.__main__, "
        "agentperf.simulator.virtual; "
        "print([m for m in sys.modules if m.startswith('tests')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=ROOT,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_a_behaviour_is_loaded_by_name_or_refused_naming_it():
    assert load_behaviour(None) is HONEST and not HONEST
    loaded = load_behaviour(dishonest.plugin("truncated,padded"))
    assert isinstance(loaded, dishonest.Dishonesty)
    assert loaded.modes == {"truncated", "padded"} and loaded
    for bad in ("tests.support.dishonest", "no.such.module:parse", "tests.support.dishonest:nope"):
        with pytest.raises(ValueError, match="behaviour"):
            load_behaviour(bad)


def test_the_honest_behaviour_changes_nothing():
    assert HONEST.lengths(40, in_flight=99) == (40, 40)
    assert HONEST.cached(10, 100) == 10
    assert HONEST.accelerators_seen(8) == 8
    body = {"messages": [{"role": "user", "content": "agentperf-session x\nhi"}]}
    assert HONEST.prefix_body(body) is body
    assert HONEST.text(3) == dishonest.filler(3)
