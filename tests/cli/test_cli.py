"""The vendor CLI (`agentperf`, docs/api.md "Vendor CLI") as a vendor runs it: a subprocess
talking to pytest-django's live server, with a real pool worker for the simulated run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management import call_command

from runs.models import BenchmarkRun
from submissions.models import Submission
from tests.pipeline.conftest import REPO, closed_port, http
from tests.pipeline.test_e2e_simulated import small_profile_config

pytestmark = pytest.mark.django_db(transaction=True)
HANG_GUARD_S = 600  # a stuck CLI fails the test instead of hanging the session


def cli_env(tmp_path: Path, url: str | None = None, token: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPERF_")}
    env.update(
        AGENTPERF_CONFIG=str(tmp_path / "home" / "agentperf.json"),
        COLUMNS="200",
        PYTHONUNBUFFERED="1",
    )
    if url:
        env["AGENTPERF_URL"] = url
    if token:
        env["AGENTPERF_TOKEN"] = token
    return env


def agentperf(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agentperf_cli", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Follower:
    """`agentperf ... --follow` in the background; its output lines collected as they come."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentperf_cli", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # as from a terminal: a suite started in the background (`make test &`) runs with
            # SIGINT ignored, which children inherit, and Ctrl-C would then do nothing
            preexec_fn=_default_sigint,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output)
            if found:
                return found
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.output}"
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in:\n{self.output}")

    def wait(self) -> int:
        code = self.proc.wait(timeout=HANG_GUARD_S)
        self.reader.join(timeout=10)
        return code


def _submission_id(text: str) -> int:
    found = re.search(r"submission #(\d+)", text)
    assert found, text
    return int(found.group(1))


def bad_config() -> str:
    """The simulated example with three mistakes: a layout, an unknown field, a clear secret."""
    text = small_profile_config().replace("      tp: 1\n", "      tp: 2\n")
    text = text.replace("  kv_cache_dtype: fp8\n", "  kv_cache_dtype: fp8\n  colour: blue\n")
    return text.replace(
        "benchmark:\n", "env:\n  HF_TOKEN: hf_Xq9vL2mZp8RtY6wK3nB7cD1eF4gH5jA0\nbenchmark:\n"
    )


# --- login, tokens, connection errors ----------------------------------------------------


def test_login_stores_the_token_in_a_0600_file_and_never_prints_it(live_server, vendor, tmp_path):
    _, token = vendor
    env = cli_env(tmp_path)
    path = Path(env["AGENTPERF_CONFIG"])

    refused = agentperf("login", "--url", live_server.url, "--token", "apf_bad_nothing", env=env)
    assert refused.returncode == 2 and "401" in refused.stderr, refused
    assert not path.exists() and "apf_bad_nothing" not in refused.stdout + refused.stderr

    done = agentperf("login", "--url", live_server.url, "--token", token, env=env)
    assert done.returncode == 0, done
    assert token not in done.stdout + done.stderr and str(path) in done.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": live_server.url, "token": token}

    path.unlink()
    prompted = agentperf("login", "--url", live_server.url, env=env, stdin=token + "\n")
    assert prompted.returncode == 0, prompted
    assert token not in prompted.stdout + prompted.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    listed = agentperf("status", env=env)  # URL and token from the file
    assert listed.returncode == 0 and "no submissions" in listed.stdout, listed
    overridden = agentperf("status", env={**env, "AGENTPERF_TOKEN": "apf_bad_override"})
    assert overridden.returncode == 2 and "authentication_failed" in overridden.stderr


def test_no_server_or_no_token_is_one_clear_line_and_exit_2(tmp_path):
    unreachable = f"http://127.0.0.1:{closed_port()}"
    down = agentperf("status", env=cli_env(tmp_path, unreachable, "apf_x_y"))
    assert down.returncode == 2, down
    assert down.stderr.strip().splitlines() == [
        f"error: cannot reach the API at {unreachable}: [Errno 111] Connection refused"
    ]
    anonymous = agentperf("status", env=cli_env(tmp_path, unreachable))
    assert anonymous.returncode == 2 and "not logged in" in anonymous.stderr
    assert "Traceback" not in down.stderr + anonymous.stderr


