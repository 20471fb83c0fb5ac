"""Links to published ladders from result and history pages (docs/ladders.md)."""

from __future__ import annotations

from typing import Any

from django import template

from ladders.models import Ladder

register = template.Library()


@register.inclusion_tag("ladders/_links.html")
def ladders_of_result(result: Any) -> dict[str, Any]:
    """Published ladders one of whose rungs this result measured."""
    ladders = Ladder.objects.filter(
        status=Ladder.STATUS_PUBLISHED, rungs__submission_id=result.submission_id
    ).distinct()
    return {"ladders": list(ladders[:20]), "what": "This result is a rung of"}


@register.inclusion_tag("ladders/_links.html")
def ladders_of_pair(model: Any, hardware: Any) -> dict[str, Any]:
    """Published ladders of this model on this hardware."""
    ladders = Ladder.objects.filter(status=Ladder.STATUS_PUBLISHED, model=model, hardware=hardware)
    return {
        "ladders": list(ladders[:20]),
        "what": "Ladders of this pair (which change bought which gain)",
    }
