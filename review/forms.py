"""Forms for the review console: queue filters (GET) and a decision with its reason (POST)."""

from __future__ import annotations

from django import forms

from catalog.models import AIModel, HardwareSystem
from review.selectors import AGE_CHOICES
from submissions import constants as c
from submissions.models import Organization


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


class PublishForm(DecisionForm):
    """Publishing also names the result: the public label, prefilled with a suggestion the
    reviewer edits (hardware, engine and date, e.g. "GB300 NVL72 · vllm 0.14.0 (28 Oct)");
    left blank, the suggestion is used."""

    label = forms.CharField(max_length=200, strip=True, required=False, label="Public label")

    def clean_label(self) -> str:
        # Left blank (a form posted without the field): the suggestion it was shown.
        return self.cleaned_data.get("label") or str(self.initial.get("label") or "")


def suggested_label(submission) -> str:
    """The label a publish form starts from: hardware, engine and version, today's date."""
    from django.utils import timezone

    from submissions.stored_config import StoredConfigError, StoredEngine

    try:
        engine = submission.deployment.engine
    except StoredConfigError:  # publishing refuses it with the reason; the label goes on
        engine = StoredEngine()
    name = " ".join(part for part in (engine.name, engine.version) if part)
    when = timezone.now()
    parts = [submission.hardware.name, *([name] if name else [])]
    return f"{' · '.join(parts)} ({when.day} {when:%b})"


class RedactForm(DecisionForm):
    """A redact names the field paths of the public config to hide, one per line,
    prefilled with the strings the secret detector rated suspicious."""

    paths = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=5000,
        label="Field paths to redact (one per line)",
        error_messages={"required": "Name at least one field path, e.g. launch.args.3."},
    )

    def clean_paths(self) -> list[str]:
        return [p.strip() for p in self.cleaned_data["paths"].splitlines() if p.strip()]


def decision_form(action: str, submission, data=None) -> DecisionForm:
    """The form of one review action: publishing asks for the label too, a redact for the
    field paths."""
    from review.services import PUBLISH, REDACT

    if action == PUBLISH:
        return PublishForm(data, prefix=action, initial={"label": suggested_label(submission)})
    if action == REDACT:
        from agentperf.schema.secrets import suspicious_strings

        found = [row["path"] for row in suspicious_strings(submission.config or {})]
        return RedactForm(data, prefix=action, initial={"paths": "\n".join(found)})
    return DecisionForm(data, prefix=action)
