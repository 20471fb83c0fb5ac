"""Reads of submissions-layer data that several apps show (the portal, the review console)."""

from __future__ import annotations

from django.db.models import QuerySet

from submissions.models import Membership, Notification


def notification_list(*, user, limit: int = 20) -> QuerySet[Notification]:
    """The newest notifications for the organizations the user belongs to (none for
    anonymous users or users without an organization)."""
    if not getattr(user, "pk", None):
        return Notification.objects.none()
    org_ids = Membership.objects.filter(user_id=user.pk).values("org_id")
    return Notification.objects.filter(org_id__in=org_ids).select_related("submission", "org")[
        :limit
    ]


def notification_unread_count(*, user) -> int:
    if not getattr(user, "pk", None):
        return 0
    org_ids = Membership.objects.filter(user_id=user.pk).values("org_id")
    return Notification.objects.filter(org_id__in=org_ids, read_at__isnull=True).count()
