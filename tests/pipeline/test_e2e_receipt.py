"""The signed measurement receipt end to end (docs/verification.md "Receipt"): a simulated
run through the real pipeline (vendor API → RabbitMQ → a database-free pool worker →
runner API → SeaweedFS → verification), published by a reviewer, then checked by the
installed `agentperf verify` as a reader would: online through the public API, offline from
the downloaded folder, with one raw byte changed, with the wrong key, and after the result
is invalidated."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentperf import receipt as rc
from leaderboard.models import Result
from leaderboard.publishing import result_set_status
from review.services import review_publish
from runs.models import BenchmarkRun
from tests.pipeline.conftest import http, submit, wait_for_status
from tests.pipeline.test_e2e_simulated import small_profile_config

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
HANG_GUARD_S = 600
AGENTPERF = Path(sys.executable).parent / "agentperf"  # the installed console script


def verify(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTPERF_")}
    env.update(AGENTPERF_CONFIG=str(tmp_path / "cli.json"), COLUMNS="300")
    # run from outside the checkout: the installed CLI, no Django settings needed
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [str(AGENTPERF), "verify", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


@pytest.fixture
def signing_key(settings, tmp_path):
    key = rc.SigningKey.generate()
    path = tmp_path / "keys" / "receipt.pem"
    key.write(path)
    settings.RECEIPT_SIGNING_KEY_FILE = str(path)
    settings.RECEIPT_RETIRED_PUBLIC_KEYS = []
    return key


def test_a_published_simulated_result_has_a_receipt_that_agentperf_verify_checks(
    pipeline_settings, live_server, vendor, pool_worker_factory, cast, client, signing_key, tmp_path
):
    # Cap 2 (N = 1, 2 and a confirmation: the three trials whose raw files the receipt
    # names) instead of the ramp to 4; the search's steps are tested in test_e2e_simulated.py.
    pipeline_settings.RUN_SEARCH_OPTIONS_BY_POOL["simulated-realtime"]["cap"] = 2
    _, token = vendor
    worker = pool_worker_factory(pools=("simulated",))
    created = submit(live_server.url, token, small_profile_config())
    body = wait_for_status(live_server.url, token, created["id"], {"in_review", "failed"})
    assert body["status"] == "in_review", (body, worker.log()[-3000:])
    run = BenchmarkRun.objects.get(submission_id=created["id"])
    result = review_publish(submission=run.submission, actor=cast.rita, reason="CI")

    # The receipt: an in-toto Statement in a DSSE envelope, signed with the platform's key.
    result.refresh_from_db()
    assert result.receipt["payloadType"] == rc.PAYLOAD_TYPE
    assert result.receipt["signatures"][0]["keyid"] == signing_key.keyid
    statement, keyid = rc.open_envelope(result.receipt, {signing_key.keyid: signing_key.public})
    assert statement["predicateType"] == rc.PREDICATE_TYPE
    names = {s["name"] for s in statement["subject"]}
    raw_keys = {t.raw_records_key for t in run.trials.all()}
    assert {rc.CONFIG, rc.FIGURES, rc.VERIFICATION, rc.INVENTORY} <= names
    assert len([n for n in names if n.startswith("raw/")]) == len(raw_keys) >= 3
    raw_digests = {
        s["digest"]["sha256"] for s in statement["subject"] if s["name"].startswith("raw/")
    }
    assert raw_digests == {t.raw_records_sha256 for t in run.trials.all()}
    assert statement["predicate"]["result"]["id"] == result.pk

    # The key list at its stable URL, by key id.
    status, keys = http("GET", f"{live_server.url}/.well-known/agentperf-keys.json")
    assert status == 200
    assert [(k["keyid"], k["status"]) for k in keys["keys"]] == [(signing_key.keyid, "active")]

    # The page shows the receipt with its download link and key id.
    html = client.get(f"/results/{result.pk}/").content.decode()
    assert f"/results/{result.pk}/receipt.json" in html and signing_key.keyid[:16] in html

    # Online: the installed CLI downloads everything through the public API and verifies.
    kept = tmp_path / "kept"
    ok = verify(str(result.pk), "--url", live_server.url, "--keep", str(kept), tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"receipt of result {result.pk} verifies" in ok.stdout
    assert "status: published" in ok.stdout
    raw_files = sorted((kept / "raw").iterdir())
    assert len(raw_files) == len(raw_keys)
    for name in (rc.CONFIG, rc.FIGURES, rc.VERIFICATION, rc.INVENTORY):
        assert f"ok  {name}" in ok.stdout

    # Offline, from the kept folder with the platform's key list: the same answer.
    platform_keys = tmp_path / "platform-keys.json"
    platform_keys.write_text(json.dumps(keys))

    def offline_verify(folder):
        return verify(
            "--offline",
            str(folder / "receipt.json"),
            str(folder),
            "--keys",
            str(platform_keys),
            tmp_path=tmp_path,
        )

    offline = offline_verify(kept)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    before = shutil.copytree(kept, tmp_path / "before-invalidation")

    # One raw byte changed: verify fails and names the file.
    victim = raw_files[1]
    data = bytearray(victim.read_bytes())
    records = gzip.decompress(bytes(data))
    assert records  # a real gzip of JSON lines
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    bad = offline_verify(kept)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert f"raw/{victim.name}" in bad.stderr
    assert "differs" in bad.stderr

    # Issue 36's finding: a receipt forged with another key, its key list written beside it.
    # Offline without --keys nothing is trusted; with the platform's list the key is unknown.
    forged = shutil.copytree(before, tmp_path / "forged")
    forger = rc.SigningKey.generate()
    wrapper = json.loads((forged / "receipt.json").read_text())
    statement, _ = rc.open_envelope(wrapper["receipt"], {signing_key.keyid: signing_key.public})
    wrapper["receipt"] = rc.sign(statement, forger)
    wrapper["status_receipt"] = None
    (forged / "receipt.json").write_text(json.dumps(wrapper))
    (forged / "keys.json").write_text(
        json.dumps({"keys": [rc.key_entry(forger.public, status="active")]})
    )
    untrusted = verify("--offline", str(forged / "receipt.json"), str(forged), tmp_path=tmp_path)
    assert untrusted.returncode != 0 and "pass --keys" in untrusted.stderr, untrusted.stderr
    caught = offline_verify(forged)
    assert caught.returncode == 1 and "not in the key list" in caught.stderr, caught.stderr

    # The wrong key: a key list without the platform's key does not verify the signature.
    other = rc.SigningKey.generate()
    wrong_keys = tmp_path / "wrong-keys.json"
    wrong_keys.write_text(json.dumps({"keys": [rc.key_entry(other.public, status="active")]}))
    wrong = verify(
        str(result.pk), "--url", live_server.url, "--keys", str(wrong_keys), tmp_path=tmp_path
    )
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "not in the key list" in wrong.stderr

    # A figure changed in the database after publish no longer matches its receipt.
    points = list(result.points)
    points[0] = dict(points[0], p25_speed=points[0]["p25_speed"] * 2)
    Result.objects.filter(pk=result.pk).update(points=points)
    changed = verify(str(result.pk), "--url", live_server.url, tmp_path=tmp_path)
    assert changed.returncode == 1 and "figures.json" in changed.stderr, changed.stderr
    Result.objects.filter(pk=result.pk).update(points=result.points)

    # Invalidated: the receipt still verifies, and a signed status statement says so.
    result_set_status(
        result=result, to=Result.STATUS_INVALIDATED, actor=cast.rita, reason="clock was unlocked"
    )
    result.refresh_from_db()
    assert result.receipt_status["signatures"][0]["keyid"] == signing_key.keyid
    gone = tmp_path / "invalidated"
    after = verify(str(result.pk), "--url", live_server.url, "--keep", str(gone), tmp_path=tmp_path)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "status: INVALIDATED (clock was unlocked)" in after.stdout
    # the config is withheld, as the signed status statement says
    assert "NOT CHECKED  config.json: withheld, as the signed status statement says" in (
        after.stdout
    )

    # Issue 36's finding: a raw file and the figures deleted, both listed under the receipt
    # file's unsigned `withheld`; verify refuses, naming the file.
    removed = sorted((gone / "raw").iterdir())[0]
    removed.unlink()
    wrapper = json.loads((gone / "receipt.json").read_text())
    wrapper["withheld"] = {rc.FIGURES: "withheld", f"raw/{removed.name}": "withheld"}
    (gone / "receipt.json").write_text(json.dumps(wrapper))
    gap = offline_verify(gone)
    assert gap.returncode == 1, gap.stdout + gap.stderr
    assert f"raw/{removed.name}" in gap.stderr and "no signed statement withholds it" in gap.stderr
    (gone / rc.FIGURES).unlink()
    gap = offline_verify(gone)
    assert gap.returncode == 1 and "file: figures.json" in gap.stderr, gap.stdout + gap.stderr

    # The folder kept before the invalidation, replayed: offline it still verifies as it was
    # signed, and says only the platform knows a later status; online says invalidated.
    replay = offline_verify(before)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "status: published" in replay.stdout and "offline: the status" in replay.stdout
    print(ok.stdout, bad.stderr, wrong.stderr, after.stdout, gap.stderr, sep="\n")
