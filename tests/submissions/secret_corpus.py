"""The two secret-detector corpora (tests/submissions/data/) as configs, and their counts.

`python -m tests.submissions.secret_corpus` prints the figures quoted in docs/security.md
"Secrets in configs": credential shapes refused / published, real serving flags accepted /
refused (false positives). It needs no database: it runs the schema's own validation."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from tests.submissions.configs import example

DATA = Path(__file__).resolve().parent / "data"


def credential_shapes() -> list[dict[str, Any]]:
    return yaml.safe_load((DATA / "credential_shapes.yaml").read_text())


def serving_flags() -> list[tuple[str, list[str]]]:
    doc = yaml.safe_load((DATA / "serving_flags.yaml").read_text())
    return [(engine, args) for engine, entries in doc.items() for args in entries]


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node: Any = doc
    for part in parts[:-1]:
        if isinstance(node, list):
            node = node[int(part)]
        else:
            node = node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def planted(shape: dict[str, Any], base: dict[str, Any] | None = None) -> tuple[dict, str]:
    """(a config with the shape planted in it, the field path the refusal must name)."""
    doc = copy.deepcopy(base if base is not None else example("process"))
    doc.setdefault("launch", {"command": "serve", "args": []})
    doc["engine"].setdefault("patches", [])
    if not doc["engine"]["patches"]:
        doc["engine"]["patches"].append({"ref": "https://github.com/x/y/pull/1", "reason": "fix"})
    expect = shape["expect"]
    if "args" in shape or "command" in shape:  # `command`: the runner's argv, launch.args
        doc["launch"]["args"] = list(doc["launch"].get("args") or []) + shape.get(
            "args", shape.get("command")
        )
        expect = expect.replace("N", str(len(doc["launch"]["args"]) - 1))
    elif "launch_command" in shape:
        doc["launch"]["command"] = shape["launch_command"]
    elif "env" in shape or "top_env" in shape:  # one environment: the config's env
        doc["env"] = {**doc.get("env", {}), **shape.get("env", shape.get("top_env"))}
    else:
        _set(doc, shape["field"]["path"], shape["field"]["value"])
    return doc, expect


def with_flags(args: list[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A config whose one launch description (launch.args) carries `args`."""
    doc = copy.deepcopy(base if base is not None else example("process"))
    doc["launch"]["args"] = list(args)
    return doc


def counts() -> dict[str, int]:
    from submissions.schema import ConfigError, parse_config

    refused = published = wrong_path = 0
    for shape in credential_shapes():
        doc, expect = planted(shape)
        try:
            parse_config(json.dumps(doc, default=str), "application/json")
            published += 1
        except ConfigError as exc:
            refused += 1
            wrong_path += expect not in exc.fields
    accepted = false_positives = 0
    for _, args in serving_flags():
        try:
            parse_config(json.dumps(with_flags(args), default=str), "application/json")
            accepted += 1
        except ConfigError:
            false_positives += 1
    return {
        "credential_shapes": refused + published,
        "refused": refused,
        "published": published,
        "refused_at_another_path": wrong_path,
        "serving_flags": accepted + false_positives,
        "accepted": accepted,
        "false_positives": false_positives,
    }


if __name__ == "__main__":
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    figures = counts()
    print(
        f"credential shapes: {figures['credential_shapes']}, refused {figures['refused']}, "
        f"published {figures['published']} (refused at another path: "
        f"{figures['refused_at_another_path']})"
    )
    print(
        f"serving flags: {figures['serving_flags']}, accepted {figures['accepted']}, "
        f"false positives {figures['false_positives']}"
    )
