"""The secret detector's rules, one test each (docs/security.md "Secrets in configs"), and the
two corpora: every credential shape refused at its field path, every real serving flag
accepted. `python -m tests.submissions.secret_corpus` prints the same counts."""

from __future__ import annotations

import copy
import json

import pytest

from agentperf.schema.secrets import (
    REFUSE,
    SUSPECT,
    clear_secrets,
    looks_secret_name,
    name_segments,
    scan,
    shell_tokens,
    suspicious_strings,
)
from submissions.schema import ConfigError, parse_config
from tests.submissions.configs import as_json, example
from tests.submissions.secret_corpus import (
    counts,
    credential_shapes,
    planted,
    serving_flags,
    with_flags,
)

SHAPES = credential_shapes()
FLAGS = serving_flags()


def refusal(doc: dict) -> dict[str, list[str]]:
    with pytest.raises(ConfigError) as info:
        parse_config(as_json(doc), "application/json")
    return info.value.fields


def refused_paths(data: dict) -> set[str]:
    return {f.path for f in scan(data) if f.severity == REFUSE}


# --- the corpora ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=[s["id"] for s in SHAPES])
def test_every_credential_shape_is_refused_at_its_field_path_without_echoing_it(shape):
    doc, expect = planted(shape)
    fields = refusal(doc)
    assert expect in fields, fields
    assert str(shape["secret"]) not in repr(fields)


@pytest.mark.parametrize(
    "args", [a for _, a in FLAGS], ids=[f"{e}:{' '.join(a)}" for e, a in FLAGS]
)
def test_every_real_serving_flag_is_accepted(args):
    config = parse_config(as_json(with_flags(args)), "application/json")
    assert config.launch is not None and config.launch.args == args


def test_the_corpus_counts_the_lead_quotes():
    figures = counts()
    assert figures["credential_shapes"] >= 60 and figures["serving_flags"] >= 60
    assert figures["refused"] == figures["credential_shapes"]
    assert figures["published"] == 0 and figures["refused_at_another_path"] == 0
    assert figures["accepted"] == figures["serving_flags"] and figures["false_positives"] == 0
    engines = {engine for engine, _ in FLAGS}
    assert {"vllm", "sglang", "trtllm", "llamacpp", "dynamo"} <= engines


def test_the_shapes_of_the_issue_are_in_the_corpus():
    ids = {s["id"] for s in SHAPES}
    assert {
        "flag-and-value-in-one-arg",
        "sh-c-payload",
        "short-flag-k",
        "camelcase-authtoken",
        "camelcase-accesskey",
        "passphrase-flag",
        "value-starting-with-dash",
        "positional-api-key-assignment",
        "env-command-assignment",
        "url-empty-user",
        "bare-user-password-host",
        "basic-auth-header",
        "short-base64-pair",
        "hex-40-key",
        "revision-hf-token",
        "patch-reason",
        "env-db-pass",
    } <= ids


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,segments",
    [
        ("--authToken", ["auth", "token"]),
        ("--accessKey", ["access", "key"]),
        ("--auth_token", ["auth", "token"]),
        ("AUTH-TOKEN", ["auth", "token"]),
        ("-k", ["key"]),
        ("-hft", ["hf", "token"]),
        ("upstreamApiKey", ["upstream", "api", "key"]),
        ("myhftoken", ["my", "hftoken"]),
    ],
)
def test_flag_spellings_are_normalised_to_name_segments(name, segments):
    assert name_segments(name) == segments


@pytest.mark.parametrize(
    "name",
    ["--api-key", "HF_TOKEN", "DB_PASS", "--passphrase", "-k", "API_KEY_VALUE", "--client_secret"],
)
def test_a_name_ending_in_a_credential_word_holds_a_credential(name):
    assert looks_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "--token-limit",  # the last word is not a credential word
        "--num-key-value-heads",
        "--max-token-len",
        "--auth-mode",
        "--max-num-batched-tokens",
        "--kv-cache-dtype",
        "--eos-token",  # a word before it makes it a structure
        "--cache-key",
        "--enable-auth",  # a switch
        "api_key_env",
        "--ssl-keyfile",
    ],
)
def test_sizes_structures_and_switches_are_not_credentials(name):
    assert not looks_secret_name(name)


# --- shell splitting ---------------------------------------------------------------------


def test_sh_c_payloads_and_separators_are_split_again():
    tokens = shell_tokens("sh -c 'cd /srv && exec serve --api-key X'; env A=B cmd")
    assert tokens[:2] == ["sh", "-c"]
    assert ["--api-key", "X"] == tokens[tokens.index("--api-key") : tokens.index("--api-key") + 2]
    assert "&&" in tokens and ";" in tokens and "A=B" in tokens


