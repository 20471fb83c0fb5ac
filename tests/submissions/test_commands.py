from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from submissions.models import ApiToken, Organization
from submissions.services.tokens import api_token_verify

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue().strip()


def test_create_org_creates_it_once():
    run("create_org", "Acme GPUs")
    run("create_org", "Acme GPUs")
    assert list(Organization.objects.values_list("name", "slug")) == [("Acme GPUs", "acme-gpus")]


def test_create_token_prints_a_working_token_that_is_stored_only_hashed():
    run("create_org", "Acme GPUs")
    plaintext = run("create_token", "--org", "Acme GPUs")
    token = api_token_verify(plaintext)
    assert token.org.slug == "acme-gpus"
    assert plaintext not in str(list(ApiToken.objects.values()))


def test_create_token_for_an_unknown_org_fails_loudly():
    with pytest.raises(CommandError, match="no organization"):
        run("create_token", "--org", "Nobody")


@pytest.mark.parametrize("days", ["0", "-3"])
def test_create_token_refuses_a_lifetime_under_a_day_instead_of_never_expiring(days):
    run("create_org", "Acme GPUs")
    with pytest.raises(CommandError, match="--expires-days"):
        run("create_token", "--org", "Acme GPUs", "--expires-days", days)
    assert not ApiToken.objects.exists()


def test_create_token_with_a_lifetime_expires_then():
    run("create_org", "Acme GPUs")
    api_token_verify(run("create_token", "--org", "Acme GPUs", "--expires-days", "1"))
    (token,) = ApiToken.objects.all()
    assert token.expires_at is not None
