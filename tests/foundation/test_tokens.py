import datetime as dt
import hashlib
from unittest import mock

import pytest
from django.utils import timezone

from demo.synthetic import make_org
from submissions.models import ApiToken
from submissions.services import tokens
from submissions.services.tokens import (
    TokenError,
    api_token_create,
    api_token_revoke,
    api_token_verify,
)


@pytest.mark.django_db
def test_only_a_hash_of_the_token_is_stored():
    token, plaintext = api_token_create(org=make_org(), name="ci")
    row = ApiToken.objects.get(pk=token.pk)
    assert plaintext.startswith("apf_")
    assert row.secret_hash == hashlib.sha256(plaintext.encode()).hexdigest()
    for field in ApiToken._meta.concrete_fields:
        assert plaintext.split("_", 2)[2] not in str(getattr(row, field.attname))


@pytest.mark.django_db
def test_a_valid_token_verifies_and_records_last_use():
    org = make_org()
    _, plaintext = api_token_create(org=org, name="ci")
    token = api_token_verify(plaintext)
    assert token.org == org
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


@pytest.mark.django_db
def test_verification_compares_hashes_in_constant_time():
    _, plaintext = api_token_create(org=make_org(), name="ci")
    with mock.patch.object(tokens.hmac, "compare_digest", wraps=tokens.hmac.compare_digest) as cmp:
        api_token_verify(plaintext)
        with pytest.raises(TokenError):
            api_token_verify(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B"))
        with pytest.raises(TokenError):
            api_token_verify("apf_000000000000_unknownsecret")
    assert cmp.call_count == 3  # also for an unknown prefix, so timing reveals nothing


@pytest.mark.django_db
def test_an_expired_token_is_refused():
    _, plaintext = api_token_create(
        org=make_org(), name="old", expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    with pytest.raises(TokenError, match="expired"):
        api_token_verify(plaintext)


@pytest.mark.django_db
def test_a_revoked_token_is_refused():
    token, plaintext = api_token_create(org=make_org(), name="ci")
    api_token_revoke(token=token)
    with pytest.raises(TokenError, match="revoked"):
        api_token_verify(plaintext)


@pytest.mark.django_db
def test_a_malformed_token_is_refused():
    with pytest.raises(TokenError, match="malformed"):
        api_token_verify("Bearer something")
