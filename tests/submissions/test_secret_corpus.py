"""The credential corpus end to end (docs/security.md "Secrets in configs"): every shape is
refused by the vendor API with its field path, and none appears in a response or a log line;
a config stored before a rule existed, published, shows none of them on the result page, the
compare page, the public API, the receipt or the `export_public` dump."""

from __future__ import annotations

import base64
import json
import logging
import urllib.request
from io import StringIO

import pytest
from django.core.management import call_command

from demo.synthetic import make_published_result
from submissions.models import Submission
from tests.submissions.configs import as_json, example
from tests.submissions.secret_corpus import credential_shapes, planted
from tests.submissions.support import token_client

pytestmark = pytest.mark.django_db

SHAPES = credential_shapes()
SECRETS = [str(s["secret"]) for s in SHAPES]


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_the_vendor_api_refuses_every_shape_with_its_path_and_never_echoes_or_logs_it(cast, caplog):
    # two organizations: the corpus is larger than one organization's hourly submit quota
    clients = [token_client(cast.org_a), token_client(cast.org_b)]
    bodies = []
    with caplog.at_level(logging.DEBUG):
        for i, shape in enumerate(SHAPES):
            doc, expect = planted(shape)
            response = clients[i % 2].post(
                "/api/v1/submissions/", as_json(doc), content_type="application/json"
            )
            assert response.status_code == 400, (shape["id"], response.content[:300])
            assert expect in response.json()["error"]["fields"], shape["id"]
            bodies.append(response.content.decode())
        bodies += [c.get("/api/v1/submissions/").content.decode() for c in clients]
    assert Submission.objects.count() == 0
    assert _leaks("\n".join(bodies)) == []
    assert _leaks(caplog.text) == []


def _groups() -> list[dict]:
    """The shapes planted into as few stored configs as their paths allow."""
    groups: list[tuple[dict, set[str]]] = []
    for shape in SHAPES:
        slot = shape["field"]["path"] if "field" in shape else None
        slot = slot or ("launch.command" if "launch_command" in shape else None)
        env = shape.get("env") or shape.get("top_env")  # one environment: a name once each
        slot = slot or (f"env.{next(iter(env))}" if env else None)
        for doc, used in groups:
            if slot is None or slot not in used:
                planted_doc, _ = planted(shape, doc)
                doc.clear()
                doc.update(planted_doc)
                used.add(slot or "")
                break
        else:
            doc, _ = planted(shape)
            groups.append((doc, {slot or ""}))
    return [doc for doc, _ in groups]


def _envelope_text(envelope) -> str:
    """A DSSE envelope's Statement as text (its payload is base64: a leak check of the
    envelope alone would never see a value in it)."""
    if not envelope:
        return ""
    return base64.b64decode(envelope["payload"]).decode()


def test_a_published_config_stored_before_the_rules_shows_no_secret_on_any_public_surface(
    client, caplog, settings, tmp_path
):
    # a signing key, so that every result has a receipt to check too
    from agentperf import receipt as rc

    rc.SigningKey.generate().write(tmp_path / "key.pem")
    settings.RECEIPT_SIGNING_KEY_FILE = str(tmp_path / "key.pem")
    configs = _groups()
    stored = json.dumps(configs, default=str)
    assert _leaks(stored) == SECRETS  # every secret is in the stored documents
    with caplog.at_level(logging.DEBUG):
        results = [
            make_published_result(config=json.loads(json.dumps(c, default=str))) for c in configs
        ]
        ids = [r.pk for r in results]
        surfaces = []
        for pk in ids:
            page = client.get(f"/results/{pk}/")
            assert page.status_code == 200
            surfaces.append(page.content.decode())
            api = client.get(f"/api/v1/public/results/{pk}/")
            assert api.status_code == 200 and api.json()["config"]["launch"]["args"]
            surfaces.append(api.content.decode())
            receipt = client.get(f"/api/v1/public/results/{pk}/receipt/")
            assert receipt.status_code == 200 and receipt.json()["receipt"], receipt.content
            surfaces.append(receipt.content.decode())  # the documents as served, in clear
            surfaces.append(_envelope_text(receipt.json()["receipt"]))
            surfaces.append(client.get(f"/embed/results/{pk}/frontier.svg").content.decode())
        compare = client.get(f"/compare/?r={','.join(map(str, ids[:4]))}")
        assert compare.status_code == 200 and f"/results/{ids[0]}/" in compare.content.decode()
        surfaces.append(compare.content.decode())
        surfaces.append(client.get("/api/v1/public/results/").content.decode())
        surfaces.append(client.get("/llms.txt").content.decode())
        call_command("export_public", stdout=StringIO())
        location = client.get("/data/latest/results.json")["Location"]
        with urllib.request.urlopen(location, timeout=30) as handle:
            dump = handle.read().decode()
    assert "[redacted]" in surfaces[0] and "[redacted]" in dump
    assert _leaks("\n".join(surfaces)) == []
    assert _leaks(dump) == []
    assert _leaks(caplog.text) == []
    # the real flags around them are still shown
    assert "--parallel" in dump and example("process")["launch"]["command"] in dump
