"""Test-only builders: users with passwords and the permission tests' cast. The synthetic
catalog rows, submissions, runs and results are demo/synthetic.py (benchmarks use them too)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from demo.synthetic import make_org
from submissions.models import Membership, Organization


@functools.cache
def password_hash(raw: str) -> str:
    """``raw`` hashed by the configured hasher (PBKDF2, as in production), once per test
    session: the cast's users are made in hundreds of tests, each hash costs about a
    quarter of a CPU second, and a login still checks the password against a real hash."""
    return make_password(raw)


def make_user(
    username: str,
    *,
    org: Organization | None = None,
    staff: bool = False,
    role: str = Membership.ROLE_MEMBER,
):
    user = get_user_model().objects.create_user(
        username=username, password=None, is_staff=staff, email=f"{username}@example.test"
    )
    user.password = password_hash(f"{username}-password-123")
    user.save(update_fields=["password"])
    if org is not None:
        Membership.objects.create(user=user, org=org, role=role)
    return user


@dataclass
class Cast:
    org_a: Organization
    org_b: Organization
    alice: Any
    bob: Any
    rita: Any


def make_cast() -> Cast:
    org_a = make_org("Org A")
    org_b = make_org("Org B")
    return Cast(
        org_a=org_a,
        org_b=org_b,
        alice=make_user("alice", org=org_a, role=Membership.ROLE_ADMIN),
        bob=make_user("bob", org=org_b, role=Membership.ROLE_ADMIN),
        rita=make_user("rita", staff=True),
    )
