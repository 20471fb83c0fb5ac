"""Forms for the review console: queue filters (GET) and a decision with its reason (POST)."""

from __future__ import annotations

from django import forms

from leaderboard.models import AIModel, HardwareSystem
from submissions import constants as c
from submissions.models import Organization
from submissions.review.selectors import AGE_CHOICES


class QueueFilterForm(forms.Form):
    state = forms.ChoiceField(required=False)
    org = forms.ChoiceField(required=False, label="Vendor")
    hardware = forms.ChoiceField(required=False)
    model = forms.ChoiceField(required=False)
    age = forms.ChoiceField(required=False, choices=AGE_CHOICES, label="In state for")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["state"].choices = [("", "any state"), *c.STATUS_CHOICES]
        self.fields["org"].choices = [("", "any vendor")] + list(
            Organization.objects.values_list("slug", "name")
        )
        self.fields["hardware"].choices = [("", "any hardware")] + list(
            HardwareSystem.objects.values_list("slug", "name")
        )
        self.fields["model"].choices = [("", "any model")] + list(
            AIModel.objects.values_list("slug", "name")
        )


class DecisionForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=5000,
        strip=True,
        error_messages={"required": "Give a reason: the vendor reads it and the audit keeps it."},
    )