# --- validate (offline) and submit of a bad config ----------------------------------------


def test_validate_offline_gives_the_apis_field_paths_and_exit_2(live_server, vendor, tmp_path):
    _, token = vendor
    config = tmp_path / "bad.yaml"
    config.write_text(bad_config())
    offline = cli_env(tmp_path, f"http://127.0.0.1:{closed_port()}", token)  # no server there

    checked = agentperf("validate", str(config), "--json", env=offline)
    assert checked.returncode == 2, checked
    status, api_body = http(
        "POST",
        f"{live_server.url}/api/v1/submissions/",
        token=token,
        body=config.read_bytes(),
        content_type="application/yaml",
    )
    assert status == 400
    assert json.loads(checked.stdout) == api_body
    assert set(api_body["error"]["fields"]) == {
        "topology.roles.0.tp",
        "model.colour",
        "env.HF_TOKEN",
    }

    plain = agentperf("validate", str(config), env=offline)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert "  topology.roles.0.tp: tp 2 x pp 1 = 2 does not match" in plain.stderr
    assert "  model.colour: unknown field" in plain.stderr
    assert "hf_Xq9vL2mZp8" not in plain.stdout + plain.stderr  # the secret is never echoed

    submitted = agentperf("submit", str(config), env=cli_env(tmp_path, live_server.url, token))
    assert submitted.returncode == 2, submitted
    assert "400 invalid_config" in submitted.stderr
    assert "  topology.roles.0.tp: tp 2 x pp 1 = 2" in submitted.stderr
    assert not Submission.objects.exists()

    good = tmp_path / "sim.yaml"
    good.write_text(small_profile_config())
    valid = agentperf("validate", str(good), env=offline)
    assert valid.returncode == 0 and "valid (schema_version 1)" in valid.stdout, valid
    missing = agentperf("validate", str(tmp_path / "nope.yaml"), env=offline)
    assert missing.returncode == 2 and "cannot read" in missing.stderr


