"""A ladder is public once published: a credential in its or a rung's name or description,
in a rung's patch (a patch `reason` included) or in its baseline is a 400 naming the field,
and nothing is stored (docs/security.md "Secrets in configs")."""

from __future__ import annotations

import pytest

from demo.synthetic import make_org
from ladders.models import Ladder
from submissions.models import Submission
from tests.ladders.test_ladders import body, post
from tests.submissions.support import make_catalog, token_client

pytestmark = pytest.mark.django_db

SECRET = "ghp_LadderPlantedTokenAbCdEfGhIjKlMn0123"


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("rung-description", "rungs.0.description"),
        ("ladder-description", "description"),
        ("patch-reason", "rungs.0.patch.engine.patches"),
        ("baseline-notes", "baseline.config.notes"),
    ],
)
def test_a_credential_anywhere_in_a_ladder_is_refused_with_its_field(where, field) -> None:
    cat = make_catalog()
    doc = body(cat)
    if where == "rung-description":
        doc["rungs"][0]["description"] = f"pulled with {SECRET}"
    elif where == "ladder-description":
        doc["description"] = f"mirror password: {SECRET}"
    elif where == "patch-reason":
        patch = [{"ref": "https://github.com/x/y/pull/1", "reason": f"token {SECRET}"}]
        doc["rungs"][0]["patch"] = {"engine": {"patches": patch}}
    else:
        doc["baseline"]["config"]["notes"] = SECRET
    response = post(token_client(make_org()), doc)
    assert response.status_code == 400, response.content
    fields = response.json()["error"]["fields"]
    assert any(k.startswith(field) for k in fields), fields
    assert SECRET not in response.content.decode()
    assert not Ladder.objects.exists() and not Submission.objects.exists()
