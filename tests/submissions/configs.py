"""Config documents for the submission tests, built from the shipped examples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def simulated_config(*, model: str | None = None, hardware: str | None = None, **top: Any) -> dict:
    """The simulated example, optionally retargeted at a test catalog's model and hardware
    (then on the `tiny` profile, which names no catalog entries)."""
    doc = copy.deepcopy(example("simulated"))
    if model or hardware:
        doc["launcher"]["simulated"]["profile"] = "tiny"
    if model:
        doc["model"]["id"] = model
    if hardware:
        for role in doc["topology"]["roles"]:
            role["hardware"] = hardware
    doc.update(top)
    return doc


def as_json(doc: dict) -> str:
    return json.dumps(doc, default=str)


def as_yaml(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False)
