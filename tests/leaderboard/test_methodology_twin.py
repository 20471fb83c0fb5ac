"""The methodology page shows the twin's validation: the hold-out table against the real
llama.cpp server next to the published-point fit, and each table is its committed results
file's (benchmarks/results/twin_holdout.json, docs/simulator.md "Hold-out"; the GB300 fit
record, docs/simulator.md "Calibration: the fit")."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "twin_holdout.json"


def _pct(x: float) -> str:
    return f"{x:+.1f} %".replace("-", "\u2212")


def test_the_methodology_page_shows_the_hold_out_table_next_to_the_fit(client, db) -> None:
    html = client.get("/methodology/").content.decode()
    fit, holdout = html.index('id="twin-fit"'), html.index('id="twin-holdout"')
    assert fit < holdout
    # the fit's table is the committed fit record's: each point's error and leave-one-out
    # error (a leave-one-out error past ×10 reads "not predicted")
    from agentperf.simulator.fit import record_path
    from agentperf.simulator.profile import resolve_profile_path

    record = json.loads(record_path(resolve_profile_path("gb300-nvl72-dsv41-flash")).read_text())
    for p in record["points"]:
        loo = p["loo_error_pct"]
        if loo is None:
            loo_cell = "<td>undetermined</td>"
        elif abs(loo) > 1000:
            loo_cell = "<td>not predicted"
        else:
            loo_cell = f"<td>{_pct(loo)}</td>"
        cells = f"<td>{_pct(p['error_pct'])}</td>{loo_cell}"
        assert cells in html[fit:holdout], (p["point"], cells)
    single = next(p for p in record["points"] if p["point"] == "single_agent")
    assert f"<td>848 tok/s</td><td>{single['simulated']:.0f} tok/s</td>" in html[fit:holdout]
    rows = json.loads(RESULTS.read_text())["rows"]
    held_out = [r for r in rows if r["role"] == "held out"]
    assert len({r["config"] for r in held_out}) >= 3
    for r in rows:
        m, p = r["measured"], r["predicted"]
        cells = (
            f"<td>{r['config']}</td><td>{r['role']}</td><td>{r['N']}</td>"
            f"<td>{m['p25_output_speed']:.1f}</td><td>{p['p25_output_speed']:.1f}</td>"
        )
        assert cells in html[holdout:], cells


def test_the_vllm_twins_hold_out_table_is_its_committed_results_files(client, db) -> None:
    html = client.get("/methodology/").content.decode()
    section = html[html.index('id="twin-holdout-vllm"') :]
    rows = json.loads((ROOT / "benchmarks" / "results" / "vllm_holdout.json").read_text())["rows"]
    assert {r["role"] for r in rows} == {"fit", "held out"}
    for r in rows:
        m, p = r["measured"], r["predicted"]
        cells = (
            f"<td>{r['config']}</td><td>{r['role']}</td><td>{r['N']}</td>"
            f"<td>{m['p25_output_speed']:.1f}</td><td>{p['p25_output_speed']:.1f}</td>"
        )
        assert cells in section, cells