def test_unbalanced_quotes_fall_back_to_whitespace_splitting():
    assert shell_tokens("serve --api-key 'abc") == ["serve", "--api-key", "'abc"]


def test_an_option_after_a_secret_flag_is_not_its_value_but_a_dash_value_is():
    assert refused_paths({"a": ["--api-key", "--port", "8000"]}) == set()
    assert refused_paths({"a": ["--api-key", "-Xq9Lm2Vt7Kp"]}) == {"a.1"}


# --- own rules (where detect-secrets falls short) -------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "nvapi-AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "hf_AbCdEfGhIjKlMnOpQrStUvWx",
        "apf_abc123_AbCdEfGhIjKlMnOpQrSt",
        "gsk_AbCdEfGhIjKlMnOpQrStUvWx",
    ],
)
def test_own_rule_token_prefixes_detect_secrets_does_not_know(text):
    assert any(f.rule == "a known token format" for f in scan({"v": text}))


def test_own_rule_authorization_header_values():
    found = scan({"v": "Authorization: Basic dXNlcjpwYXNzd29yZA=="})
    assert any(f.rule == "an Authorization Basic value" for f in found)
    assert refused_paths({"v": "Authorization: Bearer none"}) == set()


def test_own_rule_a_password_in_a_url_with_an_empty_user():
    found = scan({"v": "https://:pw12345@host.example.com/"})
    assert any(f.rule == "a password in a URL" for f in found)


def test_own_rule_user_password_at_host_without_a_scheme():
    assert any(f.rule == "a user:password@host" for f in scan({"v": "bob:pw9x@db.internal"}))
    # an image pinned by digest has its @ before the colon
    assert refused_paths({"v": "vllm/vllm-openai@sha256:" + "ab" * 32}) == set()


def test_own_rule_base64_of_a_user_password_pair():
    found = scan({"v": "YWRtaW46czNjcjN0"})  # admin:s3cr3t
    assert any(f.rule == "base64 of a user:password pair" for f in found)
    assert refused_paths({"v": "deepseek"}) == set()


def test_own_rule_a_hex_key_outside_a_revision_commit_or_digest():
    key = "3f9a7c2e1b8d4f6a0c5e9b7d2a4f8c1e6b3d9a7f"
    assert refused_paths({"notes": f"salt {key}"}) == {"notes"}
    assert refused_paths({"model": {"revision": key}}) == set()
    assert refused_paths({"notes": f"built from commit {key}"}) == set()
    assert refused_paths({"args": ["--revision", key]}) == set()
    assert refused_paths({"args": [f"--code-revision={key}"]}) == set()
    assert refused_paths({"r": f"https://github.com/vllm-project/vllm/commit/{key}"}) == set()


def test_own_rule_random_tokens_but_not_camelcase_identifiers():
    assert refused_paths({"v": "Xk8Jd2Lq9Zm4Vp7Rt1Ws6Yn3"}) == {"v"}
    found = scan({"v": "DeepseekV3ForCausalLMNextN"})
    assert not [f for f in found if f.severity == REFUSE]
    assert [f.rule for f in found] == ["a long mixed-case string"]


def test_detect_secrets_plugins_run_over_every_string():
    rules = {f.rule for f in scan({"notes": "AKIAIOSFODNN7EXAMPLF"})}
    assert any(r.startswith("detect-secrets: AWS") for r in rules), rules
    rules = {f.rule for f in scan({"notes": "password: hunter2x"})}
    assert any("detect-secrets: Secret Keyword" == r or "password" in r for r in rules), rules


# --- secrets by name -----------------------------------------------------------------------


def test_secret_name_is_accepted_in_args_and_env_and_stored_in_the_long_form():
    doc = example("process")
    doc["launch"]["args"] += ["--api-key", {"secret": "UPSTREAM_KEY"}]
    doc["env"]["HF_TOKEN"] = {"secret": "HF_TOKEN"}
    doc["env"]["DB_PASS"] = {"secret": "DB_PASS"}
    dumped = parse_config(as_json(doc), "application/json").model_dump(mode="json")
    assert dumped["launch"]["args"][-1] == {"secret": True, "name": "UPSTREAM_KEY"}
    assert dumped["env"]["HF_TOKEN"] == {"secret": True}
    assert dumped["env"]["DB_PASS"] == {"secret": True}
    assert clear_secrets(dumped) == {}


def test_an_environment_secret_under_another_name_is_refused_at_its_path():
    doc = example("process")
    doc["env"]["DB_PASS"] = {"secret": "OTHER"}
    fields = refusal(doc)
    assert list(fields) == ["env.DB_PASS"] and "{secret: DB_PASS}" in fields["env.DB_PASS"][0]


