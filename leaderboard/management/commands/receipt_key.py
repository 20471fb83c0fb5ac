"""`manage.py receipt_key`: the platform's receipt signing key, created when missing.

Prints the key file, the key id and the hex public key (docs/verification.md "Receipt",
docs/security.md "Receipt keys"). It never overwrites a key: to rotate, move the old file
away, run this again and list the old public key in RECEIPT_RETIRED_PUBLIC_KEYS.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from leaderboard.purge import purge_on_commit
from leaderboard.receipts import ensure_key


class Command(BaseCommand):
    help = "Create the receipt signing key (RECEIPT_SIGNING_KEY_FILE) if missing; print its id."

    def add_arguments(self, parser) -> None:  # type: ignore[no-untyped-def]
        parser.add_argument("--path", help="key file (default: RECEIPT_SIGNING_KEY_FILE)")

    def handle(self, *args: object, **options: object) -> None:
        path = Path(str(options["path"])) if options.get("path") else None
        path, key, created = ensure_key(path)
        verb = "created" if created else "exists"
        if created:  # the key list the proxy keeps (docs/caching.md)
            purge_on_commit(["keys"])
        self.stdout.write(f"{verb}: {path}\nkeyid: {key.keyid}\npublic: {key.public.hex()}")
