"""The result page's "Reproduce" block is the run's own search, and it runs (issue #11).

A simulated submission goes through the real pipeline on virtual time and is published; the
block printed on its public page is then run as printed, in a shell, against the same
simulator profile: it downloads the public tuning subset with the vendor CLI, writes the
run's tiers and runs `agentperf-engine search` with the run's settings.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.datasets import public_tuning_subset
from leaderboard.reproduce import INSTALL
from review.services import review_publish
from runs.models import BenchmarkRun
from tests.pipeline.conftest import EXAMPLES, submit, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_printed_reproduce_command_of_a_published_run_runs_with_that_runs_settings(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, client, tmp_path
):
    _, token = vendor
    pool_worker_factory(pools=("simulated",))
    public_tuning_subset()
    created = submit(live_server.url, token, (EXAMPLES / "simulated.yaml").read_text())
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    assert body["status"] == "in_review", body
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    result = review_publish(submission=run.submission, actor=cast.rita, reason="CI")

    page = client.get(f"/results/{result.pk}/").content.decode()
    block = re.search(r'<pre class="cmd"><code>(.*?)</code></pre>', page, re.S)
    assert block, "no reproduce block on the result page"
    command = html.unescape(block.group(1))
    # The block installs the engine's own distribution first; this checkout's venv has it
    # already (make install), so that line is left out here and run in a fresh venv by
    # tests/cli/test_engine_wheel.py.
    assert f"{INSTALL}\n" in command
    command = command.replace(f"{INSTALL}\n", "", 1)
    search, spec = run.run_spec["search"], run.run_spec
    # the run's own settings, not placeholders
    for flag in (
        f"--warmup {search['warmup_s']:g}",
        f"--duration {search['duration_s']:g}",
        f"--cap {search['cap']}",
        f"--max-trials {search['max_trials']}",
        f"--seed {search['seed']}",
        f"--accelerators {spec['accelerators']['used']}",
        f"--target sim:{spec['launcher']['profile']}",
        "--dataset tuning.jsonl.gz",
    ):
        assert flag in command, (flag, command)
    assert "<" not in command.replace("<<'EOF'", "")

    env = dict(
        os.environ,
        AGENTPERF_URL=live_server.url,
        AGENTPERF_TOKEN=token,
        AGENTPERF_CONFIG=str(tmp_path / "cli.json"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    tiers = json.loads((tmp_path / "tiers.json").read_text())
    assert tiers == spec["tiers"]
    summary = json.loads((tmp_path / "results" / "search.json").read_text())
    assert set(summary["max_agents"]) == {t["name"] for t in spec["tiers"]}
    assert summary["cap"] == search["cap"] and summary["simulated"] is True
    assert [t["name"] for t in summary["tier_definitions"]] == [t["name"] for t in spec["tiers"]]
