"""Helpers for the vendor API tests: tokens, clients, a small catalog for configs."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.test import APIClient

from demo.synthetic import make_hardware, make_model
from submissions.models import ApiToken
from submissions.services.tokens import api_token_create
from tests.submissions.configs import as_yaml, simulated_config


@dataclass
class Catalog:
    model: object
    hardware: object

    def config(self, **top) -> dict:
        return simulated_config(model=self.model.slug, hardware=self.hardware.slug, **top)

    def yaml(self, **top) -> str:
        return as_yaml(self.config(**top))


def make_catalog() -> Catalog:
    return Catalog(model=make_model(), hardware=make_hardware())


def token_client(org, scopes=ApiToken.ALL_SCOPES) -> APIClient:
    _, plaintext = api_token_create(org=org, name="test", scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def session_client(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client
