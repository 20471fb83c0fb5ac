"""`manage.py create_token --org NAME`: a vendor API token, printed once."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils import timezone

from submissions.models import ApiToken, Organization
from submissions.services.tokens import api_token_create


class Command(BaseCommand):
    help = "Create an API token for an organization and print it. It is never shown again."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--org", required=True, help="organization name or slug")
        parser.add_argument("--name", default="cli", help="label for the token")
        parser.add_argument(
            "--scope",
            action="append",
            choices=ApiToken.ALL_SCOPES,
            help="repeat for several; default: all",
        )
        parser.add_argument(
            "--expires-days",
            type=int,
            default=None,
            help="days until it expires, at least 1; leave it out for a token that never does",
        )

    def handle(self, *args, org: str, name: str, scope, expires_days, **options) -> None:
        if expires_days is not None and expires_days < 1:
            # 0 used to read as "never expires": a silent coercion of a bound to no bound
            raise CommandError(
                f"--expires-days: {expires_days} is not a number of days (at least 1); leave "
                "it out for a token that never expires"
            )
        found = Organization.objects.filter(Q(name=org) | Q(slug=org)).first()
        if found is None:
            raise CommandError(f"no organization named {org!r}; create it with create_org")
        expires = (
            timezone.now() + timedelta(days=expires_days) if expires_days is not None else None
        )
        token, plaintext = api_token_create(
            org=found, name=name, scopes=tuple(scope or ApiToken.ALL_SCOPES), expires_at=expires
        )
        self.stderr.write(
            f"token {token.prefix} for {found.name} (scopes {', '.join(token.scopes)}); "
            "store it now, it is not shown again:"
        )
        self.stdout.write(plaintext)
