"""The portal's ladder form (docs/ladders.md "Submitting (portal)"): the submit form's rules
(portal/web/forms.py: paste or upload, the size limit, UTF-8, JSON by file extension,
one key per rendered form) with the ladder's labels."""

from __future__ import annotations

from django import forms

from portal.web.forms import SubmitConfigForm


class LadderForm(SubmitConfigForm):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["config_text"].label = "Ladder (YAML or JSON)"
        self.fields["config_text"].widget.attrs["aria-describedby"] = "ladder-help"

    def clean(self) -> dict:
        data = self.cleaned_data
        if not (data.get("config_text") or "").strip() and data.get("config_file") is None:
            raise forms.ValidationError("Paste a ladder or choose a file.")
        return super().clean()
