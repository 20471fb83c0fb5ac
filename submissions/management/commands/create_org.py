"""`manage.py create_org NAME [--slug S]`: a vendor organization."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils.text import slugify

from submissions.models import Organization


class Command(BaseCommand):
    help = "Create a vendor organization (does nothing if it exists with the same slug)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name")
        parser.add_argument("--slug", default="")

    def handle(self, *args, name: str, slug: str, **options) -> None:
        slug = slug or slugify(name)
        if not slug:
            raise CommandError("the name gives an empty slug; pass --slug")
        org, created = Organization.objects.get_or_create(slug=slug, defaults={"name": name})
        if not created and org.name != name:
            raise CommandError(f"slug {slug!r} already belongs to {org.name!r}")
        verb = "created" if created else "exists"
        self.stdout.write(f"organization {org.name!r} ({org.slug}) {verb}, id {org.pk}")
