"""The one secret detector every string of a config goes through (docs/security.md).

A config is public once its result is published, so a credential must never be in it: a
secret is named (``{secret: true}`` under an environment name, ``{secret: true, name: N}``
as a command argument) and the runner host supplies the value from its own environment.

`clear_secrets(data)` walks the parsed document and returns ``{dotted path: [message]}``
for every string that carries a credential in clear. Messages name the field and the rule,
never the value, so the refusal itself leaks nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

# Name segments (split on "_", "-", ".") that mark a variable or a flag as a secret.
SECRET_NAME_SEGMENTS = frozenset(
    {
        "KEY",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "PWD",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "BEARER",
    }
)
# Names that contain a secret segment but hold none (a key *name*, a token *count*, a path).
_HARMLESS_NAMES = re.compile(
    r"(^|[_\-.])(MAX|NUM|N|MIN)[_\-.]?TOKENS?$|TOKENIZER|KEY[_\-.]?(ID|NAME|ENV|FILE|PATH)$|"
    r"(^|[_\-.])KV[_\-.]|CACHE[_\-.]?KEY",
    re.IGNORECASE,
)
# Credentials recognisable by their shape, anywhere in a string.
_CREDENTIAL = re.compile(
    r"(?<![A-Za-z0-9])("
    r"sk-[A-Za-z0-9_\-]{16,}"  # OpenAI-style
    r"|sk_(live|test)_[A-Za-z0-9]{16,}"
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|(AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|apf_[A-Za-z0-9_\-]{16,}"  # this platform's API tokens
    r"|aprun_[A-Za-z0-9_\-]{16,}"  # this platform's run tokens
    r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
    r")"
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
_BEARER = re.compile(r"\bBearer\s+[A-Za-z0-9._~+/\-]{12,}=*", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.\-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)
# A long random-looking token: base64/url-safe alphabet, mixed classes, high entropy.
_TOKEN = re.compile(r"[A-Za-z0-9+/_\-]{32,}={0,2}")
_REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")
ENTROPY_BITS_PER_CHAR = 4.3


def looks_secret_name(name: str) -> bool:
    """True when a variable's or a flag's name says it holds a credential."""
    bare = name.lstrip("-")
    if not bare or _HARMLESS_NAMES.search(bare):
        return False
    parts = {p for p in re.split(r"[_\-.]", bare.upper()) if p}
    return bool(parts & SECRET_NAME_SEGMENTS) or bare.upper().endswith(("APIKEY", "PASSWORD"))


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _random_token(text: str) -> bool:
    for match in _TOKEN.finditer(text):
        token = match.group(0).rstrip("=")
        if re.fullmatch(r"[0-9a-fA-F]+", token):  # digests, revisions: hex is not a secret
            continue
        classes = sum(bool(re.search(p, token)) for p in (r"[a-z]", r"[A-Z]", r"[0-9]"))
        if classes == 3 and _entropy(token) >= ENTROPY_BITS_PER_CHAR:
            return True
    return False


def credential_kind(text: str) -> str | None:
    """What kind of credential `text` carries in clear, or None."""
    if _PRIVATE_KEY.search(text):
        return "a private key"
    if _CREDENTIAL.search(text):
        return "a credential"
    if _BEARER.search(text):
        return "a bearer token"
    if _URL_PASSWORD.search(text):
        return "a password in a URL"
    if _random_token(text):
        return "a random-looking token"
    return None


def is_secret_ref(value: Any) -> bool:
    """``{secret: true}`` (an env value) or ``{secret: true, name: NAME}`` (an argument)."""
    return isinstance(value, dict) and value.get("secret") is True


def secret_flag_values(items: list[Any]) -> list[int]:
    """Indexes of the items of an argument list that are a secret flag's clear value."""
    return sorted({index for index, _ in _flag_values(items)})


def _flag_values(items: list[Any]) -> list[tuple[int, str]]:
    """``["--api-key", "literal"]`` and ``--api-key=literal``: (index, message) for each item
    that is a secret flag's clear value."""
    found: list[tuple[int, str]] = []
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item.startswith("-"):
            continue
        flag, eq, inline = item.partition("=")
        if not looks_secret_name(flag):
            continue
        if eq:
            if inline and not _REFERENCE.match(inline):
                found.append(
                    (
                        index,
                        f"{flag} is given a clear value: pass {{secret: true, name: NAME}} as the "
                        "next argument instead; it was not stored",
                    )
                )
            continue
        if index + 1 < len(items):
            nxt = items[index + 1]
            if (
                isinstance(nxt, str)
                and nxt
                and not nxt.startswith("-")
                and not _REFERENCE.match(nxt)
            ):
                found.append(
                    (
                        index + 1,
                        f"the value of {flag} must not be in the config: give it as "
                        "{secret: true, name: NAME}; it was not stored",
                    )
                )
    return found


def clear_secrets(data: Any, path: str = "") -> dict[str, list[str]]:
    """Every clear credential in `data`, by dotted field path (empty when there is none)."""
    found: dict[str, list[str]] = {}

    def add(where: str, message: str) -> None:
        found.setdefault(where or "non_field_errors", []).append(message)

    def walk(value: Any, where: str, key: str | None) -> None:
        if is_secret_ref(value):
            return
        if isinstance(value, dict):
            for k, v in value.items():
                child = f"{where}.{k}" if where else str(k)
                if isinstance(k, str) and credential_kind(k):
                    add(child, "a field name carries a credential; it was not stored")
                walk(v, child, str(k))
            return
        if isinstance(value, list):
            for index, message in _flag_values(value):
                add(f"{where}.{index}", message)
            for index, item in enumerate(value):
                walk(item, f"{where}.{index}", None)
            return
        if isinstance(value, str):
            if key is not None and value and looks_secret_name(key) and not _REFERENCE.match(value):
                add(
                    where,
                    "looks like a secret: give it as {secret: true} and set the value on the "
                    "runner host; clear secret values are refused and were not stored",
                )
                return
            kind = credential_kind(value)
            if kind:
                add(
                    where,
                    f"contains {kind} in clear: name it as {{secret: true}}; it was not stored",
                )

    walk(data, path, None)
    return found
