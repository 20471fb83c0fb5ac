"""Signed measurement receipts (docs/verification.md "Receipt"): the DB-free signing and
checking (agentperf/receipt.py) on folders built here, and the platform side
(leaderboard/receipts.py) through the real publish service, storage and public URLs."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.request
from pathlib import Path

import pytest
from django.core.files.base import ContentFile

from agentperf import receipt as rc
from leaderboard import receipts
from leaderboard.models import Result
from leaderboard.publishing import result_set_status
from review.services import ReviewError, review_publish
from submissions.models import Artifact
from submissions.services.artifacts import artifact_storage
from tests.review.builders import CONFIG, make_reviewable

IMAGE = "registry.example/vllm@sha256:" + "ab" * 32


# --- DB-free: agentperf/receipt.py -----------------------------------------------------------


def _folder(tmp_path: Path, *, image: str | None = IMAGE) -> tuple[Path, dict, rc.SigningKey]:
    """A receipt folder as `agentperf verify --keep` writes it, and its signed envelope."""
    folder = tmp_path / "receipt"
    (folder / "raw").mkdir(parents=True)
    config = {"engine": {"name": "vllm", "image": image}} if image else {"engine": {}}
    docs = {rc.CONFIG: config, rc.FIGURES: {"max_agents": {"20 tok/s": 8}}}
    for name, doc in docs.items():
        (folder / name).write_bytes(rc.canonical_json(doc))
    (folder / "raw" / "trial-000.jsonl.gz").write_bytes(b"\x1f\x8b raw bytes")
    subjects = [rc.subject(n, rc.sha256_hex(rc.canonical_json(d))) for n, d in docs.items()]
    subjects.append(rc.subject("raw/trial-000.jsonl.gz", rc.sha256_hex(b"\x1f\x8b raw bytes")))
    if image:
        subjects.append(rc.subject(rc.IMAGE_PREFIX + image, "ab" * 32))
    key = rc.SigningKey.generate()
    envelope = rc.sign(rc.statement(subjects, {"result": {"id": 7}}), key)
    return folder, envelope, key


def _keys(*keys: rc.SigningKey) -> dict[str, bytes]:
    return {k.keyid: k.public for k in keys}


def test_a_signed_folder_verifies_and_names_every_file(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    checked = rc.check(envelope, folder, _keys(key))
    assert checked.keyid == key.keyid
    assert checked.files == [rc.CONFIG, rc.FIGURES, "raw/trial-000.jsonl.gz"]
    assert checked.status == "published" and checked.withheld == {}


@pytest.mark.parametrize("name", [rc.CONFIG, rc.FIGURES, "raw/trial-000.jsonl.gz"])
def test_one_changed_byte_in_any_file_fails_naming_that_file(tmp_path, name):
    folder, envelope, key = _folder(tmp_path)
    path = folder / name
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(rc.ReceiptError) as failed:
        rc.check(envelope, folder, _keys(key))
    assert failed.value.name == name and "differs" in str(failed.value)


def test_a_missing_file_is_named(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    (folder / "raw" / "trial-000.jsonl.gz").unlink()
    with pytest.raises(rc.ReceiptError, match="missing") as failed:
        rc.check(envelope, folder, _keys(key))
    assert failed.value.name == "raw/trial-000.jsonl.gz"


def test_the_wrong_key_or_a_changed_payload_does_not_verify(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    other = rc.SigningKey.generate()
    with pytest.raises(rc.ReceiptError, match="not in the key list"):
        rc.check(envelope, folder, _keys(other))
    # the right key id, another key's signature
    forged = dict(envelope, signatures=rc.sign({"x": 1}, other)["signatures"])
    forged["signatures"][0]["keyid"] = key.keyid
    with pytest.raises(rc.ReceiptError, match="does not verify"):
        rc.check(forged, folder, _keys(key))
    # a subject digest edited inside the payload: the signature no longer covers it
    doc = json.loads(rc._payload_bytes(envelope))
    doc["subject"][0]["digest"]["sha256"] = "00" * 32
    edited = dict(envelope, payload=__import__("base64").b64encode(rc.canonical_json(doc)).decode())
    with pytest.raises(rc.ReceiptError, match="does not verify"):
        rc.check(edited, folder, _keys(key))


def test_a_key_list_cannot_rename_a_key(tmp_path):
    key, other = rc.SigningKey.generate(), rc.SigningKey.generate()
    entry = rc.key_entry(other.public, status="active")
    entry["keyid"] = key.keyid
    with pytest.raises(rc.ReceiptError, match="not the SHA-256"):
        rc.keys_from_document({"keys": [entry]})
    listed = rc.keys_from_document({"keys": [rc.key_entry(key.public, status="retired")]})
    assert listed == {key.keyid: key.public}


def test_the_image_subject_must_be_the_configs_declared_image(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    other = IMAGE.replace("ab" * 32, "cd" * 32)
    (folder / rc.CONFIG).write_bytes(rc.canonical_json({"engine": {"image": other}}))
    with pytest.raises(rc.ReceiptError) as failed:
        rc.check(envelope, folder, _keys(key))
    assert failed.value.name == rc.CONFIG  # its digest, then its image, differ


def test_a_subject_name_that_leaves_the_folder_is_refused(tmp_path):
    folder, _, key = _folder(tmp_path)
    envelope = rc.sign(rc.statement([rc.subject("../escape", "00" * 32)], {}), key)
    with pytest.raises(rc.ReceiptError, match="not a file name"):
        rc.check(envelope, folder, _keys(key))
    assert not rc.is_file_subject("raw/../x") and not rc.is_file_subject("/etc/passwd")


def test_a_status_statement_must_be_about_this_receipt(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    said = rc.sign(rc.status_statement(envelope, {"status": "invalidated", "reason": "r"}), key)
    checked = rc.check(envelope, folder, _keys(key), status_envelope=said)
    assert (checked.status, checked.status_reason) == ("invalidated", "r")
    another = rc.sign(rc.statement([rc.subject(rc.FIGURES, "00" * 32)], {"result": {"id": 8}}), key)
    about_other = rc.sign(rc.status_statement(another, {"status": "invalidated"}), key)
    with pytest.raises(rc.ReceiptError, match="another receipt"):
        rc.check(envelope, folder, _keys(key), status_envelope=about_other)


def _status(envelope: dict, key: rc.SigningKey, status: str, **predicate) -> dict:
    return rc.sign(rc.status_statement(envelope, {"status": status, **predicate}), key)


def test_a_config_withheld_by_a_signed_status_statement_is_reported_not_checked(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    (folder / rc.CONFIG).unlink()
    said = _status(envelope, key, "invalidated", withheld={rc.CONFIG: "no longer published"})
    checked = rc.check(envelope, folder, _keys(key), status_envelope=said)
    assert checked.withheld == {rc.CONFIG: "no longer published"}
    assert rc.CONFIG not in checked.files and checked.status == "invalidated"


def test_a_missing_file_fails_however_the_unsigned_wrapper_lists_it(tmp_path):
    """The finding of issue 36: the raw file and the figures deleted, both listed under the
    receipt file's unsigned `withheld`; verify exits 1 naming the file."""
    from agentperf_cli.verify import check_folder

    folder, envelope, key = _folder(tmp_path)
    (folder / "keys.json").write_text(
        json.dumps({"keys": [rc.key_entry(key.public, status="active")]})
    )
    (folder / "raw" / "trial-000.jsonl.gz").unlink()
    (folder / rc.FIGURES).unlink()
    wrapper = {
        "result_id": 7,
        "status": "published",
        "receipt": envelope,
        "withheld": {rc.FIGURES: "withheld", "raw/trial-000.jsonl.gz": "withheld"},
    }
    (folder / "receipt.json").write_text(json.dumps(wrapper))
    with pytest.raises(rc.ReceiptError, match="no signed statement withholds it") as failed:
        check_folder(folder / "receipt.json", folder, folder / "keys.json")
    assert failed.value.name == rc.FIGURES


