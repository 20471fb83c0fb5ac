"""The one secret detector: a clear credential anywhere in a config is refused with its field
path, and a planted secret never reaches a response or a log (docs/security.md)."""

from __future__ import annotations

import logging

import pytest

from agentperf.schema.secrets import (
    SECRET_NAME_SEGMENTS,
    clear_secrets,
    credential_kind,
    looks_secret_name,
)
from leaderboard.configview import REDACTED, redact
from submissions.models import Submission
from submissions.schema import ConfigError, parse_config
from tests.submissions.configs import as_json, example
from tests.submissions.support import make_catalog, token_client

PLANTED = "sk-planted0123456789abcdefXYZ"


def errors_of(doc: dict) -> dict[str, list[str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(as_json(doc), "application/json")
    assert PLANTED not in str(info.value)  # the refusal names the field, never the value
    return info.value.fields


def test_a_clear_api_key_after_a_flag_in_launch_args_is_refused_with_its_path():
    doc = example("process")
    doc["launch"]["args"] += ["--api-key", PLANTED]
    fields = errors_of(doc)
    index = len(doc["launch"]["args"]) - 1
    assert list(fields) == [f"launch.args.{index}"]
    assert "--api-key" in fields[f"launch.args.{index}"][0]


def test_a_flag_with_an_inline_clear_value_in_the_launch_args_is_refused():
    doc = example("process")
    doc["launch"]["args"].append("--hf-token=hf_abcdefghijklmnopqrstuvwx")
    index = len(doc["launch"]["args"]) - 1
    assert list(errors_of(doc)) == [f"launch.args.{index}"]


def test_a_credential_in_free_text_notes_is_refused():
    doc = example("process")
    doc["notes"] = f"our upstream key is {PLANTED}, please keep it"
    assert list(errors_of(doc)) == ["notes"]


@pytest.mark.parametrize(
    "value",
    [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
        "Bearer abcdefghijklmnopqrstuvwxyz012345",
        "https://user:hunter2@example.com/v1",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXRleHQ",
        "AKIAABCDEFGHIJKLMNOP",
        "q8Z3vT1mX9pL2wK7rB4nY6hJ0cF5gD8s",
    ],
)
def test_credential_shapes_are_recognised(value):
    assert credential_kind(value) is not None


@pytest.mark.parametrize(
    "value",
    [
        "vllm/vllm-openai@sha256:" + "0123456789abcdef" * 4,
        "deepseek-ai/DeepSeek-V4.1-Flash-Instruct",
        "--max-num-batched-tokens",
        "built from commit 9f2c1d7e4b3a59f2c1d7e4b3a59f2c1d7e4b3a5a",  # a named revision
        "${PORT}",
        "A real measurement of a tiny random-weight model on CPU; it shows the pipeline.",
    ],
)
def test_ordinary_config_text_is_not_mistaken_for_a_credential(value):
    assert credential_kind(value) is None


def test_secret_named_flags_and_harmless_token_names():
    assert looks_secret_name("--api-key") and looks_secret_name("HF_TOKEN")
    assert not looks_secret_name("--max-num-batched-tokens")
    assert not looks_secret_name("VLLM_MAX_NUM_BATCHED_TOKENS")
    assert not looks_secret_name("api_key_env")


@pytest.mark.parametrize("segment", sorted(SECRET_NAME_SEGMENTS))
def test_one_secret_name_list_refuses_at_submission_and_redacts_on_display(segment):
    name = f"UPSTREAM_{segment}"
    doc = example("process")
    doc["env"] = {name: "plain-value"}
    assert list(errors_of(doc)) == [f"env.{name}"]
    assert redact({"env": {name: "plain-value", "PORT": "8000"}}) == {
        "env": {name: REDACTED, "PORT": "8000"}
    }


def test_a_secret_placeholder_is_accepted_as_a_command_argument_and_stored_by_name():
    doc = example("process")
    doc["launch"]["args"] += ["--api-key", {"secret": True, "name": "UPSTREAM_KEY"}]
    config = parse_config(as_json(doc), "application/json")
    dumped = config.model_dump(mode="json")
    assert dumped["launch"]["args"][-1] == {"secret": True, "name": "UPSTREAM_KEY"}
    assert clear_secrets(dumped) == {}


def test_redaction_hides_a_clear_flag_value_in_a_config_stored_before_the_rule():
    shown = redact({"launch": {"args": ["--api-key", PLANTED, "--port", "8000"]}, "notes": PLANTED})
    assert shown == {
        "launch": {"args": ["--api-key", REDACTED, "--port", "8000"]},
        "notes": REDACTED,
    }


@pytest.mark.django_db
def test_a_planted_secret_is_refused_by_the_api_and_never_appears_in_a_response_or_log(
    cast, caplog
):
    catalog = make_catalog()
    alice = token_client(cast.org_a)
    doc = catalog.config()
    doc["launch"] = {"command": "vllm serve", "args": ["--api-key", PLANTED]}
    doc["notes"] = f"token {PLANTED}"
    with caplog.at_level(logging.DEBUG):
        response = alice.post("/api/v1/submissions/", as_json(doc), content_type="application/json")
        listing = alice.get("/api/v1/submissions/")
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert set(fields) == {"launch.args.1", "notes"}
    assert Submission.objects.count() == 0
    for body in (response.content, listing.content):
        assert PLANTED.encode() not in body
    assert PLANTED not in caplog.text
