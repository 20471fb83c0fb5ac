"""`manage.py create_vendor_user USERNAME --org ORG [--role admin|member] [--email E]`:
a portal login for a vendor organization. The password comes from the environment
variable AGENTPERF_PASSWORD when set, else one is generated and printed once."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q

from submissions.models import Membership, Organization
from submissions.services.users import UserError, vendor_user_create


class Command(BaseCommand):
    help = "Create a vendor user (portal login) in an organization, or add a user to one."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--org", required=True, help="organization name or slug")
        parser.add_argument(
            "--role",
            default=Membership.ROLE_MEMBER,
            choices=[r for r, _ in Membership.ROLE_CHOICES],
        )
        parser.add_argument("--email", default="")

    def handle(self, *args, username: str, org: str, role: str, email: str, **options) -> None:
        found = Organization.objects.filter(Q(name=org) | Q(slug=org)).first()
        if found is None:
            raise CommandError(f"no organization named {org!r}; create it with create_org")
        try:
            user, generated = vendor_user_create(
                org=found,
                username=username,
                email=email,
                role=role,
                password=os.environ.get("AGENTPERF_PASSWORD") or None,
            )
        except UserError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"vendor user {username!r} is {role} of {found.name} (user id {user.pk})")
        if generated:
            self.stderr.write("password (shown once; change it after the first login):")
            self.stdout.write(generated)