def test_the_cli_imports_no_models_and_its_limit_is_the_apis(settings):
    from agentperf_cli.offline import DEFAULT_MAX_CONFIG_BYTES

    assert settings.MAX_CONFIG_BYTES == DEFAULT_MAX_CONFIG_BYTES
    probe = (
        "import sys, agentperf_cli.main as m\n"
        "m.main(['validate', 'docs/examples/simulated.yaml'])\n"
        "bad = [n for n in sys.modules if n.startswith(('django.db', 'django.apps', "
        "'rest_framework', 'submissions.models', 'runs.models', 'leaderboard', 'config'))]\n"
        "assert not bad, bad\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr


# --- submit --follow, status, report (a real simulated run) -------------------------------


@pytest.mark.slow
def test_submit_follow_shows_queue_phase_and_trials_until_review_then_status_and_report(
    pipeline_settings, live_server, vendor, pool_worker_factory, tmp_path
):
    # Cap 2 (N = 1, 2 and a confirmation) instead of the ramp to 4: the follower shows the
    # first trial and a finished one while the next runs; the budget stays 6 trials.
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL["simulated-realtime"]["cap"] = 2
    _, token = vendor
    env = cli_env(tmp_path, live_server.url, token)
    config = tmp_path / "sim.yaml"
    config.write_text(small_profile_config())

    follower = Follower("submit", str(config), "--follow", "--interval", "1", env=env)
    follower.wait_for(r"queued on (\S+\.)?pool\.simulated: position 1 \(0 ahead\)")
    worker = pool_worker_factory(pools=("simulated",))  # only now can the run start
    code = follower.wait()
    out = follower.output
    print(out)  # shown when the test fails
    assert code == 0, (out, worker.log()[-3000:])
    sid = _submission_id(out)
    assert re.search(r"running · phase search \(\w+\) · trial 1 of 6 · N=1", out), out
    assert re.search(r"last trial N=\d+ p25 [\d.]+ tok/s TTFT p75 [\d.]+ s", out), out
    assert f"#{sid} in_review" in out
    submission = Submission.objects.get(pk=sid)
    assert submission.status == "in_review"
    run = BenchmarkRun.objects.get(submission=submission)

    status = agentperf("status", str(sid), env=env)
    assert status.returncode == 0, status
    assert "in_review" in status.stdout and f"run #{run.pk} done · phase done" in status.stdout
    listed = agentperf("status", env=env)
    assert re.search(rf"│ {sid}\s+│ in_review", listed.stdout), listed.stdout

    report = agentperf("report", str(sid), env=env)
    print(status.stdout, report.stdout)
    assert report.returncode == 0, report
    assert f"run #{run.pk} done" in report.stdout
    assert f"Verification: {run.verification.status}" in report.stdout
    assert re.search(r"request_accounting\s+│ pass", report.stdout), report.stdout
    for tier, agents in run.search_summary["max_agents"].items():
        assert re.search(rf"{re.escape(tier)}\s+│ {agents}\b", report.stdout), report.stdout
    assert "result: not published" in report.stdout
    as_json = json.loads(agentperf("report", str(sid), "--json", env=env).stdout)
    assert as_json["verification"]["run"] == run.pk

    again = agentperf("submit", str(config), env=env)  # the same file: a replay
    assert again.returncode == 0 and f"submission #{sid} in_review (replayed" in again.stdout
    assert Submission.objects.count() == 1


# --- Ctrl-C and withdraw ------------------------------------------------------------------


def test_ctrl_c_stops_following_not_the_run_and_withdraw_ends_it(
    pipeline_settings, live_server, vendor, tmp_path
):
    _, token = vendor
    env = cli_env(tmp_path, live_server.url, token)
    config = tmp_path / "sim.yaml"
    config.write_text(small_profile_config())

    follower = Follower("submit", str(config), "--follow", "--interval", "1", env=env)
    follower.wait_for(r"queued on \S+: position 1")
    follower.proc.send_signal(signal.SIGINT)
    assert follower.wait() == 130, follower.output
    sid = _submission_id(follower.output)
    assert f"Resume with: agentperf status {sid} --follow" in follower.output
    assert "Traceback" not in follower.output
    submission = Submission.objects.get(pk=sid)
    assert submission.status == "queued"  # still on its way: following stopped, not the run
    run = BenchmarkRun.objects.get(submission=submission)
    assert run.status == BenchmarkRun.STATUS_PENDING

    withdrawn = agentperf("withdraw", str(sid), "--reason", "wrong image", env=env)
    assert withdrawn.returncode == 0 and f"submission #{sid} withdrawn" in withdrawn.stdout
    submission.refresh_from_db()
    run.refresh_from_db()
    assert (submission.status, run.status) == ("withdrawn", BenchmarkRun.STATUS_CANCELLED)
    assert submission.status_reason == "wrong image"

    twice = agentperf("withdraw", str(sid), env=env)
    assert twice.returncode == 2 and "409 conflict" in twice.stderr, twice
    followed = agentperf("status", str(sid), "--follow", env=env)
    assert followed.returncode == 1 and f"#{sid} withdrawn" in followed.stdout, followed
    other = agentperf("withdraw", "999999", env=env)
    assert other.returncode == 2 and "404 not_found" in other.stderr


# --- datasets download --------------------------------------------------------------------


def test_datasets_download_writes_the_file_and_checks_its_sha256(live_server, vendor, tmp_path):
    from catalog.datasets import private_test_set
    from catalog.models import Dataset

    _, token = vendor
    private_test_set(size="small")
    call_command("publish_tuning_subset")
    dataset = Dataset.objects.get(visibility="public")
    env = cli_env(tmp_path, live_server.url, token)

    listed = agentperf("datasets", "list", env=env)
    assert listed.returncode == 0 and "agentperf-tuning-subset" in listed.stdout, listed
    folder = tmp_path / "data"
    folder.mkdir()
    done = agentperf("datasets", "download", "-o", str(folder), env=env)
    assert done.returncode == 0, done
    [written] = list(folder.iterdir())
    digest = hashlib.sha256(written.read_bytes()).hexdigest()
    assert digest == dataset.stats["file_sha256"] and f"sha256 {digest} ok" in done.stdout

    # The check can fail: the API now states another digest, so nothing is kept.
    dataset.stats = {**dataset.stats, "file_sha256": "0" * 64}
    dataset.save(update_fields=["stats"])
    target = tmp_path / "other.jsonl"
    refused = agentperf("datasets", "download", str(dataset.pk), "-o", str(target), env=env)
    assert refused.returncode == 1 and "sha256 mismatch" in refused.stderr, refused
    assert not target.exists() and not list(tmp_path.glob(".other.jsonl*"))


# --- the throttle -------------------------------------------------------------------------


def test_following_waits_out_the_throttle_and_goes_on(
    pipeline_settings, live_server, vendor, tmp_path, monkeypatch
):
    from portal.api.access import VendorThrottle
    from submissions.services.submissions import submission_withdraw

    _, token = vendor
    env = cli_env(tmp_path, live_server.url, token)
    config = tmp_path / "sim.yaml"
    config.write_text(small_profile_config())
    sid = _submission_id(agentperf("submit", str(config), env=env).stdout)

    monkeypatch.setattr(VendorThrottle, "THROTTLE_RATES", {"vendor": "2/s"})
    follower = Follower("status", str(sid), "--follow", "--interval", "0.05", env=env)
    follower.wait_for(r"throttled by the API; following again in 1 s")
    submission_withdraw(submission=Submission.objects.get(pk=sid), reason="done testing")
    assert follower.wait() == 1, follower.output  # it went on following, and saw the withdrawal
    assert f"#{sid} withdrawn" in follower.output and "Traceback" not in follower.output


# --- reading the vendor API's documents ----------------------------------------------------


def test_the_report_reads_each_tiers_verdict_not_the_verdicts_presence():
    """The vendor API gives one TierVerdict document per tier (agentperf/contract.py); a failed
    tier is a truthy dict too, and must read as fail."""
    from agentperf import contract
    from agentperf.engine.trial import TierVerdict
    from agentperf_cli.main import verdict_text

    verdicts = {
        "20 tok/s": contract.TierVerdict.of(TierVerdict(passed=True)).dump(),
        "300 tok/s": contract.TierVerdict.of(TierVerdict(passed=False, reasons=["slow"])).dump(),
    }
    assert verdict_text(json.loads(json.dumps(verdicts))) == "20 tok/s:pass 300 tok/s:fail"


def test_validate_and_help_say_a_config_is_public_and_list_suspicious_strings(tmp_path):
    """docs/api.md "A config is public": the CLI says so, and lists what the detector
    rated suspicious (the reviewer sees the same strings highlighted)."""
    text = re.sub(
        r"(?m)^notes: .*$", 'notes: "arch DeepseekV3ForCausalLMNextN7"', small_profile_config()
    )
    config = tmp_path / "config.yaml"
    config.write_text(text)
    env = cli_env(tmp_path)
    plain = agentperf("validate", str(config), env=env)
    assert plain.returncode == 0, plain
    assert "A config is public" in plain.stdout and "{secret: NAME}" in plain.stdout
    assert "suspicious: notes (a long mixed-case string)" in plain.stdout
    checked = agentperf("validate", "--json", str(config), env=env)
    body = json.loads(checked.stdout)
    assert body["public"] is True
    assert body["suspicious"] == [{"path": "notes", "rules": ["a long mixed-case string"]}]
    for command in (["--help"], ["validate", "--help"], ["submit", "--help"]):
        shown = agentperf(*command, env=env)
        assert "A config is public" in shown.stdout and "{secret: NAME}" in shown.stdout
