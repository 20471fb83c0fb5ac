"""``python -m agentperf.engine report DIR`` on a real search folder (the simulator in virtual
time, through the CLI in a subprocess): one self-contained HTML file, and the rich table of
max agents per tier at the end of ``search``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentperf.engine import report
from tests.engine.test_cli import dataset_path, engine  # noqa: F401 - the shared fixture


@pytest.fixture
def search_dir(dataset_path: Path, tmp_path: Path) -> tuple[Path, str]:  # noqa: F811
    tiers = tmp_path / "tiers.json"
    tiers.write_text(
        json.dumps(
            [
                {"name": "20", "min_p25_output_speed": 20, "max_ttft_s": 10},
                {"name": "never", "min_p25_output_speed": 1e9, "max_ttft_s": 10},
            ]
        )
    )
    out = tmp_path / "sim"
    proc = engine(
        "search",
        "--target",
        "sim:tiny",
        "--model",
        "tiny-1b",
        "--dataset",
        str(dataset_path),
        "--tiers",
        str(tiers),
        "--accelerators",
        "1",
        "--out",
        str(out),
        "--cap",
        "4",
        "--warmup",
        "5",
        "--duration",
        "60",
        "--min-requests",
        "5",
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_search_ends_with_a_table_of_max_agents_per_tier(search_dir):
    _, stdout = search_dir
    tail = stdout[stdout.index("Max agents per tier") :]
    row = next(line for line in tail.splitlines() if re.search(r"│ 20\s", line))
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:4] == ["20", "20", "10", "4"]  # tier, speed, TTFT, max agents
    never = next(line for line in tail.splitlines() if "never" in line)
    assert [c.strip() for c in never.strip("│ ").split("│")][3:5] == ["0", "1"]


def test_report_is_one_self_contained_html_file(search_dir):
    out, _ = search_dir
    proc = engine("report", str(out))
    assert proc.returncode == 0, proc.stderr
    page = (out / "report.html").read_text()
    doc = json.loads((out / "search.json").read_text())
    # plotly.js inlined (the package's own bundle), and the report's markup around it
    # loads nothing: no script, stylesheet or image by address
    from plotly.offline import get_plotlyjs

    assert get_plotlyjs() in page and "Plotly.newPlot" in page
    ours = page.replace(get_plotlyjs(), "")
    assert not re.search(r"\bsrc=|\bhref=|https?://", ours)
    for section in (
        "Max agents per tier",
        "Frontier",
        "Trials",
        "Output speed distribution",
        "TTFT distribution",
        "Search path",
    ):
        assert f"<h2>{section}</h2>" in page
    trials = page[page.index('<table id="trials">') :].split("</table>")[0]
    assert trials.count("<tr>") == len(doc["trials"]) + 1
    # the frontier trace carries each trial's interval as error bars
    search, views = report.load(out)
    fig = report.frontier_figure(views, search["tier_definitions"])
    trace = fig["data"][0]
    first = sorted(views, key=lambda v: (v.concurrency, v.index))[0]
    iv = first.intervals["throughput_per_accelerator"]
    y = first.summary["throughput_per_accelerator"]
    assert trace["error_y"]["array"][0] == pytest.approx(iv["high"] - y)
    assert trace["error_y"]["arrayminus"][0] == pytest.approx(y - iv["low"])
    assert [s["x0"] for s in fig["layout"]["shapes"]] == [20, 1e9]
    assert all(v.speed_q[0] <= v.speed_q[2] <= v.speed_q[4] for v in views)


def test_report_of_a_folder_without_results_exits_2_naming_it(tmp_path: Path):
    proc = engine("report", str(tmp_path))
    assert proc.returncode == 2
    assert "neither search.json nor trial.json" in proc.stderr
