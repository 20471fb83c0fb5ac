"""How a name says its value is a credential (docs/security.md "Secrets in configs"): a
flag's or a variable's spelling normalised to name segments (``--authToken``,
``--auth_token``, ``AUTH-TOKEN`` and ``authtoken`` are all ``auth token``; ``-k`` is
``key``), whose *last* segment is a credential word (``key``, ``token``, ``password``, …),
unless the word before it says it is a size or a structure (``max-token``, ``cache-key``)
or the name is a switch (``--enable-auth``). The detector (``agentperf.schema.secrets``)
pairs such a name with its value; each rule is tested in
tests/submissions/test_secret_rules.py."""

from __future__ import annotations

import re
from functools import lru_cache

# Words that, as the last segment of a flag's or a variable's name, say it holds a credential.
CREDENTIAL_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "pass",
        "pw",
        "passphrase",
        "credential",
        "credentials",
        "creds",
        "auth",
        "bearer",
        "cookie",
        "pat",
        "psk",
    }
)
# Compound spellings without a separator ("authtoken"), read as their last word.
_COMPOUNDS = (
    "apikey",
    "authkey",
    "authtoken",
    "accesskey",
    "accesstoken",
    "secretkey",
    "privatekey",
    "apitoken",
    "hftoken",
    "bearertoken",
    "sessiontoken",
    "refreshtoken",
    "clientsecret",
    "masterkey",
    "adminpassword",
    "dbpassword",
    "userpassword",
)
# Kept for the schema's field description and the tests: the upper-case words.
SECRET_NAME_SEGMENTS = frozenset(w.upper() for w in CREDENTIAL_WORDS)
# Strong words: alone, even in a "Name: value" phrase, they mean a credential.
_STRONG = frozenset(
    {"password", "passwd", "passphrase", "secret", "apikey", "credentials", "credential"}
)
# The word before a credential word that makes the name a size, a count or a structure.
_NOT_A_CREDENTIAL_BEFORE = {
    "key": frozenset(
        {
            "cache",
            "kv",
            "sort",
            "partition",
            "routing",
            "hash",
            "dict",
            "primary",
            "foreign",
            "shard",
            "lookup",
            "group",
            "prefix",
            "public",
            "pub",
            "value",
            "num",
            "n",
            "max",
            "min",
            "dedupe",
            "type",
        }
    ),
    "token": frozenset(
        {
            "max",
            "min",
            "num",
            "n",
            "bos",
            "eos",
            "pad",
            "sep",
            "unk",
            "mask",
            "cls",
            "special",
            "first",
            "last",
            "start",
            "end",
            "stop",
            "per",
            "chunk",
            "image",
            "video",
            "audio",
            "think",
            "thinking",
            "reasoning",
            "prefill",
            "decode",
            "draft",
            "spec",
            "speculative",
            "tool",
            "sampled",
            "output",
            "input",
            "prompt",
            "long",
            "batched",
            "next",
            "add",
            "placeholder",
        }
    ),
}
# Segments after the credential word that only describe its encoding ("API_KEY_VALUE").
_VALUE_SUFFIXES = frozenset({"value", "val", "str", "string", "data", "text", "b64", "base64"})
# A first segment that makes the name a switch, not a holder of a value.
_SWITCH_PREFIXES = frozenset(
    {"enable", "disable", "no", "skip", "require", "allow", "without", "trust", "verify"}
)
# Short flags that hold a credential (a short flag is otherwise judged by its value only).
SHORT_SECRET_FLAGS = frozenset({"k", "hft"})
# Context words that make a hex string a revision, a commit or a digest.
_HEX_CONTEXT_WORDS = frozenset(
    {"revision", "rev", "commit", "sha", "sha1", "sha256", "digest", "hash", "checksum", "id"}
)


def name_segments(name: str) -> list[str]:
    """``--authToken`` → [auth, token]; ``-k`` → [key]; ``DB_PASS`` → [db, pass]."""
    return list(_name_segments(name))


@lru_cache(maxsize=8192)
def _name_segments(name: str) -> tuple[str, ...]:
    raw = name.strip().lstrip("-$").strip("{}")
    if name.startswith("-") and not name.startswith("--") and raw in SHORT_SECRET_FLAGS:
        return ("key",) if raw == "k" else ("hf", "token")
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", raw)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", spaced)
    segments = [s for s in re.split(r"[_\-.\s]+", spaced.lower()) if s]
    out: list[str] = []
    for segment in segments:
        for compound in _COMPOUNDS:
            if segment != compound and segment.endswith(compound):
                out += [segment[: -len(compound)], compound]
                break
        else:
            out.append(segment)
    return tuple(out)


def _credential_word(segment: str) -> str | None:
    if segment in CREDENTIAL_WORDS:
        return segment
    for compound in _COMPOUNDS:
        if segment == compound:
            return "token" if compound.endswith("token") else "key"
    return None


@lru_cache(maxsize=8192)
def looks_secret_name(name: str) -> bool:
    """True when a flag's or a variable's name says its value is a credential."""
    segments = name_segments(name)
    while len(segments) > 1 and segments[-1] in _VALUE_SUFFIXES:
        segments = segments[:-1]
    if not segments or segments[0] in _SWITCH_PREFIXES:
        return False
    word = _credential_word(segments[-1])
    if word is None:
        return False
    before = segments[-2] if len(segments) > 1 else ""
    return before not in _NOT_A_CREDENTIAL_BEFORE.get(word, frozenset())


def strong_name(name: str) -> bool:
    """A credential name even alone, in a "Name: value" phrase: two segments or a strong word."""
    segments = name_segments(name)
    return looks_secret_name(name) and (len(segments) > 1 or segments[-1] in _STRONG)


def hex_context(name: str | None) -> bool:
    """The name says its value is a revision, a commit or a digest (hex expected there)."""
    return bool(name) and bool(set(name_segments(name or "")) & _HEX_CONTEXT_WORDS)