@pytest.mark.parametrize(
    ("status", "withheld", "refused"),
    [
        ("invalidated", {rc.FIGURES: "gone"}, rc.FIGURES),  # only the config
        ("invalidated", {"raw/trial-000.jsonl.gz": "gone"}, "raw/trial-000.jsonl.gz"),
        ("superseded", {rc.CONFIG: "gone"}, rc.CONFIG),  # only when invalidated or withdrawn
        ("published", {rc.CONFIG: "gone"}, rc.CONFIG),
    ],
)
def test_even_a_signed_statement_may_withhold_only_an_invalidated_results_config(
    tmp_path, status, withheld, refused
):
    folder, envelope, key = _folder(tmp_path)
    (folder / refused).unlink()
    said = _status(envelope, key, status, withheld=withheld)
    with pytest.raises(rc.ReceiptError, match="only the config") as failed:
        rc.check(envelope, folder, _keys(key), status_envelope=said)
    assert failed.value.name == refused


def test_a_status_statement_signed_before_withheld_was_named_still_withholds_the_config(
    tmp_path,
):
    """Statements signed before they named what is withheld (no `withheld` key) follow the
    rule the platform followed then: an invalidated result's config, nothing else."""
    folder, envelope, key = _folder(tmp_path)
    (folder / rc.CONFIG).unlink()
    old = _status(envelope, key, "invalidated", reason="clock was unlocked")
    checked = rc.check(envelope, folder, _keys(key), status_envelope=old)
    assert list(checked.withheld) == [rc.CONFIG] and "invalidated" in checked.withheld[rc.CONFIG]
    superseded = _status(envelope, key, "superseded", reason="v2")
    with pytest.raises(rc.ReceiptError, match="missing") as failed:
        rc.check(envelope, folder, _keys(key), status_envelope=superseded)
    assert failed.value.name == rc.CONFIG


