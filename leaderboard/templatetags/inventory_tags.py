"""`{% result_inventory result as inventory %}`: what served a result (leaderboard.inventory_view)."""

from typing import Any

from django import template

from leaderboard.inventory_view import launched_from, public_inventory

register = template.Library()


@register.simple_tag
def result_inventory(result: Any) -> dict[str, Any] | None:
    inventory = public_inventory(result)
    if inventory and inventory.get("document"):
        inventory["launched_from"] = launched_from(inventory["document"])
    return inventory


@register.filter
def mib_to_gib(value: Any) -> str:
    try:
        return f"{float(value) / 1024:.0f}"
    except (TypeError, ValueError):
        return "—"
