"""Where in the submitted text each error path points, so errors show beside their line."""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from agentperf.schema.limits import LimitError
from agentperf.schema.yaml12 import compose_yaml


@dataclass(slots=True)
class Line:
    number: int
    text: str
    errors: list[tuple[str, str]] = field(default_factory=list)


def _line_of(root: yaml.Node, path: str) -> int | None:
    """0-based line of the deepest node of `path` that exists (the key line for mappings)."""
    node, line = root, root.start_mark.line
    for part in [p for p in path.split(".") if p]:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if getattr(kv[0], "value", None) == part), None)
            if match is None:
                return line
            line, node = match[0].start_mark.line, match[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line
        else:
            return line
    return line


def annotate(text: str, fields: dict[str, list[str]]) -> tuple[list[Line], list[tuple[str, str]]]:
    """The text's lines with errors attached; errors that match no line come back apart."""
    lines = [Line(i + 1, t) for i, t in enumerate(text.splitlines())]
    unplaced: list[tuple[str, str]] = []
    try:
        # the API's own reader (depth first, then the same refusals): a 5,000-deep body is
        # refused by the depth check, never composed (docs/security.md "YAML")
        root = compose_yaml(text) if text.strip() else None
    except (yaml.YAMLError, LimitError):
        root = None
    for path, messages in fields.items():
        number = _line_of(root, path) if root is not None and path != "non_field_errors" else None
        for message in messages:
            if number is not None and number < len(lines):
                lines[number].errors.append((path, message))
            else:
                unplaced.append((path, message))
    return lines, unplaced