def test_a_withheld_list_signed_by_an_unknown_key_counts_for_nothing(tmp_path):
    folder, envelope, key = _folder(tmp_path)
    (folder / rc.CONFIG).unlink()
    stranger = rc.SigningKey.generate()
    said = _status(envelope, stranger, "invalidated", withheld={rc.CONFIG: "gone"})
    with pytest.raises(rc.ReceiptError, match="not in the key list"):
        rc.check(envelope, folder, _keys(key), status_envelope=said)
    # nor can the stranger re-sign the receipt itself, withholding as it likes
    doc = json.loads(rc._payload_bytes(envelope))
    forged = rc.sign(doc, stranger)
    with pytest.raises(rc.ReceiptError, match="not in the key list"):
        rc.check(forged, folder, _keys(key))


def test_another_results_receipt_swapped_in_fails(tmp_path):
    from agentperf_cli.verify import check_folder

    folder, envelope, key = _folder(tmp_path)
    (folder / "keys.json").write_text(
        json.dumps({"keys": [rc.key_entry(key.public, status="active")]})
    )
    other_figures = {"max_agents": {"20 tok/s": 80}}
    other = rc.sign(
        rc.statement(
            [rc.subject(rc.FIGURES, rc.sha256_hex(rc.canonical_json(other_figures)))],
            {"result": {"id": 8}},
        ),
        key,
    )
    # the whole receipt file of result 8 over result 7's files: a file differs
    (folder / "receipt.json").write_text(json.dumps({"result_id": 8, "receipt": other}))
    with pytest.raises(rc.ReceiptError, match="differs") as failed:
        check_folder(folder / "receipt.json", folder, folder / "keys.json")
    assert failed.value.name == rc.FIGURES
    # its envelope under result 7's receipt file: the file's result id is not the signed one
    (folder / rc.FIGURES).write_bytes(rc.canonical_json(other_figures))
    (folder / "receipt.json").write_text(json.dumps({"result_id": 7, "receipt": other}))
    with pytest.raises(rc.ReceiptError, match="result 8") as failed:
        check_folder(folder / "receipt.json", folder, folder / "keys.json")
    assert failed.value.name == "receipt.json"
    # online: result 7 asked for, result 8's receipt served
    (folder / "receipt.json").write_text(json.dumps({"result_id": 8, "receipt": other}))
    with pytest.raises(rc.ReceiptError, match="receipt of result 8 for result 7"):
        check_folder(folder / "receipt.json", folder, None, result_id=7)


