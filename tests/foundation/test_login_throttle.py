"""The login throttle (docs/security.md "Login"): django-axes counts wrong passwords per
address; past LOGIN_FAILURE_LIMIT the address is refused with a 429 even with the right
password, on the portal's login (which the review console uses) and on the admin's. A
guesser can neither lock a victim's account for everyone nor reset its count by signing in
to its own account between guesses."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("light_hashes")]


class LightPBKDF2(PBKDF2PasswordHasher):
    """Django's own PBKDF2 with 1,000 rounds: what is tested here is the count of wrong
    passwords, not the hash's strength, and these tests make about 90 attempts, each a
    whole hash (0.24 CPU s at production's rounds)."""

    iterations = 1_000


@pytest.fixture
def light_hashes(cast, settings):
    """The cast's passwords, and the hash a login of an unknown name runs, at LightPBKDF2's
    rounds (a real PBKDF2 check on every attempt)."""
    settings.PASSWORD_HASHERS = [f"{__name__}.LightPBKDF2"]
    for user in (cast.alice, cast.bob, cast.rita):
        user.set_password(f"{user.username}-password-123")
        user.save(update_fields=["password"])
    return cast


PORTAL = "/accounts/login/"
ADMIN = "/admin/login/"


def attempt(url: str, username: str, password: str, address: str):
    client = Client()
    response = client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)
    return response, client


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def fail_to_the_limit(url: str, username: str, address: str) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        response, client = attempt(url, username, "wrong-password", address)
        assert response.status_code in (200, 429) and not signed_in(client)


def test_the_right_password_is_refused_after_the_limit_of_wrong_ones(cast):
    ok, client = attempt(PORTAL, "alice", "alice-password-123", "10.0.0.1")
    assert ok.status_code == 302 and signed_in(client)  # the password is right
    fail_to_the_limit(PORTAL, "alice", "10.0.0.2")
    refused, client = attempt(PORTAL, "alice", "alice-password-123", "10.0.0.2")
    assert refused.status_code == 429 and not signed_in(client)


def test_a_guesser_cannot_lock_a_victims_account_for_everyone(cast):
    fail_to_the_limit(PORTAL, "alice", "10.0.1.1")
    locked, client = attempt(PORTAL, "alice", "alice-password-123", "10.0.1.1")
    assert locked.status_code == 429 and not signed_in(client)  # from the guesser's address
    elsewhere, client = attempt(PORTAL, "alice", "alice-password-123", "10.0.1.99")
    assert elsewhere.status_code == 302 and signed_in(client)  # alice, from her own


def test_an_address_is_locked_for_every_account(cast):
    # one wrong password for each of many names, all from one address
    for i in range(settings.AXES_FAILURE_LIMIT):
        attempt(PORTAL, f"guess-{i}", "wrong-password", "10.0.2.1")
    refused, client = attempt(PORTAL, "bob", "bob-password-123", "10.0.2.1")
    assert refused.status_code == 429 and not signed_in(client)
    elsewhere, client = attempt(PORTAL, "bob", "bob-password-123", "10.0.2.2")
    assert elsewhere.status_code == 302 and signed_in(client)


def test_the_admin_login_is_throttled_too(cast):
    fail_to_the_limit(ADMIN, "rita", "10.0.3.1")
    refused, client = attempt(ADMIN, "rita", "rita-password-123", "10.0.3.1")
    assert refused.status_code == 429 and not signed_in(client)
    # and the count is the same whichever page spent it: the portal login refuses her too
    portal, client = attempt(PORTAL, "rita", "rita-password-123", "10.0.3.1")
    assert portal.status_code == 429 and not signed_in(client)


def test_signing_in_to_ones_own_account_between_guesses_resets_nothing(cast):
    """The hostile finding: 4 × (9 wrong passwords for the victim, then the attacker's own
    right one) from one address was 36 guesses and no 429."""
    guesses = 0
    refused = None
    for _ in range(4):
        for _ in range(settings.AXES_FAILURE_LIMIT - 1):
            response, _client = attempt(PORTAL, "alice", "wrong-password", "10.0.4.1")
            guesses += 1
            if response.status_code == 429:
                refused = guesses
                break
        if refused:
            break
        own, _client = attempt(PORTAL, "bob", "bob-password-123", "10.0.4.1")
        if own.status_code == 429:
            refused = guesses
            break
    assert refused is not None and refused <= settings.AXES_FAILURE_LIMIT, refused
    # the victim herself, from elsewhere, is not locked out
    ok, client = attempt(PORTAL, "alice", "alice-password-123", "10.0.4.2")
    assert ok.status_code == 302 and signed_in(client)


def test_behind_a_proxy_the_address_the_proxy_saw_is_counted_not_the_proxys(cast, settings):
    """Every login through Varnish comes from 127.0.0.1; with TRUSTED_PROXY_COUNT = 1 the
    throttle counts the address Varnish appended to X-Forwarded-For, and an address a
    client claims in front of it counts for nothing."""
    settings.TRUSTED_PROXY_COUNT = 1

    def via_proxy(username: str, password: str, client_address: str, claimed: str = ""):
        client = Client()
        forwarded = f"{claimed}, {client_address}" if claimed else client_address
        response = client.post(
            PORTAL,
            {"username": username, "password": password},
            REMOTE_ADDR="127.0.0.1",
            HTTP_X_FORWARDED_FOR=forwarded,
        )
        return response, client

    for i in range(settings.AXES_FAILURE_LIMIT):  # a different claimed address each time
        via_proxy(f"guess-{i}", "wrong-password", "203.0.113.7", claimed=f"10.9.9.{i}")
    refused, client = via_proxy("bob", "bob-password-123", "203.0.113.7")
    assert refused.status_code == 429 and not signed_in(client)
    # everyone else, through the same proxy, still signs in
    ok, client = via_proxy("bob", "bob-password-123", "198.51.100.4")
    assert ok.status_code == 302 and signed_in(client)
