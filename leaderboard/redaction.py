"""A reviewer's `redact` of a published result's public config (docs/security.md "Secrets in
configs"): the values at the named field paths become ``[redacted]`` in the stored public
config, which the result page, the public API, the compare page and the next
`export_public` dump all serve (`leaderboard.configview.public_config`). The submission's
own config is untouched (the vendor's record); the action is audited with its reason and the
paths, never the values.
"""

from __future__ import annotations

import functools

from django.db import transaction

from agentperf import receipt as rc
from leaderboard import configview, receipts
from leaderboard.models import Result
from leaderboard.tasks import result_pages_changed
from submissions.services.lifecycle import audit_record

REDACT_ACTION = "result.config_redacted"


class RedactError(ValueError):
    """A redact that cannot be applied; the message says why (never a value)."""


def result_redact_config(*, result: Result, paths: list[str], actor, reason: str) -> Result:
    """Redact `paths` (dotted, as the review console lists them) in `result`'s public config."""
    paths = [p.strip() for p in paths if p and p.strip()]
    if not reason or not reason.strip():
        raise RedactError("a reason is required")
    if not paths:
        raise RedactError("name at least one field path to redact")
    with transaction.atomic():
        locked = Result.objects.select_for_update().select_related("submission").get(pk=result.pk)
        base = locked.public_config
        if base is None:
            base = configview.redact(locked.submission.config or {})
        redacted, missing = configview.redact_paths(base, paths)
        if missing:
            raise RedactError(f"no such field in the public config: {', '.join(missing)}")
        locked.public_config = redacted
        locked.save(update_fields=["public_config"])
        # the receipt signed the config as published: a signed statement names the redacted
        # one, so `agentperf verify` still checks what the platform serves (docs/verification.md)
        receipts.sign_status(
            result_id=locked.pk,
            to=locked.status,
            # public and signed for good: the paths only; the reviewer's own words (which may
            # quote what was redacted) stay in the audit record
            reason="a reviewer redacted the public config",
            config_redacted={
                "sha256": rc.sha256_hex(rc.canonical_json(redacted)),
                "paths": paths,
            },
        )
        audit_record(
            actor=actor,
            obj=locked.submission,  # on the submission: the console's timeline shows it
            action=REDACT_ACTION,
            reason=reason.strip(),
            data={"result_id": locked.pk, "paths": paths},
        )
        transaction.on_commit(
            functools.partial(result_pages_changed, result_ids=[locked.pk], removed=True)
        )
    result.public_config = redacted
    return result