def test_a_status_the_receipt_file_claims_without_a_signed_statement_fails(tmp_path):
    """An old receipt replayed after invalidation: the platform's receipt file says
    invalidated, and a folder whose status statement was dropped cannot pass as published."""
    from agentperf_cli.verify import check_folder

    folder, envelope, key = _folder(tmp_path)
    (folder / "keys.json").write_text(
        json.dumps({"keys": [rc.key_entry(key.public, status="active")]})
    )
    wrapper = {"result_id": 7, "status": "invalidated", "receipt": envelope}
    (folder / "receipt.json").write_text(json.dumps(wrapper))
    with pytest.raises(rc.ReceiptError, match="signed statements say published") as failed:
        check_folder(folder / "receipt.json", folder, folder / "keys.json")
    assert failed.value.name == "receipt.json"
    said = _status(envelope, key, "invalidated", reason="r", at="2026-12-04T00:00:00+00:00")
    (folder / "receipt.json").write_text(json.dumps(dict(wrapper, status_receipt=said)))
    checked = check_folder(folder / "receipt.json", folder, folder / "keys.json")
    assert (checked.status, checked.status_at) == ("invalidated", "2026-12-04T00:00:00+00:00")


# --- the platform: leaderboard/receipts.py ---------------------------------------------------


@pytest.fixture
def signing_key(settings, tmp_path):
    key = rc.SigningKey.generate()
    key.write(tmp_path / "key.pem")
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "key.pem")
    settings.RECEIPT_RETIRED_PUBLIC_KEYS = []
    return key


def _publishable(cast):
    config = dict(CONFIG, engine=dict(CONFIG["engine"], image=IMAGE))
    return make_reviewable(org=cast.org_a, artifacts=True, config=config)


@pytest.mark.django_db
def test_publish_signs_the_receipt_from_the_stored_rows_and_files(cast, signing_key):
    sub = _publishable(cast)
    result = review_publish(submission=sub, actor=cast.rita, reason="ok")
    stored = Result.objects.get(pk=result.pk)
    statement, keyid = rc.open_envelope(stored.receipt, {signing_key.keyid: signing_key.public})
    assert keyid == signing_key.keyid
    digests = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    artifact = Artifact.objects.get(run=stored.run, kind=Artifact.KIND_RAW_RECORDS)
    with artifact_storage().open(artifact.storage_key, "rb") as fh:
        assert digests["raw/requests.jsonl"] == hashlib.sha256(fh.read()).hexdigest()
    docs = receipts.documents(stored)
    for name in (rc.CONFIG, rc.FIGURES, rc.VERIFICATION):
        assert digests[name] == rc.sha256_hex(rc.canonical_json(docs[name]))
    assert digests[rc.IMAGE_PREFIX + IMAGE] == "ab" * 32
    assert statement["predicate"]["image"]["status"] == "as declared, not run"
    # the builder's run recorded no inventory: the receipt says so instead of hashing {}
    assert rc.INVENTORY not in digests
    assert statement["predicate"]["inventory"]["recorded"] is False


@pytest.mark.django_db
def test_a_raw_file_changed_in_storage_after_upload_refuses_the_publish(cast, signing_key):
    sub = _publishable(cast)
    artifact = Artifact.objects.get(run__submission=sub, kind=Artifact.KIND_RAW_RECORDS)
    storage = artifact_storage()
    storage.delete(artifact.storage_key)
    storage.save(artifact.storage_key, ContentFile(b'{"ok": false}\n'))
    with pytest.raises(ReviewError, match="raw/requests.jsonl"):
        review_publish(submission=sub, actor=cast.rita, reason="ok")
    assert not Result.objects.filter(submission=sub).exists()


@pytest.mark.django_db
def test_without_a_key_the_result_publishes_unsigned_and_says_so(cast, settings, client, tmp_path):
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "absent.pem")
    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    assert Result.objects.get(pk=result.pk).receipt == {}
    assert receipts.summary(Result.objects.get(pk=result.pk)) is None  # the page's "No receipt"
    assert client.get(f"/results/{result.pk}/receipt.json").status_code == 404
    body = client.get(f"/api/v1/public/results/{result.pk}/receipt/").json()
    assert body["receipt"] is None and "no signing key" in body["unsigned_reason"]