def test_a_secret_name_that_is_itself_a_credential_is_refused():
    doc = example("process")
    doc["launch"]["args"] += ["--t", {"secret": "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456"}]
    index = len(doc["launch"]["args"]) - 1
    assert f"launch.args.{index}.secret" in refusal(doc)


# --- suspicious strings (the review console's panel) -----------------------------------------


def test_suspicious_strings_below_the_threshold_come_with_spans_to_highlight():
    doc = copy.deepcopy(example("process"))
    doc["launch"]["args"] += ["--api-key", "EMPTY", "--json", '{"a": "DeepseekV3ForCausalLM2"}']
    rows = suspicious_strings(doc)
    by_path = {r["path"]: r for r in rows}
    n = len(doc["launch"]["args"])
    assert by_path[f"launch.args.{n - 3}"]["severity"] == SUSPECT
    assert [p for p, marked in by_path[f"launch.args.{n - 3}"]["parts"] if marked] == ["EMPTY"]
    marked = [p for p, m in by_path[f"launch.args.{n - 1}"]["parts"] if m]
    assert marked == ["DeepseekV3ForCausalLM2"]
    assert all(r["severity"] == SUSPECT for r in rows)
    parse_config(as_json(doc), "application/json")  # suspicious is not refused


def test_the_json_schema_accepts_the_secret_name_forms_the_validators_accept():
    import jsonschema

    from submissions.schema import config_json_schema

    doc = example("process")
    doc["launch"]["args"] += [
        "--api-key",
        {"secret": "UPSTREAM_KEY"},
        {"secret": True, "name": "A"},
    ]
    doc["env"]["DB_PASS"] = {"secret": "DB_PASS"}
    validator = jsonschema.Draft202012Validator(config_json_schema())
    validator.validate(json.loads(as_json(doc)))
    doc["launch"]["args"].append({"secret": "X", "name": "Y"})
    assert list(validator.iter_errors(json.loads(as_json(doc))))


def test_a_message_never_repeats_a_name_that_is_itself_a_credential():
    name = "sk-proj-AbCdEfGhIjKlMnOpQr-key"
    for data in ({"args": [f"{name}=1"]}, {"env": {name: "x"}}, {name: {"a": "b"}}):
        messages = repr(clear_secrets(data))
        assert messages != "{}" and "AbCdEfGhIjKlMnOpQr" not in messages
    assert "--api-key" in repr(clear_secrets({"args": ["--api-key", "hunter2x"]}))


# --- the hostile re-run's misses (issue 36) -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--hf-overrides", '{"token": "Zx81Qp0wLm"}'],
        ['--json-model-override-args={"token":"Zx81Qp0wLm"}'],
        ["--speculative-config", '{"model": "draft", "hf_token": "Zx81Qp0wLm"}'],
        ["--speculative-config", '[{"auth": {"api_key": "Zx81Qp0wLm"}}]'],
    ],
    ids=["hf-overrides", "json-override-equals", "speculative-config", "nested-list"],
)
def test_a_credential_inside_a_json_argument_is_refused_at_the_argument(args):
    doc = example("process")
    doc["launch"]["args"] = list(args)
    fields = refusal(doc)
    index = len(args) - 1
    assert list(fields) == [f"launch.args.{index}"], fields
    assert "in its JSON" in fields[f"launch.args.{index}"][0]
    assert "Zx81Qp0wLm" not in repr(fields)


@pytest.mark.parametrize(
    "flag",
    ["\u2010\u2010api-key", "\u2013\u2013api-key", "\u2014api-key", "\uff0d\uff0dapi-key",
     "--api\u200b-key", "--api-\u2060key"],
    ids=["hyphens", "en-dashes", "em-dash", "fullwidth", "zero-width-space", "word-joiner"],
)  # fmt: skip
def test_a_flag_written_with_look_alike_dashes_or_invisible_characters_is_still_a_flag(flag):
    doc = example("process")
    doc["launch"]["args"] = [flag, "Zx81Qp0wLm"]
    fields = refusal(doc)
    assert "launch.args.1" in fields, fields


@pytest.mark.parametrize("revision", ["token: Zx81Qp0wLm", "main token", "v1\nsecret"])
def test_a_revision_is_a_ref_or_a_digest_never_free_text(revision):
    doc = example("process")
    doc["model"]["revision"] = revision
    assert "model.revision" in refusal(doc)


def test_real_json_arguments_and_revisions_are_accepted():
    doc = example("process")
    doc["launch"]["args"] += [
        "--speculative-config",
        '{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}',
        '--hf-overrides={"rope_scaling": {"type": "yarn", "factor": 4.0}}',
    ]
    for revision in ("3f9c2a1", "refs/pr/12", "v1.0-rc+2", "sha256:" + "ab" * 32):
        doc["model"]["revision"] = revision
        parse_config(as_json(doc), "application/json")
