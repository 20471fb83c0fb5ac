from __future__ import annotations

import uuid

from django import forms
from django.conf import settings

# Pasted text, or a file not named .json, is read as YAML (a superset of JSON) by the one
# reader (agentperf.schema.yaml12); the form declares it, as an API client must (docs/security.md "YAML").
YAML = "application/yaml"


class SubmitConfigForm(forms.Form):
    config_text = forms.CharField(
        label="Config (YAML or JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "spellcheck": "false"}),
    )
    config_file = forms.FileField(label="…or upload a file", required=False)
    # One key per rendered form, so a double click or a browser retry submits once.
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)

    def clean(self) -> dict:
        data = super().clean()
        upload = data.get("config_file")
        if upload is not None:
            limit = int(settings.MAX_CONFIG_BYTES)
            if upload.size > limit:
                raise forms.ValidationError(f"The file is larger than {limit} bytes.")
            raw = upload.read(limit + 1)
            try:
                data["config_text"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
            name = (upload.name or "").lower()
            data["content_type"] = "application/json" if name.endswith(".json") else YAML
        else:
            data["content_type"] = YAML
        if not (data.get("config_text") or "").strip():
            raise forms.ValidationError("Paste a config or choose a file.")
        return data