@pytest.mark.django_db
@pytest.mark.django_db
def test_a_shared_cache_keeps_the_key_list_for_minutes_not_a_day(client, signing_key):
    """A rotation is a key file and a restart, which no purge follows (docs/caching.md)."""
    for url in ("/.well-known/agentperf-keys.json", "/api/v1/public/keys/"):
        answer = client.get(url)
        assert answer.status_code == 200
        s_maxage = int(re.search(r"s-maxage=(\d+)", answer["Cache-Control"]).group(1))
        assert s_maxage <= 300, answer["Cache-Control"]


def test_keys_are_listed_by_id_and_a_retired_key_stays_listed(client, settings, signing_key):
    retired = rc.SigningKey.generate()
    settings.RECEIPT_RETIRED_PUBLIC_KEYS = [retired.public.hex()]
    for url in ("/.well-known/agentperf-keys.json", "/api/v1/public/keys/"):
        doc = client.get(url).json()
        assert [(k["keyid"], k["status"]) for k in doc["keys"]] == [
            (signing_key.keyid, "active"),
            (retired.keyid, "retired"),
        ]
        assert rc.keys_from_document(doc) == _keys(signing_key, retired)


@pytest.mark.django_db
def test_a_receipt_signed_with_a_retired_key_still_verifies_after_rotation(
    cast, client, settings, signing_key, tmp_path
):
    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    new = rc.SigningKey.generate()
    new.write(tmp_path / "new.pem")
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "new.pem")
    settings.RECEIPT_RETIRED_PUBLIC_KEYS = [signing_key.public.hex()]
    keys = rc.keys_from_document(client.get("/.well-known/agentperf-keys.json").json())
    assert set(keys) == {new.keyid, signing_key.keyid}
    # the status statement after rotation is signed with the new key; both verify
    result_set_status(result=result, to=Result.STATUS_SUPERSEDED, actor=cast.rita, reason="v2")
    stored = Result.objects.get(pk=result.pk)
    _, old_id = rc.open_envelope(stored.receipt, keys)
    said, new_id = rc.open_envelope(stored.receipt_status, keys, what="status")
    assert (old_id, new_id) == (signing_key.keyid, new.keyid)
    assert said["predicate"]["status"] == "superseded"


@pytest.mark.django_db
def test_the_receipt_file_and_api_serve_the_envelopes_and_documents(cast, client, signing_key):
    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    download = client.get(f"/results/{result.pk}/receipt.json")
    assert download.status_code == 200
    assert "attachment" in download["Content-Disposition"]
    assert json.loads(download.content)["receipt"] == Result.objects.get(pk=result.pk).receipt
    body = client.get(f"/api/v1/public/results/{result.pk}/receipt/").json()
    assert set(body["documents"]) == {rc.CONFIG, rc.FIGURES, rc.VERIFICATION}
    [raw] = body["raw_records"]
    assert raw["name"] == "raw/requests.jsonl" and raw["url"].startswith("http://testserver/")
    assert client.get(f"/api/v1/public/results/{result.pk + 1000}/receipt/").status_code == 404


