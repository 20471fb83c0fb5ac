"""Small builders for test data. No shared mutable fixtures."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from leaderboard.models import AIModel, HardwareSystem, SloTier, SloTierSet
from submissions.models import Membership, Organization, Submission

_seq = itertools.count(1)

DEFAULT_TIERS = [
    ("20 tok/s", 20, 10),
    ("60 tok/s", 60, 10),
    ("100 tok/s", 100, 5),
    ("180 tok/s", 180, 5),
    ("300 tok/s", 300, 3),
]


def make_org(name: str | None = None) -> Organization:
    n = next(_seq)
    name = name or f"Org {n}"
    return Organization.objects.create(name=name, slug=f"org-{n}-{name.lower().replace(' ', '-')}")


def make_user(
    username: str,
    *,
    org: Organization | None = None,
    staff: bool = False,
    role: str = Membership.ROLE_MEMBER,
):
    user = get_user_model().objects.create_user(
        username=username,
        password=f"{username}-password-123",
        is_staff=staff,
        email=f"{username}@example.test",
    )
    if org is not None:
        Membership.objects.create(user=user, org=org, role=role)
    return user


def make_model(**fields: Any) -> AIModel:
    n = next(_seq)
    defaults = {
        "slug": f"model-{n}",
        "name": f"Model {n}",
        "provider": "Test",
        "total_params_b": 100.0,
        "active_params_decode_b": 10.0,
        "kv_bytes_per_token": 1000,
        "context_length": 131072,
    }
    defaults.update(fields)
    return AIModel.objects.create(**defaults)


def make_hardware(**fields: Any) -> HardwareSystem:
    n = next(_seq)
    defaults = {
        "slug": f"hw-{n}",
        "name": f"HW {n}",
        "vendor": "Test",
        "accelerator": "X1",
        "accelerators_per_system": 8,
        "runner_pool": f"hw-{n}",
    }
    defaults.update(fields)
    return HardwareSystem.objects.create(**defaults)


def make_tier_set(model: AIModel | None = None, tiers=DEFAULT_TIERS) -> SloTierSet:
    n = next(_seq)
    tier_set = SloTierSet.objects.create(
        slug=f"tiers-{n}",
        model=model,
        name=f"Tiers {n}",
        version=n,
        effective_date="2026-11-01",
        source="test",
    )
    for order, (name, speed, ttft) in enumerate(tiers):
        SloTier.objects.create(
            tier_set=tier_set, name=name, order=order, min_p25_output_speed=speed, max_ttft_s=ttft
        )
    return tier_set


def make_submission(*, org: Organization, status: str = "draft", **fields: Any) -> Submission:
    model = fields.pop("model", None) or make_model()
    hardware = fields.pop("hardware", None) or make_hardware()
    return Submission.objects.create(
        org=org,
        model=model,
        hardware=hardware,
        status=status,
        config=fields.pop("config", {}),
        **fields,
    )


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
