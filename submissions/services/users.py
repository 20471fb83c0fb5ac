"""Creating the people who use the site: vendor users (members of an organization, for
the portal) and reviewers (staff, for the review console). docs/api.md "Accounts"."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.db import transaction

from submissions.models import Membership, Organization


class UserError(Exception):
    """The account cannot be created as asked (name taken by another kind of account, a
    weak password); the message says which."""


def staff_rule_problem(
    user, *, staff: bool | None = None, member: bool | None = None
) -> str | None:
    """The one staff rule (docs/security.md "Staff"): an account is staff (a reviewer, or an
    admin: is_staff or is_superuser) or a member of vendor organizations, never both. The
    message that says why `user` breaks it, or None. `staff` / `member` give the state a
    form is about to save (the admin's user form, its membership inline); unset, the
    stored state. Checked where an account is made (here, the admin) and on every use of
    a staff surface (the review console, the admin site, review actions), so an account
    made another way is refused where it would read or act."""
    if staff is None:
        staff = bool(user.is_staff or user.is_superuser)
    if not staff:
        return None
    if member is None:
        member = bool(user.pk) and Membership.objects.filter(user_id=user.pk).exists()
    if not member:
        return None
    orgs = ", ".join(
        sorted(Membership.objects.filter(user_id=user.pk).values_list("org__name", flat=True))
    )
    name = user.get_username() or "this account"
    return (
        f"{name} is a member of {orgs or 'a vendor organization'}; a member of a vendor "
        "organization cannot be staff (reviewer or admin)"
    )


def _password(password: str | None, user) -> tuple[str, bool]:
    """(password, generated?): the one given after Django's validators, or a new one."""
    if password:
        try:
            validate_password(password, user)
        except Exception as exc:  # ValidationError: its messages name the rule
            raise UserError("; ".join(getattr(exc, "messages", [str(exc)]))) from exc
        return password, False
    return secrets.token_urlsafe(18), True


def vendor_user_create(
    *,
    org: Organization,
    username: str,
    email: str = "",
    role: str = Membership.ROLE_MEMBER,
    password: str | None = None,
) -> tuple[object, str | None]:
    """A portal user in `org` (role admin or member); (user, generated password or None).

    A reviewer (staff) account is never made a vendor member here: a reviewer must not
    belong to the organizations they review (docs/review.md "Conflicts of interest")."""
    if role not in dict(Membership.ROLE_CHOICES):
        raise UserError(f"role must be one of {', '.join(dict(Membership.ROLE_CHOICES))}")
    users = get_user_model()
    with transaction.atomic():
        user = users.objects.filter(username=username).first()
        generated = None
        if user is None:
            user = users(username=username, email=email)
            secret, was_generated = _password(password, user)
            user.set_password(secret)
            user.save()
            generated = secret if was_generated else None
        elif staff_rule_problem(user, member=True):  # staff or superuser: the staff rule
            raise UserError(f"{username!r} is a reviewer (staff); use another name for a vendor")
        membership, _ = Membership.objects.get_or_create(
            user=user, org=org, defaults={"role": role}
        )
        if membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    return user, generated


def reviewer_create(
    *, username: str, email: str = "", password: str | None = None
) -> tuple[object, str | None]:
    """A reviewer: an active staff account without superuser rights; (user, generated
    password or None). Refused for a member of a vendor organization."""
    users = get_user_model()
    with transaction.atomic():
        user = users.objects.filter(username=username).first()
        generated = None
        if user is None:
            user = users(username=username, email=email)
            secret, was_generated = _password(password, user)
            user.set_password(secret)
            generated = secret if was_generated else None
        elif Membership.objects.filter(user=user).exists():
            orgs = ", ".join(m.org.name for m in Membership.objects.filter(user=user))
            raise UserError(f"{username!r} is a member of {orgs}; a reviewer must not be")
        user.is_staff = True
        user.is_active = True
        user.save()
    return user, generated