def test_a_malformed_retired_key_stops_start_up_naming_the_variable():
    import subprocess
    import sys

    from tests.pipeline.conftest import REPO

    env = {"RECEIPT_RETIRED_PUBLIC_KEYS": "not-hex", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']="
            "'config.settings'; django.setup()",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0 and "RECEIPT_RETIRED_PUBLIC_KEYS" in run.stderr


def _download(client, result_pk: int, folder: Path) -> tuple[dict, dict | None, dict]:
    """What `agentperf verify` fetches, through the public URLs: the envelopes, every served
    document (canonical JSON, as the CLI writes it) and every raw file."""
    body = client.get(f"/api/v1/public/results/{result_pk}/receipt/").json()
    for name, doc in body["documents"].items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(rc.canonical_json(doc))
    for raw in body["raw_records"]:
        answer = client.get(raw["url"])
        assert answer.status_code == 302  # to the artifact store, as the CLI follows it
        with urllib.request.urlopen(answer["Location"], timeout=30) as fh:
            content = fh.read()
        (folder / raw["name"]).parent.mkdir(parents=True, exist_ok=True)
        (folder / raw["name"]).write_bytes(content)
    return body["receipt"], body["status_receipt"], body["withheld"]  # withheld: unsigned


@pytest.mark.django_db
def test_a_reviewers_redaction_keeps_the_receipt_verifiable_and_a_quiet_edit_does_not(
    cast, client, signing_key, tmp_path
):
    from leaderboard.redaction import result_redact_config

    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    result_redact_config(
        result=result,
        paths=["engine.args.max_num_seqs", "engine.image"],
        actor=cast.rita,
        reason="it quoted hf_secretvalue",
    )
    keys = _keys(signing_key)
    folder = tmp_path / "after-redact"
    envelope, status, _ = _download(client, result.pk, folder)
    checked = rc.check(envelope, folder, keys, status_envelope=status)
    assert rc.CONFIG in checked.files and "engine.args.max_num_seqs" in checked.redacted[rc.CONFIG]
    assert checked.status == "published"
    said = json.loads(base64.b64decode(status["payload"]))  # the reviewer's words stay private
    assert said["predicate"]["config_redacted"]["paths"] == [
        "engine.args.max_num_seqs",
        "engine.image",
    ]
    assert "hf_secretvalue" not in json.dumps(said)
    # a later status statement carries the redaction forward
    result_set_status(result=result, to=Result.STATUS_SUPERSEDED, actor=cast.rita, reason="newer")
    folder = tmp_path / "after-supersede"
    envelope, status, _ = _download(client, result.pk, folder)
    checked = rc.check(envelope, folder, keys, status_envelope=status)
    assert checked.status == "superseded" and rc.CONFIG in checked.redacted
    # an edit of the public config with no signed statement fails, naming the config
    stored = Result.objects.get(pk=result.pk)
    Result.objects.filter(pk=result.pk).update(
        public_config=dict(stored.public_config, notes="changed quietly")
    )
    folder = tmp_path / "after-edit"
    envelope, status, _ = _download(client, result.pk, folder)
    with pytest.raises(rc.ReceiptError) as failed:
        rc.check(envelope, folder, keys, status_envelope=status)
    assert failed.value.name == rc.CONFIG


@pytest.mark.django_db
def test_invalidation_signs_that_the_config_is_withheld_and_nothing_else(
    cast, client, signing_key, tmp_path
):
    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    keys = _keys(signing_key)
    before = tmp_path / "before"
    envelope, status, _ = _download(client, result.pk, before)
    assert status is None and rc.check(envelope, before, keys).withheld == {}
    result_set_status(result=result, to=Result.STATUS_INVALIDATED, actor=cast.rita, reason="r")
    folder = tmp_path / "after"
    envelope, status, served = _download(client, result.pk, folder)
    said = json.loads(base64.b64decode(status["payload"]))["predicate"]
    assert list(said["withheld"]) == [rc.CONFIG] and said["status"] == "invalidated"
    assert served == said["withheld"] and not (folder / rc.CONFIG).exists()
    checked = rc.check(envelope, folder, keys, status_envelope=status)
    assert checked.withheld == said["withheld"] and checked.status == "invalidated"
    # the figures deleted too: nothing signed withholds them
    (folder / rc.FIGURES).unlink()
    with pytest.raises(rc.ReceiptError, match="no signed statement withholds it") as failed:
        rc.check(envelope, folder, keys, status_envelope=status)
    assert failed.value.name == rc.FIGURES
    # the folder kept before the invalidation still verifies as published (nothing signed
    # expires); the platform's receipt file says invalidated, which that folder cannot meet
    from agentperf_cli.verify import check_folder

    (before / "keys.json").write_text(json.dumps(client.get("/api/v1/public/keys/").json()))
    current = client.get(f"/results/{result.pk}/receipt.json").json()
    (before / "receipt.json").write_text(json.dumps(dict(current, status_receipt=None)))
    with pytest.raises(rc.ReceiptError, match="says the result is invalidated"):
        check_folder(before / "receipt.json", before, None, result_id=result.pk)


@pytest.mark.django_db
def test_a_status_statement_of_a_published_result_withholds_nothing(cast, signing_key):
    from leaderboard.redaction import result_redact_config

    result = review_publish(submission=_publishable(cast), actor=cast.rita, reason="ok")
    result_redact_config(result=result, paths=["engine.image"], actor=cast.rita, reason="x")
    stored = Result.objects.get(pk=result.pk)
    said = json.loads(base64.b64decode(stored.receipt_status["payload"]))["predicate"]
    assert said["withheld"] == {} and said["status"] == "published"
