"""The one YAML reader for untrusted text (docs/security.md "YAML").

Every YAML body the platform accepts goes through :func:`load_yaml`: the vendor API's
submit and resubmit, the portal's submit form and its error annotator (:func:`compose_yaml`),
ladders (their body and a rung's YAML config) and the CLI's offline `agentperf validate`.

What it reads, and why:

- **The YAML 1.2 core schema**, not PyYAML's YAML 1.1: ``yes``/``no``/``on``/``off`` are
  strings, ``0x1F`` and ``0o17`` are integers (as 1.2 reads them), ``2_56``, ``0b101``,
  ``1:30`` and ``2024-01-01`` are strings (1.1 read them as 256, 5, 90 and a date), ``010``
  is ten. A date field takes the ISO string (the schema's own rule, as JSON sends it).
- **The depth is checked first** (`agentperf.schema.limits.check_yaml_depth`, from the event stream),
  so composing, which recurses once per level, never exhausts the stack.
- **Refused, each with its line**: anchors and aliases (expansion bombs; an anchor with no
  alias too), explicit tags (``!!python/...``, ``!!binary``, ``!!set``, even ``!!str``:
  quote the value instead), complex keys (``? [a, b]``: a key must be a scalar, as in
  JSON) and duplicate keys.

Errors are ``yaml.MarkedYAMLError`` (their text names the line and column) or
``agentperf.schema.limits.LimitError``; callers turn them into a 400 naming the field.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from agentperf.schema.limits import check_yaml_depth

NULL = "tag:yaml.org,2002:null"
BOOL = "tag:yaml.org,2002:bool"
INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
STR = "tag:yaml.org,2002:str"
SEQ = "tag:yaml.org,2002:seq"
MAP = "tag:yaml.org,2002:map"

# The YAML 1.2.2 core schema's plain-scalar rules (spec section 10.3.2), exactly.
_CORE: list[tuple[str, re.Pattern[str], str]] = [
    (NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    (BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), "-+0123456789"),
    (
        FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+0123456789.",
    ),
]


COMPLEX_KEY = (
    "a key must be a plain value (text or a number), not a list or a mapping (no `?` complex keys)"
)


def _problem(message: str, node_or_event: Any) -> yaml.MarkedYAMLError:
    return yaml.MarkedYAMLError(None, None, message, node_or_event.start_mark)


class Yaml12Loader(yaml.SafeLoader):
    """A SafeLoader that resolves plain scalars by the YAML 1.2 core schema and refuses
    anchors, aliases, tags, complex keys and duplicate keys (see the module text)."""

    yaml_implicit_resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    yaml_constructors: dict[Any, Any] = {}  # type: ignore[misc]  # PyYAML's stubs: a ClassVar

    # composing: refuse what must not build a node, before it does
    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _problem("anchors and aliases are not accepted (write the value out)", event)
        if getattr(event, "anchor", None) is not None:
            raise _problem(
                f"anchors and aliases are not accepted (&{event.anchor}; write the value out)",
                event,
            )
        tag = getattr(event, "tag", None)
        if tag is not None:
            raise _problem(f"tags are not accepted ({tag}); quote a value that is text", event)
        # a mapping's key is composed with index None (its value with the key as index)
        if isinstance(parent, yaml.MappingNode) and index is None:
            if isinstance(event, yaml.CollectionStartEvent):
                raise _problem(COMPLEX_KEY, event)
        return super().compose_node(parent, index)

    # constructing
    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        if not isinstance(node, yaml.MappingNode):
            raise _problem("expected a mapping", node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise _problem(COMPLEX_KEY, key_node)
            key = self.construct_object(key_node, deep=deep)
            if key in out:  # as a dict compares keys: 1, 1.0 and true are one key
                raise _problem(f"duplicate key {key!r}", key_node)
            out[key] = self.construct_object(value_node, deep=deep)
        return out


def _construct_null(loader: Yaml12Loader, node: yaml.ScalarNode) -> None:
    return None


def _construct_bool(loader: Yaml12Loader, node: yaml.ScalarNode) -> bool:
    return str(node.value).lower() == "true"


def _construct_int(loader: Yaml12Loader, node: yaml.ScalarNode) -> int:
    text = str(node.value)
    try:
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)
    except ValueError:  # more digits than Python converts (sys.get_int_max_str_digits)
        raise _problem("this integer has too many digits", node) from None


def _construct_float(loader: Yaml12Loader, node: yaml.ScalarNode) -> float:
    text = str(node.value)
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    return float(text)  # the pattern above is a subset of Python's float syntax


def _construct_str(loader: Yaml12Loader, node: yaml.ScalarNode) -> str:
    return str(loader.construct_scalar(node))


def _construct_seq(loader: Yaml12Loader, node: yaml.SequenceNode) -> Any:
    # one pass (no generator): the document is shallow here, checked before composing
    return [loader.construct_object(child, deep=True) for child in node.value]


def _construct_map(loader: Yaml12Loader, node: yaml.MappingNode) -> Any:
    return loader.construct_mapping(node, deep=True)  # type: ignore[no-untyped-call]


def _undefined(loader: Yaml12Loader, node: yaml.Node) -> Any:
    raise _problem(f"the type {node.tag} is not accepted", node)


for _tag, _pattern, _first in _CORE:
    Yaml12Loader.add_implicit_resolver(_tag, _pattern, list(_first) or [""])
# the empty plain scalar (`key:` with no value) is null
Yaml12Loader.add_implicit_resolver(NULL, _CORE[0][1], [""])
for _ctag, _fn in (
    (NULL, _construct_null),
    (BOOL, _construct_bool),
    (INT, _construct_int),
    (FLOAT, _construct_float),
    (STR, _construct_str),
    (SEQ, _construct_seq),
    (MAP, _construct_map),
    (None, _undefined),
):
    Yaml12Loader.add_constructor(_ctag, _fn)


def load_yaml(text: str) -> Any:
    """The data of one YAML document, read as described above (depth first)."""
    check_yaml_depth(text)
    return yaml.load(text, Loader=Yaml12Loader)  # noqa: S506 - a SafeLoader, stricter


def compose_yaml(text: str) -> yaml.Node | None:
    """The node tree of one YAML document (for line numbers), under the same rules."""
    check_yaml_depth(text)
    return yaml.compose(text, Loader=Yaml12Loader)
