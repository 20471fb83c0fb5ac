"""`{{ value|words }}`: a stored token as words (`not_checked` → "not checked")."""

from typing import Any

from django import template

register = template.Library()


@register.filter
def words(value: Any) -> str:
    return str(value).replace("_", " ") if value is not None else ""
