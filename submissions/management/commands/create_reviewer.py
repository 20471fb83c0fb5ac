"""`manage.py create_reviewer USERNAME [--email E]`: a review-console login (staff, not
superuser). The password comes from AGENTPERF_PASSWORD when set, else one is generated
and printed once."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError

from submissions.services.users import UserError, reviewer_create


class Command(BaseCommand):
    help = "Create a reviewer (staff account for /review/), or make an existing user one."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="")

    def handle(self, *args, username: str, email: str, **options) -> None:
        try:
            user, generated = reviewer_create(
                username=username,
                email=email,
                password=os.environ.get("AGENTPERF_PASSWORD") or None,
            )
        except UserError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"reviewer {username!r} can use /review/ (user id {user.pk})")
        if generated:
            self.stderr.write("password (shown once; change it after the first login):")
            self.stdout.write(generated)
