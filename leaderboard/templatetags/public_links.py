"""`{% absolute path %}`: an absolute link to this site (leaderboard.links)."""

from django import template

from leaderboard import links

register = template.Library()


@register.simple_tag(takes_context=True)
def absolute(context, path: str) -> str:
    return links.absolute(context.get("request"), path)
